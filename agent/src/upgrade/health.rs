//! The post-upgrade health check: the point of a safe upgrade is that what worked before works
//! after. When the version is bumped, the Kustomizations that are Ready at a revision are
//! recorded; the upgrade succeeds only once each of them is Ready again at that revision,
//! reconciled after the bump. kustomize-controller sets Ready to Unknown at the start of every
//! reconciliation, so a Ready condition whose lastTransitionTime differs from the recorded one
//! was reached by a reconciliation since then (for this generation).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{StepError, kube_err, list_all, resource, storage_version};

const CRD: &str = "kustomizations.kustomize.toolkit.fluxcd.io";

/// One Kustomization that was Ready when the version was bumped, and how it is now.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Healthy {
    pub namespace: String,
    pub name: String,
    /// `status.lastAppliedRevision` at the bump.
    pub revision: String,
    /// The Ready condition's lastTransitionTime at the bump.
    pub ready_since: String,
    /// Ready again at `revision`, reconciled since the bump.
    pub ready_again: bool,
    /// Why not (its Ready condition now, or that it is gone).
    pub message: String,
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn ready(kustomization: &Value) -> Option<&Value> {
    kustomization
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
}

/// Ready True for the object's current generation (the condition is not a leftover).
fn ready_now(kustomization: &Value) -> bool {
    ready(kustomization).is_some_and(|c| {
        c["status"] == "True" && c["observedGeneration"] == kustomization["metadata"]["generation"]
    })
}

/// The Kustomizations Ready at a revision now, suspended ones left out (nothing reconciles them).
pub fn snapshot(kustomizations: &[Value]) -> Vec<Healthy> {
    let mut ready_ones: Vec<Healthy> = kustomizations
        .iter()
        .filter(|k| ready_now(k) && k.pointer("/spec/suspend") != Some(&Value::Bool(true)))
        .filter(|k| !text(k, "/status/lastAppliedRevision").is_empty())
        .map(|k| Healthy {
            namespace: text(k, "/metadata/namespace").to_owned(),
            name: text(k, "/metadata/name").to_owned(),
            revision: text(k, "/status/lastAppliedRevision").to_owned(),
            ready_since: ready(k)
                .and_then(|c| c["lastTransitionTime"].as_str())
                .unwrap_or_default()
                .to_owned(),
            ..Healthy::default()
        })
        .collect();
    ready_ones.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    ready_ones
}

/// Updates each recorded Kustomization from `live`; true when all are Ready again.
pub fn check(recorded: &mut [Healthy], live: &[Value]) -> bool {
    for entry in recorded.iter_mut() {
        let Some(now) = live.iter().find(|k| {
            text(k, "/metadata/namespace") == entry.namespace
                && text(k, "/metadata/name") == entry.name
        }) else {
            entry.ready_again = false;
            entry.message = "deleted since the upgrade started".into();
            continue;
        };
        let condition = ready(now);
        let since = condition
            .and_then(|c| c["lastTransitionTime"].as_str())
            .unwrap_or_default();
        let applied = text(now, "/status/lastAppliedRevision");
        entry.ready_again =
            ready_now(now) && since != entry.ready_since && applied == entry.revision;
        entry.message = if entry.ready_again {
            String::new()
        } else if ready_now(now) && since == entry.ready_since {
            "not reconciled since the version was bumped".into()
        } else if ready_now(now) {
            format!("Ready at {applied}, not at {}", entry.revision)
        } else {
            format!(
                "Ready={}: {}",
                condition
                    .and_then(|c| c["status"].as_str())
                    .unwrap_or("Unknown"),
                condition
                    .and_then(|c| c["message"].as_str())
                    .unwrap_or("no Ready condition for its generation yet")
            )
        };
    }
    recorded.iter().all(|e| e.ready_again)
}

/// The names of the recorded Kustomizations not Ready again, with why.
pub fn not_ready(recorded: &[Healthy]) -> Vec<String> {
    recorded
        .iter()
        .filter(|e| !e.ready_again)
        .map(|e| format!("Kustomization {}/{} ({})", e.namespace, e.name, e.message))
        .collect()
}

/// Every Kustomization in the cluster, as JSON; none when Kustomizations are not served.
pub async fn list(client: &Client) -> Result<Vec<Value>, StepError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let Some(crd) = crds
        .get_opt(CRD)
        .await
        .map_err(kube_err(format!("reading CRD {CRD}")))?
    else {
        return Ok(Vec::new());
    };
    let Some(version) = storage_version(&crd) else {
        return Ok(Vec::new());
    };
    let api = Api::all_with(
        client.clone(),
        &resource(
            "kustomize.toolkit.fluxcd.io",
            "Kustomization",
            "kustomizations",
            &version,
        ),
    );
    let objects = list_all(&api)
        .await
        .map_err(kube_err("listing Kustomizations"))?;
    Ok(objects
        .into_iter()
        .map(|o| serde_json::to_value(o).unwrap_or_default())
        .collect())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ks(name: &str, ready: &str, since: &str, revision: &str, suspended: bool) -> Value {
        json!({
            "metadata": {"namespace": "apps", "name": name, "generation": 2},
            "spec": {"suspend": suspended},
            "status": {
                "lastAppliedRevision": revision,
                "conditions": [{"type": "Ready", "status": ready, "observedGeneration": 2,
                                "lastTransitionTime": since, "message": "m"}],
            },
        })
    }

    #[test]
    fn ready_again_needs_a_reconciliation_since_the_bump_at_the_same_revision() {
        let before = [
            ks("a", "True", "t1", "main@sha1:1", false),
            ks("b", "True", "t1", "main@sha1:1", false),
            ks("failing", "False", "t1", "main@sha1:1", false),
            ks("paused", "True", "t1", "main@sha1:1", true),
        ];
        let mut recorded = snapshot(&before);
        let names: Vec<&str> = recorded.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a", "b"], "only the Ready, unsuspended ones");

        // Not reconciled yet: its condition is the one seen at the bump.
        assert!(!check(&mut recorded, &before));
        assert_eq!(
            recorded[0].message,
            "not reconciled since the version was bumped"
        );

        let after = [
            ks("a", "True", "t2", "main@sha1:1", false),
            ks("b", "False", "t2", "main@sha1:1", false),
        ];
        assert!(!check(&mut recorded, &after));
        assert!(recorded[0].ready_again);
        assert_eq!(
            not_ready(&recorded),
            ["Kustomization apps/b (Ready=False: m)"]
        );

        assert!(!check(&mut recorded, &after[..1]));
        assert_eq!(recorded[1].message, "deleted since the upgrade started");

        let fixed = [
            ks("a", "True", "t2", "main@sha1:1", false),
            ks("b", "True", "t3", "main@sha1:1", false),
        ];
        assert!(check(&mut recorded, &fixed));
        assert!(not_ready(&recorded).is_empty());
    }

    #[test]
    fn ready_at_another_revision_is_not_ready_again() {
        let mut recorded = snapshot(&[ks("a", "True", "t1", "main@sha1:1", false)]);
        assert!(!check(
            &mut recorded,
            &[ks("a", "True", "t2", "main@sha1:2", false)]
        ));
        assert_eq!(
            recorded[0].message,
            "Ready at main@sha1:2, not at main@sha1:1"
        );
    }
}
