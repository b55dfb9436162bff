//! What the agent starts, group by group: the shared watches, the install loop, the policy's
//! tasks, adoption, status, the caches, the admin endpoints and the gRPC services. Every task
//! is registered with the supervisor by name and gets its shutdown token from it.

use std::{sync::Arc, time::SystemTime};

use k8s_openapi::api::apps::v1::Deployment;
use kube::{
    Api, Client,
    api::DynamicObject,
    runtime::{reflector::Lookup, watcher},
};
use tenantflux_core::{
    flux::{INSTANCE_NAME, OPERATOR_DEPLOYMENT},
    policy::signing,
    releases::Releases,
};
use tokio::{net::TcpListener, sync::watch};
use tokio_util::sync::CancellationToken;

use super::{Error, admin, supervisor::Supervisor};
use crate::{
    VERSION,
    adopt::{self, Adopter},
    cli::Args,
    flux_instance_resource, flux_report_resource,
    instance::{self, Instances},
    operator::{self, InstallConfig, InstallState, bundle::ImageRules, source::Fetcher},
    policy::{self, admission, store::PolicyStore},
    server::{
        self, AdoptService, AgentService, InspectService, InstanceService, PolicyService,
        UpgradeService, WorkloadsService, auth::Authorizer, metrics::Metrics,
    },
    status::{self, AgentFacts, Readiness, Status},
    upgrade::{UpgradeConfig, Upgrader},
    watches::{self, Shared},
    workloads::Caches,
};

/// The admin and gRPC listeners, bound before anything starts.
pub(super) struct Listeners {
    pub admin: TcpListener,
    pub grpc: TcpListener,
}

impl Listeners {
    pub async fn bind(args: &Args, readiness: &Readiness) -> Result<Self, Error> {
        let bind = |what, address| async move {
            TcpListener::bind(address)
                .await
                .map_err(|source| Error::Bind {
                    what,
                    address,
                    source,
                })
        };
        let admin = bind("admin", args.admin_address).await?;
        let grpc = bind("gRPC", args.grpc_address).await?;
        readiness.set_grpc_bound();
        tracing::info!(
            version = VERSION,
            grpc = %grpc.local_addr().map_err(|source| Error::Bind { what: "gRPC", address: args.grpc_address, source })?,
            admin = %admin.local_addr().map_err(|source| Error::Bind { what: "admin", address: args.admin_address, source })?,
            namespace = %args.namespace,
            operator_namespace = %args.operator_namespace,
            "tenantflux-agent listening"
        );
        Ok(Self { admin, grpc })
    }
}

