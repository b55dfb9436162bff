//! The tenant's FluxInstance through the agent: read it, and apply a manifest the tenant wrote
//! after checking it (its shape here, the policy the agent holds, then the API server's schema
//! with strict field validation, as a dry run first). `server::instance` serves it over gRPC;
//! upgrades bump the version through here too, so they pass the same checks. `defaults`
//! creates the first FluxInstance from the policy's defaults.

pub mod defaults;

use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams, ValidationDirective},
};
use serde_json::Value;
use tenantflux_core::{
    FIELD_MANAGER,
    flux::{INSTANCE_API_VERSION, INSTANCE_KIND, INSTANCE_NAME, KNOWN_COMPONENTS},
    text::quote,
};
use tokio::sync::watch;

use crate::{flux_instance_resource, policy::store::Held};

/// Why a manifest is not a FluxInstance the agent may apply.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("the manifest is not valid YAML: {0}")]
    Yaml(String),
    #[error("the manifest is not an object")]
    NotAnObject,
    #[error(
        "apiVersion is {}; a FluxInstance is {INSTANCE_API_VERSION}",
        quote(found)
    )]
    ApiVersion { found: String },
    #[error("kind is {}; expected {INSTANCE_KIND}", quote(found))]
    Kind { found: String },
    #[error(
        "metadata.name is {}; flux-operator reconciles only the FluxInstance named {INSTANCE_NAME:?}",
        quote(found)
    )]
    Name { found: String },
    #[error(
        "metadata.namespace is {}; the FluxInstance lives in {expected:?}",
        quote(found)
    )]
    Namespace { found: String, expected: String },
    #[error("spec is missing")]
    Spec,
    #[error(
        "spec.components must be a list of component names, e.g. [source-controller, kustomize-controller]"
    )]
    ComponentsShape,
    #[error(
        "spec.components[{index}] {} is not a Flux component ({count} unknown in all); nothing was changed. Known: {}",
        quote(name),
        KNOWN_COMPONENTS.join(", ")
    )]
    UnknownComponent {
        index: usize,
        name: String,
        count: usize,
    },
    #[error(
        "spec.components names {} {count} times; name each component once (nothing was changed)",
        quote(name)
    )]
    RepeatedComponent { name: String, count: usize },
}

/// Checks `spec.components` before anything reaches the API server: flux-operator would take a
/// list of 40,000 names and store it, so the first unknown or repeated name is refused here,
/// with how many there are.
fn check_components(spec: &Value) -> Result<(), ManifestError> {
    let Some(components) = spec.get("components") else {
        return Ok(());
    };
    let names: Vec<&str> = components
        .as_array()
        .ok_or(ManifestError::ComponentsShape)?
        .iter()
        .map(|c| c.as_str().ok_or(ManifestError::ComponentsShape))
        .collect::<Result<_, _>>()?;
    let unknown = |name: &str| !KNOWN_COMPONENTS.contains(&name);
    if let Some(index) = names.iter().position(|n| unknown(n)) {
        return Err(ManifestError::UnknownComponent {
            index,
            name: names[index].to_owned(),
            count: names.iter().filter(|n| unknown(n)).count(),
        });
    }
    for (index, name) in names.iter().enumerate() {
        if names[..index].contains(name) {
            return Err(ManifestError::RepeatedComponent {
                name: (*name).to_owned(),
                count: names.iter().filter(|n| *n == name).count(),
            });
        }
    }
    Ok(())
}

