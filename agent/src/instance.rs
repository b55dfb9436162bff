//! The tenant's FluxInstance through the agent: read it, and apply a manifest the tenant wrote
//! after checking it (its shape here, the policy the agent holds, then the API server's schema
//! with strict field validation, as a dry run first). Serves `tenantflux.v1.Instance`.

use std::sync::Arc;

use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams, ValidationDirective},
};
use serde_json::Value;
use tenantflux_proto::v1::{
    ApplyInstanceRequest, ApplyInstanceResponse, DiffInstanceResponse, GetInstanceRequest,
    InstanceState, instance_server,
};
use tokio::sync::watch;
use tonic::{Request, Response};

use crate::{
    auth::{Authorizer, Permission},
    policy_service::{Held, chain},
    status::{INSTANCE_NAME, flux_instance_resource},
};

const API_VERSION: &str = "fluxcd.controlplane.io/v1";
const KIND: &str = "FluxInstance";

/// Why a manifest is not a FluxInstance the agent may apply.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("the manifest is not valid YAML: {0}")]
    Yaml(String),
    #[error("the manifest is not an object")]
    NotAnObject,
    #[error("apiVersion is {found:?}; a FluxInstance is {API_VERSION}")]
    ApiVersion { found: String },
    #[error("kind is {found:?}; expected {KIND}")]
    Kind { found: String },
    #[error(
        "metadata.name is {found:?}; flux-operator reconciles only the FluxInstance named {INSTANCE_NAME:?}"
    )]
    Name { found: String },
    #[error("metadata.namespace is {found:?}; the FluxInstance lives in {expected:?}")]
    Namespace { found: String, expected: String },
    #[error("spec is missing")]
    Spec,
}

/// Checks the manifest's shape and returns it with the namespace filled in.
pub fn parse_manifest(text: &str, namespace: &str) -> Result<Value, ManifestError> {
    let mut value: Value =
        serde_yaml_ng::from_str(text).map_err(|err| ManifestError::Yaml(err.to_string()))?;
    let object = value.as_object_mut().ok_or(ManifestError::NotAnObject)?;
    let text_of = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    let found = text_of(object.get("apiVersion"));
    if found != API_VERSION {
        return Err(ManifestError::ApiVersion { found });
    }
    let found = text_of(object.get("kind"));
    if found != KIND {
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
    if !object.get("spec").is_some_and(Value::is_object) {
        return Err(ManifestError::Spec);
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

fn yaml(value: &Value) -> String {
    serde_yaml_ng::to_string(value).unwrap_or_default()
}

/// The `tenantflux.v1.Instance` service.
pub struct InstanceService {
    api: Api<DynamicObject>,
    namespace: String,
    policy: watch::Receiver<Held>,
    authorizer: Arc<Authorizer>,
}

impl InstanceService {
    /// `namespace` is the operator namespace, where the FluxInstance lives.
    pub fn new(
        client: Client,
        namespace: &str,
        policy: watch::Receiver<Held>,
        authorizer: Arc<Authorizer>,
    ) -> Self {
        Self {
            api: Api::namespaced_with(client, namespace, &flux_instance_resource()),
            namespace: namespace.to_owned(),
            policy,
            authorizer,
        }
    }

    fn permission(&self, verb: &str) -> Permission {
        Permission {
            verb: verb.into(),
            group: "fluxcd.controlplane.io".into(),
            resource: "fluxinstances".into(),
            subresource: None,
            namespace: Some(self.namespace.clone()),
        }
    }

    async fn live(&self) -> Result<Option<DynamicObject>, tonic::Status> {
        self.api.get_opt(INSTANCE_NAME).await.map_err(|err| {
            tonic::Status::unavailable(format!(
                "reading FluxInstance {}/{INSTANCE_NAME}: {}",
                self.namespace,
                chain(&err)
            ))
        })
    }

    /// Checks `manifest` and applies it (`dry_run`: on the API server, storing nothing).
    /// Returns the live object before and the object after. Upgrades bump the version through
    /// here too, so they pass the same checks.
    pub(crate) async fn apply(
        &self,
        manifest: &str,
        dry_run: bool,
    ) -> Result<(Option<DynamicObject>, DynamicObject, Vec<String>), tonic::Status> {
        let manifest = parse_manifest(manifest, &self.namespace)
            .map_err(|err| tonic::Status::invalid_argument(err.to_string()))?;
        let held = self.policy.borrow().accepted.clone();
        let mut warnings = Vec::new();
        if let Some(accepted) = held {
            let evaluation = accepted.policy.evaluate(&manifest["spec"]);
            if !evaluation.compliant() {
                let lines: Vec<String> = evaluation
                    .violations
                    .iter()
                    .map(|v| v.message.clone())
                    .collect();
                return Err(tonic::Status::failed_precondition(format!(
                    "the FluxInstance breaks {}; nothing was changed:\n{}",
                    accepted.policy,
                    lines.join("\n")
                )));
            }
            warnings = evaluation.warnings;
        }
        let live = self.live().await?;
        let params = PatchParams {
            dry_run,
            force: true,
            field_manager: Some(crate::FIELD_MANAGER.to_owned()),
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
                    tonic::Status::invalid_argument(format!(
                        "the API server refused the FluxInstance; nothing was changed: {}",
                        status.message
                    ))
                }
                _ => tonic::Status::unavailable(format!(
                    "applying FluxInstance {}/{INSTANCE_NAME}: {}",
                    self.namespace,
                    chain(&err)
                )),
            })?;
        Ok((live, applied, warnings))
    }
}

#[tonic::async_trait]
impl instance_server::Instance for InstanceService {
    async fn get_instance(
        &self,
        request: Request<GetInstanceRequest>,
    ) -> Result<Response<InstanceState>, tonic::Status> {
        self.authorizer
            .authorize(request.metadata(), &self.permission("get"))
            .await?;
        let live = self.live().await?;
        Ok(Response::new(InstanceState {
            present: live.is_some(),
            manifest: live.map(|o| yaml(&clean(&o))).unwrap_or_default(),
        }))
    }

    async fn apply_instance(
        &self,
        request: Request<ApplyInstanceRequest>,
    ) -> Result<Response<ApplyInstanceResponse>, tonic::Status> {
        self.authorizer
            .authorize(request.metadata(), &self.permission("patch"))
            .await?;
        // Applying where there is no instance yet creates one: the caller must be allowed that
        // too, as `kubectl apply` would need.
        if !request.get_ref().dry_run && self.live().await?.is_none() {
            self.authorizer
                .authorize(request.metadata(), &self.permission("create"))
                .await?;
        }
        let message = request.into_inner();
        let (live, applied, warnings) = self.apply(&message.manifest, message.dry_run).await?;
        let after = clean(&applied);
        Ok(Response::new(ApplyInstanceResponse {
            created: live.is_none(),
            changed: live
                .as_ref()
                .is_none_or(|l| clean(l)["spec"] != after["spec"]),
            manifest: yaml(&after),
            warnings,
        }))
    }

    async fn diff_instance(
        &self,
        request: Request<ApplyInstanceRequest>,
    ) -> Result<Response<DiffInstanceResponse>, tonic::Status> {
        self.authorizer
            .authorize(request.metadata(), &self.permission("patch"))
            .await?;
        let message = request.into_inner();
        let (live, applied, _) = self.apply(&message.manifest, true).await?;
        Ok(Response::new(DiffInstanceResponse {
            live: live.map(|o| yaml(&clean(&o))).unwrap_or_default(),
            applied: yaml(&clean(&applied)),
        }))
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
}
