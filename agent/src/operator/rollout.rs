//! Whether a Deployment has rolled out, as `kubectl rollout status` reads it.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;

/// Whether `deployment` has rolled out (`kubectl rollout status` semantics), else why not.
pub fn rollout(deployment: &Deployment) -> Result<(), String> {
    let generation = deployment.metadata.generation.unwrap_or_default();
    let desired = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let Some(status) = &deployment.status else {
        return Err("the Deployment controller has not reported on it yet".into());
    };
    if status.observed_generation.unwrap_or_default() < generation {
        return Err(format!(
            "the Deployment controller has not observed generation {generation} yet"
        ));
    }
    let conditions: BTreeMap<&str, _> = status
        .conditions
        .iter()
        .flatten()
        .map(|c| (c.type_.as_str(), c))
        .collect();
    if let Some(c) = conditions.get("Progressing")
        && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
    {
        return Err(format!(
            "rollout stalled: {}",
            c.message.as_deref().unwrap_or("progress deadline exceeded")
        ));
    }
    let updated = status.updated_replicas.unwrap_or(0);
    let total = status.replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    if updated < desired {
        return Err(format!("{updated} of {desired} replicas updated"));
    }
    if total > updated {
        return Err(format!(
            "{} old replicas still terminating",
            total - updated
        ));
    }
    if available < updated {
        return Err(format!(
            "{available} of {updated} updated replicas available"
        ));
    }
    match conditions.get("Available") {
        Some(c) if c.status == "True" => Ok(()),
        Some(c) => Err(format!(
            "not available: {}",
            c.message.as_deref().unwrap_or("no message")
        )),
        None => Err("no Available condition yet".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(value: serde_json::Value) -> Deployment {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn rollout_is_done_only_when_the_new_generation_is_available() {
        let base = serde_json::json!({
            "metadata": {"name": "flux-operator", "generation": 2},
            "spec": {"replicas": 1, "selector": {}, "template": {}},
        });
        let with_status = |status: serde_json::Value| {
            let mut d = base.clone();
            d["status"] = status;
            deployment(d)
        };
        assert_eq!(
            rollout(&deployment(base.clone())).unwrap_err(),
            "the Deployment controller has not reported on it yet"
        );
        let available = serde_json::json!([{"type": "Available", "status": "True"}]);
        assert_eq!(
            rollout(&with_status(serde_json::json!({
                "observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                "availableReplicas": 1, "conditions": available,
            })))
            .unwrap_err(),
            "the Deployment controller has not observed generation 2 yet",
            "Available from the old generation does not count"
        );
        assert_eq!(
            rollout(&with_status(serde_json::json!({
                "observedGeneration": 2, "replicas": 2, "updatedReplicas": 1,
                "availableReplicas": 1, "conditions": available,
            })))
            .unwrap_err(),
            "1 old replicas still terminating"
        );
        assert_eq!(
            rollout(&with_status(serde_json::json!({
                "observedGeneration": 2, "replicas": 1, "updatedReplicas": 1,
                "availableReplicas": 0,
                "conditions": [{"type": "Available", "status": "False", "message": "Deployment does not have minimum availability."}],
            })))
            .unwrap_err(),
            "0 of 1 updated replicas available"
        );
        assert_eq!(
            rollout(&with_status(serde_json::json!({
                "observedGeneration": 2, "replicas": 1, "updatedReplicas": 1,
                "availableReplicas": 1,
                "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"x\" has timed out progressing."}],
            })))
            .unwrap_err(),
            "rollout stalled: ReplicaSet \"x\" has timed out progressing."
        );
        rollout(&with_status(serde_json::json!({
            "observedGeneration": 2, "replicas": 1, "updatedReplicas": 1,
            "availableReplicas": 1, "conditions": available,
        })))
        .unwrap();
    }
}
