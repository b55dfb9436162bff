//! The adoption plan, pure: from what the agent found in the cluster to what adoption would
//! take over, from whom, what it changes and keeps, whether Flux's controllers would be
//! re-rendered, and the policy's verdict. Unit-tested without a cluster.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use tenantflux_core::{
    flux::{
        ADOPTED_FROM_HELM_ANNOTATION, INSTANCE_API_VERSION, INSTANCE_KIND, INSTANCE_NAME,
        KNOWN_COMPONENTS, image_tag,
    },
    policy::{Policy, Violation},
    text::quote,
};

use super::keep::{Marks, RESOURCE_POLICY};

/// Helm's ownership metadata, which `helm upgrade` checks before it writes an object.
pub const HELM_MANAGED_BY: &str = "Helm";
pub const HELM_RELEASE_NAME: &str = "meta.helm.sh/release-name";
pub const HELM_RELEASE_NAMESPACE: &str = "meta.helm.sh/release-namespace";
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The label `flux install` puts on its controllers.
pub const PART_OF: &str = "app.kubernetes.io/part-of";

/// One object found: a Deployment or the FluxInstance.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Found {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The field managers of metadata.managedFields.
    pub managers: Vec<String>,
    pub generation: i64,
    /// Deployments: the first container's image and args.
    pub image: String,
    pub args: Vec<String>,
    /// FluxInstances: the spec.
    pub spec: Value,
}

impl Found {
    /// The Helm release that owns it (`namespace/name`), from Helm's annotations.
    pub fn helm_release(&self) -> Option<String> {
        let name = self.annotations.get(HELM_RELEASE_NAME)?;
        let namespace = self
            .annotations
            .get(HELM_RELEASE_NAMESPACE)
            .map_or(self.namespace.as_str(), String::as_str);
        Some(format!("{namespace}/{name}"))
    }

    /// Whether Helm's ownership label or annotations are on it.
    pub fn helm_owned(&self) -> bool {
        self.labels.get(MANAGED_BY).map(String::as_str) == Some(HELM_MANAGED_BY)
            || self.annotations.contains_key(HELM_RELEASE_NAME)
            || self.annotations.contains_key(HELM_RELEASE_NAMESPACE)
    }

    /// The version it runs: a Deployment's image tag, a FluxInstance's distribution.
    pub fn version(&self) -> String {
        if self.kind == INSTANCE_KIND {
            return self
                .spec
                .pointer("/distribution/version")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
        }
        image_tag(&self.image).unwrap_or_default().to_owned()
    }

    fn describe(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// A Helm release record (a Secret `sh.helm.release.v1.NAME.vN`, read by its metadata only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelmRecord {
    pub namespace: String,
    pub name: String,
    pub release: String,
    pub status: String,
}

/// Everything the agent read for a plan.
#[derive(Clone, Debug)]
pub struct Facts {
    /// Deployments `flux-operator` in any namespace.
    pub operators: Vec<Found>,
    /// FluxInstances `flux` in any namespace.
    pub instances: Vec<Found>,
    /// Deployments named as Flux's controllers, in any namespace.
    pub controllers: Vec<Found>,
    /// Helm's release records in the namespace Flux runs in, or why they could not be read.
    pub helm_records: Result<Vec<HelmRecord>, String>,
    /// Whether an adoption was recorded already.
    pub adopted: bool,
    /// Kustomizations (`namespace/name`) whose inventory holds a controller Deployment, as
    /// `flux bootstrap`'s `flux-system` holds `gotk-components.yaml`.
    pub appliers: Vec<String>,
    /// Deployments named like flux-operator or a Flux controller outside the operator
    /// namespace: a namespace's admin can create one, so they are not taken as a running Flux.
    pub ignored: Vec<Found>,
    /// The objects of the releases that own Flux, and whether Helm is kept off them.
    pub marks: Marks,
}

impl Default for Facts {
    fn default() -> Self {
        Self {
            operators: Vec::new(),
            instances: Vec::new(),
            controllers: Vec::new(),
            helm_records: Ok(Vec::new()),
            adopted: false,
            appliers: Vec::new(),
            ignored: Vec::new(),
            marks: Marks::default(),
        }
    }
}

impl Facts {
    /// The Helm releases (`namespace/name`) that own something of Flux or, before an
    /// adoption removed Helm's ownership, owned it: the namespace may hold other releases,
    /// which are none of adoption's business.
    pub fn owning_releases(&self) -> BTreeSet<String> {
        self.operators
            .iter()
            .chain(&self.instances)
            .chain(&self.controllers)
            .flat_map(|f| {
                f.helm_release()
                    .into_iter()
                    .chain(f.annotations.get(ADOPTED_FROM_HELM_ANNOTATION).cloned())
            })
            .collect()
    }
}

/// The Deployments among Flux's controllers that a Kustomization's inventory (`status.inventory
/// .entries[].id`, `NAMESPACE_NAME_GROUP_KIND`) holds, as `namespace/name`.
pub fn applied_controllers(kustomization: &Value) -> Vec<String> {
    kustomization
        .pointer("/status/inventory/entries")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| e["id"].as_str()?.strip_suffix("_apps_Deployment"))
        .filter_map(|id| id.split_once('_'))
        .filter(|(_, name)| KNOWN_COMPONENTS.contains(name))
        .map(|(namespace, name)| format!("{namespace}/{name}"))
        .collect()
}

