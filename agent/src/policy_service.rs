//! The policy the agent holds: verified against the installed key, stored in the cluster
//! (ConfigMap `tenantflux-policy` in the agent's namespace) so it survives restarts, re-verified
//! at start, and watched, so that an edit to the stored copy is detected, reported, and undone
//! from the last verified policy held in memory. Serves the `tenantflux.v1.Policy` service.

use std::{sync::Arc, time::SystemTime};

use ed25519_dalek::VerifyingKey;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;
use tenantflux_proto::v1::{
    GetPolicyRequest, PolicyState, PushPolicyRequest, PushPolicyResponse, policy_server,
};
use tokio::sync::{Mutex, watch};
use tonic::{Request, Response};

use crate::{
    auth::{Authorizer, Permission},
    policy::{
        Policy,
        signing::{SignedError, SignedPolicy, key_id},
    },
    shutdown::Shutdown,
};

/// The ConfigMap that holds the accepted signed policy.
pub const STORE_NAME: &str = "tenantflux-policy";
/// Its key: the SignedPolicy envelope, exactly as pushed.
pub const STORE_KEY: &str = "signed-policy.yaml";

/// The policy in force, and what is wrong with its stored copy.
#[derive(Clone, Debug, Default)]
pub struct Held {
    pub accepted: Option<Accepted>,
    pub problems: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct Accepted {
    pub signed: SignedPolicy,
    pub policy: Arc<Policy>,
    pub accepted_at: SystemTime,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("reading ConfigMap {namespace}/{STORE_NAME}")]
    Read {
        namespace: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("writing ConfigMap {namespace}/{STORE_NAME}")]
    Write {
        namespace: String,
        #[source]
        source: Box<kube::Error>,
    },
}

/// Holds the policy; shared by the gRPC service and the watcher of the stored copy.
pub struct PolicyStore {
    key: Option<VerifyingKey>,
    configmaps: Api<ConfigMap>,
    namespace: String,
    held: watch::Sender<Held>,
    /// Pushes are decided one at a time, so two generations cannot both pass the check.
    push: Mutex<()>,
}

impl PolicyStore {
    pub fn new(client: Client, namespace: &str, key: Option<VerifyingKey>) -> Arc<Self> {
        Arc::new(Self {
            key,
            configmaps: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            held: watch::Sender::new(Held::default()),
            push: Mutex::new(()),
        })
    }

    pub fn subscribe(&self) -> watch::Receiver<Held> {
        self.held.subscribe()
    }

    fn where_stored(&self) -> String {
        format!("ConfigMap {}/{STORE_NAME}", self.namespace)
    }

    /// Verifies a stored copy; `Err` says why it is not trusted.
    fn verify_stored(&self, text: &str) -> Result<(SignedPolicy, Policy), String> {
        let key = self
            .key
            .as_ref()
            .ok_or("the agent has no policy key (--policy-public-key)")?;
        let signed = SignedPolicy::parse(text).map_err(|err| chain(&err))?;
        let policy = signed.verify(key).map_err(|err| chain(&err))?;
        Ok((signed, policy))
    }

    /// What the stored copy says against what is held: accept it at start, otherwise report
    /// and undo an edit.
    async fn observe_stored(&self, stored: Option<&ConfigMap>) {
        let text = stored
            .and_then(|cm| cm.data.as_ref())
            .and_then(|d| d.get(STORE_KEY))
            .cloned();
        let held = self.held.borrow().accepted.clone();
        match (held, text) {
            (None, None) => {}
            (None, Some(text)) => match self.verify_stored(&text) {
                Ok((signed, policy)) => {
                    tracing::info!(
                        name = policy.name(),
                        generation = policy.generation(),
                        "loaded the stored policy"
                    );
                    self.held.send_replace(Held {
                        accepted: Some(Accepted {
                            signed,
                            policy: Arc::new(policy),
                            accepted_at: SystemTime::now(),
                        }),
                        problems: Vec::new(),
                    });
                }
                Err(reason) => self.problem(format!(
                    "the policy stored in {} fails verification and is ignored: {reason}",
                    self.where_stored()
                )),
            },
            (Some(accepted), text) => {
                if text.as_deref() == Some(accepted.signed.to_yaml().as_str()) {
                    return;
                }
                let what = match &text {
                    None => "was deleted".to_owned(),
                    Some(text) => match self.verify_stored(text) {
                        Ok((_, policy)) => format!(
                            "was replaced with generation {} without a push",
                            policy.generation()
                        ),
                        Err(reason) => format!("was edited ({reason})"),
                    },
                };
                self.problem(format!(
                    "the policy stored in {} {what}; the agent keeps generation {} and restored it",
                    self.where_stored(),
                    accepted.policy.generation()
                ));
                if let Err(err) = self.store(&accepted.signed).await {
                    tracing::warn!(error = %chain(&err), "restoring the stored policy");
                }
            }
        }
    }

    fn problem(&self, problem: String) {
        tracing::warn!(problem, "policy store");
        self.held.send_modify(|held| {
            if !held.problems.contains(&problem) {
                held.problems.push(problem);
            }
        });
    }

