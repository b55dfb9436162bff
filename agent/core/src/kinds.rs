//! The one table of Flux kinds: names, groups, categories, how each is suspended, where its
//! revision and source are. The agent's catalog (with what the cluster serves), the plugin's
//! grammar and the release facts are all derived from it.
//!
//! The table is not what decides which kinds exist: the agent watches every kind the cluster
//! serves under Flux's API groups ([`is_flux_group`]), and a kind the table lacks (one a newer
//! Flux release added) gets a generic entry from discovery ([`Registry`]). The table fills in
//! what discovery cannot say: short names, flux's words, categories, kind-specific revision
//! columns and sources, and how the kinds that are not suspended by `spec.suspend` are.

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
    /// A kind the table lacks: `status.artifact.revision` (a source), else
    /// `status.lastAppliedRevision` (what applies one), the two places Flux's kinds put it.
    Generic,
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
            | Revision::LastExported
            | Revision::Generic => "REVISION",
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

    /// Whether the entry is the table's, not one made from discovery.
    pub fn is_compiled(&self) -> bool {
        KINDS.iter().any(|k| std::ptr::eq(k, self))
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

/// Whether Flux serves kinds under `group`: the toolkit's groups (`*.toolkit.fluxcd.io`),
/// source-watcher's and flux-operator's. Every kind the cluster serves under one is a Flux kind,
/// whether or not the table knows it.
pub fn is_flux_group(group: &str) -> bool {
    group
        .strip_suffix(".toolkit.fluxcd.io")
        .is_some_and(|name| !name.is_empty())
        || group == SOURCE_EXTENSIONS
        || group == OPERATOR_GROUP
}

/// The table's entry for `kind` of `group`, if it has one.
pub fn compiled(group: &str, kind: &str) -> Option<&'static FluxKind> {
    KINDS.iter().find(|k| k.group == group && k.kind == kind)
}

/// How many kinds discovery may add to the table in one process.
pub const MAX_DISCOVERED: usize = 64;

/// The entries of the kinds discovery found that the table lacks: its kind, group and plural
/// from discovery, no short names or flux words, [`Category::Other`], [`Revision::Generic`],
/// suspended by `spec.suspend` when the schema the cluster serves has it, else read-only.
///
/// `FluxKind` is `&'static` everywhere (rows, changes, errors, access checks compare entries
/// by address), so each distinct entry is leaked once and reused by every later discovery:
/// a few hundred bytes per kind, for kinds that stay served for the life of the process. What
/// the leak can grow by is bounded by [`MAX_DISCOVERED`], since whoever may create CRDs in a
/// Flux group could otherwise make the agent leak an entry per CRD they create and delete.
#[derive(Debug, Default)]
pub struct Registry {
    entries: Vec<&'static FluxKind>,
}

/// The registry holds [`MAX_DISCOVERED`] entries already.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{MAX_DISCOVERED} Flux kinds were discovered beyond the compiled table already")]
pub struct RegistryFull;

impl Registry {
    /// The entry of a discovered kind: the one made for the same kind, group, plural and way
    /// of suspending before, else a new one. Never called for a kind the table has.
    pub fn entry(
        &mut self,
        kind: &str,
        group: &str,
        plural: &str,
        spec_suspend: bool,
    ) -> Result<&'static FluxKind, RegistryFull> {
        let suspend = if spec_suspend {
            SuspendBy::Spec
        } else {
            SuspendBy::ReadOnly
        };
        if let Some(found) = self.entries.iter().copied().find(|k| {
            k.kind == kind && k.group == group && k.plural == plural && k.suspend == suspend
        }) {
            return Ok(found);
        }
        if self.entries.len() >= MAX_DISCOVERED {
            return Err(RegistryFull);
        }
        let leak = |text: &str| -> &'static str { Box::leak(text.to_owned().into_boxed_str()) };
        let entry: &'static FluxKind = Box::leak(Box::new(FluxKind {
            kind: leak(kind),
            group: leak(group),
            plural: leak(plural),
            short_names: &[],
            revision: Revision::Generic,
            suspend,
            source: SourceRef::None,
            category: Category::Other,
            flux: &[],
        }));
        self.entries.push(entry);
        Ok(entry)
    }
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
        assert!(KINDS.iter().all(|k| is_flux_group(k.group)));
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

    #[test]
    fn flux_groups_are_the_toolkits_source_watchers_and_the_operators() {
        for group in [
            "kustomize.toolkit.fluxcd.io",
            "probe.toolkit.fluxcd.io",
            "source.extensions.fluxcd.io",
            "fluxcd.controlplane.io",
        ] {
            assert!(is_flux_group(group), "{group}");
        }
        for group in [
            "toolkit.fluxcd.io",
            ".toolkit.fluxcd.io",
            "evil.toolkit.fluxcd.io.example.com",
            "apps",
            "",
        ] {
            assert!(!is_flux_group(group), "{group}");
        }
    }

    #[test]
    fn discovered_kinds_get_one_generic_entry_each() {
        let mut registry = Registry::default();
        let probe = registry
            .entry("Probe", "probe.toolkit.fluxcd.io", "probes", true)
            .unwrap();
        assert_eq!(
            *probe,
            FluxKind {
                kind: "Probe",
                group: "probe.toolkit.fluxcd.io",
                plural: "probes",
                short_names: &[],
                revision: Revision::Generic,
                suspend: SuspendBy::Spec,
                source: SourceRef::None,
                category: Category::Other,
                flux: &[],
            }
        );
        assert!(probe.is_named("probe") && probe.is_named("Probes"));
        assert!(probe.controllable() && !probe.is_compiled());
        assert_eq!(probe.revision_column(), "REVISION");
        // The next discovery gets the same entry (caches compare entries by address).
        let again = registry
            .entry("Probe", "probe.toolkit.fluxcd.io", "probes", true)
            .unwrap();
        assert!(std::ptr::eq(probe, again));
        // A schema without spec.suspend: read-only, as an entry of its own.
        let read_only = registry
            .entry("Probe", "probe.toolkit.fluxcd.io", "probes", false)
            .unwrap();
        assert!(!std::ptr::eq(probe, read_only));
        assert!(!read_only.controllable());
        assert!(compiled(KUSTOMIZE, "Kustomization").is_some_and(FluxKind::is_compiled));
        assert!(compiled(KUSTOMIZE, "Probe").is_none());
    }

    #[test]
    fn the_registry_stops_at_its_cap() {
        let mut registry = Registry::default();
        for n in 0..MAX_DISCOVERED {
            registry
                .entry(&format!("Kind{n}"), "x.toolkit.fluxcd.io", "kinds", true)
                .unwrap();
        }
        assert_eq!(
            registry.entry("More", "x.toolkit.fluxcd.io", "mores", true),
            Err(RegistryFull)
        );
        // What it holds is still found.
        assert!(
            registry
                .entry("Kind0", "x.toolkit.fluxcd.io", "kinds", true)
                .is_ok()
        );
    }
}