/// What the agent itself brings.
#[derive(Clone, Debug, Default)]
pub struct Agent<'a> {
    /// `--operator-namespace`.
    pub operator_namespace: &'a str,
    /// The flux-operator version of the agent's bundle, when it installs one.
    pub bundle_version: Option<&'a str>,
    pub policy: Option<&'a Policy>,
}

/// Which kind of install was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    /// Nothing of Flux runs: nothing to adopt.
    None,
    /// flux-operator and a FluxInstance (e.g. Cozystack's Helm releases).
    Operator,
    /// Flux's controllers without an operator (`flux install`, `flux bootstrap`).
    FluxInstall,
    /// Adoption is refused (see [`AdoptionPlan::refusals`]).
    Refused,
}

impl Case {
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Operator => "operator",
            Self::FluxInstall => "flux-install",
            Self::Refused => "refused",
        }
    }
}

#[derive(Clone, Debug)]
pub struct AdoptionPlan {
    pub case: Case,
    pub summary: String,
    pub namespace: String,
    pub operators: Vec<Found>,
    pub instances: Vec<Found>,
    pub controllers: Vec<Found>,
    pub helm_records: Vec<HelmRecord>,
    pub helm_records_note: String,
    pub changes: Vec<String>,
    pub keeps: Vec<String>,
    pub rollout: bool,
    pub rollout_reason: String,
    pub policy: String,
    pub violations: Vec<Violation>,
    pub refusals: Vec<String>,
    /// The FluxInstance to create (flux-install case).
    pub instance: Option<Value>,
    pub cleanup: Vec<String>,
    pub adopted: bool,
    /// See [`Facts::appliers`].
    pub appliers: Vec<String>,
    /// See [`Facts::ignored`].
    pub ignored: Vec<Found>,
    /// The objects of the owning releases adoption marks `helm.sh/resource-policy: keep`,
    /// one line each with where it stands.
    pub marks: Vec<String>,
    /// What the caller may not read, counted (the service fills it in).
    pub hidden: Vec<String>,
}

/// The names of Flux's controller Deployments (the components a FluxInstance lists).
pub fn controller_names() -> &'static [&'static str] {
    KNOWN_COMPONENTS
}

fn list(found: &[Found]) -> String {
    found
        .iter()
        .map(Found::describe)
        .collect::<Vec<_>>()
        .join(" and ")
}

/// The plan from `facts`: the refusals first (one Flux, in one namespace, the agent's operator
/// namespace), Helm's records that own it, then the case and what it takes over, changes and
/// keeps.
pub fn plan(facts: &Facts, agent: &Agent<'_>) -> AdoptionPlan {
    let mut plan = unplanned(facts, agent);
    plan.refusals.extend(one_flux_only(facts));
    let Some(namespace) = flux_namespace(facts) else {
        plan.summary = nothing_to_adopt(facts, agent);
        return plan;
    };
    plan.namespace.clone_from(&namespace);
    if plan.refusals.is_empty() {
        plan.refusals.extend(one_namespace_only(facts, &namespace));
    }
    plan.refusals
        .extend(in_operator_namespace(&namespace, agent));
    owning_helm_records(&mut plan, facts);
    if !plan.refusals.is_empty() {
        plan.case = Case::Refused;
        plan.summary = format!("adoption refused: {}", plan.refusals.join("; "));
        return plan;
    }
    decide_case(&mut plan, facts, agent);
    if matches!(plan.case, Case::Operator | Case::FluxInstall) {
        keep_from_helm(&mut plan, &facts.marks);
    }
    plan
}

/// The plan before anything is decided: what was found, and nothing to do yet.
fn unplanned(facts: &Facts, agent: &Agent<'_>) -> AdoptionPlan {
    AdoptionPlan {
        case: Case::None,
        summary: String::new(),
        namespace: String::new(),
        operators: facts.operators.clone(),
        instances: facts.instances.clone(),
        controllers: facts.controllers.clone(),
        helm_records: Vec::new(),
        helm_records_note: String::new(),
        changes: Vec::new(),
        keeps: Vec::new(),
        rollout: false,
        rollout_reason: String::new(),
        policy: agent.policy.map(ToString::to_string).unwrap_or_default(),
        violations: Vec::new(),
        refusals: Vec::new(),
        instance: None,
        cleanup: Vec::new(),
        adopted: facts.adopted,
        appliers: facts.appliers.clone(),
        ignored: facts.ignored.clone(),
        marks: Vec::new(),
        hidden: Vec::new(),
    }
}

