//! The platform's policy: the constraints a tenant's FluxInstance must stay within, parsed
//! strictly and evaluated without a cluster. `signing` wraps a policy in a signed envelope;
//! `decide` says whether the agent takes one over the policy it holds.
//!
//! Every constraint is optional; an absent one constrains nothing. The generation is
//! `spec.generation` (not `metadata.generation`, which the API server owns on stored objects):
//! the agent accepts only a higher one than it holds.

pub mod admission;
pub mod channel;
pub mod clusters;
pub mod decide;
pub mod enforcement;
mod evaluate;
pub mod glob;
pub mod keyring;
pub mod range;
pub mod signing;
pub mod vouch;

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use clusters::{ClusterIdentity, ClusterSelector, Refusal};
pub use evaluate::{Evaluation, MAX_VIOLATIONS, Violation};
pub use range::{Range, RangeError, Release};
pub use vouch::{ClusterRule, Trust, Vouching, VouchingError};

use crate::flux::{KNOWN_COMPONENTS, KNOWN_SIZES};
use crate::operator::{AllowedVersions, BadRequirement};
use crate::text::quote;

pub const API_VERSION: &str = "tenantflux.io/v1alpha1";
pub const KIND: &str = "Policy";

/// The document as written.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Document {
    pub api_version: String,
    pub kind: String,
    pub metadata: Metadata,
    pub spec: Spec,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Spec {
    /// Monotonic: the agent refuses a generation lower than the one it holds.
    pub generation: u64,
    /// The clusters this policy is for (any entry matching); absent: every cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<Vec<ClusterSelector>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<OperatorRules>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribution: Option<DistributionRules>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub components: Option<ComponentRules>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterRules>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncRules>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kustomize: Option<KustomizeRules>,
    /// The FluxInstance spec created when the cluster has none (once; then the tenant owns it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaults: Option<Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OperatorRules {
    /// flux-operator versions the agent may install (`>=0.58.0 <0.59.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<String>,
    /// Patterns of the bundle sources the agent may install from (`oci://ghcr.io/acme/*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundles: Option<Vec<String>>,
    /// The source the agent installs flux-operator from, replacing its `--operator-bundle`
    /// (for an agent that owns the install), so a new release rolls out with the policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<String>,
    /// Releases the agent's build does not know that the platform vouches for, by digest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vouched: Vec<Vouching>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DistributionRules {
    /// The range every version of `spec.distribution.version` must fall in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<String>,
    /// Patterns of `spec.distribution.registry`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registries: Option<Vec<String>>,
    /// Patterns of `spec.distribution.artifact`, when the instance sets one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_deadline: Option<UpgradeDeadline>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UpgradeDeadline {
    /// From `date` on, the instance's range must allow nothing below this version.
    pub minimum_version: String,
    /// `YYYY-MM-DD` (UTC).
    pub date: String,
    /// How many days before `date` the agent warns (default 30).
    #[serde(default = "default_warn_days")]
    pub warn_days: u32,
}