    async fn store(&self, signed: &SignedPolicy) -> Result<(), StoreError> {
        let body = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": STORE_NAME,
                "labels": {"app.kubernetes.io/managed-by": crate::FIELD_MANAGER},
            },
            "data": {STORE_KEY: signed.to_yaml()},
        });
        self.configmaps
            .patch(
                STORE_NAME,
                &PatchParams::apply(crate::FIELD_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
            .map(drop)
            .map_err(|source| StoreError::Write {
                namespace: self.namespace.clone(),
                source: Box::new(source),
            })
    }

    /// Reads the stored copy once (so the policy is in force before gRPC answers), then
    /// watches it until the shutdown.
    pub async fn run(self: Arc<Self>, shutdown: Shutdown) {
        let watcher = watcher::watcher(
            self.configmaps.clone(),
            watcher::Config::default().fields(&format!("metadata.name={STORE_NAME}")),
        )
        .backoff(crate::backoff::watch());
        let mut watcher = std::pin::pin!(watcher);
        let mut relist: Option<Option<ConfigMap>> = None;
        loop {
            let event = tokio::select! {
                () = shutdown.wait() => return,
                event = watcher.next() => event,
            };
            match event {
                None => return,
                Some(Err(err)) => tracing::warn!(error = %err, "watching {}", self.where_stored()),
                Some(Ok(watcher::Event::Init)) => relist = Some(None),
                Some(Ok(watcher::Event::InitApply(cm))) => relist = Some(Some(cm)),
                Some(Ok(watcher::Event::InitDone)) => {
                    self.observe_stored(relist.take().flatten().as_ref()).await;
                }
                Some(Ok(watcher::Event::Apply(cm))) => self.observe_stored(Some(&cm)).await,
                Some(Ok(watcher::Event::Delete(_))) => self.observe_stored(None).await,
            }
        }
    }

    /// Accepts `text` (a SignedPolicy) if signed by the installed key with a higher generation.
    pub async fn push(&self, text: &str) -> Result<PushPolicyResponse, tonic::Status> {
        let _one_at_a_time = self.push.lock().await;
        let key = self.key.as_ref().ok_or_else(|| {
            tonic::Status::failed_precondition(
                "this agent was installed without a policy key (--policy-public-key, Helm value policy.publicKey), so it accepts no policy",
            )
        })?;
        let signed = SignedPolicy::parse(text)
            .map_err(|err| tonic::Status::invalid_argument(chain(&err)))?;
        let policy = signed.verify(key).map_err(|err| match err {
            SignedError::UnknownKey { .. } | SignedError::BadSignature { .. } => {
                tonic::Status::permission_denied(chain(&err))
            }
            _ => tonic::Status::invalid_argument(chain(&err)),
        })?;
        let held = self.held.borrow().accepted.clone();
        let previous_generation = held.as_ref().map_or(0, |a| a.policy.generation());
        if let Some(held) = &held {
            let (new, old) = (policy.generation(), held.policy.generation());
            if new == old && held.signed.policy == signed.policy {
                return Ok(PushPolicyResponse {
                    name: policy.name().to_owned(),
                    generation: new,
                    unchanged: true,
                    previous_generation,
                });
            }
            if new <= old {
                return Err(tonic::Status::failed_precondition(format!(
                    "stale generation {new} ≤ {old}: the agent holds {}; sign the change as generation {} or higher",
                    held.policy,
                    old + 1
                )));
            }
        }
        self.store(&signed)
            .await
            .map_err(|err| tonic::Status::unavailable(chain(&err)))?;
        tracing::info!(
            name = policy.name(),
            generation = policy.generation(),
            previous_generation,
            "accepted a new policy"
        );
        let response = PushPolicyResponse {
            name: policy.name().to_owned(),
            generation: policy.generation(),
            unchanged: false,
            previous_generation,
        };
        self.held.send_replace(Held {
            accepted: Some(Accepted {
                signed,
                policy: Arc::new(policy),
                accepted_at: SystemTime::now(),
            }),
            problems: Vec::new(),
        });
        Ok(response)
    }

    pub fn state(&self) -> PolicyState {
        let held = self.held.borrow();
        let mut state = PolicyState {
            problems: held.problems.clone(),
            ..PolicyState::default()
        };
        if let Some(accepted) = &held.accepted {
            state.present = true;
            accepted.policy.name().clone_into(&mut state.name);
            state.generation = accepted.policy.generation();
            state.key_id = self.key.as_ref().map(key_id).unwrap_or_default();
            state.policy = accepted.signed.policy.clone();
            state.accepted_at = Some(accepted.accepted_at.into());
        }
        state
    }
}

/// `err: cause: cause`, as one line for a gRPC message or a status problem.
pub(crate) fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The `tenantflux.v1.Policy` service.
pub struct PolicyService {
    store: Arc<PolicyStore>,
    authorizer: Arc<Authorizer>,
}

impl PolicyService {
    pub fn new(store: Arc<PolicyStore>, authorizer: Arc<Authorizer>) -> Self {
        Self { store, authorizer }
    }

    fn permission(&self, verb: &str) -> Permission {
        Permission {
            verb: verb.into(),
            group: "tenantflux.io".into(),
            resource: "policies".into(),
            subresource: None,
            namespace: Some(self.store.namespace.clone()),
        }
    }
}

#[tonic::async_trait]
impl policy_server::Policy for PolicyService {
    async fn push_policy(
        &self,
        request: Request<PushPolicyRequest>,
    ) -> Result<Response<PushPolicyResponse>, tonic::Status> {
        let (metadata, _, message) = request.into_parts();
        self.authorizer
            .authorize(&metadata, &self.permission("update"))
            .await?;
        self.store
            .push(&message.signed_policy)
            .await
            .map(Response::new)
    }

    async fn get_policy(
        &self,
        request: Request<GetPolicyRequest>,
    ) -> Result<Response<PolicyState>, tonic::Status> {
        let (metadata, _, _) = request.into_parts();
        self.authorizer
            .authorize(&metadata, &self.permission("get"))
            .await?;
        Ok(Response::new(self.store.state()))
    }
}
