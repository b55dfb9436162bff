//! What the agent remembers of the last install (ConfigMap `tenantflux-operator-install`) and
//! the pruning of what a new bundle no longer holds.

use super::*;

impl Installer {
    pub(super) async fn read_record(&self) -> Result<Option<Record>, InstallError> {
        let api = Api::<ConfigMap>::namespaced(self.client.clone(), &self.config.agent_namespace);
        let map = api
            .get_opt(RECORD_CONFIGMAP)
            .await
            .map_err(|err| InstallError::Kube {
                what: format!(
                    "reading ConfigMap {}/{RECORD_CONFIGMAP}",
                    self.config.agent_namespace
                ),
                message: kube_message(&err),
            })?;
        Ok(map.as_ref().and_then(Record::from_config_map))
    }

    pub(super) async fn write_record(&self, record: &Record) -> Result<(), InstallError> {
        let api = Api::<ConfigMap>::namespaced(self.client.clone(), &self.config.agent_namespace);
        crate::apply_record(&api, RECORD_CONFIGMAP, record.to_data())
            .await
            .map(|_| tracing::debug!(version = %record.version, "install recorded"))
            .map_err(|err| InstallError::Kube {
                what: format!(
                    "writing ConfigMap {}/{RECORD_CONFIGMAP}",
                    self.config.agent_namespace
                ),
                message: kube_message(&err),
            })
    }

    /// Deletes what `previous` applied and `next` no longer has, when the live object still
    /// carries the agent's label; never CRDs. Failures are logged: a leftover object does not
    /// make the new install fail. Returns what was removed.
    pub(super) async fn prune(&self, previous: Option<&Record>, next: &[ObjectRef]) -> Vec<String> {
        let Some(previous) = previous else {
            return Vec::new();
        };
        let mut removed = Vec::new();
        for reference in to_prune(&previous.objects, next) {
            let Some(kind) = kind_of(&reference.api_version, &reference.kind) else {
                continue;
            };
            let resource = kind.api_resource();
            let api: Api<DynamicObject> = match &reference.namespace {
                Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
                None => Api::all_with(self.client.clone(), &resource),
            };
            let live = match api.get_opt(&reference.name).await {
                Ok(Some(live)) => live,
                Ok(None) => continue,
                Err(err) => {
                    tracing::warn!(object = %reference, error = %kube_message(&err), "reading an object to prune failed");
                    continue;
                }
            };
            let ours = live
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(MANAGED_BY_LABEL))
                .is_some_and(|v| v == FIELD_MANAGER);
            if !ours {
                tracing::info!(object = %reference, "not pruning: it no longer carries the agent's label");
                continue;
            }
            match api.delete(&reference.name, &DeleteParams::default()).await {
                Ok(_) => {
                    tracing::info!(object = %reference, "pruned: no longer in the bundle");
                    removed.push(reference.to_string());
                }
                Err(err) => {
                    tracing::warn!(object = %reference, error = %kube_message(&err), "pruning failed")
                }
            }
        }
        removed
    }
}