/// The policy store, with the key or root keys the agent was installed with.
pub(super) fn policy_store(args: &Args, client: &Client) -> Result<Arc<PolicyStore>, Error> {
    let policy_key = match &args.policy_public_key {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| Error::PolicyKeyFile {
                path: path.clone(),
                source,
            })?;
            let key = signing::read_public_key(&text).map_err(|source| Error::PolicyKey {
                path: path.clone(),
                source,
            })?;
            tracing::info!(key_id = signing::key_id(&key), "policy key loaded");
            Some(key)
        }
        None => None,
    };
    let roots = if args.policy_root_keys.is_empty() {
        None
    } else {
        let keys = args
            .policy_root_keys
            .iter()
            .map(|path| {
                let text = std::fs::read_to_string(path).map_err(|err| {
                    Error::PolicyRoots(format!("reading {}: {err}", path.display()))
                })?;
                signing::read_public_key(&text)
                    .map_err(|err| Error::PolicyRoots(format!("{}: {err}", path.display())))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let ids: Vec<String> = keys.iter().map(signing::key_id).collect();
        let threshold = usize::try_from(args.policy_root_threshold).unwrap_or(usize::MAX);
        let roots = tenantflux_core::policy::keyring::Roots::new(keys, threshold)
            .map_err(Error::PolicyRoots)?;
        tracing::info!(root_keys = ?ids, threshold, "policy root keys loaded");
        Some(roots)
    };
    Ok(PolicyStore::with_roots(
        client.clone(),
        &args.namespace,
        policy_key,
        roots,
        args.cluster_name.clone(),
    ))
}

/// The install the agent owns (`--operator-bundle`), if any.
pub(super) fn install_config(
    args: &Args,
    client: &Client,
) -> Result<Option<(InstallConfig, Fetcher)>, Error> {
    let Some(source) = args.operator_bundle.clone() else {
        return Ok(None);
    };
    let config = InstallConfig {
        allowed: args
            .operator_version
            .clone()
            .ok_or(Error::OperatorVersionMissing)?,
        source,
        agent_namespace: args.namespace.clone(),
        operator_namespace: args.operator_namespace.clone(),
        resync: args.operator_resync_interval,
        images: ImageRules {
            registries: args.operator_image_registries.clone(),
            require_digest: args.operator_require_image_digest,
            pod_fields: args.operator_allow_pod_fields.clone(),
        },
        adopt: args.adopt,
    };
    let fetcher = Fetcher::new(
        client.clone(),
        args.namespace.clone(),
        args.operator_bundle_pull_secret.clone(),
        args.operator_bundle_plain_http,
    );
    Ok(Some((config, fetcher)))
}

/// The agent's tasks, and what they are started from.
pub(super) struct Wiring {
    pub args: Args,
    pub client: Client,
    pub policy: Arc<PolicyStore>,
    pub tasks: Supervisor,
    pub shutdown: CancellationToken,
}

impl Wiring {
    /// One watch each of the objects of the operator namespace that status and the install
    /// loop read.
    pub fn shared_watches(&mut self) -> status::Watched {
        let (ns, client, tasks) = (&self.args.operator_namespace, &self.client, &mut self.tasks);
        let dynamic =
            |resource| Api::<DynamicObject>::namespaced_with(client.clone(), ns, resource);
        status::Watched {
            operator: shared_watch(
                tasks,
                "operator Deployment watch",
                Api::<Deployment>::namespaced(client.clone(), ns),
                OPERATOR_DEPLOYMENT,
                (),
            ),
            instance: shared_watch(
                tasks,
                "FluxInstance watch",
                dynamic(&flux_instance_resource()),
                INSTANCE_NAME,
                flux_instance_resource(),
            ),
            report: shared_watch(
                tasks,
                "FluxReport watch",
                dynamic(&flux_report_resource()),
                INSTANCE_NAME,
                flux_report_resource(),
            ),
        }
    }

    /// The flux-operator install loop, when the agent owns the install; its state.
    pub fn operator_install(
        &mut self,
        install: Option<(InstallConfig, Fetcher)>,
        deployment: Shared<Deployment>,
        releases: watch::Sender<Option<Arc<Releases>>>,
    ) -> Option<watch::Receiver<InstallState>> {
        let (config, fetcher) = install?;
        let (tx, rx) = watch::channel(InstallState::initial(&config.source));
        let channels = operator::Channels {
            policy: self.policy.subscribe(),
            deployment,
            state: tx,
            releases,
        };
        let client = self.client.clone();
        self.tasks.spawn("operator install", |shutdown| {
            operator::run(client, fetcher, config, channels, shutdown)
        });
        Some(rx)
    }

    /// The policy store, its pull, the defaults, admission and the proof of enforcement.
    pub fn policy_tasks(&mut self) {
        let (args, client, store) = (&self.args, &self.client, &self.policy);
        self.tasks
            .spawn("policy store", |shutdown| store.clone().run(shutdown));
        if let Some(channel) = args.policy_source.clone() {
            tracing::info!(%channel, interval = ?args.policy_source_interval, "pulling policy");
            let config = policy::pull::PullConfig {
                channel,
                interval: args.policy_source_interval,
                plain_http: args.policy_source_plain_http,
                pull_secret: args.policy_source_pull_secret.clone(),
                namespace: args.namespace.clone(),
            };
            let (client, store) = (client.clone(), store.clone());
            self.tasks.spawn("policy pull", |shutdown| {
                policy::pull::run(client, store, config, shutdown)
            });
        }
        // Ends once the defaults were dealt with (created, or found not needed).
        let (client_, held) = (client.clone(), store.subscribe());
        let (agent, operator) = (args.namespace.clone(), args.operator_namespace.clone());
        self.tasks.spawn_once("defaults", |shutdown| async move {
            instance::defaults::run(client_, &agent, &operator, held, shutdown).await
        });
        let (client_, store_) = (client.clone(), store.clone());
        self.tasks.spawn("admission", |shutdown| {
            admission::run(client_, store_, shutdown)
        });
        let config = policy::enforcement::EnforcementConfig {
            interval: args.enforcement_check_interval,
            permissions_interval: args.permissions_check_interval,
            operator_namespace: args.operator_namespace.clone(),
        };
        let (client, store) = (client.clone(), store.clone());
        self.tasks.spawn("enforcement", |shutdown| {
            policy::enforcement::run(client, store, config, shutdown)
        });
    }

    /// Adoption at start (`--adopt`) and the watch on its marks; what the marks put at risk.
    pub fn adoption(
        &mut self,
        install: Option<watch::Receiver<InstallState>>,
    ) -> (Adopter, watch::Receiver<Option<String>>) {
        let adopter = Adopter::new(
            self.client.clone(),
            &self.args.namespace,
            &self.args.operator_namespace,
            self.policy.subscribe(),
            install,
        );
        if self.args.adopt {
            let adopter = adopter.clone();
            self.tasks.spawn_once("adoption at start", |shutdown| {
                adopt::run_at_start(adopter, shutdown)
            });
        }
        let (marks_tx, marks_rx) = watch::channel(None);
        let marks = adopter.clone();
        self.tasks.spawn("adoption marks", |shutdown| {
            adopt::watch_marks(marks, marks_tx, shutdown)
        });
        (adopter, marks_rx)
    }

    /// The status report, and the metrics kept at what it says.
    pub fn status(
        &mut self,
        readiness: Arc<Readiness>,
        metrics: Arc<Metrics>,
        inputs: status::Inputs,
    ) -> watch::Receiver<Status> {
        let facts = AgentFacts {
            version: VERSION.to_owned(),
            namespace: self.args.namespace.clone(),
            operator_namespace: self.args.operator_namespace.clone(),
            started_at: SystemTime::now(),
        };
        let (tx, rx) = watch::channel(status::initial(&facts));
        let client = self.client.clone();
        self.tasks.spawn("status", |shutdown| {
            status::run(client, facts, tx, readiness, inputs, shutdown)
        });
        let status = rx.clone();
        self.tasks.spawn("status metrics", |shutdown| {
            super::record_status_metrics(status, metrics, shutdown)
        });
        rx
    }

    /// The caches of Flux objects.
    pub fn caches(&mut self) -> Arc<Caches> {
        let caches = Arc::new(Caches::default());
        let (run, client) = (caches.clone(), self.client.clone());
        self.tasks
            .spawn("object caches", |shutdown| run.run(client, shutdown));
        caches
    }

    /// `/livez`, `/readyz` and `/metrics` on the admin listener.
    pub fn admin(
        &mut self,
        listener: TcpListener,
        readiness: Arc<Readiness>,
        metrics: Arc<Metrics>,
        caches: Arc<Caches>,
    ) {
        let router = admin::router(readiness, metrics, caches);
        self.tasks.spawn("admin server", |shutdown| {
            admin::serve(listener, router, shutdown)
        });
    }

    /// Denies the identity CSRs nobody signed once they are old.
    pub fn identity_csr_sweep(&mut self) {
        let (client, args) = (self.client.clone(), &self.args);
        let (max_age, interval) = (args.identity_csr_max_age, args.identity_csr_sweep_interval);
        self.tasks.spawn("identity CSR sweep", |shutdown| {
            server::auth::deny_expired_identity_csrs(client, max_age, interval, shutdown)
        });
    }

    /// The gRPC services; resumes an upgrade an earlier agent left unfinished.
    pub fn services(
        &mut self,
        status: watch::Receiver<Status>,
        caches: Arc<Caches>,
        adopter: Adopter,
        releases: watch::Receiver<Option<Arc<Releases>>>,
    ) -> server::Services {
        let (args, client, shutdown) = (&self.args, &self.client, &self.shutdown);
        let authorizer = Arc::new(
            Authorizer::new(client.clone(), args.token_audience.clone())
                .with_stream_recheck(args.stream_recheck_interval)
                .with_namespace(args.namespace.clone()),
        );
        let upgrader = Upgrader::new(
            client.clone(),
            UpgradeConfig {
                agent_namespace: args.namespace.clone(),
                operator_namespace: args.operator_namespace.clone(),
                concurrency: args.upgrade_concurrency,
            },
            self.policy.subscribe(),
            releases,
            shutdown.clone(),
        );
        let resume = upgrader.clone();
        let services = server::Services {
            agent: AgentService::new(
                args.namespace.clone(),
                status,
                authorizer.clone(),
                shutdown.clone(),
            ),
            instance: InstanceService::new(
                Instances::new(
                    client.clone(),
                    &args.operator_namespace,
                    self.policy.subscribe(),
                ),
                authorizer.clone(),
            ),
            upgrade: UpgradeService::new(upgrader, authorizer.clone()),
            adopt: AdoptService::new(adopter, authorizer.clone()),
            policy: PolicyService::new(self.policy.clone(), authorizer.clone()),
            inspect: InspectService::new(
                caches.clone(),
                client.clone(),
                &args.operator_namespace,
                authorizer.clone(),
                shutdown.clone(),
            ),
            workloads: WorkloadsService::new(caches, client.clone(), authorizer, shutdown.clone()),
        };
        // An upgrade an earlier agent left unfinished goes on from its record.
        self.tasks.spawn_once("upgrade resume", |_| resume.resume());
        services
    }
}

/// A shared watch of the object `name` of `api`, run under the supervisor as `task`.
fn shared_watch<K>(
    tasks: &mut Supervisor,
    task: &'static str,
    api: Api<K>,
    name: &str,
    dyntype: <K as kube::Resource>::DynamicType,
) -> Shared<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync,
    K: Lookup<DynamicType = <K as kube::Resource>::DynamicType> + 'static,
    <K as kube::Resource>::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let by_name = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let (shared, watch) = watches::shared(api, by_name, dyntype);
    tasks.spawn(task, |shutdown| async move {
        match crate::unless_shutdown(&shutdown, watch).await {
            None => Ok(()),
            Some(ended) => Err(ended),
        }
    });
    shared
}
