//! The recorded run of an upgrade: each step (migrate stored versions, bump the FluxInstance,
//! wait for Ready and the post-upgrade health check) retried on API errors with backoff, its
//! progress written to the record after each change.

use std::{
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
    time::Instant,
};

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::{
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    jiff::Timestamp,
};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use tenantflux_core::{
    flux::{INSTANCE_API_VERSION, INSTANCE_KIND, INSTANCE_NAME},
    text::chain,
};

use super::{
    MAX_FAILURES, POLL, PROGRESS_EVERY, RETRY_MAX, StepError, Upgrader, health, kube_err, list_all,
    migrate, plan, resource, retry_delays,
    state::{self, Phase, Record, Rollout},
};

impl Upgrader {
    /// Runs `record` from its phase to the end (or until the agent stops).
    pub(super) async fn execute(
        self: Arc<Self>,
        mut record: Record,
        _running: tokio::sync::OwnedMutexGuard<()>,
    ) {
        record.runs += 1;
        if !self.store_retrying(&mut record).await {
            return;
        }
        let mut failures = 0;
        let mut delays = retry_delays();
        while !record.phase.finished() {
            let step = match record.phase {
                Phase::Migrating => self.migrate(&mut record).await,
                Phase::Bumping => self.bump(&mut record).await,
                Phase::Waiting => self.wait_ready(&mut record).await,
                Phase::Succeeded | Phase::Failed => unreachable!("the loop ends at these"),
            };
            match step {
                Ok(()) => {
                    failures = 0;
                    delays = retry_delays();
                }
                Err(StepError::Refused(reason)) => self.fail(&mut record, reason),
                Err(err) => {
                    let reason = chain(&err);
                    failures += 1;
                    if failures >= MAX_FAILURES
                        || (record.ready_by > 0 && Timestamp::now().as_second() > record.ready_by)
                    {
                        self.fail(&mut record, reason);
                    } else {
                        tracing::warn!(
                            error = reason,
                            phase = record.phase.name(),
                            "upgrade step failed; retrying"
                        );
                        record.message = format!("retrying: {reason}");
                        let wait = delays.next().unwrap_or(RETRY_MAX);
                        if !crate::sleep(&self.shutdown, wait).await {
                            return;
                        }
                    }
                }
            }
            if self.shutdown.is_cancelled() {
                return;
            }
            if !self.store_retrying(&mut record).await {
                return;
            }
        }
        tracing::info!(
            id = record.id,
            phase = record.phase.name(),
            message = record.message,
            "upgrade finished"
        );
    }

    fn fail(&self, record: &mut Record, reason: String) {
        tracing::warn!(id = record.id, reason, "upgrade failed");
        record.phase = Phase::Failed;
        record.message = reason;
        record.finished_at = Timestamp::now().to_string();
    }

    /// Migrates every unfinished CRD, one after the other; finished ones are skipped.
    async fn migrate(&self, record: &mut Record) -> Result<(), StepError> {
        while let Some(index) = record.next_crd() {
            record.crds[index].attempts += 1;
            record.crds[index].migrated = 0;
            record.message = format!("migrating {}", record.crds[index].crd);
            self.store(record).await?;
            let started = Instant::now();
            self.migrate_crd(record, index).await?;
            if self.shutdown.is_cancelled() {
                return Ok(());
            }
            let crd = &mut record.crds[index];
            crd.done = true;
            crd.seconds += started.elapsed().as_secs_f64();
            tracing::info!(
                crd = crd.crd,
                objects = crd.migrated,
                seconds = crd.seconds,
                "CRD migrated"
            );
            self.store(record).await?;
        }
        record.phase = Phase::Bumping;
        record.message = format!(
            "setting the FluxInstance's version to {}",
            record.written_version
        );
        Ok(())
    }

