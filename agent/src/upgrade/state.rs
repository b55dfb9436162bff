//! The record of an upgrade, kept in ConfigMap `tenantflux-upgrade` (key `state.json`) in the
//! agent's namespace, so that an agent killed at any step resumes where it stopped. Each step
//! writes the record before and after its effect, and every effect is idempotent or checked
//! against the cluster first, so a resumed step is never done twice.

use serde::{Deserialize, Serialize};

/// The ConfigMap holding the record.
pub const RECORD_NAME: &str = "tenantflux-upgrade";
/// Its key.
pub const RECORD_KEY: &str = "state.json";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Rewriting objects at the storage version, then trimming `status.storedVersions`.
    #[default]
    Migrating,
    /// Writing the new distribution version into the FluxInstance.
    Bumping,
    /// Waiting for flux-operator to apply it (Ready at the target).
    Waiting,
    Succeeded,
    Failed,
}

impl Phase {
    pub fn finished(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Migrating => "migrating",
            Self::Bumping => "bumping",
            Self::Waiting => "waiting",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CrdRecord {
    pub crd: String,
    pub group: String,
    pub kind: String,
    pub plural: String,
    pub storage_version: String,
    pub total: i64,
    pub migrated: i64,
    pub done: bool,
    pub attempts: u32,
    pub seconds: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub id: String,
    pub requested: String,
    pub target: String,
    pub written_version: String,
    pub from_version: String,
    pub from_range: String,
    pub phase: Phase,
    pub message: String,
    pub crds: Vec<CrdRecord>,
    pub bumped: bool,
    pub instance_generation: i64,
    pub concurrency: u32,
    pub timeout_seconds: u32,
    pub started_at: String,
    pub updated_at: String,
    pub finished_at: String,
    /// Unix seconds by which the FluxInstance must be Ready; set when the bump is written.
    pub ready_by: i64,
    pub requested_by: String,
    pub runs: u32,
    /// The Kustomizations Ready when the version was bumped (the post-upgrade health check).
    #[serde(default)]
    pub ready_before: Option<Vec<super::health::Healthy>>,
}

impl Record {
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a record serializes")
    }

    /// The next CRD whose migration has not finished.
    pub fn next_crd(&self) -> Option<usize> {
        self.crds.iter().position(|c| !c.done)
    }

    /// When the FluxInstance must be Ready (RFC 3339), once the bump is written.
    pub fn deadline(&self) -> String {
        if self.ready_by > 0 {
            k8s_openapi::jiff::Timestamp::from_second(self.ready_by)
                .map(|t| t.to_string())
                .unwrap_or_default()
        } else {
            String::new()
        }
    }
}

/// What the waiting step sees of the FluxInstance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rollout {
    /// Ready at the target, for the bumped generation.
    Done,
    /// Stalled: flux-operator gave up (its message).
    Stalled(String),
    /// Still going (the Ready condition's message, if any).
    Pending(String),
}

/// Reads the FluxInstance (as JSON) after the bump to `target` at `generation`.
pub fn rollout(instance: &serde_json::Value, target: &str, generation: i64) -> Rollout {
    let condition = |type_: &str| {
        instance
            .pointer("/status/conditions")
            .and_then(serde_json::Value::as_array)
            .and_then(|c| {
                c.iter()
                    .find(|c| c.get("type").and_then(serde_json::Value::as_str) == Some(type_))
            })
    };
    let text = |c: Option<&serde_json::Value>, field: &str| {
        c.and_then(|c| c.get(field))
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let observed = |c: Option<&serde_json::Value>| {
        c.and_then(|c| c.get("observedGeneration"))
            .and_then(serde_json::Value::as_i64)
            .unwrap_or(0)
    };
    let ready = condition("Ready");
    let applied = instance
        .pointer("/status/lastAppliedRevision")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    let at_target = applied
        .split('@')
        .next()
        .is_some_and(|v| v.strip_prefix('v').unwrap_or(v) == target);
    let stalled = condition("Stalled");
    if text(stalled, "status") == "True" && observed(stalled) >= generation {
        return Rollout::Stalled(text(stalled, "message"));
    }
    if text(ready, "status") == "True" && observed(ready) >= generation && at_target {
        return Rollout::Done;
    }
    Rollout::Pending(text(ready, "message"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_record_round_trips_and_names_the_next_crd() {
        let record = Record {
            id: "u1".into(),
            phase: Phase::Migrating,
            crds: vec![
                CrdRecord {
                    crd: "a".into(),
                    done: true,
                    ..CrdRecord::default()
                },
                CrdRecord {
                    crd: "b".into(),
                    ..CrdRecord::default()
                },
            ],
            ..Record::default()
        };
        let back = Record::parse(&record.to_json()).unwrap();
        assert_eq!(back, record);
        assert_eq!(back.next_crd(), Some(1));
        assert!(record.to_json().contains("\"phase\": \"migrating\""));
        assert!(!Phase::Waiting.finished() && Phase::Failed.finished());
    }

    #[test]
    fn rollout_is_done_only_ready_at_the_target_for_the_bumped_generation() {
        let instance = |revision: &str, status: &str, observed: i64| {
            json!({"status": {
                "lastAppliedRevision": revision,
                "conditions": [{"type": "Ready", "status": status, "observedGeneration": observed, "message": "m"}],
            }})
        };
        assert_eq!(
            rollout(&instance("v2.8.8@sha256:1", "True", 3), "2.8.8", 3),
            Rollout::Done
        );
        assert!(matches!(
            rollout(&instance("v2.6.4@sha256:1", "True", 2), "2.8.8", 3),
            Rollout::Pending(_)
        ));
        assert!(matches!(
            rollout(&instance("v2.8.8@sha256:1", "False", 3), "2.8.8", 3),
            Rollout::Pending(_)
        ));
        let stalled = json!({"status": {"conditions": [
            {"type": "Stalled", "status": "True", "observedGeneration": 3, "message": "CRD refused"},
        ]}});
        assert_eq!(
            rollout(&stalled, "2.8.8", 3),
            Rollout::Stalled("CRD refused".into())
        );
    }
}