/// The refusals of more than one Flux: two flux-operators, two FluxInstances.
fn one_flux_only(facts: &Facts) -> Vec<String> {
    let mut refusals = Vec::new();
    if facts.operators.len() > 1 {
        refusals.push(format!(
            "{} flux-operators run: {}; adopt one Flux only (remove the other install first)",
            facts.operators.len(),
            list(&facts.operators)
        ));
    }
    if facts.instances.len() > 1 {
        refusals.push(format!(
            "{} FluxInstances exist: {}; flux-operator reconciles one per cluster (delete the other first)",
            facts.instances.len(),
            list(&facts.instances)
        ));
    }
    refusals
}

/// The namespace Flux runs in: the FluxInstance's, else the operator's, else the controllers';
/// `None` when nothing of Flux runs.
fn flux_namespace(facts: &Facts) -> Option<String> {
    facts
        .instances
        .first()
        .or(facts.operators.first())
        .or(facts.controllers.first())
        .map(|f| f.namespace.clone())
}

/// The summary of a cluster where nothing of Flux runs, saying why Deployments named like
/// Flux's were ignored when there are some.
fn nothing_to_adopt(facts: &Facts, agent: &Agent<'_>) -> String {
    if facts.ignored.is_empty() {
        "nothing to adopt: no flux-operator, FluxInstance or Flux controller runs in this cluster"
            .into()
    } else {
        format!(
            "nothing to adopt in the operator namespace {}: the Deployments named like Flux's elsewhere are ignored (anyone who administers their namespace can create one); if one of them is the Flux to adopt, install the agent with operatorNamespace set to its namespace",
            quote(agent.operator_namespace)
        )
    }
}