    /// Rewrites every object of one CRD at its storage version, then leaves only that version
    /// in `status.storedVersions`. Idempotent: a rewrite of an object already stored at the
    /// storage version changes nothing.
    async fn migrate_crd(&self, record: &mut Record, index: usize) -> Result<(), StepError> {
        let crd = record.crds[index].clone();
        let resource = resource(&crd.group, &crd.kind, &crd.plural, &crd.storage_version);
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let objects = list_all(&api)
            .await
            .map_err(kube_err(format!("listing {}", crd.crd)))?;
        record.crds[index].total = i64::try_from(objects.len()).unwrap_or(i64::MAX);
        let done = Arc::new(AtomicI64::new(0));
        let concurrency = usize::try_from(record.concurrency.max(1)).unwrap_or(1);
        let work = futures::stream::iter(objects)
            .map({
                let (client, resource, done) =
                    (self.client.clone(), resource.clone(), done.clone());
                move |object| {
                    let (client, resource, done) = (client.clone(), resource.clone(), done.clone());
                    async move {
                        migrate::migrate_object(&client, &resource, &object).await?;
                        done.fetch_add(1, Ordering::Relaxed);
                        Ok::<_, StepError>(())
                    }
                }
            })
            .buffer_unordered(concurrency)
            .try_collect::<()>();
        let mut work = std::pin::pin!(work);
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        tick.tick().await;
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => return Ok(()),
                result = &mut work => { result?; break; }
                _ = tick.tick() => {
                    record.crds[index].migrated = done.load(Ordering::Relaxed);
                    // Progress is informative: a failed write is retried at the next tick.
                    if let Err(err) = self.store(record).await {
                        tracing::warn!(error = %chain(&err), "storing migration progress");
                    }
                }
            }
        }
        record.crds[index].migrated = done.load(Ordering::Relaxed);
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let patch = json!({"status": {"storedVersions": [crd.storage_version]}});
        crds.patch_status(&crd.crd, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(kube_err(format!(
                "setting status.storedVersions of CRD {}",
                crd.crd
            )))?;
        Ok(())
    }

    /// Writes the new version once: a resumed bump first looks whether it is already there.
    async fn bump(&self, record: &mut Record) -> Result<(), StepError> {
        if record.ready_before.is_none() {
            record.ready_before = Some(health::snapshot(&health::list(&self.client).await?));
            self.store(record).await?;
        }
        let ns = &self.config.operator_namespace;
        let live = self.live_instance().await?.ok_or_else(|| {
            StepError::Refused(format!(
                "FluxInstance {ns}/{INSTANCE_NAME} was deleted during the upgrade"
            ))
        })?;
        let value = serde_json::to_value(&live).unwrap_or_default();
        let current = value
            .pointer("/spec/distribution/version")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let generation = if current == record.written_version {
            tracing::info!(
                version = current,
                "the FluxInstance already has the target version; not written again"
            );
            live.metadata.generation.unwrap_or_default()
        } else {
            let spec = plan::with_version(value.get("spec"), &record.written_version).ok_or_else(|| {
                StepError::Refused(format!(
                    "FluxInstance {ns}/{INSTANCE_NAME} has a spec.distribution that is not an object; fix it with `kubectl tenantflux instance apply`"
                ))
            })?;
            let manifest = json!({
                "apiVersion": INSTANCE_API_VERSION,
                "kind": INSTANCE_KIND,
                "metadata": {"name": INSTANCE_NAME, "namespace": ns},
                "spec": spec,
            });
            // A transient failure (the API server unavailable, a webhook not answering) is
            // retried like every other step; only the manifest, the policy or the schema
            // refusing the new version fails the upgrade.
            let applied = self
                .instance
                .apply(&manifest.to_string(), false)
                .await
                .map_err(|err| {
                    if err.is_transient() {
                        StepError::Instance(err)
                    } else {
                        StepError::Refused(chain(&err))
                    }
                })?
                .applied;
            tracing::info!(
                version = record.written_version,
                generation = applied.metadata.generation,
                "FluxInstance version bumped"
            );
            applied.metadata.generation.unwrap_or_default()
        };
        record.bumped = true;
        record.instance_generation = generation;
        record.ready_by = Timestamp::now().as_second() + i64::from(record.timeout_seconds);
        record.phase = Phase::Waiting;
        record.message = format!("waiting for flux-operator to apply Flux {}", record.target);
        Ok(())
    }

    async fn wait_ready(&self, record: &mut Record) -> Result<(), StepError> {
        loop {
            let ns = &self.config.operator_namespace;
            let live = self
                .live_instance()
                .await?
                .map(|o| serde_json::to_value(o).unwrap_or_default())
                .unwrap_or_default();
            match state::rollout(&live, &record.target, record.instance_generation) {
                Rollout::Done => {
                    let live = health::list(&self.client).await?;
                    let recorded = record.ready_before.get_or_insert_default();
                    if health::check(recorded, &live) {
                        record.phase = Phase::Succeeded;
                        record.message = format!(
                            "Flux {} is Ready, and so is every Kustomization that was Ready before ({})",
                            record.target,
                            recorded.len()
                        );
                        record.finished_at = Timestamp::now().to_string();
                        return Ok(());
                    }
                    let not_ready = health::not_ready(recorded).join("; ");
                    if Timestamp::now().as_second() > record.ready_by {
                        return Err(StepError::Refused(format!(
                            "Flux {} is Ready, but Kustomizations Ready before the upgrade are not Ready again at their revision within {}s: {not_ready}",
                            record.target, record.timeout_seconds
                        )));
                    }
                    let waiting = format!(
                        "Flux {} is Ready; waiting for the Kustomizations Ready before to be Ready again: {not_ready}",
                        record.target
                    );
                    if record.message != waiting {
                        record.message = waiting;
                        self.store(record).await?;
                    }
                }
                Rollout::Stalled(message) => {
                    return Err(StepError::Refused(format!(
                        "flux-operator stalled applying Flux {}: {message}",
                        record.target
                    )));
                }
                Rollout::Pending(message) => {
                    if Timestamp::now().as_second() > record.ready_by {
                        return Err(StepError::Refused(format!(
                            "FluxInstance {ns}/{INSTANCE_NAME} was not Ready at {} within {}s: {message}",
                            record.target, record.timeout_seconds
                        )));
                    }
                    let waiting = format!(
                        "waiting for flux-operator to apply Flux {}: {message}",
                        record.target
                    );
                    if record.message != waiting {
                        record.message = waiting;
                        self.store(record).await?;
                    }
                }
            }
            if !crate::sleep(&self.shutdown, POLL).await {
                return Ok(());
            }
        }
    }
}
