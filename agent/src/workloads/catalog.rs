//! The Flux kinds the agent knows, and everything about them that needs no cluster: which
//! version of each the cluster serves (from discovery data), the row `flux get` shows for an
//! object, the selectors, and the patches that suspend, resume and reconcile.

use serde_json::{Value, json};
use tenantflux_core::flux::{
    INSTANCE_KIND, INSTANCE_PLURAL, OPERATOR_GROUP, OPERATOR_RECONCILE_ANNOTATION, REPORT_KIND,
    REPORT_PLURAL, REQUESTED_AT_ANNOTATION,
};

/// Annotation helm-controller forces a one-off install or upgrade on (same value as requestedAt).
pub const FORCE_AT: &str = "reconcile.fluxcd.io/forceAt";

/// How a kind is suspended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SuspendBy {
    /// `spec.suspend: true|false` (every Flux toolkit kind that has a controller of its own).
    Spec,
    /// This annotation set to `disabled|enabled` (flux-operator's kinds:
    /// `fluxcd.controlplane.io/reconcile`; source-watcher's ArtifactGenerator:
    /// `source.extensions.fluxcd.io/reconcile`).
    Annotation(&'static str),
    /// Nothing reconciles the kind on its own schedule (ExternalArtifact, written by whatever
    /// produces it) or it is a report (FluxReport): read-only here.
    ReadOnly,
}

/// Where a kind's revision column comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revision {
    None,
    Artifact,
    LastApplied,
    HelmRelease,
    ScanTime,
    LatestImage,
    LastRun,
    /// ResourceSetInputProvider: `status.lastExportedRevision`.
    LastExported,
    /// FluxReport: the distribution version it reports.
    Distribution,
}

/// Where a kind names its source, for `reconcile --with-source`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceRef {
    None,
    /// `spec.sourceRef` (Kustomization).
    Spec,
    /// `spec.chartRef`, else `spec.chart.spec.sourceRef` (HelmRelease).
    HelmChart,
}

/// Which of flux's command groups a kind belongs to (`flux get sources all`, `flux get images
/// all`), so the same words select the same kinds here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    Source,
    Image,
    Other,
}

impl Category {
    /// The category a word of flux's grammar names (`sources`, `images`, either singular).
    pub fn named(word: &str) -> Option<Self> {
        match word.to_ascii_lowercase().as_str() {
            "sources" | "source" => Some(Self::Source),
            "images" | "image" => Some(Self::Image),
            _ => None,
        }
    }
}

/// One Flux kind.
#[derive(Debug, PartialEq, Eq)]
pub struct FluxKind {
    pub kind: &'static str,
    pub group: &'static str,
    pub plural: &'static str,
    /// Accepted besides the kind and the plural, as flux's and kubectl's habits go.
    pub short_names: &'static [&'static str],
    pub revision: Revision,
    pub suspend: SuspendBy,
    pub source: SourceRef,
    pub category: Category,
}

impl FluxKind {
    /// Whether `name` (case-insensitive) names this kind.
    pub fn is_named(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        name == self.kind.to_ascii_lowercase()
            || name == self.plural
            || self.short_names.contains(&name.as_str())
    }

    /// The heading of its revision column in tables.
    pub fn revision_column(&self) -> &'static str {
        match self.revision {
            Revision::None => "",
            Revision::Artifact
            | Revision::LastApplied
            | Revision::HelmRelease
            | Revision::LastExported => "REVISION",
            Revision::ScanTime => "LAST SCAN",
            Revision::LatestImage => "LATEST IMAGE",
            Revision::LastRun => "LAST RUN",
            Revision::Distribution => "VERSION",
        }
    }

    /// Whether suspend, resume and reconcile apply: read-only kinds refuse them.
    pub fn controllable(&self) -> bool {
        self.suspend != SuspendBy::ReadOnly
    }

    /// `kustomizations.kustomize.toolkit.fluxcd.io`, as RBAC and kubectl name it.
    pub fn resource(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }
}

