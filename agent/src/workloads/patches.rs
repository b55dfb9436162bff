//! The merge patches that suspend, resume and reconcile an object, each setting only what its
//! kind's controller reads.

use serde_json::{Value, json};
use tenantflux_core::flux::REQUESTED_AT_ANNOTATION;

use super::catalog::{FORCE_AT, FluxKind, SuspendBy};

/// The identity of the object a patch is for.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    pub kind: &'a FluxKind,
    pub api_version: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

fn apply_object(target: Target<'_>, annotations: Value, spec: Option<Value>) -> Value {
    let mut object = json!({
        "apiVersion": target.api_version,
        "kind": target.kind.kind,
        "metadata": {"name": target.name, "namespace": target.namespace},
    });
    if annotations.as_object().is_some_and(|a| !a.is_empty()) {
        object["metadata"]["annotations"] = annotations;
    }
    if let Some(spec) = spec {
        object["spec"] = spec;
    }
    object
}

/// The merge patch that suspends (`suspend`) or resumes the target; a resume
/// also asks for a reconciliation at `requested_at`, as `flux resume` does.
pub fn suspend_patch(target: Target<'_>, suspend: bool, requested_at: Option<&str>) -> Value {
    let mut annotations = serde_json::Map::new();
    if let Some(at) = requested_at {
        annotations.insert(REQUESTED_AT_ANNOTATION.into(), at.into());
    }
    match target.kind.suspend {
        SuspendBy::Spec => apply_object(
            target,
            annotations.into(),
            Some(json!({ "suspend": suspend })),
        ),
        SuspendBy::Annotation(annotation) => {
            let value = if suspend { "disabled" } else { "enabled" };
            annotations.insert(annotation.into(), value.into());
            apply_object(target, annotations.into(), None)
        }
        // Refused before a patch is made (`controllable`); nothing to set.
        SuspendBy::ReadOnly => apply_object(target, annotations.into(), None),
    }
}

/// The merge patch that asks for a reconciliation at `requested_at`; `force`
/// (HelmRelease) also forces a one-off install or upgrade.
pub fn reconcile_patch(target: Target<'_>, requested_at: &str, force: bool) -> Value {
    let mut annotations = serde_json::Map::new();
    annotations.insert(REQUESTED_AT_ANNOTATION.into(), requested_at.into());
    if force {
        annotations.insert(FORCE_AT.into(), requested_at.into());
    }
    apply_object(target, annotations.into(), None)
}

#[cfg(test)]
mod tests {
    use tenantflux_core::flux::OPERATOR_RECONCILE_ANNOTATION;

    use crate::workloads::catalog::{GENERATOR_RECONCILE_ANNOTATION, kind};

    use super::*;

    fn target(name: &str) -> Target<'static> {
        Target {
            kind: kind(name),
            api_version: "v",
            namespace: "apps",
            name: "podinfo",
        }
    }
    #[test]
    fn suspend_and_resume_patches_set_only_what_flux_reads() {
        assert_eq!(
            suspend_patch(target("ks"), true, None),
            json!({"apiVersion": "v", "kind": "Kustomization", "metadata": {"name": "podinfo", "namespace": "apps"}, "spec": {"suspend": true}})
        );
        assert_eq!(
            suspend_patch(target("ks"), false, Some("t1")),
            json!({"apiVersion": "v", "kind": "Kustomization", "metadata": {"name": "podinfo", "namespace": "apps", "annotations": {REQUESTED_AT_ANNOTATION: "t1"}}, "spec": {"suspend": false}})
        );
        assert_eq!(
            suspend_patch(target("instance"), true, None),
            json!({"apiVersion": "v", "kind": "FluxInstance", "metadata": {"name": "podinfo", "namespace": "apps", "annotations": {OPERATOR_RECONCILE_ANNOTATION: "disabled"}}})
        );
        assert_eq!(
            suspend_patch(target("instance"), false, Some("t2"))["metadata"]["annotations"],
            json!({OPERATOR_RECONCILE_ANNOTATION: "enabled", REQUESTED_AT_ANNOTATION: "t2"})
        );
        assert_eq!(
            suspend_patch(target("rsip"), true, None)["metadata"]["annotations"],
            json!({OPERATOR_RECONCILE_ANNOTATION: "disabled"})
        );
        assert_eq!(
            suspend_patch(target("ag"), true, None)["metadata"]["annotations"],
            json!({GENERATOR_RECONCILE_ANNOTATION: "disabled"})
        );
    }
    #[test]
    fn reconcile_patches_request_and_force_with_one_timestamp() {
        assert_eq!(
            reconcile_patch(target("ks"), "t1", false),
            json!({"apiVersion": "v", "kind": "Kustomization", "metadata": {"name": "podinfo", "namespace": "apps", "annotations": {REQUESTED_AT_ANNOTATION: "t1"}}})
        );
        assert_eq!(
            reconcile_patch(target("hr"), "t1", true)["metadata"]["annotations"],
            json!({REQUESTED_AT_ANNOTATION: "t1", FORCE_AT: "t1"})
        );
    }
}
