//! The install loop's steps: wait for the API server, learn the releases of the bundle's
//! artifact, reconcile the bundle into the cluster, restore what someone changed, and follow the
//! operator's rollout into the phase.

use super::*;

impl Installer {
    pub(super) fn set(&self, phase: OperatorPhase, reason: impl Into<String>) {
        let reason = reason.into();
        let (version, digest, trust) = self
            .applied
            .as_ref()
            .map(|(b, _)| (b.version.clone(), b.digest.clone(), b.trust))
            .unwrap_or_default();
        self.tx.send_if_modified(|state| {
            let changed_phase = state.phase != phase;
            let changed = changed_phase
                || state.reason != reason
                || state.version != version
                || state.digest != digest
                || state.trust != trust
                || state.source != self.source
                || state.offered != self.offered
                || state.notices != self.notices;
            if changed_phase {
                tracing::info!(phase = ?phase, %reason, "flux-operator install phase");
                state.last_transition = SystemTime::now();
            }
            state.phase = phase;
            state.reason = reason.clone();
            state.version = version.clone();
            state.digest = digest.clone();
            state.trust = trust;
            state.source.clone_from(&self.source);
            state.offered.clone_from(&self.offered);
            state.notices.clone_from(&self.notices);
            changed
        });
    }

    pub(super) async fn event(&self, type_: EventType, reason: &str, note: String) {
        let event = KubeEvent {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Install".into(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&event, &self.record_ref).await {
            tracing::warn!(reason, error = %err, "recording an Event on ConfigMap {RECORD_CONFIGMAP} failed");
        }
    }

    /// Returns once the API server answers `/readyz`, reporting WAITING_FOR_API with the
    /// reason while it does not. Retries back off; there is no deadline.
    pub(super) async fn wait_for_api(&mut self) {
        let mut delays = crate::retry_delays(BACKOFF_MIN, API_WAIT_MAX);
        let mut first = true;
        loop {
            let request = http::Request::get("/readyz").body(Vec::new());
            let answer = match request {
                Ok(request) => {
                    match tokio::time::timeout(READYZ_TIMEOUT, self.client.request_text(request))
                        .await
                    {
                        Ok(Ok(_)) => return,
                        Ok(Err(err)) => kube_message(&err),
                        Err(_) => format!("no answer within {}s", READYZ_TIMEOUT.as_secs()),
                    }
                }
                Err(err) => err.to_string(),
            };
            let wait = delays.next().unwrap_or(API_WAIT_MAX);
            let reason = format!(
                "waiting for the Kubernetes API server to answer /readyz: {answer} (next try in {}s)",
                wait.as_secs()
            );
            // Once per wait, so a long outage is visible in the log without a line per retry.
            if std::mem::take(&mut first) {
                tracing::info!(%reason, "flux-operator install waits for the API server");
            }
            self.set(OperatorPhase::WaitingForApi, reason);
            tokio::time::sleep(wait).await;
        }
    }

    /// Derives the Flux releases from the artifact's distributions, once per artifact digest:
    /// flux-operator installs only what it ships, so the upgrade planner follows it. An
    /// artifact whose `flux/` cannot be read leaves the previous list (or the embedded table)
    /// in force, with a warning.
    pub(super) async fn learn_releases(
        &self,
        bundle: &Bundle,
        source_name: &str,
        distributions: Vec<(String, String)>,
    ) {
        if distributions.is_empty() {
            return;
        }
        let name = format!(
            "flux-operator {} manifests artifact {source_name} ({})",
            bundle.version, bundle.digest
        );
        if self
            .releases
            .borrow()
            .as_ref()
            .is_some_and(|r| r.source == name)
        {
            return;
        }
        let derive_name = name.clone();
        let derived = tokio::task::spawn_blocking(move || {
            Releases::from_distributions(
                derive_name,
                distributions
                    .iter()
                    .map(|(path, text)| (path.as_str(), text.as_str())),
            )
        })
        .await;
        match derived {
            Ok(Ok(releases)) => {
                tracing::info!(source = %name, releases = %releases.span(), "Flux releases known from the artifact");
                self.releases.send_replace(Some(Arc::new(releases)));
            }
            Ok(Err(err)) => {
                tracing::warn!(source = %name, error = %err, "the artifact's Flux distributions cannot be read; the upgrade planner keeps its previous release list");
            }
            Err(err) => {
                tracing::warn!(source = %name, error = %err, "deriving the Flux releases failed");
            }
        }
    }