/// The refusal of a Flux that runs in more namespaces than `namespace`, naming what runs in
/// the others.
fn one_namespace_only(facts: &Facts, namespace: &str) -> Option<String> {
    let elsewhere: Vec<&Found> = facts
        .operators
        .iter()
        .chain(&facts.instances)
        .chain(&facts.controllers)
        .filter(|f| f.namespace != namespace)
        .collect();
    (!elsewhere.is_empty()).then(|| {
        format!(
            "Flux runs in more than one namespace ({} besides {namespace}); adopt one Flux only",
            elsewhere
                .iter()
                .map(|f| f.describe())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// The refusal of a Flux outside the agent's operator namespace, with the setting to use.
fn in_operator_namespace(namespace: &str, agent: &Agent<'_>) -> Option<String> {
    (agent.operator_namespace != namespace).then(|| {
        format!(
            "Flux runs in namespace {namespace} but the agent's operator namespace is {}: install the agent with operatorNamespace: {namespace} (--operator-namespace={namespace})",
            quote(agent.operator_namespace)
        )
    })
}

/// Helm's records of the releases that own Flux, and the commands that delete them after
/// adoption; or the note saying why they are not named.
fn owning_helm_records(plan: &mut AdoptionPlan, facts: &Facts) {
    match &facts.helm_records {
        Ok(records) => {
            let owning = facts.owning_releases();
            plan.helm_records = records
                .iter()
                .filter(|r| owning.contains(&format!("{}/{}", r.namespace, r.release)))
                .cloned()
                .collect();
            plan.cleanup = plan
                .helm_records
                .iter()
                .map(|r| format!("kubectl delete secret -n {} {}", r.namespace, r.name))
                .collect();
        }
        Err(note) => plan.helm_records_note.clone_from(note),
    }
}

/// Which install runs, and the plan of its case.
fn decide_case(plan: &mut AdoptionPlan, facts: &Facts, agent: &Agent<'_>) {
    match (facts.operators.first(), facts.instances.first()) {
        // Controllers without a FluxInstance: `flux install`, whether or not a flux-operator
        // (e.g. the agent's own, installed from its bundle) runs beside them already.
        (operator, None) if !facts.controllers.is_empty() => {
            flux_install_case(plan, operator, agent);
        }
        (Some(operator), instance) => operator_case(plan, operator, instance, agent),
        (None, Some(instance)) => {
            plan.case = Case::Refused;
            plan.refusals.push(format!(
                "{} exists but no flux-operator runs: install flux-operator (or the agent with --operator-bundle) first",
                instance.describe()
            ));
            plan.summary = format!("adoption refused: {}", plan.refusals.join("; "));
        }
        (None, None) => flux_install_case(plan, None, agent),
    }
}

/// Helm deletes what its releases hold on `helm uninstall` and what an upgrade drops: adoption
/// marks those objects, live and in the releases' records, so Flux stays.
fn keep_from_helm(plan: &mut AdoptionPlan, marks: &Marks) {
    plan.marks = marks.lines();
    if !marks.note.is_empty() {
        if !plan.helm_records_note.is_empty() {
            plan.helm_records_note.push_str("; ");
        }
        plan.helm_records_note.push_str(&marks.note);
    }
    if marks.pending() {
        let releases: BTreeSet<&str> = marks
            .objects
            .iter()
            .map(|h| h.release.as_str())
            .filter(|r| !r.is_empty())
            .collect();
        plan.changes.push(format!(
            "marks the objects of Helm release(s) {} with {RESOURCE_POLICY}: keep, live and in {} record(s), so that `helm uninstall` of the old release, or an upgrade that drops an object, leaves Flux in place",
            releases.into_iter().collect::<Vec<_>>().join(", "),
            marks.records.len()
        ));
    }
}

fn operator_case(
    plan: &mut AdoptionPlan,
    operator: &Found,
    instance: Option<&Found>,
    agent: &Agent<'_>,
) {
    plan.case = Case::Operator;
    let running = operator.version();
    let from = operator
        .helm_release()
        .map(|r| format!(" (Helm release {r})"))
        .unwrap_or_default();
    match agent.bundle_version {
        Some(bundle) if bundle == running => {
            plan.changes.push(format!(
                "flux-operator {running}{from} becomes the agent's install (its bundle, the same version)"
            ));
        }
        Some(bundle) => {
            plan.changes.push(format!(
                "flux-operator {running}{from} is replaced by the agent's bundle {bundle}"
            ));
            plan.rollout = true;
            plan.rollout_reason = format!(
                "flux-operator {bundle} renders Flux's controllers from its own manifests, which may differ from what {running} rendered: their Deployments may roll out"
            );
        }
        None => plan.keeps.push(format!(
            "flux-operator {running}{from}: the agent has no --operator-bundle, so it observes the operator and does not replace it"
        )),
    }
    plan.keeps.push(
        "the Flux controllers' Deployments and processes: no controller is re-rendered".into(),
    );
    let Some(instance) = instance else {
        plan.summary = format!(
            "adopt flux-operator {running} in {}; no FluxInstance exists (create one with `kubectl tenantflux instance apply`)",
            plan.namespace
        );
        return;
    };
    if instance.helm_owned() {
        let release = instance
            .helm_release()
            .map(|r| format!(" of Helm release {r}"))
            .unwrap_or_default();
        plan.changes.push(format!(
            "FluxInstance {}/{INSTANCE_NAME}: Helm's ownership ({MANAGED_BY}: {HELM_MANAGED_BY}, {HELM_RELEASE_NAME}, {HELM_RELEASE_NAMESPACE}){release} is removed, and a later write by Helm is reported; delete the release's records to end it (Helm upgrades what its last release holds whatever the ownership)",
            instance.namespace
        ));
    }
    let fields: Vec<String> = instance
        .spec
        .as_object()
        .map(|o| o.keys().map(|k| format!("spec.{k}")).collect())
        .unwrap_or_default();
    let managers: Vec<&str> = instance
        .managers
        .iter()
        .map(String::as_str)
        .filter(|m| *m != tenantflux_core::FIELD_MANAGER)
        .collect();
    plan.changes.push(format!(
        "the tenant owns FluxInstance {}/{INSTANCE_NAME} ({}){}",
        instance.namespace,
        fields.join(", "),
        if managers.is_empty() {
            String::new()
        } else {
            format!(
                ", until now written by field managers {}",
                managers.join(", ")
            )
        }
    ));
    plan.keeps.push(format!(
        "FluxInstance {}/{INSTANCE_NAME}'s spec as it is (distribution {}): the policy's create-once defaults never overwrite it",
        instance.namespace,
        instance.version()
    ));
    verdict(plan, &instance.spec, agent);
    if !plan.violations.is_empty() {
        plan.keeps.push(format!(
            "the FluxInstance outside {} keeps running as it is; `kubectl tenantflux upgrade plan` shows the way inside",
            plan.policy
        ));
    }
    plan.summary = format!(
        "adopt flux-operator {running} and FluxInstance {}/{INSTANCE_NAME} ({}){}",
        plan.namespace,
        instance.version(),
        if plan.rollout {
            "; the controllers may roll out (--allow-rollout)"
        } else {
            " without restarting Flux"
        }
    );
}

fn verdict(plan: &mut AdoptionPlan, spec: &Value, agent: &Agent<'_>) {
    let Some(policy) = agent.policy else {
        return;
    };
    plan.violations = policy.evaluate(spec).violations;
}

/// The value of `--name=VALUE` among `args`.
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let prefix = format!("--{name}=");
    args.iter().rev().find_map(|a| a.strip_prefix(&prefix))
}

/// The cluster domain in an address such as `http://notification-controller.flux-system.svc.cluster.local./`.
fn cluster_domain(address: &str) -> Option<String> {
    let host = address
        .split("://")
        .last()?
        .split(['/', ':'])
        .next()?
        .trim_end_matches('.');
    let (_, domain) = host.split_once(".svc.")?;
    (!domain.is_empty()).then(|| domain.to_owned())
}

/// Why taking over a `flux install` rolls the controllers out once.
pub const FLUX_INSTALL_ROLLOUT: &str = "flux-operator renders Flux's controllers itself and pins their images by digest (`flux install` uses tags), so each controller's pod template changes and its pod restarts once; Flux's objects stay, and every Kustomization Ready before must be Ready again at its revision";

fn flux_install_case(plan: &mut AdoptionPlan, operator: Option<&Found>, agent: &Agent<'_>) {
    plan.case = Case::FluxInstall;
    let controllers = &plan.controllers;
    let version = controllers
        .iter()
        .find_map(|c| c.labels.get("app.kubernetes.io/version").cloned())
        .unwrap_or_default();
    let registry = controllers
        .first()
        .and_then(|c| c.image.rsplit_once('/').map(|(r, _)| r.to_owned()))
        .unwrap_or_default();
    let domain = controllers
        .iter()
        .find_map(|c| flag(&c.args, "events-addr").and_then(cluster_domain))
        .or_else(|| {
            controllers
                .iter()
                .find_map(|c| flag(&c.args, "storage-adv-addr").and_then(cluster_domain))
        })
        .unwrap_or_else(|| "cluster.local".to_owned());
    let mut components: Vec<&str> = KNOWN_COMPONENTS
        .iter()
        .copied()
        .filter(|k| controllers.iter().any(|c| c.name == *k))
        .collect();
    components.dedup();
    let spec = json!({
        "distribution": {"version": version.trim_start_matches('v'), "registry": registry},
        "components": components,
        "cluster": {"domain": domain},
    });
    plan.instance = Some(json!({
        "apiVersion": INSTANCE_API_VERSION,
        "kind": INSTANCE_KIND,
        "metadata": {"name": INSTANCE_NAME, "namespace": plan.namespace},
        "spec": spec,
    }));
    match (operator, agent.bundle_version) {
        (Some(operator), _) => plan.changes.push(format!(
            "flux-operator {} (running in {}{}) takes Flux's controllers over",
            operator.version(),
            operator.namespace,
            if operator.managers.iter().any(|m| m == tenantflux_core::FIELD_MANAGER) {
                ", the agent's install"
            } else {
                ""
            }
        )),
        (None, Some(bundle)) => plan.changes.push(format!(
            "flux-operator {bundle} is installed into {} from the agent's bundle",
            plan.namespace
        )),
        (None, None) => plan.refusals.push(
            "Flux runs without flux-operator and the agent has no --operator-bundle to install it from".into(),
        ),
    }
    plan.changes.push(format!(
        "FluxInstance {}/{INSTANCE_NAME} is created to match what runs: distribution {version} from {registry}, components {}, cluster domain {domain}; the tenant owns it from then on",
        plan.namespace,
        components.join(", ")
    ));
    plan.rollout = true;
    plan.rollout_reason = FLUX_INSTALL_ROLLOUT.into();
    if version.is_empty() {
        plan.refusals.push(
            "Flux's controllers carry no app.kubernetes.io/version label (as `flux install` sets it), so the distribution they run is unknown: write the FluxInstance yourself (`kubectl tenantflux instance apply`)".into(),
        );
    }
    plan.keeps.push(format!(
        "Flux {version} as it runs: the same version, components, registry and cluster domain; Flux's objects and what they applied"
    ));
    for applier in plan.appliers.clone() {
        plan.changes.push(format!(
            "Kustomization {applier} applies Flux's controllers (as `flux bootstrap`'s gotk-components.yaml does): flux-operator marks what it renders `kustomize.toolkit.fluxcd.io/ssa: Ignore` and `prune: disabled`, so that Kustomization no longer changes or prunes them; remove Flux's components from its source afterwards"
        ));
    }
    verdict(plan, &spec, agent);
    if !plan.violations.is_empty() {
        let fields: Vec<&str> = plan.violations.iter().map(|v| v.field.as_str()).collect();
        plan.refusals.push(format!(
            "the FluxInstance that matches what runs is outside {} ({}), so the API server would refuse it; Flux keeps running as it is until the policy allows it or Flux is changed to fit",
            plan.policy,
            fields.join(", ")
        ));
    }
    if plan.refusals.is_empty() {
        plan.summary = format!(
            "adopt Flux {version} installed without flux-operator in {}; its controllers restart once (--allow-rollout)",
            plan.namespace
        );
    } else {
        plan.case = Case::Refused;
        plan.summary = format!("adoption refused: {}", plan.refusals.join("; "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(namespace: &str, name: &str, image: &str) -> Found {
        Found {
            kind: "Deployment".into(),
            namespace: namespace.into(),
            name: name.into(),
            image: image.into(),
            generation: 1,
            ..Found::default()
        }
    }

    fn helm(mut found: Found, release: &str) -> Found {
        found
            .labels
            .insert(MANAGED_BY.into(), HELM_MANAGED_BY.into());
        found
            .annotations
            .insert(HELM_RELEASE_NAME.into(), release.into());
        found
            .annotations
            .insert(HELM_RELEASE_NAMESPACE.into(), found.namespace.clone());
        found.managers = vec!["helm".into()];
        found
    }

    fn instance(namespace: &str, version: &str) -> Found {
        Found {
            kind: INSTANCE_KIND.into(),
            namespace: namespace.into(),
            name: INSTANCE_NAME.into(),
            spec: json!({"distribution": {"version": version, "registry": "ghcr.io/fluxcd"}, "components": ["source-controller"]}),
            ..Found::default()
        }
    }

    fn cozystack() -> Facts {
        Facts {
            operators: vec![helm(
                deployment(
                    "cozy-fluxcd",
                    "flux-operator",
                    "ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1",
                ),
                "fluxcd-operator",
            )],
            instances: vec![helm(instance("cozy-fluxcd", "2.9.x"), "fluxcd")],
            controllers: vec![deployment(
                "cozy-fluxcd",
                "source-controller",
                "ghcr.io/fluxcd/source-controller:v1.9.4",
            )],
            helm_records: Ok(vec![HelmRecord {
                namespace: "cozy-fluxcd".into(),
                name: "sh.helm.release.v1.fluxcd.v1".into(),
                release: "fluxcd".into(),
                status: "deployed".into(),
            }]),
            ..Facts::default()
        }
    }

    fn agent<'a>(bundle: Option<&'a str>) -> Agent<'a> {
        Agent {
            operator_namespace: "cozy-fluxcd",
            bundle_version: bundle,
            policy: None,
        }
    }

    #[test]
    fn flux_runs_where_its_instance_else_its_operator_else_its_controllers_are() {
        let mut facts = Facts {
            controllers: vec![deployment("c", "source-controller", "")],
            ..Facts::default()
        };
        assert_eq!(flux_namespace(&facts).as_deref(), Some("c"));
        facts.operators = vec![deployment("o", "flux-operator", "")];
        assert_eq!(flux_namespace(&facts).as_deref(), Some("o"));
        facts.instances = vec![instance("i", "2.9.x")];
        assert_eq!(flux_namespace(&facts).as_deref(), Some("i"));
        assert_eq!(flux_namespace(&Facts::default()), None);
        let elsewhere = one_namespace_only(&facts, "i").unwrap();
        assert!(
            elsewhere.starts_with("Flux runs in more than one namespace ("),
            "{elsewhere}"
        );
        assert!(
            elsewhere.ends_with(" besides i); adopt one Flux only"),
            "{elsewhere}"
        );
        assert_eq!(one_namespace_only(&cozystack(), "cozy-fluxcd"), None);
    }

    #[test]
    fn nothing_running_is_nothing_to_adopt() {
        let plan = plan(&Facts::default(), &agent(None));
        assert_eq!(plan.case, Case::None);
        assert!(
            plan.summary.starts_with("nothing to adopt"),
            "{}",
            plan.summary
        );
        assert!(plan.refusals.is_empty());
    }

    #[test]
    fn the_cleanup_names_only_the_releases_that_own_flux() {
        let mut facts = cozystack();
        let mut records = facts.helm_records.clone().unwrap();
        records.push(HelmRecord {
            namespace: "cozy-fluxcd".into(),
            name: "sh.helm.release.v1.unrelated.v3".into(),
            release: "unrelated".into(),
            status: "deployed".into(),
        });
        facts.helm_records = Ok(records);
        let plan = plan(&facts, &agent(Some("v0.58.1")));
        assert!(
            plan.cleanup.iter().all(|c| !c.contains("unrelated")),
            "{:?}",
            plan.cleanup
        );
        assert!(plan.helm_records.iter().all(|r| r.release != "unrelated"));
        assert!(!plan.cleanup.is_empty());
        // After the adoption removed Helm's ownership, the release it came from still counts.
        let before = plan.cleanup.clone();
        for instance in &mut facts.instances {
            let release = instance.helm_release().unwrap();
            instance.annotations.remove(HELM_RELEASE_NAME);
            instance.annotations.remove(HELM_RELEASE_NAMESPACE);
            instance.labels.remove(MANAGED_BY);
            instance
                .annotations
                .insert(ADOPTED_FROM_HELM_ANNOTATION.to_owned(), release);
        }
        let adopted = super::plan(&facts, &agent(Some("v0.58.1")));
        assert_eq!(adopted.cleanup, before);
    }

    #[test]
    fn decoys_outside_the_operator_namespace_are_named_not_adopted() {
        let facts = Facts {
            ignored: vec![deployment(
                "team-a",
                "notification-controller",
                "ghcr.io/fluxcd/notification-controller:v1.9.4",
            )],
            ..Facts::default()
        };
        let plan = plan(&facts, &agent(None));
        assert_eq!(plan.case, Case::None);
        assert!(plan.refusals.is_empty(), "{:?}", plan.refusals);
        assert!(plan.summary.contains("ignored"), "{}", plan.summary);
        assert_eq!(plan.ignored.len(), 1);
        // Beside the Flux of the operator namespace, a decoy changes nothing of the plan.
        let mut with_flux = cozystack();
        with_flux.ignored = facts.ignored.clone();
        let plan = super::plan(&with_flux, &agent(Some("v0.58.1")));
        assert_eq!(plan.case, Case::Operator, "{:?}", plan.refusals);
    }

    #[test]
    fn the_cozystack_shape_is_adopted_without_a_rollout_at_the_same_version() {
        let plan = plan(&cozystack(), &agent(Some("v0.58.1")));
        assert_eq!(plan.case, Case::Operator, "{:?}", plan.refusals);
        assert!(!plan.rollout);
        assert_eq!(
            plan.cleanup,
            ["kubectl delete secret -n cozy-fluxcd sh.helm.release.v1.fluxcd.v1"]
        );
        assert!(
            plan.changes[0].contains("(Helm release cozy-fluxcd/fluxcd-operator)"),
            "{:?}",
            plan.changes
        );
        assert!(plan.changes[1].contains("Helm release cozy-fluxcd/fluxcd"));
        assert!(
            plan.changes[2].contains("spec.components")
                && plan.changes[2].ends_with("until now written by field managers helm"),
            "{:?}",
            plan.changes
        );
        assert!(plan.summary.ends_with("without restarting Flux"));
    }

    #[test]
    fn another_operator_version_is_a_rollout() {
        let plan = plan(&cozystack(), &agent(Some("v0.59.0")));
        assert!(plan.rollout);
        assert!(
            plan.rollout_reason.contains("v0.59.0"),
            "{}",
            plan.rollout_reason
        );
    }

    #[test]
    fn two_operators_or_two_instances_are_refused_naming_both() {
        let mut facts = cozystack();
        facts.operators.push(deployment(
            "flux-system",
            "flux-operator",
            "ghcr.io/controlplaneio-fluxcd/flux-operator:v0.59.0",
        ));
        facts.instances.push(instance("flux-system", "2.9.x"));
        let plan = plan(&facts, &agent(None));
        assert_eq!(plan.case, Case::Refused);
        assert_eq!(
            plan.refusals[..2],
            [
                "2 flux-operators run: Deployment cozy-fluxcd/flux-operator and Deployment flux-system/flux-operator; adopt one Flux only (remove the other install first)",
                "2 FluxInstances exist: FluxInstance cozy-fluxcd/flux and FluxInstance flux-system/flux; flux-operator reconciles one per cluster (delete the other first)",
            ]
        );
    }

    #[test]
    fn another_operator_namespace_is_refused_with_the_setting_to_use() {
        let plan = plan(
            &cozystack(),
            &Agent {
                operator_namespace: "flux-system",
                ..agent(None)
            },
        );
        assert_eq!(plan.case, Case::Refused);
        assert!(
            plan.refusals[0].contains("operatorNamespace: cozy-fluxcd"),
            "{:?}",
            plan.refusals
        );
    }

    fn flux_install() -> Facts {
        let mut source = deployment(
            "flux-system",
            "source-controller",
            "ghcr.io/fluxcd/source-controller:v1.9.5",
        );
        source
            .labels
            .insert("app.kubernetes.io/version".into(), "v2.9.5".into());
        let kustomize = deployment(
            "flux-system",
            "kustomize-controller",
            "ghcr.io/fluxcd/kustomize-controller:v1.9.5",
        );
        Facts {
            controllers: vec![source, kustomize],
            ..Facts::default()
        }
    }

    #[test]
    fn a_flux_install_is_a_rollout_taken_over_by_the_operator_that_runs() {
        let flux_system = |bundle, policy| Agent {
            operator_namespace: "flux-system",
            bundle_version: bundle,
            policy,
        };
        // Without an operator or a bundle: refused, saying what is missing.
        let refused = plan(&flux_install(), &flux_system(None, None));
        assert_eq!(refused.case, Case::Refused);
        assert!(refused.refusals[0].contains("no --operator-bundle"));
        // The agent's own operator, installed from its bundle beside the controllers.
        let mut facts = flux_install();
        let mut operator = deployment(
            "flux-system",
            "flux-operator",
            "ghcr.io/controlplaneio-fluxcd/flux-operator:v0.59.0",
        );
        operator.managers = vec![tenantflux_core::FIELD_MANAGER.into()];
        facts.operators.push(operator);
        let planned = plan(&facts, &flux_system(Some("v0.59.0"), None));
        assert_eq!(planned.case, Case::FluxInstall, "{:?}", planned.refusals);
        assert!(planned.rollout);
        assert_eq!(planned.rollout_reason, FLUX_INSTALL_ROLLOUT);
        assert_eq!(
            planned.changes[0],
            "flux-operator v0.59.0 (running in flux-system, the agent's install) takes Flux's controllers over"
        );
        assert!(planned.summary.ends_with("(--allow-rollout)"));
        // A policy the matching instance is outside of: refused by field, before anything.
        let policy = Policy::parse(
            "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {name: platform}\n\
             spec:\n  generation: 3\n  distribution:\n    versions: \">=2.10.0\"\n    registries: [ghcr.io/fluxcd]\n",
        )
        .unwrap();
        let outside = plan(&facts, &flux_system(Some("v0.59.0"), Some(&policy)));
        assert_eq!(outside.case, Case::Refused);
        assert_eq!(outside.violations[0].field, "spec.distribution.version");
        assert!(
            outside.refusals[0]
                .contains("(spec.distribution.version), so the API server would refuse it"),
            "{:?}",
            outside.refusals
        );
    }

    #[test]
    fn a_bootstrap_kustomization_that_applies_the_controllers_is_named() {
        let kustomization = json!({"status": {"inventory": {"entries": [
            {"id": "flux-system_source-controller_apps_Deployment", "v": "v1"},
            {"id": "flux-system_flux-system_source.toolkit.fluxcd.io_GitRepository", "v": "v1"},
            {"id": "apps_web_apps_Deployment", "v": "v1"},
        ]}}});
        assert_eq!(
            applied_controllers(&kustomization),
            ["flux-system/source-controller"]
        );
        let mut facts = flux_install();
        facts.appliers = vec!["flux-system/flux-system".into()];
        let planned = plan(
            &facts,
            &Agent {
                operator_namespace: "flux-system",
                bundle_version: Some("v0.59.0"),
                policy: None,
            },
        );
        assert!(
            planned.changes.iter().any(|c| c
                .starts_with("Kustomization flux-system/flux-system applies Flux's controllers")),
            "{:?}",
            planned.changes
        );
    }

    #[test]
    fn a_flux_install_gets_an_instance_matching_what_runs() {
        let mut source = deployment(
            "flux-system",
            "source-controller",
            "ghcr.io/fluxcd/source-controller:v1.9.4",
        );
        source
            .labels
            .insert("app.kubernetes.io/version".into(), "v2.9.5".into());
        source.labels.insert(PART_OF.into(), "flux".into());
        source.args = vec![
            "--events-addr=http://notification-controller.flux-system.svc.cozy.local./".into(),
        ];
        let kustomize = deployment(
            "flux-system",
            "kustomize-controller",
            "ghcr.io/fluxcd/kustomize-controller:v1.9.4",
        );
        let facts = Facts {
            controllers: vec![kustomize, source],
            helm_records: Ok(Vec::new()),
            ..Facts::default()
        };
        let plan = plan(
            &facts,
            &Agent {
                operator_namespace: "flux-system",
                bundle_version: Some("v0.58.1"),
                policy: None,
            },
        );
        assert_eq!(plan.case, Case::FluxInstall, "{:?}", plan.refusals);
        assert_eq!(
            plan.instance.unwrap()["spec"],
            json!({
                "distribution": {"version": "2.9.5", "registry": "ghcr.io/fluxcd"},
                "components": ["source-controller", "kustomize-controller"],
                "cluster": {"domain": "cozy.local"},
            })
        );
    }

    #[test]
    fn controllers_without_a_version_label_are_refused_with_what_to_do() {
        let facts = Facts {
            controllers: vec![deployment(
                "flux-system",
                "source-controller",
                "ghcr.io/fluxcd/source-controller:v1.9.4",
            )],
            ..Facts::default()
        };
        let plan = plan(
            &facts,
            &Agent {
                operator_namespace: "flux-system",
                bundle_version: Some("v0.58.1"),
                policy: None,
            },
        );
        assert_eq!(plan.case, Case::Refused);
        assert!(
            plan.refusals[0].contains("no app.kubernetes.io/version label"),
            "{:?}",
            plan.refusals
        );
    }

    #[test]
    fn a_cluster_domain_is_read_from_a_service_address() {
        assert_eq!(
            cluster_domain("http://notification-controller.flux-system.svc.cluster.local./"),
            Some("cluster.local".into())
        );
        assert_eq!(cluster_domain("source-controller.cozy-fluxcd.svc"), None);
    }
}