/// Checks the manifest's shape and returns it with the namespace filled in.
pub fn parse_manifest(text: &str, namespace: &str) -> Result<Value, ManifestError> {
    let mut value: Value = tenantflux_core::yaml::from_str(text)
        .map_err(|err| ManifestError::Yaml(err.to_string()))?;
    let object = value.as_object_mut().ok_or(ManifestError::NotAnObject)?;
    let text_of = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    let found = text_of(object.get("apiVersion"));
    if found != INSTANCE_API_VERSION {
        return Err(ManifestError::ApiVersion { found });
    }
    let found = text_of(object.get("kind"));
    if found != INSTANCE_KIND {
        return Err(ManifestError::Kind { found });
    }
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    let found = text_of(metadata.get("name"));
    if found != INSTANCE_NAME {
        return Err(ManifestError::Name { found });
    }
    match metadata.get("namespace").and_then(Value::as_str) {
        Some(found) if found != namespace => {
            return Err(ManifestError::Namespace {
                found: found.to_owned(),
                expected: namespace.to_owned(),
            });
        }
        Some(_) => {}
        None => {
            metadata["namespace"] = Value::String(namespace.to_owned());
        }
    }
    match object.get("spec") {
        Some(spec) if spec.is_object() => check_components(spec)?,
        _ => return Err(ManifestError::Spec),
    }
    Ok(value)
}

/// The object as a user reads it: no managedFields, no status.
pub fn clean(object: &DynamicObject) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or_default();
    if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    if let Some(object) = value.as_object_mut() {
        object.remove("status");
    }
    value
}

/// Why the FluxInstance could not be read or applied.
#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    #[error(transparent)]
    Manifest(ManifestError),
    #[error("the FluxInstance breaks {policy}; nothing was changed:\n{}", violations.join("\n"))]
    Policy {
        policy: String,
        violations: Vec<String>,
    },
    #[error("the API server refused the FluxInstance; nothing was changed: {message}")]
    Refused { message: String },
    #[error("{action} FluxInstance {namespace}/{INSTANCE_NAME}")]
    Kube {
        action: &'static str,
        namespace: String,
        #[source]
        source: Box<kube::Error>,
    },
}

impl InstanceError {
    /// Whether trying again may succeed: the API server did not answer or failed, rather than
    /// the manifest, the policy or the schema refusing it.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Kube { .. })
    }
}

/// An apply: the live object before, the object after, and the policy's warnings.
#[derive(Debug)]
pub struct Applied {
    pub live: Option<DynamicObject>,
    pub applied: DynamicObject,
    pub warnings: Vec<String>,
}

/// The FluxInstance of the operator namespace, checked against the held policy.
#[derive(Clone)]
pub struct Instances {
    api: Api<DynamicObject>,
    namespace: String,
    policy: watch::Receiver<Held>,
}