const SOURCE: &str = "source.toolkit.fluxcd.io";
const SOURCE_EXTENSIONS: &str = "source.extensions.fluxcd.io";
const KUSTOMIZE: &str = "kustomize.toolkit.fluxcd.io";
const HELM: &str = "helm.toolkit.fluxcd.io";
const NOTIFICATION: &str = "notification.toolkit.fluxcd.io";
const IMAGE: &str = "image.toolkit.fluxcd.io";

/// source-watcher's annotation that turns reconciliation of an ArtifactGenerator off.
const GENERATOR_RECONCILE_ANNOTATION: &str = "source.extensions.fluxcd.io/reconcile";

const fn toolkit(
    kind: &'static str,
    group: &'static str,
    plural: &'static str,
    short_names: &'static [&'static str],
    revision: Revision,
    source: SourceRef,
    category: Category,
) -> FluxKind {
    FluxKind {
        kind,
        group,
        plural,
        short_names,
        revision,
        suspend: SuspendBy::Spec,
        source,
        category,
    }
}

const fn operator(
    kind: &'static str,
    plural: &'static str,
    short_names: &'static [&'static str],
    revision: Revision,
    suspend: SuspendBy,
) -> FluxKind {
    FluxKind {
        kind,
        group: OPERATOR_GROUP,
        plural,
        short_names,
        revision,
        suspend,
        source: SourceRef::None,
        category: Category::Other,
    }
}

/// Every kind, in the order `get all` shows them: `flux get all`'s (sources, images, what
/// applies them, notifications), then source-watcher's and flux-operator's kinds.
pub static KINDS: &[FluxKind] = &[
    toolkit(
        "OCIRepository",
        SOURCE,
        "ocirepositories",
        &["ocirepo", "ocirepos", "oci"],
        Revision::Artifact,
        SourceRef::None,
        Category::Source,
    ),
    toolkit(
        "Bucket",
        SOURCE,
        "buckets",
        &[],
        Revision::Artifact,
        SourceRef::None,
        Category::Source,
    ),
    toolkit(
        "GitRepository",
        SOURCE,
        "gitrepositories",
        &["gitrepo", "gitrepos", "git"],
        Revision::Artifact,
        SourceRef::None,
        Category::Source,
    ),
    toolkit(
        "HelmRepository",
        SOURCE,
        "helmrepositories",
        &["helmrepo", "helmrepos"],
        Revision::Artifact,
        SourceRef::None,
        Category::Source,
    ),
    toolkit(
        "HelmChart",
        SOURCE,
        "helmcharts",
        &["helmchart", "chart", "charts", "hc"],
        Revision::Artifact,
        SourceRef::None,
        Category::Source,
    ),
    FluxKind {
        kind: "ExternalArtifact",
        group: SOURCE,
        plural: "externalartifacts",
        short_names: &[],
        revision: Revision::Artifact,
        suspend: SuspendBy::ReadOnly,
        source: SourceRef::None,
        category: Category::Source,
    },
    toolkit(
        "ImageRepository",
        IMAGE,
        "imagerepositories",
        &["imagerepo", "imagerepos"],
        Revision::ScanTime,
        SourceRef::None,
        Category::Image,
    ),
    toolkit(
        "ImagePolicy",
        IMAGE,
        "imagepolicies",
        &[],
        Revision::LatestImage,
        SourceRef::None,
        Category::Image,
    ),
    toolkit(
        "ImageUpdateAutomation",
        IMAGE,
        "imageupdateautomations",
        &["imageupdate", "imageupdates"],
        Revision::LastRun,
        SourceRef::None,
        Category::Image,
    ),
    toolkit(
        "HelmRelease",
        HELM,
        "helmreleases",
        &["hr"],
        Revision::HelmRelease,
        SourceRef::HelmChart,
        Category::Other,
    ),
    toolkit(
        "Kustomization",
        KUSTOMIZE,
        "kustomizations",
        &["ks"],
        Revision::LastApplied,
        SourceRef::Spec,
        Category::Other,
    ),
    toolkit(
        "Receiver",
        NOTIFICATION,
        "receivers",
        &[],
        Revision::None,
        SourceRef::None,
        Category::Other,
    ),
    toolkit(
        "Provider",
        NOTIFICATION,
        "providers",
        &["alert-provider", "alert-providers"],
        Revision::None,
        SourceRef::None,
        Category::Other,
    ),
    toolkit(
        "Alert",
        NOTIFICATION,
        "alerts",
        &[],
        Revision::None,
        SourceRef::None,
        Category::Other,
    ),
    FluxKind {
        kind: "ArtifactGenerator",
        group: SOURCE_EXTENSIONS,
        plural: "artifactgenerators",
        short_names: &["ag"],
        revision: Revision::None,
        suspend: SuspendBy::Annotation(GENERATOR_RECONCILE_ANNOTATION),
        source: SourceRef::None,
        category: Category::Other,
    },
    operator(
        INSTANCE_KIND,
        INSTANCE_PLURAL,
        &["instance", "instances"],
        Revision::LastApplied,
        SuspendBy::Annotation(OPERATOR_RECONCILE_ANNOTATION),
    ),
    operator(
        REPORT_KIND,
        REPORT_PLURAL,
        &["report", "reports"],
        Revision::Distribution,
        SuspendBy::ReadOnly,
    ),
    operator(
        "ResourceSet",
        "resourcesets",
        &["rset", "rsets"],
        Revision::LastApplied,
        SuspendBy::Annotation(OPERATOR_RECONCILE_ANNOTATION),
    ),
    operator(
        "ResourceSetInputProvider",
        "resourcesetinputproviders",
        &["rsip", "rsips"],
        Revision::LastExported,
        SuspendBy::Annotation(OPERATOR_RECONCILE_ANNOTATION),
    ),
];

