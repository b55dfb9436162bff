//! One server-side apply of a bundle object, taking over fields another manager owns and
//! saying so, and the wait until a CRD is Established.

use super::*;

/// What a server-side apply refused with 409 says another manager owns, as one line:
/// `field manager "kubectl-edit" (.spec.replicas, .spec.template.spec.containers…)`. The
/// managers' names are whatever their writers chose, so each is quoted and bounded.
fn field_conflicts(status: &kube::core::Status) -> String {
    let mut by_manager: Vec<(String, Vec<&str>)> = Vec::new();
    let causes = status.details.as_ref().map(|d| d.causes.as_slice());
    for cause in causes.unwrap_or_default() {
        let manager = cause
            .message
            .split('"')
            .nth(1)
            .map_or_else(|| "an unnamed manager".to_owned(), quote);
        match by_manager.iter_mut().find(|(m, _)| *m == manager) {
            Some((_, fields)) => fields.push(&cause.field),
            None => by_manager.push((manager, vec![&cause.field])),
        }
    }
    if by_manager.is_empty() {
        return format!("another field manager ({})", quote(&status.message));
    }
    let listed: Vec<String> = by_manager
        .iter()
        .map(|(manager, fields)| {
            let shown: Vec<String> = fields.iter().take(5).map(|f| quote(f)).collect();
            let more = match fields.len().saturating_sub(5) {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            format!("field manager {manager} ({}{more})", shown.join(", "))
        })
        .collect();
    listed.join(", ")
}

impl Installer {
    /// Server-side applies one object. Without force first: when another field manager owns
    /// some of its fields (someone created or edited it), the apply is repeated with force,
    /// which takes them over, and that is said in a Warning Event `TookOver` and the install's
    /// notices, naming the object, the managers and their fields.
    pub(super) async fn apply(
        &mut self,
        object: &BundleObject,
    ) -> Result<DynamicObject, InstallError> {
        let resource = object.kind.api_resource();
        let api: Api<DynamicObject> = match &object.reference.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        let name = &object.reference.name;
        let failed = |err: kube::Error| InstallError::Apply {
            object: object.reference.clone(),
            message: kube_message(&err),
        };
        let params = PatchParams::apply(FIELD_MANAGER);
        let conflicts = match api
            .patch(name, &params, &Patch::Apply(&object.manifest))
            .await
        {
            Ok(applied) => {
                tracing::debug!(object = %object.reference, "applied");
                return Ok(applied);
            }
            Err(kube::Error::Api(status)) if status.code == 409 => field_conflicts(&status),
            Err(err) => return Err(failed(err)),
        };
        let applied = api
            .patch(name, &params.force(), &Patch::Apply(&object.manifest))
            .await
            .map_err(failed)?;
        tracing::debug!(object = %object.reference, "applied");
        let note = format!(
            "{} was taken over from {conflicts}: the bundle's values apply now",
            object.reference
        );
        tracing::warn!(%note, "took over fields of another manager");
        self.event(EventType::Warning, "TookOver", note.clone())
            .await;
        if self.notices.len() == MAX_NOTICES {
            self.notices.remove(0);
        }
        self.notices.push(note);
        Ok(applied)
    }

    /// Waits (kube-runtime's `await_condition`, a watch on the one CRD) until `name` is
    /// Established; past [`CRD_TIMEOUT`] the error says what the CRD last showed.
    pub(super) async fn wait_established(&self, name: &str) -> Result<(), InstallError> {
        let api = Api::<CustomResourceDefinition>::all(self.client.clone());
        let established = await_condition(api.clone(), name, conditions::is_crd_established());
        let detail = match tokio::time::timeout(CRD_TIMEOUT, established).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(err)) => format!("watching it failed: {err}"),
            Err(_) => match api.get_opt(name).await {
                Ok(Some(crd)) => crd
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|c| c.iter().find(|c| c.type_ == "Established"))
                    .map_or("no Established condition yet".into(), |c| {
                        format!(
                            "Established={} {}",
                            c.status,
                            c.message.as_deref().unwrap_or_default()
                        )
                    }),
                Ok(None) => "it does not exist".into(),
                Err(err) => kube_message(&err),
            },
        };
        Err(InstallError::CrdNotEstablished {
            name: name.to_owned(),
            detail,
        })
    }
}

#[cfg(test)]
mod takeover {
    use kube::core::Status;

    use super::field_conflicts;

    fn conflict(causes: &[(&str, &str)]) -> Status {
        let causes: Vec<_> = causes
            .iter()
            .map(|(message, field)| {
                serde_json::json!({"reason": "FieldManagerConflict", "message": message, "field": field})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "code": 409,
            "message": "Apply failed with conflicts",
            "details": {"causes": causes},
        }))
        .unwrap()
    }

    #[test]
    fn a_conflict_names_each_manager_once_with_its_fields() {
        let status = conflict(&[
            (
                r#"conflict with "kubectl-set" using apps/v1"#,
                ".spec.template.spec.containers[name=\"manager\"].image",
            ),
            (r#"conflict with "helm" using apps/v1"#, ".spec.replicas"),
            (
                r#"conflict with "kubectl-set" using apps/v1"#,
                ".metadata.labels.a",
            ),
        ]);
        assert_eq!(
            field_conflicts(&status),
            "field manager \"kubectl-set\" (\".spec.template.spec.containers[name=\\\"manager\\\"].image\", \
             \".metadata.labels.a\"), field manager \"helm\" (\".spec.replicas\")"
        );
    }

    #[test]
    fn many_fields_and_long_names_stay_bounded() {
        let long = format!("conflict with \"{}\" using v1", "m".repeat(500));
        let fields: Vec<String> = (0..40).map(|i| format!(".data.k{i}")).collect();
        let causes: Vec<(&str, &str)> =
            fields.iter().map(|f| (long.as_str(), f.as_str())).collect();
        let text = field_conflicts(&conflict(&causes));
        assert!(text.len() < 300, "{text}");
        assert!(text.ends_with(" and 35 more)"), "{text}");
        assert!(
            field_conflicts(&conflict(&[])).starts_with("another field manager (\"Apply failed")
        );
    }
}
