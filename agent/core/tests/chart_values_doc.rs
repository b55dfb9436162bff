//! docs/reference/chart-values.md against the chart it describes: every value of
//! deploy/helm/tenantflux-agent/values.yaml, in that file's order, with its type and description
//! from values.schema.json and its default from values.yaml. A value the schema does not
//! describe fails the test, so a new value cannot go undocumented.
//!
//! Refresh the page: `TENANTFLUX_BLESS=1 cargo test -p tenantflux-core --test chart_values_doc`.
//!
//! Lives in tenantflux-core because that crate compiles in seconds; it reads files only.

mod support;

use std::{
    fmt, fs,
    path::{Path, PathBuf},
};

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

const PAGE: &str = "docs/reference/chart-values.md";
const VALUES: &str = "deploy/helm/tenantflux-agent/values.yaml";
const SCHEMA: &str = "deploy/helm/tenantflux-agent/values.schema.json";
const REFRESH: &str = "TENANTFLUX_BLESS=1 cargo test -p tenantflux-core --test chart_values_doc";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(relative: &str) -> String {
    let path = root().join(relative);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// A YAML value whose mappings keep the file's order (serde_json's maps sort their keys).
enum Node {
    Map(Vec<(String, Node)>),
    Leaf(Value),
}

impl Node {
    fn to_json(&self) -> Value {
        match self {
            Node::Leaf(value) => value.clone(),
            Node::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(key, node)| (key.clone(), node.to_json()))
                    .collect(),
            ),
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NodeVisitor;

        impl<'de> Visitor<'de> for NodeVisitor {
            type Value = Node;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a YAML value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
                Ok(Node::Leaf(v.into()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
                Ok(Node::Leaf(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
                Ok(Node::Leaf(v.into()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
                Ok(Node::Leaf(v.into()))
            }
            fn visit_str<E>(self, v: &str) -> Result<Node, E> {
                Ok(Node::Leaf(v.into()))
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Leaf(Value::Null))
            }
            fn visit_none<E>(self) -> Result<Node, E> {
                Ok(Node::Leaf(Value::Null))
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
                Node::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<Node>()? {
                    items.push(item.to_json());
                }
                Ok(Node::Leaf(Value::Array(items)))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Node>()? {
                    entries.push(entry);
                }
                Ok(Node::Map(entries))
            }
        }

        deserializer.deserialize_any(NodeVisitor)
    }
}

/// One row of the page: the value's dotted path, its schema and its default (None: not set in
/// values.yaml).
struct Row<'a> {
    path: String,
    schema: &'a Value,
    default: Option<Value>,
}

/// The rows of `values` under `prefix`, in values.yaml's order, then the values the schema
/// knows and values.yaml leaves unset. A mapping is split into rows when the schema lists its
/// properties; otherwise it is one value with a mapping for its default.
fn rows<'a>(
    values: &[(String, Node)],
    schema: &'a Value,
    prefix: &str,
    out: &mut Vec<Row<'a>>,
    problems: &mut Vec<String>,
) {
    let properties = &schema["properties"];
    for (key, node) in values {
        let path = format!("{prefix}{key}");
        let Some(property) = properties.get(key) else {
            problems.push(format!(
                "{path}: in values.yaml but not in values.schema.json"
            ));
            continue;
        };
        match node {
            Node::Map(entries) if property.get("properties").is_some() => {
                rows(entries, property, &format!("{path}."), out, problems);
            }
            _ => out.push(Row {
                path,
                schema: property,
                default: Some(node.to_json()),
            }),
        }
    }
    for (key, property) in properties.as_object().into_iter().flatten() {
        if !values.iter().any(|(k, _)| k == key) {
            out.push(Row {
                path: format!("{prefix}{key}"),
                schema: property,
                default: None,
            });
        }
    }
}

/// What a schema allows, in words ("string", "one of `a`, `b`", "array of string", "integer,
/// 1 to 16"), with its pattern when it has one.
fn type_of(schema: &Value) -> String {
    if let Some(choices) = schema["enum"].as_array() {
        let choices: Vec<String> = choices.iter().map(|c| format!("`{}`", plain(c))).collect();
        return format!("one of {}", choices.join(", "));
    }
    let base = match &schema["type"] {
        Value::String(t) => t.clone(),
        Value::Array(types) => types
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "any".to_string(),
    };
    let mut text = match base.as_str() {
        "array" if schema["items"]["enum"].is_array() => {
            format!("array, each {}", type_of(&schema["items"]))
        }
        "array" if schema["items"].is_object() => format!("array of {}", type_of(&schema["items"])),
        "object" if schema["additionalProperties"].is_object() => {
            format!("map of {}", type_of(&schema["additionalProperties"]))
        }
        _ => base,
    };
    if schema["minLength"].as_u64() == Some(1) {
        text = format!("non-empty {text}");
    }
    if let (Some(min), Some(max)) = (schema["minimum"].as_i64(), schema["maximum"].as_i64()) {
        text.push_str(&format!(", {min} to {max}"));
    }
    if let Some(pattern) = schema["pattern"].as_str() {
        text.push_str(&format!(" matching `{pattern}`"));
    }
    text
}

/// A string as itself, anything else as compact JSON.
fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Text fit for one table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// The page, as generated from values.yaml and values.schema.json.
fn render(problems: &mut Vec<String>) -> String {
    let values: Node =
        tenantflux_core::yaml::from_str(&read(VALUES)).unwrap_or_else(|e| panic!("{VALUES}: {e}"));
    let Node::Map(values) = values else {
        panic!("{VALUES} is not a mapping");
    };
    let schema: Value =
        serde_json::from_str(&read(SCHEMA)).unwrap_or_else(|e| panic!("{SCHEMA}: {e}"));
    let mut table = Vec::new();
    rows(&values, &schema, "", &mut table, problems);

    let mut page = String::from(
        "# Chart values\n\
         \n\
         Every value of the `tenantflux-agent` chart (`deploy/helm/tenantflux-agent/`): the \
         default from `values.yaml`, the\n\
         type and the description from `values.schema.json`. Helm refuses values the schema \
         does not allow: unknown keys at\n\
         every level (typos), bad formats, and an `operatorBundle` without an \
         `operatorVersion`. Most values are passed to the\n\
         agent as the env twin of one of its flags ([the agent's flags](agent-flags.md)); \
         how to install the chart:\n\
         [the platform guide](../platform.md).\n\
         \n\
         Generated by `agent/core/tests/chart_values_doc.rs`, which fails when this page \
         and the chart differ; refresh it with\n\
         `",
    );
    page.push_str(REFRESH);
    page.push_str("`.\n\n| value | type | default | description |\n|---|---|---|---|\n");
    for row in table {
        let Some(description) = row.schema["description"].as_str() else {
            problems.push(format!(
                "{}: no description in values.schema.json",
                row.path
            ));
            continue;
        };
        let default = match &row.default {
            Some(value) => format!("`{value}`"),
            None => "not set".to_string(),
        };
        page.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            row.path,
            cell(&type_of(row.schema)),
            cell(&default),
            cell(description),
        ));
    }
    page
}

#[test]
fn the_chart_values_page_matches_the_chart() {
    let mut problems = Vec::new();
    let generated = render(&mut problems);
    assert!(
        problems.is_empty(),
        "the chart's values need a schema entry with a description:\n{}",
        problems.join("\n")
    );
    support::matches_generated(&root().join(PAGE), PAGE, &generated, "the chart", REFRESH);
}

#[test]
fn the_renderer_reads_what_it_documents() {
    let node: Node = tenantflux_core::yaml::from_str("b: 1\na: {y: [x], x: null}\n").unwrap();
    let Node::Map(entries) = &node else {
        panic!("a mapping")
    };
    let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["b", "a"], "the file's order, not sorted");
    assert_eq!(
        node.to_json(),
        serde_json::json!({"a": {"x": null, "y": ["x"]}, "b": 1})
    );
    let schema = serde_json::json!({"type": "array", "items": {"enum": ["a", "b"]}});
    assert_eq!(type_of(&schema), "array, each one of `a`, `b`");
    let schema = serde_json::json!({"type": "integer", "minimum": 1, "maximum": 16});
    assert_eq!(type_of(&schema), "integer, 1 to 16");
    assert_eq!(cell("a|b\nc"), "a\\|b c");
}
