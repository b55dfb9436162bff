//! `flux get`'s tables of Flux objects, and the `-o json|yaml` list of them.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{
    output::{Cell, Style, table},
    state::State as _,
    views::object::ObjectView,
};

#[derive(Debug, Serialize)]
pub(super) struct ListView {
    pub(super) items: Vec<ObjectView>,
}

/// How a table shows one kind: its revision heading (empty: no such column).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableOptions {
    /// Kind → heading of its revision column.
    pub revision_columns: BTreeMap<String, String>,
    pub all_namespaces: bool,
    /// `get all`: one table per kind, names as `kind/name`.
    pub grouped: bool,
    pub no_header: bool,
}

impl TableOptions {
    pub(super) fn headers(&self, kind: &str) -> Vec<&str> {
        let mut headers = Vec::new();
        if self.all_namespaces {
            headers.push("NAMESPACE");
        }
        headers.push("NAME");
        match self.revision_columns.get(kind).map(String::as_str) {
            Some("") => {}
            Some(heading) => headers.push(heading),
            None => headers.push("REVISION"),
        }
        headers.extend(["SUSPENDED", "READY", "MESSAGE"]);
        headers
    }

    pub(super) fn row(&self, object: &ObjectView, deleted: bool) -> Vec<Cell> {
        let mut row = Vec::new();
        if self.all_namespaces {
            row.push(Cell::plain(&object.namespace));
        }
        row.push(Cell::plain(if self.grouped {
            format!("{}/{}", object.kind.to_ascii_lowercase(), object.name)
        } else {
            object.name.clone()
        }));
        if self
            .revision_columns
            .get(&object.kind)
            .is_none_or(|h| !h.is_empty())
        {
            row.push(Cell::plain(&object.revision));
        }
        row.push(Cell::plain(if object.suspended { "True" } else { "False" }));
        row.push(object.ready_status().cell());
        row.push(Cell::plain(if deleted {
            "(deleted)"
        } else {
            object.message()
        }));
        row
    }
}

/// `flux get`'s tables: one per kind (in the order given), apart by a blank line.
pub fn render_tables(objects: &[ObjectView], options: &TableOptions, style: Style) -> String {
    let mut kinds: Vec<&str> = Vec::new();
    for object in objects {
        if !kinds.contains(&object.kind.as_str()) {
            kinds.push(&object.kind);
        }
    }
    let mut out = Vec::new();
    for kind in kinds {
        let rows: Vec<Vec<Cell>> = objects
            .iter()
            .filter(|o| o.kind == kind)
            .map(|o| options.row(o, false))
            .collect();
        let text = table("", &options.headers(kind), &rows, style);
        out.push(if options.no_header {
            text.split_once('\n')
                .map(|(_, rest)| rest.to_owned())
                .unwrap_or_default()
        } else {
            text
        });
    }
    out.join("\n")
}