    /// One install attempt: read, check, apply in order, remember, prune.
    pub(super) async fn reconcile(&mut self) -> Result<(), InstallError> {
        let policy = self
            .policy
            .borrow()
            .accepted
            .as_ref()
            .map(|a| a.policy.clone());
        // The held policy may name the source (a release it vouches for, rolled out by the
        // platform without touching any agent's configuration).
        let source = match policy.as_deref().and_then(Policy::operator_bundle) {
            Some(text) => text
                .parse::<BundleSource>()
                .map_err(|err| InstallError::Source {
                    source_name: text.to_owned(),
                    message: format!("spec.operator.bundle of the held policy: {err}"),
                })?,
            None => self.config.source.clone(),
        };
        let source_name = source.to_string();
        self.source.clone_from(&source_name);
        let (bundle, distributions) = self
            .read_bundle(&source, &source_name, policy.as_deref())
            .await?;
        self.offered.clone_from(&bundle.version);
        if self.config.adopt {
            self.check_adoption(&bundle).await?;
        }
        let previous = self.read_record().await?;
        if previous.as_ref().is_none_or(|p| p.digest != bundle.digest) {
            self.notices.clear();
        }
        let deployment = self.apply_bundle(&bundle).await?;
        let generation = deployment.metadata.generation.unwrap_or_default();
        let record = Record {
            version: bundle.version.clone(),
            digest: bundle.digest.clone(),
            source: source_name.clone(),
            objects: bundle.references(),
        };
        self.write_record(&record).await?;
        self.learn_releases(&bundle, &source_name, distributions)
            .await;
        let pruned = self.prune(previous.as_ref(), &record.objects).await;
        let recovered = self.failure.take().is_some();
        if let Some((reason, note)) = install_event(previous.as_ref(), &record, recovered, &pruned)
        {
            self.event(EventType::Normal, reason, note).await;
        }
        self.applied = Some((bundle, generation));
        self.deployment = as_deployment(deployment);
        self.update_rollout_phase();
        Ok(())
    }

    /// The bundle read from `source` and checked: inside the versions the policy (else the
    /// flag) allows, and a release the agent knows or the policy vouches for. Returns it with
    /// the artifact's Flux distributions.
    async fn read_bundle(
        &self,
        source: &BundleSource,
        source_name: &str,
        policy: Option<&Policy>,
    ) -> Result<(Bundle, Vec<(String, String)>), InstallError> {
        let allowed = install_rules(policy, &self.config.allowed, source_name)?.clone();
        let (vouched, generation) = policy
            .map(|p| (p.vouched().to_vec(), p.generation()))
            .unwrap_or_default();
        let mut fetched = self
            .fetcher
            .fetch(source)
            .await
            .map_err(|err: SourceError| InstallError::Source {
                source_name: source_name.to_owned(),
                message: chain(&err),
            })?;
        let distributions = std::mem::take(&mut fetched.distributions);
        let bundle = Bundle::parse(
            &fetched.yaml,
            fetched.digest,
            &self.config.operator_namespace,
            &self.config.images,
        )
        .and_then(|b| b.check_version(&allowed).map(|()| b))
        .and_then(|mut b| {
            b.check_release(
                bundle::releases::KNOWN,
                &vouched,
                generation,
                &self.config.images.pod_fields,
            )
            .map(|()| b)
        })
        .map_err(|error| InstallError::Rejected {
            source_name: source_name.to_owned(),
            error,
        })?;
        Ok((bundle, distributions))
    }

    /// Applies the bundle in its order: the CRDs (then waits until each is established), the
    /// namespaces and access, last the Deployment, which it returns as the API server answered.
    async fn apply_bundle(&mut self, bundle: &Bundle) -> Result<DynamicObject, InstallError> {
        self.set(
            OperatorPhase::ApplyingCrds,
            format!("applying the CRDs of flux-operator {}", bundle.version),
        );
        for object in bundle.stage(Stage::Crds) {
            self.apply(object).await?;
        }
        for object in bundle.stage(Stage::Crds) {
            self.wait_established(&object.reference.name).await?;
        }
        for object in bundle
            .stage(Stage::Namespaces)
            .chain(bundle.stage(Stage::Access))
        {
            self.apply(object).await?;
        }
        self.apply(bundle.deployment()).await
    }

