//! Whether the API server enforces the held policy, proven rather than inferred from the
//! admission objects being there: the agent asks for a server-side dry run of a canary
//! FluxInstance that every rendered policy refuses (its version is no version, the first
//! validation of [`super::admission::render`]), and judges the answer.
//!
//! One failed proof is not yet a verdict: right after the agent (re)writes the admission
//! objects the API server may not have compiled them, so "not enforced" is reported only when
//! proofs have failed in a row for [`SETTLE_SECONDS`] ([`Tracker`]). One refusal is proof
//! enough.
//!
//! What the canary proves is that a FluxInstance of its shape is refused. A matchCondition
//! that spares every other shape is a change of the admission objects, which the agent's drift
//! check reports and undoes; the canary does not replace that check.

use serde_json::{Value, json};

use super::admission::NAME;

/// How long proofs must fail in a row before the verdict is NOT ENFORCED: an API server
/// compiles a new or rewritten policy within seconds, more on a loaded one.
pub const SETTLE_SECONDS: i64 = 10;

/// The canary's `spec.distribution.version`: no version and no range, so that the first
/// validation of every rendered policy refuses it.
pub const CANARY_VERSION: &str = "tenantflux-enforcement-canary";

/// The canary, as a server-side apply body for FluxInstance `flux` in `namespace` (the only
/// name flux-operator reconciles, and the only one the agent may create). It is only ever sent
/// with `dryRun=All`: nothing is stored.
pub fn canary(api_version: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": "FluxInstance",
        "metadata": {"name": "flux", "namespace": namespace},
        "spec": {
            "distribution": {"version": CANARY_VERSION, "registry": "ghcr.io/fluxcd"},
        },
    })
}

/// What one dry run of the canary showed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    /// The API server refused it with the agent's policy: enforced.
    Refused,
    /// It was admitted (or refused for a reason of its own, which means the policy did not
    /// judge it): not enforced, and why.
    Admitted(String),
    /// The dry run could not be made (the agent lacks a permission, the API server did not
    /// answer): not proven, and why.
    Failed(String),
    /// The API server does not serve FluxInstances there (no flux-operator CRD, or no operator
    /// namespace): no FluxInstance can be admitted in it, so there is nothing to prove yet.
    NotServed,
    /// The API server did not answer (unreachable, restarting, overloaded): it admits nothing
    /// meanwhile either, so the verdict stays as it was.
    Unanswered,
}

/// Judges the API server's answer to the dry run: `None` when it admitted the canary,
/// otherwise the HTTP status code and message of its refusal.
pub fn judge(refusal: Option<(u16, &str)>) -> Probe {
    let Some((code, message)) = refusal else {
        return Probe::Admitted(
            "a FluxInstance that the policy refuses was admitted in a dry run".to_owned(),
        );
    };
    // `ValidatingAdmissionPolicy 'tenantflux-policy' with binding 'tenantflux-policy' denied
    // request: ...`
    let ours = format!("ValidatingAdmissionPolicy '{NAME}'");
    match code {
        422 | 403 if message.contains(&ours) && message.contains(CANARY_VERSION) => Probe::Refused,
        404 => Probe::NotServed,
        429 | 500..=599 => Probe::Unanswered,
        // Admission passed, and the dry run met an existing object another way.
        409 => Probe::Admitted(format!(
            "a FluxInstance that the policy refuses passed admission in a dry run ({message})"
        )),
        _ => Probe::Failed(format!(
            "the dry run of a FluxInstance that the policy refuses failed with HTTP {code}: {message}"
        )),
    }
}

/// The verdict the agent reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enforcement {
    pub enforced: bool,
    /// Since when (unix seconds) the verdict holds.
    pub since: i64,
    /// When it was last proven (unix seconds).
    pub checked_at: i64,
    /// Why not, when not enforced.
    pub reason: String,
}

/// A verdict that changed, for an Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Enforced,
    NotEnforced(String),
    /// FluxInstances are no longer served: no verdict until they are.
    NotServed,
}

