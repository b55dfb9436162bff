//! The one table of Flux kinds: names, groups, categories, how each is suspended, where its
//! revision and source are. The agent's catalog (with what the cluster serves), the plugin's
//! grammar and the release facts are all derived from it.

use crate::flux::{
    INSTANCE_KIND, INSTANCE_PLURAL, OPERATOR_GROUP, OPERATOR_RECONCILE_ANNOTATION, REPORT_KIND,
    REPORT_PLURAL,
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
    /// How the flux CLI names the kind: a word of its own (`flux get kustomizations`), or a
    /// group word and a sub-word (`flux get sources git`); empty for kinds flux has no word for.
    pub flux: &'static [&'static str],
}

impl FluxKind {
    /// The kind with the words flux names it by.
    const fn flux(self, words: &'static [&'static str]) -> Self {
        Self {
            flux: words,
            ..self
        }
    }

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

pub const SOURCE: &str = "source.toolkit.fluxcd.io";
pub const SOURCE_EXTENSIONS: &str = "source.extensions.fluxcd.io";
pub const KUSTOMIZE: &str = "kustomize.toolkit.fluxcd.io";
pub const HELM: &str = "helm.toolkit.fluxcd.io";
pub const NOTIFICATION: &str = "notification.toolkit.fluxcd.io";
pub const IMAGE: &str = "image.toolkit.fluxcd.io";

/// source-watcher's annotation that turns reconciliation of an ArtifactGenerator off.
pub const GENERATOR_RECONCILE_ANNOTATION: &str = "source.extensions.fluxcd.io/reconcile";

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
        flux: &[],
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
        flux: &[],
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
    )
    .flux(&["sources", "oci"]),
    toolkit(
        "Bucket",
        SOURCE,
        "buckets",
        &[],
        Revision::Artifact,
        SourceRef::None,
        Category::Source,
    )
    .flux(&["sources", "bucket"]),
    toolkit(
        "GitRepository",
        SOURCE,
        "gitrepositories",
        &["gitrepo", "gitrepos", "git"],
        Revision::Artifact,
        SourceRef::None,
        Category::Source,
    )
    .flux(&["sources", "git"]),
    toolkit(
        "HelmRepository",
        SOURCE,
        "helmrepositories",
        &["helmrepo", "helmrepos"],
        Revision::Artifact,
        SourceRef::None,
        Category::Source,
    )
    .flux(&["sources", "helm"]),
    toolkit(
        "HelmChart",
        SOURCE,
        "helmcharts",
        &["helmchart", "chart", "charts", "hc"],
        Revision::Artifact,
        SourceRef::None,
        Category::Source,
    )
    .flux(&["sources", "chart"]),
    FluxKind {
        kind: "ExternalArtifact",
        group: SOURCE,
        plural: "externalartifacts",
        short_names: &[],
        revision: Revision::Artifact,
        suspend: SuspendBy::ReadOnly,
        source: SourceRef::None,
        flux: &["sources", "external"],
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
    )
    .flux(&["images", "repository"]),
    toolkit(
        "ImagePolicy",
        IMAGE,
        "imagepolicies",
        &[],
        Revision::LatestImage,
        SourceRef::None,
        Category::Image,
    )
    .flux(&["images", "policy"]),
    toolkit(
        "ImageUpdateAutomation",
        IMAGE,
        "imageupdateautomations",
        &["imageupdate", "imageupdates"],
        Revision::LastRun,
        SourceRef::None,
        Category::Image,
    )
    .flux(&["images", "update"]),
    toolkit(
        "HelmRelease",
        HELM,
        "helmreleases",
        &["hr"],
        Revision::HelmRelease,
        SourceRef::HelmChart,
        Category::Other,
    )
    .flux(&["helmreleases"]),
    toolkit(
        "Kustomization",
        KUSTOMIZE,
        "kustomizations",
        &["ks"],
        Revision::LastApplied,
        SourceRef::Spec,
        Category::Other,
    )
    .flux(&["kustomizations"]),
    toolkit(
        "Receiver",
        NOTIFICATION,
        "receivers",
        &[],
        Revision::None,
        SourceRef::None,
        Category::Other,
    )
    .flux(&["receivers"]),
    toolkit(
        "Provider",
        NOTIFICATION,
        "providers",
        &["alert-provider", "alert-providers"],
        Revision::None,
        SourceRef::None,
        Category::Other,
    )
    .flux(&["alert-providers"]),
    toolkit(
        "Alert",
        NOTIFICATION,
        "alerts",
        &[],
        Revision::None,
        SourceRef::None,
        Category::Other,
    )
    .flux(&["alerts"]),
    FluxKind {
        kind: "ArtifactGenerator",
        group: SOURCE_EXTENSIONS,
        plural: "artifactgenerators",
        short_names: &["ag"],
        revision: Revision::None,
        suspend: SuspendBy::Annotation(GENERATOR_RECONCILE_ANNOTATION),
        source: SourceRef::None,
        flux: &["artifact", "generators"],
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

    #[test]
    fn fluxs_words_follow_its_groups_and_name_one_kind_each() {
        let mut seen = Vec::new();
        for k in KINDS {
            match (k.flux, k.category) {
                ([], _) => assert_eq!(k.group, OPERATOR_GROUP, "{} has no flux word", k.kind),
                (["sources", _], Category::Source) | (["images", _], Category::Image) => {}
                (["artifact", _] | [_], Category::Other) => {}
                (words, category) => panic!("{}: {words:?} in {category:?}", k.kind),
            }
            if !k.flux.is_empty() {
                assert!(!seen.contains(&k.flux), "{:?} twice", k.flux);
                seen.push(k.flux);
            }
        }
    }
}
