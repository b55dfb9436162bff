//! `suspend|resume KIND --all`: every object of one kind in the namespace (or in every
//! namespace), one result line each, as `flux suspend --all` does, and exit 1 if any failed.
//! Each object is its own call, so the agent authorizes each (a caller may patch some objects of
//! a kind and not others: RBAC's resourceNames).

use std::fmt::Write as _;

use serde::Serialize;
use tenantflux_proto::v1 as pb;

use crate::{
    connect::Agent,
    output::{Printer, Style, Tone},
};

/// Suspend or resume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Suspend,
    Resume,
}

impl Action {
    fn done(self) -> &'static str {
        match self {
            Self::Suspend => "suspended",
            Self::Resume => "resumed",
        }
    }
}

/// One object's outcome, as `-o json|yaml` shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Outcome {
    kind: String,
    namespace: String,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct Outcomes {
    items: Vec<Outcome>,
}

/// Acts on every object of `kind` in the agent's namespace, or in every namespace.
pub async fn run(
    agent: &Agent,
    printer: &Printer,
    action: Action,
    kind: &str,
    all_namespaces: bool,
) -> anyhow::Result<()> {
    let namespace = if all_namespaces {
        String::new()
    } else {
        agent.namespace().to_owned()
    };
    let listed = agent
        .call(agent.workloads().list_objects(pb::ListObjectsRequest {
            kind: kind.to_owned(),
            namespace: namespace.clone(),
            ..pb::ListObjectsRequest::default()
        }))
        .await?;
    // Resuming what runs, or suspending what is suspended, changes nothing: flux skips them too.
    let objects: Vec<pb::FluxObject> = listed
        .objects
        .into_iter()
        .filter(|o| o.suspended == (action == Action::Resume))
        .collect();
    let mut items = Vec::with_capacity(objects.len());
    for object in objects {
        let reference = Some(pb::ObjectRef {
            kind: object.kind.clone(),
            namespace: object.namespace.clone(),
            name: object.name.clone(),
        });
        let result = match action {
            Action::Suspend => agent
                .call(
                    agent
                        .workloads()
                        .suspend(pb::SuspendRequest { object: reference }),
                )
                .await
                .map(drop),
            Action::Resume => agent
                .call(
                    agent
                        .workloads()
                        .resume(pb::ResumeRequest { object: reference }),
                )
                .await
                .map(drop),
        };
        items.push(Outcome {
            kind: object.kind,
            namespace: object.namespace,
            name: object.name,
            error: result.err().map(|e| e.to_string()),
        });
    }
    let failed = items.iter().filter(|o| o.error.is_some()).count();
    let total = items.len();
    let place = if namespace.is_empty() {
        "any namespace".to_owned()
    } else {
        format!("namespace {namespace}")
    };
    printer.print(&Outcomes { items }, |view, style| {
        render(view, action, &place, style)
    })?;
    if failed > 0 {
        anyhow::bail!("{failed} of {total} objects were not {}", action.done());
    }
    Ok(())
}

fn render(view: &Outcomes, action: Action, place: &str, style: Style) -> String {
    let mut out = String::new();
    if view.items.is_empty() {
        let _ = writeln!(
            out,
            "nothing to do: no object in {place} is to be {}",
            action.done()
        );
    }
    for item in &view.items {
        let title = format!("{} {}/{}", item.kind, item.namespace, item.name);
        let _ = match &item.error {
            None => writeln!(
                out,
                "{} {title} {}",
                style.paint("✔", Tone::Good),
                action.done()
            ),
            Some(error) => writeln!(out, "{} {title}: {error}", style.paint("✗", Tone::Bad)),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_object_has_its_line_and_failures_their_reason() {
        let view = Outcomes {
            items: vec![
                Outcome {
                    kind: "Kustomization".into(),
                    namespace: "apps".into(),
                    name: "a".into(),
                    error: None,
                },
                Outcome {
                    kind: "Kustomization".into(),
                    namespace: "apps".into(),
                    name: "c".into(),
                    error: Some("user \"u\" may not patch".into()),
                },
            ],
        };
        let text = render(&view, Action::Suspend, "namespace apps", Style::PLAIN);
        assert_eq!(
            text,
            "✔ Kustomization apps/a suspended\n✗ Kustomization apps/c: user \"u\" may not patch\n"
        );
        let none = render(
            &Outcomes { items: Vec::new() },
            Action::Resume,
            "namespace apps",
            Style::PLAIN,
        );
        assert_eq!(
            none,
            "nothing to do: no object in namespace apps is to be resumed\n"
        );
    }
}
