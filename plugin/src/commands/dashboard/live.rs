//! What the tenant dashboard shows, kept current: every Flux object of the watched scope from
//! the agent's WatchObjects stream, and the agent's status from WatchStatus, each reconnected
//! when the connection is lost. Pages read it; their live streams follow its changes.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tenantflux_proto::v1::{self as pb, object_event};
use tokio::sync::broadcast;

use crate::{
    connect::{Agent, CallError, ConnectOptions, Reconnects},
    views::{object::ObjectView, status::StatusView},
};

/// How long the start waits for the first snapshot of the objects.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(60);
/// What the page plans an upgrade to: the newest Flux 2 release the policy allows, as
/// `kubectl tenantflux upgrade plan --to 2.x` does.
pub const NEXT_UPGRADE: &str = "2.x";

/// An object's place: the kind's position in the agent's catalog first, so tables come in the
/// order `get all` shows them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub order: usize,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl Key {
    /// The key the page's rows carry (`data-key`).
    pub fn dom(&self) -> String {
        format!("{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

/// What changed, for the live streams of the pages.
#[derive(Clone, Debug)]
pub enum Change {
    Object(Key),
    Removed(Key),
    Status,
    /// The watch sent its snapshot (again, after a reconnect): every page loads anew.
    Reset,
}

/// The cluster's upgrades: the one running or last run, and the plan of the next.
#[derive(Clone, Debug, Default)]
pub struct Upgrades {
    pub running: Option<pb::UpgradeState>,
    /// The plan to [`NEXT_UPGRADE`], or why there is none (the agent's refusal).
    pub next: Option<Result<pb::UpgradePlan, String>>,
}

/// The scope the dashboard watches, and why when it is narrower than asked.
#[derive(Clone, Debug)]
pub struct Scope {
    /// Empty: every namespace.
    pub namespace: String,
    pub notice: Option<String>,
}

pub struct Live {
    options: ConnectOptions,
    agent: RwLock<Arc<Agent>>,
    pub kinds: Vec<pb::FluxKind>,
    pub scope: Scope,
    objects: RwLock<BTreeMap<Key, ObjectView>>,
    status: RwLock<Result<Option<StatusView>, String>>,
    upgrades: RwLock<Upgrades>,
    /// Why the object watch is down, while it is.
    watch_error: RwLock<Option<String>>,
    changes: broadcast::Sender<Change>,
    /// Counts the changes announced: a page rendered at one version and a stream started at
    /// another have missed what lies between.
    version: AtomicU64,
}

impl Live {
    /// Connects, reads the kinds, and opens the first watch: every namespace unless `-n` was
    /// given, narrowed to the context's namespace when the user may not watch them all.
    pub async fn start(options: ConnectOptions) -> anyhow::Result<Arc<Live>> {
        let agent = Agent::connect(&options).await?;
        let kinds = agent
            .call(agent.workloads().list_kinds(pb::ListKindsRequest {}))
            .await?
            .kinds;
        let asked_all = options.namespace.is_none();
        let mut scope = Scope {
            namespace: if asked_all {
                String::new()
            } else {
                agent.namespace().to_owned()
            },
            notice: None,
        };
        let stream = match watch(&agent, &scope.namespace).await {
            Err(CallError::PermissionDenied { message }) if asked_all => {
                scope = Scope {
                    namespace: agent.namespace().to_owned(),
                    notice: Some(format!(
                        "You may not watch Flux objects in every namespace ({message}), so this page shows namespace {}. Start the dashboard with -n NAMESPACE for another.",
                        agent.namespace()
                    )),
                };
                watch(&agent, &scope.namespace).await?
            }
            other => other?,
        };
        let (changes, _) = broadcast::channel(1024);
        let live = Arc::new(Live {
            options,
            agent: RwLock::new(Arc::new(agent)),
            kinds,
            scope,
            objects: RwLock::default(),
            status: RwLock::new(Ok(None)),
            upgrades: RwLock::default(),
            watch_error: RwLock::default(),
            changes,
            version: AtomicU64::new(0),
        });
        // The address is printed once the first page can be whole: after the watch's snapshot.
        let mut changes = live.subscribe();
        tokio::spawn(follow_objects(live.clone(), stream));
        tokio::spawn(follow_status(live.clone()));
        let synced = async {
            loop {
                match changes.recv().await {
                    Ok(Change::Reset) | Err(broadcast::error::RecvError::Closed) => break,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                }
            }
        };
        // A watch that cannot finish its snapshot is shown on the page rather than waited for.
        let _ = tokio::time::timeout(SNAPSHOT_WAIT, synced).await;
        Ok(live)
    }

    /// The connection pages call the agent on.
    pub fn agent(&self) -> Arc<Agent> {
        read(&self.agent).clone()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    pub fn objects(&self) -> Vec<(Key, ObjectView)> {
        read(&self.objects)
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// How many objects the watch holds.
    pub fn count(&self) -> usize {
        read(&self.objects).len()
    }

    pub fn object(&self, key: &Key) -> Option<ObjectView> {
        read(&self.objects).get(key).cloned()
    }

    pub fn status(&self) -> Result<Option<StatusView>, String> {
        read(&self.status).clone()
    }

    pub fn upgrades(&self) -> Upgrades {
        read(&self.upgrades).clone()
    }

    pub fn watch_error(&self) -> Option<String> {
        read(&self.watch_error).clone()
    }

    /// The kind's catalog entry, by its name as the agent reports it.
    pub fn kind(&self, kind: &str) -> Option<(usize, &pb::FluxKind)> {
        self.kinds.iter().enumerate().find(|(_, k)| k.kind == kind)
    }

    pub fn key(&self, object: &ObjectView) -> Key {
        Key {
            order: self.kind(&object.kind).map_or(usize::MAX, |(i, _)| i),
            kind: object.kind.clone(),
            namespace: object.namespace.clone(),
            name: object.name.clone(),
        }
    }

    fn announce(&self, change: Change) {
        self.version.fetch_add(1, Ordering::SeqCst);
        // No page listening is fine.
        let _ = self.changes.send(change);
    }

    /// The number of changes so far; read it before the state a page renders.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }

    /// One new connection in place of the current one, for a call the old one failed (an
    /// expired credential, a lost port-forward).
    pub async fn refresh(&self) -> Result<Arc<Agent>, crate::connect::ConnectError> {
        let agent = Arc::new(Agent::connect(&self.options).await?);
        *write(&self.agent) = agent.clone();
        Ok(agent)
    }

    /// A fresh connection for every follower, after the old one was lost.
    async fn reconnect(&self, reconnects: &mut Reconnects) -> Arc<Agent> {
        loop {
            reconnects.wait().await;
            if let Ok(agent) = Agent::connect(&self.options).await {
                let agent = Arc::new(agent);
                *write(&self.agent) = agent.clone();
                return agent;
            }
        }
    }
}

async fn watch(
    agent: &Agent,
    namespace: &str,
) -> Result<tonic::Streaming<pb::ObjectEvent>, CallError> {
    agent
        .call(agent.workloads().watch_objects(pb::WatchObjectsRequest {
            kind: "all".to_owned(),
            namespace: namespace.to_owned(),
            ..Default::default()
        }))
        .await
}

async fn follow_objects(live: Arc<Live>, mut stream: tonic::Streaming<pb::ObjectEvent>) {
    let mut agent = live.agent();
    let mut reconnects = Reconnects::new();
    loop {
        let lost = read_objects(&live, &agent, &mut stream).await;
        *write(&live.watch_error) = Some(format!("{lost}; reconnecting"));
        live.announce(Change::Status);
        stream = loop {
            agent = live.reconnect(&mut reconnects).await;
            match watch(&agent, &live.scope.namespace).await {
                Ok(stream) => break stream,
                Err(err) => *write(&live.watch_error) = Some(format!("{err}; retrying")),
            }
        };
        reconnects = Reconnects::new();
    }
}

/// Reads one watch until it ends, and says why it did.
async fn read_objects(
    live: &Live,
    agent: &Agent,
    stream: &mut tonic::Streaming<pb::ObjectEvent>,
) -> String {
    let mut initial = BTreeMap::new();
    let mut synced = false;
    loop {
        let event = match agent.next(stream).await {
            Ok(Some(event)) => event,
            Ok(None) => return format!("{} ended the watch", agent.target()),
            Err(err) => return err.to_string(),
        };
        let type_ = event.r#type();
        let Some(object) = event.object.map(ObjectView::from) else {
            if type_ == object_event::Type::Synced && !synced {
                synced = true;
                *write(&live.objects) = std::mem::take(&mut initial);
                *write(&live.watch_error) = None;
                live.announce(Change::Reset);
            }
            continue;
        };
        let key = live.key(&object);
        if !synced {
            initial.insert(key, object);
            continue;
        }
        if type_ == object_event::Type::Deleted {
            write(&live.objects).remove(&key);
            live.announce(Change::Removed(key));
        } else {
            write(&live.objects).insert(key.clone(), object);
            live.announce(Change::Object(key));
        }
    }
}

/// What the next upgrade's plan depends on: the instance's version and request, and the policy.
fn plan_inputs(status: &StatusView) -> (String, String, u64) {
    (
        status.instance.last_applied_revision.clone(),
        status.instance.requested_version.clone(),
        status.policy.as_ref().map_or(0, |p| p.generation),
    )
}

async fn follow_status(live: Arc<Live>) {
    let mut reconnects = Reconnects::new();
    let mut agent = live.agent();
    // The agent reads the whole cluster to plan: planned again only when what it depends on
    // changed, not at every status.
    let mut planned_for = None;
    loop {
        match agent.status_stream().await {
            Ok(mut stream) => {
                reconnects = Reconnects::new();
                loop {
                    match agent.next(&mut stream).await {
                        Ok(Some(status)) => {
                            let status = StatusView::from(status);
                            let inputs = plan_inputs(&status);
                            let running = agent
                                .call(agent.upgrade().get_upgrade(pb::GetUpgradeRequest {}))
                                .await
                                .ok()
                                .filter(|u| u.present);
                            let next = if planned_for.as_ref() != Some(&inputs) {
                                let next = agent
                                    .call(agent.upgrade().plan_upgrade(pb::PlanUpgradeRequest {
                                        to: NEXT_UPGRADE.to_owned(),
                                    }))
                                    .await
                                    .map_err(|err| err.to_string());
                                planned_for = Some(inputs);
                                Some(next)
                            } else {
                                None
                            };
                            // The status and the plan made from it change together: a page
                            // drawn in between showed a new revision beside the old plan.
                            *write(&live.status) = Ok(Some(status));
                            let mut upgrades = write(&live.upgrades);
                            upgrades.running = running;
                            if let Some(next) = next {
                                upgrades.next = Some(next);
                            }
                            drop(upgrades);
                            live.announce(Change::Status);
                        }
                        Ok(None) => break,
                        Err(err) => {
                            *write(&live.status) = Err(err.to_string());
                            live.announce(Change::Status);
                            break;
                        }
                    }
                }
            }
            Err(err) => {
                *write(&live.status) = Err(err.to_string());
                live.announce(Change::Status);
            }
        }
        // The object watch may have replaced the connection already.
        let current = live.agent();
        agent = if Arc::ptr_eq(&current, &agent) {
            live.reconnect(&mut reconnects).await
        } else {
            reconnects.wait().await;
            current
        };
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