    /// With `--adopt`, refuses to replace someone else's operator by another version until an
    /// adoption allowed the rollout (ConfigMap `tenantflux-adoption`, `allowRollout: "true"`).
    async fn check_adoption(&self, bundle: &Bundle) -> Result<(), InstallError> {
        let namespace = &self.config.operator_namespace;
        let kube = |what: String| {
            move |err: kube::Error| InstallError::Kube {
                what,
                message: kube_message(&err),
            }
        };
        let live = Api::<Deployment>::namespaced(self.client.clone(), namespace)
            .get_opt(OPERATOR_DEPLOYMENT)
            .await
            .map_err(kube(format!(
                "reading Deployment {namespace}/{OPERATOR_DEPLOYMENT}"
            )))?;
        let running = live.as_ref().map(|d| {
            let ours = d
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(MANAGED_BY_LABEL))
                .is_some_and(|v| v == FIELD_MANAGER);
            let image = d
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|p| p.containers.first())
                .and_then(|c| c.image.clone())
                .unwrap_or_default();
            let version = tenantflux_core::flux::image_tag(&image)
                .unwrap_or_default()
                .to_owned();
            (version, ours)
        });
        let allowed =
            Api::<ConfigMap>::namespaced(self.client.clone(), &self.config.agent_namespace)
                .get_opt(ADOPTION_RECORD)
                .await
                .map_err(kube(format!("reading ConfigMap {}", ADOPTION_RECORD)))?
                .and_then(|m| m.data?.get("allowRollout").cloned())
                .is_some_and(|v| v == "true");
        let running_ref = running.as_ref().map(|(v, ours)| (v.as_str(), *ours));
        if adoption_holds(true, running_ref, &bundle.version, allowed) {
            return Err(InstallError::AdoptionRollout {
                running: running.map(|(v, _)| v).unwrap_or_default(),
                bundle: bundle.version.clone(),
                namespace: namespace.clone(),
            });
        }
        Ok(())
    }

    /// Puts the operator Deployment back as the last applied bundle has it, without reading
    /// the source again (a source that is down must not keep a deleted operator away).
    pub(super) async fn restore(&mut self, trigger: &Trigger) -> Result<(), InstallError> {
        let Some((bundle, _)) = self.applied.take() else {
            return self.reconcile().await;
        };
        let result = self.apply(bundle.deployment()).await;
        let what = match trigger {
            Trigger::DeploymentEdited { generation } => {
                format!("was edited (generation {generation}); the agent restored")
            }
            _ => "was deleted; the agent recreated".to_owned(),
        };
        let deployment = match result {
            Ok(deployment) => deployment,
            Err(err) => {
                self.applied = Some((bundle, 0));
                return Err(err);
            }
        };
        self.event(
            EventType::Warning,
            "DeploymentRestored",
            format!(
                "Deployment {}/{OPERATOR_DEPLOYMENT} {what} it from flux-operator {} ({})",
                self.config.operator_namespace, bundle.version, bundle.digest
            ),
        )
        .await;
        let generation = deployment.metadata.generation.unwrap_or_default();
        self.applied = Some((bundle, generation));
        self.deployment = as_deployment(deployment);
        self.update_rollout_phase();
        Ok(())
    }

    pub(super) async fn fail(&mut self, err: &InstallError) {
        let reason = err.to_string();
        tracing::warn!(%reason, "flux-operator install attempt failed; retrying with backoff");
        if self.failure.as_deref() != Some(reason.as_str()) {
            self.event(EventType::Warning, err.event_reason(), reason.clone())
                .await;
        }
        self.set(OperatorPhase::Failed, reason.clone());
        self.failure = Some(reason);
    }

    /// Takes in the operator Deployment as the watch shows it now (listed: `None` is none);
    /// returns a trigger when it drifted from what the agent applied.
    pub(super) fn observe(&mut self, seen: Option<Arc<Deployment>>) -> Option<Trigger> {
        let seen = seen.map(Arc::unwrap_or_clone);
        let now = seen.as_ref().map(|d| {
            (
                d.metadata.uid.as_deref(),
                d.metadata.generation.unwrap_or_default(),
            )
        });
        let applied = self.applied.as_ref().map(|(_, g)| *g);
        let trigger = drift(self.watched.as_deref(), now, applied);
        self.watched = seen.as_ref().and_then(|d| d.metadata.uid.clone());
        self.deployment = seen;
        if trigger.is_none() {
            self.update_rollout_phase();
        }
        trigger
    }

    pub(super) fn update_rollout_phase(&self) {
        if self.failure.is_some() || self.applied.is_none() {
            return;
        }
        let name = format!(
            "Deployment {}/{OPERATOR_DEPLOYMENT}",
            self.config.operator_namespace
        );
        match self.deployment.as_ref().map(rollout) {
            Some(Ok(())) => self.set(OperatorPhase::Ready, ""),
            Some(Err(why)) => self.set(OperatorPhase::WaitingForOperator, format!("{name}: {why}")),
            None => self.set(
                OperatorPhase::WaitingForOperator,
                format!("{name} is not there yet"),
            ),
        }
    }
}