/// The kind `name` names, if any.
pub fn find(name: &str) -> Option<&'static FluxKind> {
    KINDS.iter().find(|k| k.is_named(name))
}

/// Every API group of the catalog, once each.
pub fn groups() -> Vec<&'static str> {
    let mut groups: Vec<&'static str> = Vec::new();
    for kind in KINDS {
        if !groups.contains(&kind.group) {
            groups.push(kind.group);
        }
    }
    groups
}

/// The kinds of a category, in catalog order.
pub fn in_category(category: Category) -> impl Iterator<Item = &'static FluxKind> {
    KINDS.iter().filter(move |k| k.category == category)
}

/// What discovery says about one API group: its versions in the API server's priority order
/// and the kinds each serves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupVersions {
    pub group: String,
    pub preferred: Option<String>,
    pub versions: Vec<(String, Vec<String>)>,
}

/// How the cluster serves one kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    /// The version the agent uses: the group's preferred version if it serves the kind, else
    /// the first (highest priority) version that does.
    pub version: String,
    /// Every version serving the kind, `version` first.
    pub versions: Vec<String>,
}

/// How the cluster serves `kind`, from the discovery of its group; `None` if it does not.
pub fn served(kind: &FluxKind, groups: &[GroupVersions]) -> Option<Served> {
    let group = groups.iter().find(|g| g.group == kind.group)?;
    let mut versions: Vec<String> = group
        .versions
        .iter()
        .filter(|(_, kinds)| kinds.iter().any(|k| k == kind.kind))
        .map(|(v, _)| v.clone())
        .collect();
    if let Some(at) = group
        .preferred
        .as_ref()
        .and_then(|p| versions.iter().position(|v| v == p))
    {
        let preferred = versions.remove(at);
        versions.insert(0, preferred);
    }
    Some(Served {
        version: versions.first()?.clone(),
        versions,
    })
}

/// The row `flux get` shows for an object, read from its JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Row {
    pub revision: String,
    pub suspended: bool,
    pub ready: Option<Condition>,
    pub observed_generation: i64,
    pub last_handled_reconcile_at: String,
    /// (kind, namespace, name) of the object's source.
    pub source: Option<(String, String, String)>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Condition {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition: String,
}

fn text(object: &Value, pointer: &str) -> Option<String> {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// The condition `type_` (case-insensitive) of the object's status.
pub fn condition(object: &Value, type_: &str) -> Option<Condition> {
    let found = object
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| {
            c.get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.eq_ignore_ascii_case(type_))
        })?;
    let field = |name: &str| {
        found
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Some(Condition {
        type_: field("type"),
        status: field("status"),
        reason: field("reason"),
        message: field("message"),
        last_transition: field("lastTransitionTime"),
    })
}

