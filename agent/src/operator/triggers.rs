//! What sets a reconcile of the install off: the start, the resync interval, a change of the
//! bundle source, of the policy or of the operator Deployment, and a retry.

use super::*;

/// What set a reconcile off.
#[derive(Debug)]
pub(super) enum Trigger {
    Start,
    Resync,
    SourceChanged,
    PolicyChanged,
    Retry,
    DeploymentDeleted,
    DeploymentEdited { generation: i64 },
}

/// What changed, as the install loop's events.
pub(super) enum Change {
    /// The bundle source: `true` when it is another version than the last one read.
    Source(bool),
    /// The policy held (its operator rules may now allow or refuse the bundle).
    Policy,
    /// The operator Deployment, as the shared watch shows it now.
    Deployment(Seen<Deployment>),
}

impl Installer {
    /// The reconcile `change` calls for, if any.
    pub(super) fn trigger(&mut self, change: Change) -> Option<Trigger> {
        match change {
            Change::Source(changed) => changed.then_some(Trigger::SourceChanged),
            Change::Policy => Some(Trigger::PolicyChanged),
            Change::Deployment(Seen::Listed(deployment)) => self.observe(deployment),
            Change::Deployment(Seen::Failed(err)) => {
                tracing::debug!(error = %err, "watching the operator Deployment failed; retrying");
                None
            }
            Change::Deployment(Seen::Listing) => None,
        }
    }
}

/// `true` each time the source object (ConfigMap or Secret) changes; nothing for sources that
/// are only read again on the resync interval.
pub(super) fn source_changes(
    client: &Client,
    config: &InstallConfig,
) -> std::pin::Pin<Box<dyn Stream<Item = bool> + Send>> {
    fn changes<K>(api: Api<K>, name: &str) -> std::pin::Pin<Box<dyn Stream<Item = bool> + Send>>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        let mut last_version: Option<Option<String>> = None;
        Box::pin(
            watcher::watcher(
                api,
                watcher::Config::default().fields(&format!("metadata.name={name}")),
            )
            .backoff(crate::watch_backoff())
            .filter_map(move |event| {
                let version = match event {
                    Ok(Event::Apply(o) | Event::InitApply(o)) => {
                        Some(o.meta().resource_version.clone())
                    }
                    Ok(Event::Delete(_)) => Some(None),
                    _ => None,
                };
                // The first version seen is the one the first reconcile read.
                let changed = match (&last_version, version) {
                    (_, None) => false,
                    (None, Some(v)) => {
                        last_version = Some(v);
                        false
                    }
                    (Some(previous), Some(v)) => {
                        let changed = *previous != v;
                        last_version = Some(v);
                        changed
                    }
                };
                futures::future::ready(Some(changed))
            }),
        )
    }
    let ns = &config.agent_namespace;
    match &config.source {
        BundleSource::ConfigMap(name) => {
            changes(Api::<ConfigMap>::namespaced(client.clone(), ns), name)
        }
        BundleSource::Secret(name) => changes(Api::<Secret>::namespaced(client.clone(), ns), name),
        BundleSource::File(_) | BundleSource::Oci(_) => Box::pin(futures::stream::pending()),
    }
}