impl Instances {
    /// `namespace` is the operator namespace, where the FluxInstance lives.
    pub fn new(client: Client, namespace: &str, policy: watch::Receiver<Held>) -> Self {
        Self {
            api: Api::namespaced_with(client, namespace, &flux_instance_resource()),
            namespace: namespace.to_owned(),
            policy,
        }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn kube_err(&self, action: &'static str) -> impl FnOnce(kube::Error) -> InstanceError {
        let namespace = self.namespace.clone();
        move |source| InstanceError::Kube {
            action,
            namespace,
            source: Box::new(source),
        }
    }

    pub async fn live(&self) -> Result<Option<DynamicObject>, InstanceError> {
        self.api
            .get_opt(INSTANCE_NAME)
            .await
            .map_err(self.kube_err("reading"))
    }

    /// Checks `manifest` and applies it (`dry_run`: on the API server, storing nothing).
    pub async fn apply(&self, manifest: &str, dry_run: bool) -> Result<Applied, InstanceError> {
        let manifest =
            parse_manifest(manifest, &self.namespace).map_err(InstanceError::Manifest)?;
        let held = self.policy.borrow().accepted.clone();
        let mut warnings = Vec::new();
        if let Some(accepted) = held {
            let evaluation = accepted.policy.evaluate(&manifest["spec"]);
            if !evaluation.compliant() {
                return Err(InstanceError::Policy {
                    policy: accepted.policy.to_string(),
                    violations: evaluation
                        .violations
                        .iter()
                        .map(|v| v.message.clone())
                        .collect(),
                });
            }
            warnings = evaluation.warnings;
        }
        let live = self.live().await?;
        let params = PatchParams {
            dry_run,
            force: true,
            field_manager: Some(FIELD_MANAGER.to_owned()),
            field_validation: Some(ValidationDirective::Strict),
        };
        let applied = self
            .api
            .patch(INSTANCE_NAME, &params, &Patch::Apply(&manifest))
            .await
            .map_err(|err| match &err {
                // An unknown field fails server-side apply with a 500 ("failed to create typed
                // patch object ... field not declared in schema"): the manifest's fault too.
                kube::Error::Api(status)
                    if matches!(status.code, 400 | 409 | 422)
                        || status.message.contains("field not declared in schema") =>
                {
                    InstanceError::Refused {
                        message: status.message.clone(),
                    }
                }
                _ => self.kube_err("applying")(err),
            })?;
        Ok(Applied {
            live,
            applied,
            warnings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: &str = "flux-system";

    #[test]
    fn a_flux_instance_named_flux_gets_its_namespace() {
        let value = parse_manifest(
            "apiVersion: fluxcd.controlplane.io/v1\nkind: FluxInstance\nmetadata:\n  name: flux\nspec:\n  distribution: {version: 2.9.x}\n",
            NS,
        )
        .unwrap();
        assert_eq!(value["metadata"]["namespace"], NS);
        assert_eq!(value["spec"]["distribution"]["version"], "2.9.x");
    }

    #[test]
    fn wrong_shapes_say_what_is_wrong() {
        let head = "apiVersion: fluxcd.controlplane.io/v1\nkind: FluxInstance\n";
        let cases = [
            ("a: [", "not valid YAML"),
            ("- a\n", "not an object"),
            (
                "apiVersion: v1\nkind: FluxInstance\n",
                "apiVersion is \"v1\"",
            ),
            (
                "apiVersion: fluxcd.controlplane.io/v1\nkind: Flux\n",
                "kind is \"Flux\"",
            ),
            (
                &format!("{head}metadata: {{name: other}}\nspec: {{}}\n"),
                "metadata.name is \"other\"",
            ),
            (
                &format!("{head}metadata: {{name: flux, namespace: x}}\nspec: {{}}\n"),
                "metadata.namespace is \"x\"; the FluxInstance lives in \"flux-system\"",
            ),
            (
                &format!("{head}metadata: {{name: flux}}\n"),
                "spec is missing",
            ),
        ];
        for (text, want) in cases {
            let err = parse_manifest(text, NS).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    fn with_components(components: &str) -> Result<Value, ManifestError> {
        parse_manifest(
            &format!(
                "apiVersion: fluxcd.controlplane.io/v1\nkind: FluxInstance\nmetadata: {{name: flux}}\nspec:\n  components: {components}\n"
            ),
            NS,
        )
    }

    #[test]
    fn components_must_be_known_and_named_once() {
        assert!(with_components("[source-controller, kustomize-controller]").is_ok());
        let many = vec!["source-controller"; 40_000].join(", ");
        assert_eq!(
            with_components(&format!("[kustomize-controller, {many}]")).unwrap_err(),
            ManifestError::RepeatedComponent {
                name: "source-controller".into(),
                count: 40_000
            }
        );
        let err = with_components("[source-controller, aa, bb, aa]").unwrap_err();
        assert_eq!(
            err,
            ManifestError::UnknownComponent {
                index: 1,
                name: "aa".into(),
                count: 3
            }
        );
        assert!(
            err.to_string().contains("Known: source-controller"),
            "{err}"
        );
        assert_eq!(
            with_components("source-controller").unwrap_err(),
            ManifestError::ComponentsShape
        );
        assert_eq!(
            with_components("[{name: x}]").unwrap_err(),
            ManifestError::ComponentsShape
        );
    }
}