/// Whether the object is suspended, the way its kind says it.
pub fn suspended(kind: &FluxKind, object: &Value) -> bool {
    match kind.suspend {
        SuspendBy::Spec => object.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true),
        SuspendBy::Annotation(annotation) => text(
            object,
            &format!("/metadata/annotations/{}", escape(annotation)),
        )
        .is_some_and(|v| v.eq_ignore_ascii_case("disabled")),
        SuspendBy::ReadOnly => false,
    }
}

/// A JSON pointer token for a key holding `/` (RFC 6901).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn revision(kind: &FluxKind, object: &Value) -> String {
    let first = |pointers: &[&str]| pointers.iter().find_map(|p| text(object, p));
    match kind.revision {
        Revision::None => None,
        Revision::Artifact => first(&["/status/artifact/revision"]),
        Revision::LastApplied => first(&["/status/lastAppliedRevision"]),
        // As flux: the chart version of the latest release (v2), else what was last applied
        // or attempted.
        Revision::HelmRelease => first(&[
            "/status/history/0/chartVersion",
            "/status/lastAppliedRevision",
            "/status/lastAttemptedRevision",
        ]),
        Revision::ScanTime => first(&["/status/lastScanResult/scanTime"]),
        // v1 reports latestRef; v1beta2 latestImage.
        Revision::LatestImage => object
            .pointer("/status/latestRef")
            .and_then(|r| {
                let name = r.get("name")?.as_str()?;
                let tag = r.get("tag").and_then(Value::as_str).unwrap_or_default();
                Some(if tag.is_empty() {
                    name.to_owned()
                } else {
                    format!("{name}:{tag}")
                })
            })
            .or_else(|| first(&["/status/latestImage"])),
        Revision::LastRun => first(&["/status/lastAutomationRunTime"]),
        Revision::LastExported => first(&["/status/lastExportedRevision"]),
        Revision::Distribution => first(&["/spec/distribution/version"]),
    }
    .unwrap_or_default()
}

fn source(kind: &FluxKind, object: &Value) -> Option<(String, String, String)> {
    let reference = match kind.source {
        SourceRef::None => None,
        SourceRef::Spec => object.pointer("/spec/sourceRef"),
        SourceRef::HelmChart => object
            .pointer("/spec/chartRef")
            .or_else(|| object.pointer("/spec/chart/spec/sourceRef")),
    }?;
    let kind = reference.get("kind")?.as_str()?.to_owned();
    let name = reference.get("name")?.as_str()?.to_owned();
    let namespace = reference
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .or_else(|| {
            object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
        })
        .unwrap_or_default()
        .to_owned();
    Some((kind, namespace, name))
}

/// The `flux get` row of an object of `kind`.
pub fn row(kind: &FluxKind, object: &Value) -> Row {
    Row {
        revision: revision(kind, object),
        suspended: suspended(kind, object),
        ready: condition(object, "Ready"),
        observed_generation: object
            .pointer("/status/observedGeneration")
            .and_then(Value::as_i64)
            .unwrap_or_default(),
        last_handled_reconcile_at: text(object, "/status/lastHandledReconcileAt")
            .unwrap_or_default(),
        source: source(kind, object),
    }
}

/// Why a status selector was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid status selector {}: {reason} (expected CONDITION=STATUS, e.g. ready=false)",
    tenantflux_core::text::quote(selector)
)]
pub struct StatusSelectorError {
    pub selector: String,
    pub reason: &'static str,
}

/// A condition type and the status it must have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusSelector {
    pub type_: String,
    pub status: String,
}

impl StatusSelector {
    pub fn new(type_: &str, status: &str) -> Result<Self, StatusSelectorError> {
        let invalid = |reason| StatusSelectorError {
            selector: format!("{type_}={status}"),
            reason,
        };
        if type_.trim().is_empty() {
            return Err(invalid("the condition type is empty"));
        }
        let status = match status.trim().to_ascii_lowercase().as_str() {
            "true" => "True",
            "false" => "False",
            "unknown" => "Unknown",
            _ => return Err(invalid("the status must be true, false or unknown")),
        };
        Ok(Self {
            type_: type_.trim().to_owned(),
            status: status.to_owned(),
        })
    }

