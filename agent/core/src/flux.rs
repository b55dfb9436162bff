//! Names of the flux-operator and Flux APIs, spelled once for both binaries.

/// flux-operator's API group (FluxInstance, FluxReport, ResourceSet).
pub const OPERATOR_GROUP: &str = "fluxcd.controlplane.io";
/// The only version of the FluxInstance API the agent writes.
pub const INSTANCE_VERSION: &str = "v1";
/// `apiVersion` of a FluxInstance.
pub const INSTANCE_API_VERSION: &str = "fluxcd.controlplane.io/v1";
pub const INSTANCE_KIND: &str = "FluxInstance";
pub const INSTANCE_PLURAL: &str = "fluxinstances";
pub const REPORT_KIND: &str = "FluxReport";
pub const REPORT_PLURAL: &str = "fluxreports";
/// flux-operator reconciles only the FluxInstance of this name (and its FluxReport has it too).
pub const INSTANCE_NAME: &str = "flux";
/// The Deployment (and ServiceAccount, Service) of flux-operator itself.
pub const OPERATOR_DEPLOYMENT: &str = "flux-operator";

/// flux-operator's annotation that turns reconciliation of its objects off (`disabled`) and on.
pub const OPERATOR_RECONCILE_ANNOTATION: &str = "fluxcd.controlplane.io/reconcile";
/// The annotation every Flux controller reads as "reconcile now" (`flux reconcile` sets it).
pub const REQUESTED_AT_ANNOTATION: &str = "reconcile.fluxcd.io/requestedAt";
/// Set on a FluxInstance adopted from a Helm release (`namespace/name`) when the adoption
/// removes Helm's ownership, so that Helm writing it again is recognised and reported.
pub const ADOPTED_FROM_HELM_ANNOTATION: &str = "tenantflux.io/adopted-from-helm-release";

/// The CRDs a flux-operator install holds: without them nobody can manage Flux.
pub const OPERATOR_CRDS: [&str; 4] = [
    "fluxinstances.fluxcd.controlplane.io",
    "fluxreports.fluxcd.controlplane.io",
    "resourcesets.fluxcd.controlplane.io",
    "resourcesetinputproviders.fluxcd.controlplane.io",
];

/// Components a FluxInstance may name (flux-operator's list).
pub const KNOWN_COMPONENTS: &[&str] = &[
    "source-controller",
    "kustomize-controller",
    "helm-controller",
    "notification-controller",
    "image-reflector-controller",
    "image-automation-controller",
    "source-watcher",
];

/// What flux-operator installs when `spec.components` is absent.
pub const DEFAULT_COMPONENTS: &[&str] = &[
    "source-controller",
    "kustomize-controller",
    "helm-controller",
    "notification-controller",
];

/// Sizes flux-operator knows (`spec.cluster.size`).
pub const KNOWN_SIZES: &[&str] = &["small", "medium", "large"];

/// The tag of an image reference (`registry:5000/repo:tag@sha256:…` → `tag`), if it has one.
pub fn image_tag(image: &str) -> Option<&str> {
    let without_digest = image.split_once('@').map_or(image, |(name, _)| name);
    let last_segment = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last_segment
        .split_once(':')
        .map(|(_, tag)| tag)
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_tags() {
        assert_eq!(
            image_tag("ghcr.io/x/flux-operator:v0.58.1"),
            Some("v0.58.1")
        );
        assert_eq!(
            image_tag("localhost:5000/flux-operator:v1@sha256:ab"),
            Some("v1")
        );
        assert_eq!(image_tag("localhost:5000/flux-operator"), None);
        assert_eq!(image_tag("flux-operator@sha256:ab"), None);
    }
}