fn default_warn_days() -> u32 {
    30
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ComponentRules {
    /// Components the instance may run; absent: any known one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed: Option<Vec<String>>,
    /// Components the instance must run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required: Vec<String>,
}

/// Whether a boolean setting of the instance must be on, may be either, or must be off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Requirement {
    Required,
    #[default]
    Optional,
    Forbidden,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterRules {
    #[serde(default)]
    pub multitenant: Requirement,
    #[serde(default)]
    pub network_policy: Requirement,
    /// Sizes the instance may choose (`spec.cluster.size`); absent: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sizes: Option<Vec<String>>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SyncRules {
    /// Patterns of `spec.sync.url`.
    pub urls: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KustomizeRules {
    /// Whether `spec.kustomize.patches` may be set.
    pub allow_patches: bool,
}

/// Why a policy document is refused. Each says which field and what to write instead.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("the policy is not valid YAML or has a field the schema lacks")]
    Yaml(#[source] crate::yaml::Error),
    #[error("apiVersion is {}; a policy is {API_VERSION}", quote(found))]
    ApiVersion { found: String },
    #[error("kind is {}; a policy is {KIND}", quote(found))]
    Kind { found: String },
    #[error("metadata.name must not be empty")]
    Name,
    #[error("spec.generation must be 1 or more")]
    Generation,
    #[error("{field}")]
    Range {
        field: &'static str,
        #[source]
        source: RangeError,
    },
    #[error("spec.operator.versions")]
    OperatorVersions(#[source] BadRequirement),
    #[error("{field} {} is not a date (YYYY-MM-DD)", quote(value))]
    Date { field: &'static str, value: String },
    #[error("{field} names {}, which is not a Flux component (one of {})", quote(name), KNOWN_COMPONENTS.join(", "))]
    Component { field: &'static str, name: String },
    #[error(
        "spec.components.required names {}, which spec.components.allowed leaves out",
        quote(name)
    )]
    RequiredNotAllowed { name: String },
    #[error("spec.cluster.sizes names {}; sizes are {}", quote(name), KNOWN_SIZES.join(", "))]
    Size { name: String },
    #[error("{field} is empty: nothing could match; leave it out to allow anything")]
    EmptyList { field: &'static str },
    #[error("spec.clusters[{index}] names no cluster: set name, uid or both, not empty")]
    ClusterSelector { index: usize },
    #[error(transparent)]
    Vouching(#[from] VouchingError),
    #[error("spec.operator.bundle {}: {problem}", quote(bundle))]
    Bundle { bundle: String, problem: String },
    #[error("spec.defaults is not a FluxInstance spec (an object)")]
    DefaultsShape,
    #[error("spec.defaults breaks the policy itself: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Defaults(Vec<Violation>),
}

/// A parsed and checked policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    document: Document,
    distribution_versions: Option<Range>,
    operator_versions: Option<AllowedVersions>,
    deadline: Option<Deadline>,
}

/// An upgrade deadline as the agent reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct Deadline {
    minimum: Release,
    minimum_text: String,
    date: String,
    day: i64,
    warn_days: u32,
}

impl Deadline {
    /// `spec.distribution.upgradeDeadline` parsed: its minimum version's lowest release, and
    /// its date as a day.
    fn from_rule(rule: &UpgradeDeadline) -> Result<Self, PolicyError> {
        let minimum = Range::parse(&rule.minimum_version)
            .map_err(|source| PolicyError::Range {
                field: "spec.distribution.upgradeDeadline.minimumVersion",
                source,
            })?
            .low();
        let day = parse_date(&rule.date).ok_or_else(|| PolicyError::Date {
            field: "spec.distribution.upgradeDeadline.date",
            value: rule.date.clone(),
        })?;
        Ok(Deadline {
            minimum,
            minimum_text: rule
                .minimum_version
                .trim()
                .trim_start_matches('v')
                .to_owned(),
            date: rule.date.clone(),
            day,
            warn_days: rule.warn_days,
        })
    }

    /// The minimum version as written, without a leading `v`.
    pub fn minimum_version(&self) -> &str {
        &self.minimum_text
    }

    /// `YYYY-MM-DD`, UTC.
    pub fn date(&self) -> &str {
        &self.date
    }

    /// How many days before the date warnings start.
    pub fn warn_days(&self) -> u32 {
        self.warn_days
    }
}

impl Policy {
    /// Parses and checks a policy document (YAML or JSON).
    pub fn parse(text: &str) -> Result<Self, PolicyError> {
        let document: Document = crate::yaml::from_str(text).map_err(PolicyError::Yaml)?;
        Self::from_document(document)
    }

    /// Checks a document in the order of its fields: what it is (apiVersion, kind, name,
    /// generation), then the clusters, the operator, the distribution, the components, the
    /// cluster sizes, the sync URLs, and last the defaults against the policy itself.
    pub fn from_document(document: Document) -> Result<Self, PolicyError> {
        check_header(&document)?;
        let spec = &document.spec;
        clusters::check(spec.clusters.as_deref())?;
        let operator_versions = check_operator(spec.operator.as_ref(), spec.generation)?;
        let (distribution_versions, deadline) = check_distribution(spec.distribution.as_ref())?;
        if let Some(components) = &spec.components {
            check_components(components)?;
        }
        check_sizes(spec.cluster.as_ref().and_then(|c| c.sizes.as_ref()))?;
        if let Some(sync) = &spec.sync {
            non_empty(Some(&sync.urls), "spec.sync.urls")?;
        }
        let policy = Self {
            document,
            distribution_versions,
            operator_versions,
            deadline,
        };
        policy.check_defaults()?;
        Ok(policy)
    }

    /// Defaults that the policy would refuse could never be created: say so now, at signing
    /// time, rather than in the tenant's cluster. Deadlines are left out: they move with the
    /// calendar.
    fn check_defaults(&self) -> Result<(), PolicyError> {
        let Some(defaults) = &self.document.spec.defaults else {
            return Ok(());
        };
        if !defaults.is_object() {
            return Err(PolicyError::DefaultsShape);
        }
        let violations = self.evaluate_at(defaults, i64::MIN).violations;
        if !violations.is_empty() {
            return Err(PolicyError::Defaults(violations));
        }
        Ok(())
    }

    pub fn document(&self) -> &Document {
        &self.document
    }

    pub fn name(&self) -> &str {
        &self.document.metadata.name
    }

    pub fn generation(&self) -> u64 {
        self.document.spec.generation
    }

    /// The flux-operator versions the agent may install under this policy.
    pub fn operator_versions(&self) -> Option<&AllowedVersions> {
        self.operator_versions.as_ref()
    }

    /// Whether the agent may install flux-operator from `source` (as `--operator-bundle`
    /// writes it).
    pub fn allows_bundle(&self, source: &str) -> bool {
        self.document
            .spec
            .operator
            .as_ref()
            .and_then(|o| o.bundles.as_ref())
            .is_none_or(|patterns| patterns.iter().any(|p| glob::matches(p, source)))
    }

    /// The source the agent installs flux-operator from under this policy, when it names one.
    pub fn operator_bundle(&self) -> Option<&str> {
        self.document.spec.operator.as_ref()?.bundle.as_deref()
    }

    /// The releases the platform vouches for (`spec.operator.vouched`).
    pub fn vouched(&self) -> &[Vouching] {
        self.document
            .spec
            .operator
            .as_ref()
            .map_or(&[], |o| &o.vouched[..])
    }

    /// The upgrade deadline, when the policy sets one.
    pub fn upgrade_deadline(&self) -> Option<&Deadline> {
        self.deadline.as_ref()
    }

    /// The FluxInstance spec to create when the cluster has none.
    pub fn defaults(&self) -> Option<&Value> {
        self.document.spec.defaults.as_ref()
    }

    /// The document as YAML (what `policy show` prints).
    pub fn to_yaml(&self) -> String {
        crate::yaml::to_string(&self.document).expect("a policy document serializes")
    }

    /// Evaluates a FluxInstance `spec` today (UTC).
    pub fn evaluate(&self, spec: &Value) -> Evaluation {
        self.evaluate_at(spec, today())
    }

    /// Evaluates `spec` on `day` (days since 1970-01-01, UTC).
    pub fn evaluate_at(&self, spec: &Value, day: i64) -> Evaluation {
        evaluate::evaluate(self, spec, day)
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "policy {:?} generation {}",
            self.name(),
            self.generation()
        )
    }
}

/// The document is a policy: its apiVersion and kind, a name, a generation of 1 or more.
fn check_header(document: &Document) -> Result<(), PolicyError> {
    if document.api_version != API_VERSION {
        return Err(PolicyError::ApiVersion {
            found: document.api_version.clone(),
        });
    }
    if document.kind != KIND {
        return Err(PolicyError::Kind {
            found: document.kind.clone(),
        });
    }
    if document.metadata.name.trim().is_empty() {
        return Err(PolicyError::Name);
    }
    if document.spec.generation == 0 {
        return Err(PolicyError::Generation);
    }
    Ok(())
}

/// `spec.operator`: its versions (returned, parsed), its bundle patterns, the releases it
/// vouches for, and the bundle it names.
fn check_operator(
    operator: Option<&OperatorRules>,
    generation: u64,
) -> Result<Option<AllowedVersions>, PolicyError> {
    let by = format!("policy generation {generation}");
    let versions = operator
        .and_then(|o| o.versions.as_deref())
        .map(|v| AllowedVersions::parse(v, by))
        .transpose()
        .map_err(PolicyError::OperatorVersions)?;
    non_empty(
        operator.and_then(|o| o.bundles.as_ref()),
        "spec.operator.bundles",
    )?;
    vouch::check(operator.map_or(&[], |o| &o.vouched[..]))?;
    if let Some(bundle) = operator.and_then(|o| o.bundle.as_deref()) {
        check_bundle(bundle, operator.and_then(|o| o.bundles.as_deref()))?;
    }
    Ok(versions)
}

/// `spec.distribution`: its version range and upgrade deadline (returned, parsed), and its
/// registry and artifact patterns.
fn check_distribution(
    distribution: Option<&DistributionRules>,
) -> Result<(Option<Range>, Option<Deadline>), PolicyError> {
    let versions = distribution
        .and_then(|d| d.versions.as_deref())
        .map(Range::parse)
        .transpose()
        .map_err(|source| PolicyError::Range {
            field: "spec.distribution.versions",
            source,
        })?;
    non_empty(
        distribution.and_then(|d| d.registries.as_ref()),
        "spec.distribution.registries",
    )?;
    non_empty(
        distribution.and_then(|d| d.artifacts.as_ref()),
        "spec.distribution.artifacts",
    )?;
    let deadline = distribution
        .and_then(|d| d.upgrade_deadline.as_ref())
        .map(Deadline::from_rule)
        .transpose()?;
    Ok((versions, deadline))
}

/// `spec.components`: a non-empty allowed list, Flux components only, and nothing required
/// that the allowed list leaves out.
fn check_components(components: &ComponentRules) -> Result<(), PolicyError> {
    let allowed = components.allowed.as_deref();
    non_empty(
        allowed.map(<[_]>::to_vec).as_ref(),
        "spec.components.allowed",
    )?;
    for (field, names) in [
        ("spec.components.allowed", allowed.unwrap_or_default()),
        ("spec.components.required", &components.required[..]),
    ] {
        if let Some(name) = names
            .iter()
            .find(|n| !KNOWN_COMPONENTS.contains(&n.as_str()))
        {
            return Err(PolicyError::Component {
                field,
                name: name.clone(),
            });
        }
    }
    if let Some(allowed) = allowed
        && let Some(name) = components.required.iter().find(|n| !allowed.contains(n))
    {
        return Err(PolicyError::RequiredNotAllowed { name: name.clone() });
    }
    Ok(())
}

/// `spec.cluster.sizes`, when set: not empty, known sizes only.
fn check_sizes(sizes: Option<&Vec<String>>) -> Result<(), PolicyError> {
    let Some(sizes) = sizes else {
        return Ok(());
    };
    non_empty(Some(sizes), "spec.cluster.sizes")?;
    if let Some(name) = sizes.iter().find(|s| !KNOWN_SIZES.contains(&s.as_str())) {
        return Err(PolicyError::Size { name: name.clone() });
    }
    Ok(())
}

/// `spec.operator.bundle`: a source of a kind the agent reads, inside the policy's own
/// `spec.operator.bundles` patterns.
fn check_bundle(bundle: &str, patterns: Option<&[String]>) -> Result<(), PolicyError> {
    const KINDS: [&str; 4] = ["oci://", "configmap:", "secret:", "file:"];
    if !KINDS
        .iter()
        .any(|k| bundle.starts_with(k) && bundle.len() > k.len())
    {
        return Err(PolicyError::Bundle {
            bundle: bundle.to_owned(),
            problem: "not a bundle source: write oci://REGISTRY/REPOSITORY:TAG, configmap:NAME, \
                      secret:NAME or file:PATH"
                .to_owned(),
        });
    }
    if let Some(patterns) = patterns
        && !patterns.iter().any(|p| glob::matches(p, bundle))
    {
        return Err(PolicyError::Bundle {
            bundle: bundle.to_owned(),
            problem: "spec.operator.bundles leaves it out".to_owned(),
        });
    }
    Ok(())
}

fn non_empty(list: Option<&Vec<String>>, field: &'static str) -> Result<(), PolicyError> {
    match list {
        Some(list) if list.is_empty() => Err(PolicyError::EmptyList { field }),
        _ => Ok(()),
    }
}

/// Today, as days since 1970-01-01 (UTC).
pub fn today() -> i64 {
    jiff::Timestamp::now().as_second().div_euclid(86_400)
}

/// `YYYY-MM-DD` (exactly that form) → days since 1970-01-01, proleptic Gregorian.
pub fn parse_date(text: &str) -> Option<i64> {
    let shape = text.len() == 10
        && text.bytes().enumerate().all(|(i, c)| match i {
            4 | 7 => c == b'-',
            _ => c.is_ascii_digit(),
        });
    if !shape {
        return None;
    }
    let date: jiff::civil::Date = text.parse().ok()?;
    let days = date.since(jiff::civil::date(1970, 1, 1)).ok()?.get_days();
    Some(i64::from(days))
}

#[cfg(test)]
mod tests;