    /// Whether the object has the condition with that status; an object without the
    /// condition matches `unknown` only.
    pub fn matches(&self, object: &Value) -> bool {
        match condition(object, &self.type_) {
            Some(c) => c.status == self.status,
            None => self.status == "Unknown",
        }
    }
}

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
    use super::*;

    fn kind(name: &str) -> &'static FluxKind {
        find(name).unwrap_or_else(|| panic!("no kind {name}"))
    }

    #[test]
    fn kinds_are_found_by_kind_plural_and_short_name_case_insensitively() {
        assert_eq!(kind("ks").kind, "Kustomization");
        assert_eq!(kind("Kustomization").kind, "Kustomization");
        assert_eq!(kind("KUSTOMIZATIONS").kind, "Kustomization");
        assert_eq!(kind("hr").kind, "HelmRelease");
        assert_eq!(kind("gitrepo").kind, "GitRepository");
        assert_eq!(kind("gitrepository").kind, "GitRepository");
        assert_eq!(kind("ocirepo").kind, "OCIRepository");
        assert_eq!(kind("helmrepo").kind, "HelmRepository");
        assert_eq!(kind("chart").kind, "HelmChart");
        assert_eq!(kind("helmchart").kind, "HelmChart");
        assert_eq!(kind("bucket").kind, "Bucket");
        assert_eq!(kind("receiver").kind, "Receiver");
        assert_eq!(kind("alert").kind, "Alert");
        assert_eq!(kind("provider").kind, "Provider");
        assert_eq!(kind("imagerepo").kind, "ImageRepository");
        assert_eq!(kind("imagepolicy").kind, "ImagePolicy");
        assert_eq!(kind("imageupdate").kind, "ImageUpdateAutomation");
        assert_eq!(kind("instance").kind, "FluxInstance");
        assert_eq!(kind("externalartifact").kind, "ExternalArtifact");
        assert_eq!(kind("ag").kind, "ArtifactGenerator");
        assert_eq!(kind("rset").kind, "ResourceSet");
        assert_eq!(kind("rsip").kind, "ResourceSetInputProvider");
        assert_eq!(kind("fluxreport").kind, "FluxReport");
        assert!(find("all").is_none());
        assert!(find("sources").is_none());
        assert!(find("deployment").is_none());
    }

    #[test]
    fn no_name_is_ambiguous() {
        for k in KINDS {
            let mut names = vec![k.kind.to_ascii_lowercase(), k.plural.to_owned()];
            names.extend(k.short_names.iter().map(|s| s.to_string()));
            for name in names {
                let matching: Vec<_> = KINDS.iter().filter(|o| o.is_named(&name)).collect();
                assert_eq!(matching.len(), 1, "{name} names {matching:?}");
            }
        }
        assert_eq!(groups().len(), 7);
        let sources: Vec<_> = in_category(Category::Source).map(|k| k.kind).collect();
        assert_eq!(
            sources,
            [
                "OCIRepository",
                "Bucket",
                "GitRepository",
                "HelmRepository",
                "HelmChart",
                "ExternalArtifact"
            ],
            "flux get sources all's order"
        );
        let images: Vec<_> = in_category(Category::Image).map(|k| k.kind).collect();
        assert_eq!(
            images,
            ["ImageRepository", "ImagePolicy", "ImageUpdateAutomation"]
        );
        assert_eq!(Category::named("Sources"), Some(Category::Source));
        assert_eq!(Category::named("image"), Some(Category::Image));
        assert_eq!(Category::named("all"), None);
    }

    fn group(name: &str, preferred: &str, versions: &[(&str, &[&str])]) -> GroupVersions {
        GroupVersions {
            group: name.into(),
            preferred: Some(preferred.into()),
            versions: versions
                .iter()
                .map(|(v, kinds)| (v.to_string(), kinds.iter().map(|k| k.to_string()).collect()))
                .collect(),
        }
    }

    #[test]
    fn served_versions_follow_each_flux_minor() {
        // Flux 2.6: image kinds at v1beta2 only, notification Alert at v1beta3 (+v1beta2).
        let flux_2_6 = [
            group(
                IMAGE,
                "v1beta2",
                &[
                    (
                        "v1beta2",
                        &["ImageRepository", "ImagePolicy", "ImageUpdateAutomation"],
                    ),
                    (
                        "v1beta1",
                        &["ImageRepository", "ImagePolicy", "ImageUpdateAutomation"],
                    ),
                ],
            ),
            group(
                NOTIFICATION,
                "v1",
                &[
                    ("v1", &["Receiver"]),
                    ("v1beta3", &["Alert", "Provider"]),
                    ("v1beta2", &["Alert", "Provider", "Receiver"]),
                ],
            ),
        ];
        assert_eq!(
            served(kind("imagepolicy"), &flux_2_6),
            Some(Served {
                version: "v1beta2".into(),
                versions: vec!["v1beta2".into(), "v1beta1".into()]
            })
        );
        // Not in the preferred version: the first version that serves it.
        assert_eq!(served(kind("alert"), &flux_2_6).unwrap().version, "v1beta3");
        assert_eq!(
            served(kind("receiver"), &flux_2_6).unwrap().versions,
            ["v1", "v1beta2"]
        );
        // Flux 2.9: v1 for image kinds.
        let flux_2_9 = [group(
            IMAGE,
            "v1",
            &[(
                "v1",
                &["ImageRepository", "ImagePolicy", "ImageUpdateAutomation"],
            )],
        )];
        assert_eq!(
            served(kind("imagepolicy"), &flux_2_9).unwrap().versions,
            ["v1"]
        );
        // A group not served, or a kind its group does not serve.
        assert_eq!(served(kind("ks"), &flux_2_9), None);
        assert_eq!(
            served(
                kind("alert"),
                &[group(NOTIFICATION, "v1", &[("v1", &["Receiver"])])]
            ),
            None
        );
        // The preferred version first even when the server lists it later.
        let reordered = [group(
            SOURCE,
            "v1",
            &[("v1beta2", &["GitRepository"]), ("v1", &["GitRepository"])],
        )];
        assert_eq!(
            served(kind("gitrepo"), &reordered).unwrap().versions,
            ["v1", "v1beta2"]
        );
    }

    fn ready(status: &str, message: &str) -> Value {
        json!({"type": "Ready", "status": status, "reason": "Reason", "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn rows_read_revision_ready_and_suspend_as_flux_get_does() {
        let git = json!({
            "metadata": {"name": "podinfo", "namespace": "apps"},
            "spec": {"suspend": true},
            "status": {"artifact": {"revision": "main@sha1:abc"}, "conditions": [ready("True", "stored artifact")], "observedGeneration": 3, "lastHandledReconcileAt": "t1"},
        });
        let row = row(kind("gitrepo"), &git);
        assert_eq!(row.revision, "main@sha1:abc");
        assert!(row.suspended);
        assert_eq!(row.ready.as_ref().unwrap().status, "True");
        assert_eq!(row.ready.as_ref().unwrap().message, "stored artifact");
        assert_eq!(row.observed_generation, 3);
        assert_eq!(row.last_handled_reconcile_at, "t1");
        assert_eq!(row.source, None);

        let ks = json!({
            "metadata": {"name": "apps", "namespace": "apps"},
            "spec": {"sourceRef": {"kind": "GitRepository", "name": "podinfo"}},
            "status": {"lastAppliedRevision": "main@sha1:def"},
        });
        let ks_row = super::row(kind("ks"), &ks);
        assert_eq!(ks_row.revision, "main@sha1:def");
        assert!(!ks_row.suspended);
        assert_eq!(ks_row.ready, None);
        assert_eq!(
            ks_row.source,
            Some(("GitRepository".into(), "apps".into(), "podinfo".into()))
        );

        let hr = |status: Value, spec: Value| {
            super::row(
                kind("hr"),
                &json!({"metadata": {"namespace": "apps"}, "spec": spec, "status": status}),
            )
        };
        let chart_spec = json!({"chart": {"spec": {"sourceRef": {"kind": "HelmRepository", "name": "bitnami", "namespace": "flux-system"}}}});
        assert_eq!(
            hr(
                json!({"history": [{"chartVersion": "6.0.0"}], "lastAttemptedRevision": "5.0.0"}),
                chart_spec.clone()
            )
            .revision,
            "6.0.0"
        );
        let attempted = hr(json!({"lastAttemptedRevision": "5.0.0"}), chart_spec);
        assert_eq!(attempted.revision, "5.0.0");
        assert_eq!(
            attempted.source,
            Some((
                "HelmRepository".into(),
                "flux-system".into(),
                "bitnami".into()
            ))
        );
        assert_eq!(
            hr(
                json!({}),
                json!({"chartRef": {"kind": "OCIRepository", "name": "podinfo"}})
            )
            .source,
            Some(("OCIRepository".into(), "apps".into(), "podinfo".into()))
        );

        let policy_v1 = json!({"status": {"latestRef": {"name": "ghcr.io/x/app", "tag": "1.2.3"}}});
        assert_eq!(
            super::row(kind("imagepolicy"), &policy_v1).revision,
            "ghcr.io/x/app:1.2.3"
        );
        let policy_v1beta2 = json!({"status": {"latestImage": "ghcr.io/x/app:1.2.2"}});
        assert_eq!(
            super::row(kind("imagepolicy"), &policy_v1beta2).revision,
            "ghcr.io/x/app:1.2.2"
        );
        assert_eq!(
            super::row(
                kind("imagerepo"),
                &json!({"status": {"lastScanResult": {"scanTime": "2026-01-01T00:00:00Z"}}})
            )
            .revision,
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(
            super::row(
                kind("receiver"),
                &json!({"status": {"webhookPath": "/hook"}})
            )
            .revision,
            ""
        );
        assert_eq!(kind("receiver").revision_column(), "");
        assert_eq!(kind("ks").revision_column(), "REVISION");

        let instance = |value: &str| json!({"metadata": {"annotations": {OPERATOR_RECONCILE_ANNOTATION: value}}, "spec": {"suspend": true}});
        assert!(suspended(kind("instance"), &instance("disabled")));
        assert!(!suspended(kind("instance"), &instance("enabled")));
        assert!(!suspended(kind("instance"), &json!({})));

        let generator = |value: &str| json!({"metadata": {"annotations": {GENERATOR_RECONCILE_ANNOTATION: value}}});
        assert!(suspended(kind("ag"), &generator("Disabled")));
        assert!(!suspended(kind("ag"), &generator("enabled")));
        assert!(!suspended(kind("rset"), &generator("disabled")));
        assert_eq!(
            super::row(
                kind("rsip"),
                &json!({"status": {"lastExportedRevision": "sha256:1"}})
            )
            .revision,
            "sha256:1"
        );
        let report = json!({"spec": {"distribution": {"version": "v2.9.4"}}, "status": {"conditions": [ready("True", "Reporting finished")]}});
        assert_eq!(super::row(kind("fluxreport"), &report).revision, "v2.9.4");
        assert!(!kind("fluxreport").controllable());
        assert!(!kind("externalartifact").controllable());
        assert!(kind("rset").controllable());
        assert_eq!(kind("fluxreport").revision_column(), "VERSION");
    }

    #[test]
    fn status_selectors_match_conditions() {
        let object = json!({"status": {"conditions": [ready("False", "boom")]}});
        assert!(
            StatusSelector::new("ready", "false")
                .unwrap()
                .matches(&object)
        );
        assert!(
            StatusSelector::new("Ready", "FALSE")
                .unwrap()
                .matches(&object)
        );
        assert!(
            !StatusSelector::new("ready", "true")
                .unwrap()
                .matches(&object)
        );
        assert!(
            StatusSelector::new("ready", "unknown")
                .unwrap()
                .matches(&json!({}))
        );
        assert!(
            !StatusSelector::new("stalled", "true")
                .unwrap()
                .matches(&object)
        );
        let err = StatusSelector::new("ready", "maybe").unwrap_err();
        assert!(err.to_string().contains("ready=maybe"), "{err}");
        assert!(StatusSelector::new("", "true").is_err());
    }

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