/// The Event an apply of `record` is told by (reason, note): installed the first time,
/// updated or upgraded when the digest changed (with what was removed), recovered when the
/// same bundle applies again after a failure; none otherwise.
fn install_event(
    previous: Option<&Record>,
    record: &Record,
    recovered: bool,
    pruned: &[String],
) -> Option<(&'static str, String)> {
    let source_name = &record.source;
    match previous {
        None => Some((
            "Installed",
            format!(
                "applied flux-operator {} from {source_name} ({})",
                record.version, record.digest
            ),
        )),
        Some(p) if p.digest != record.digest => Some((
            if p.version == record.version {
                "Updated"
            } else {
                "Upgraded"
            },
            format!(
                "applied flux-operator {} ({}) from {source_name}, replacing {} ({}){}",
                record.version,
                record.digest,
                p.version,
                p.digest,
                if pruned.is_empty() {
                    String::new()
                } else {
                    format!("; removed {}", pruned.join(", "))
                }
            ),
        )),
        Some(_) if recovered => Some((
            "Recovered",
            format!(
                "flux-operator {} from {source_name} applies again",
                record.version
            ),
        )),
        Some(_) => None,
    }
}

/// Whether the operator Deployment drifted from the agent's apply, which produced generation
/// `applied`: edited past it, deleted, or replaced by another of the same name. `watched` is the
/// uid the watch showed before, `now` the uid and generation it shows now. Only a Deployment
/// the watch showed can be found gone: right after the first apply, it may not show it yet.
fn drift(
    watched: Option<&str>,
    now: Option<(Option<&str>, i64)>,
    applied: Option<i64>,
) -> Option<Trigger> {
    let applied = applied?;
    match now {
        None => watched.is_some().then_some(Trigger::DeploymentDeleted),
        Some((uid, _)) if watched.is_some() && watched != uid => Some(Trigger::DeploymentDeleted),
        Some((_, generation)) => {
            (generation > applied).then_some(Trigger::DeploymentEdited { generation })
        }
    }
}

/// The applied Deployment as the typed object (what the API server answered an apply with).
fn as_deployment(object: DynamicObject) -> Option<Deployment> {
    serde_json::to_value(object)
        .and_then(serde_json::from_value)
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_an_edit_past_the_apply_a_deletion_or_a_replacement() {
        let edited =
            |t: Option<Trigger>| matches!(t, Some(Trigger::DeploymentEdited { generation: 4 }));
        let deleted = |t: Option<Trigger>| matches!(t, Some(Trigger::DeploymentDeleted));
        assert!(edited(drift(Some("a"), Some((Some("a"), 4)), Some(3))));
        assert!(drift(Some("a"), Some((Some("a"), 3)), Some(3)).is_none());
        assert!(deleted(drift(Some("a"), None, Some(3))));
        assert!(deleted(drift(Some("a"), Some((Some("b"), 1)), Some(3))));
        // Nothing applied yet: the agent has nothing to restore.
        assert!(drift(Some("a"), None, None).is_none());
        // Not yet shown by the watch (it lags the first apply): not gone.
        assert!(drift(None, None, Some(3)).is_none());
        assert!(drift(None, Some((Some("a"), 3)), Some(3)).is_none());
    }

    fn record(version: &str, digest: &str) -> Record {
        Record {
            version: version.into(),
            digest: digest.into(),
            source: "oci://r/op:v1".into(),
            objects: Vec::new(),
        }
    }

    #[test]
    fn an_apply_is_told_as_installed_updated_upgraded_or_recovered() {
        let next = record("0.58.1", "sha256:b");
        assert_eq!(
            install_event(None, &next, true, &[]),
            Some((
                "Installed",
                "applied flux-operator 0.58.1 from oci://r/op:v1 (sha256:b)".into()
            ))
        );
        let removed = ["ConfigMap x/y".to_owned()];
        assert_eq!(
            install_event(Some(&record("0.58.1", "sha256:a")), &next, false, &removed),
            Some((
                "Updated",
                "applied flux-operator 0.58.1 (sha256:b) from oci://r/op:v1, replacing 0.58.1 (sha256:a); removed ConfigMap x/y".into()
            ))
        );
        let upgraded = install_event(Some(&record("0.57.0", "sha256:a")), &next, false, &[]);
        assert_eq!(upgraded.map(|(reason, _)| reason), Some("Upgraded"));
        let same = record("0.58.1", "sha256:b");
        assert_eq!(
            install_event(Some(&same), &next, true, &[]),
            Some((
                "Recovered",
                "flux-operator 0.58.1 from oci://r/op:v1 applies again".into()
            ))
        );
        assert_eq!(install_event(Some(&same), &next, false, &[]), None);
    }
}