/// Turns proofs into a verdict: one refusal proves, failures for [`SETTLE_SECONDS`] disprove.
#[derive(Clone, Debug, Default)]
pub struct Tracker {
    verdict: Option<Enforcement>,
    /// When the first failed proof of a run of failures was made: held until the failures
    /// have lasted [`SETTLE_SECONDS`].
    pending: Option<i64>,
}

impl Tracker {
    /// The verdict so far (none before the first refusal or failures for the settle time).
    pub fn verdict(&self) -> Option<&Enforcement> {
        self.verdict.as_ref()
    }

    /// Whether a failed proof waits for a second one (the caller proves again soon).
    pub fn pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Forgets everything, e.g. when the agent no longer holds a policy.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Takes one proof made at `now`; returns the change of verdict, if any.
    pub fn observe(&mut self, probe: Probe, now: i64) -> Option<Change> {
        let reason = match probe {
            Probe::Refused => {
                self.pending = None;
                let was = self.verdict.as_ref().map(|v| v.enforced);
                let since = match &self.verdict {
                    Some(v) if v.enforced => v.since,
                    _ => now,
                };
                self.verdict = Some(Enforcement {
                    enforced: true,
                    since,
                    checked_at: now,
                    reason: String::new(),
                });
                return (was != Some(true)).then_some(Change::Enforced);
            }
            Probe::Unanswered => return None,
            Probe::NotServed => {
                let had = self.verdict.is_some();
                self.reset();
                return had.then_some(Change::NotServed);
            }
            Probe::Admitted(reason) | Probe::Failed(reason) => reason,
        };
        // Already not enforced: kept current, a new Event only for a new reason.
        if let Some(verdict) = self.verdict.as_mut().filter(|v| !v.enforced) {
            let changed = verdict.reason != reason;
            verdict.reason.clone_from(&reason);
            verdict.checked_at = now;
            return changed.then_some(Change::NotEnforced(reason));
        }
        let Some(first_at) = self.pending else {
            self.pending = Some(now);
            return None;
        };
        if now - first_at < SETTLE_SECONDS {
            return None;
        }
        self.pending = None;
        self.verdict = Some(Enforcement {
            enforced: false,
            since: first_at,
            checked_at: now,
            reason: reason.clone(),
        });
        Some(Change::NotEnforced(reason))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DENIED: &str = "fluxinstances.fluxcd.controlplane.io \"flux\" is forbidden: ValidatingAdmissionPolicy 'tenantflux-policy' with binding 'tenantflux-policy' denied request: spec.distribution.version \"tenantflux-enforcement-canary\" is neither a version (2.8.0) nor a semver range";

    #[test]
    fn only_our_policys_refusal_of_the_canary_proves_enforcement() {
        assert_eq!(judge(Some((422, DENIED))), Probe::Refused);
        assert_eq!(judge(Some((403, DENIED))), Probe::Refused);
        // Another policy's refusal, or a schema error, proves nothing about ours.
        let other = DENIED.replace("'tenantflux-policy'", "'tenant-own'");
        assert!(matches!(judge(Some((422, &other))), Probe::Failed(_)));
        assert!(matches!(
            judge(Some((422, "spec.distribution.registry: Required value"))),
            Probe::Failed(_)
        ));
        assert!(matches!(judge(None), Probe::Admitted(_)));
        // No FluxInstance CRD (or no operator namespace): nothing can be admitted there.
        assert_eq!(judge(Some((404, "404 page not found"))), Probe::NotServed);
        assert!(matches!(
            judge(Some((409, "the object has been modified"))),
            Probe::Admitted(_)
        ));
        let forbidden = judge(Some((
            403,
            "fluxinstances.fluxcd.controlplane.io \"flux\" is forbidden: User \"system:serviceaccount:tenantflux-system:tenantflux-agent\" cannot patch resource",
        )));
        let Probe::Failed(why) = forbidden else {
            panic!("{forbidden:?}")
        };
        assert!(
            why.contains("HTTP 403") && why.contains("cannot patch"),
            "{why}"
        );
    }

    #[test]
    fn the_canary_is_flux_in_the_namespace_with_a_version_no_policy_admits() {
        let canary = canary("fluxcd.controlplane.io/v1", "cozy-fluxcd");
        assert_eq!(canary["metadata"]["name"], "flux");
        assert_eq!(canary["metadata"]["namespace"], "cozy-fluxcd");
        let version = canary["spec"]["distribution"]["version"].as_str().unwrap();
        assert!(crate::policy::Range::parse(version).is_err(), "{version}");
    }

    #[test]
    fn one_refusal_proves_and_only_failures_for_the_settle_time_disprove() {
        let mut tracker = Tracker::default();
        assert_eq!(tracker.observe(Probe::Refused, 10), Some(Change::Enforced));
        assert_eq!(tracker.observe(Probe::Refused, 25), None);
        let verdict = tracker.verdict().unwrap();
        assert!(verdict.enforced);
        assert_eq!((verdict.since, verdict.checked_at), (10, 25));

        // A failure (the API server compiling a rewritten policy) is held back.
        assert_eq!(tracker.observe(Probe::Admitted("gap".into()), 40), None);
        assert!(tracker.pending() && tracker.verdict().unwrap().enforced);
        assert_eq!(tracker.observe(Probe::Refused, 42), None);
        assert!(!tracker.pending());

        // Failures in a row for the settle time are the verdict, dated from the first.
        assert_eq!(tracker.observe(Probe::Failed("forbidden".into()), 50), None);
        assert_eq!(
            tracker.observe(Probe::Admitted("admitted".into()), 52),
            None
        );
        assert!(tracker.verdict().unwrap().enforced, "still settling");
        assert_eq!(
            tracker.observe(Probe::Admitted("admitted".into()), 50 + SETTLE_SECONDS),
            Some(Change::NotEnforced("admitted".into()))
        );
        let verdict = tracker.verdict().unwrap();
        assert!(!verdict.enforced && !tracker.pending());
        assert_eq!((verdict.since, verdict.reason.as_str()), (50, "admitted"));
        // Still not enforced: no new Event unless the reason changes; `since` stays.
        assert_eq!(
            tracker.observe(Probe::Admitted("admitted".into()), 77),
            None
        );
        assert_eq!(tracker.verdict().unwrap().checked_at, 77);
        assert_eq!(
            tracker.observe(Probe::Failed("forbidden".into()), 92),
            Some(Change::NotEnforced("forbidden".into()))
        );
        assert_eq!(tracker.verdict().unwrap().since, 50);

        // One refusal ends it.
        assert_eq!(tracker.observe(Probe::Refused, 100), Some(Change::Enforced));
        assert_eq!(tracker.verdict().unwrap().since, 100);

        // An API server that does not answer changes nothing.
        assert_eq!(judge(Some((503, "service unavailable"))), Probe::Unanswered);
        assert_eq!(tracker.observe(Probe::Unanswered, 105), None);
        assert_eq!(tracker.observe(Probe::Unanswered, 120), None);
        assert!(tracker.verdict().unwrap().enforced && !tracker.pending());

        // FluxInstances no longer served (the CRD deleted): no verdict, said once.
        assert_eq!(
            tracker.observe(Probe::NotServed, 130),
            Some(Change::NotServed)
        );
        assert!(tracker.verdict().is_none() && !tracker.pending());
        assert_eq!(tracker.observe(Probe::NotServed, 145), None);
    }

    #[test]
    fn a_first_proof_that_keeps_failing_reports_not_enforced_from_the_start() {
        let mut tracker = Tracker::default();
        assert_eq!(tracker.observe(Probe::Failed("no".into()), 1), None);
        assert_eq!(tracker.observe(Probe::Failed("no".into()), 3), None);
        assert!(tracker.verdict().is_none());
        assert_eq!(
            tracker.observe(Probe::Failed("no".into()), 1 + SETTLE_SECONDS),
            Some(Change::NotEnforced("no".into()))
        );
        assert_eq!(tracker.verdict().unwrap().since, 1);
    }
}
