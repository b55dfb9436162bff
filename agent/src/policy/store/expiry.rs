//! The report of the held policy's expiry: at the instant it passes, so that `stale` and the
//! problem turn together; the policy stays in force (fail-static) until a newer one is
//! verified.

use std::time::{Duration, SystemTime};

use tenantflux_core::policy::{
    decide::{self, Expiry},
    signing::{self, format_timestamp},
};
use tokio_util::sync::CancellationToken;

use super::PolicyStore;

impl PolicyStore {
    /// Reports the held policy as stale once its expiry passes, and again for each policy
    /// accepted later; it stays in force (fail-static) until a newer one is verified.
    pub(super) async fn watch_expiry(&self, shutdown: CancellationToken) {
        let mut held = self.subscribe();
        loop {
            let expiry = held.borrow().accepted.as_ref().map(|a| {
                (
                    decide::expiry(a.validity, signing::now()),
                    a.policy.to_string(),
                )
            });
            let wait = match expiry {
                Some((Expiry::Stale { expires_at }, policy)) => {
                    let problem = stale_problem(&policy, expires_at);
                    if !held.borrow().problems.contains(&problem) {
                        self.problem(problem);
                    }
                    None
                }
                Some((Expiry::At(expires_at), _)) => Some(
                    (SystemTime::UNIX_EPOCH
                        + Duration::from_secs(u64::try_from(expires_at).unwrap_or(0)))
                    .duration_since(SystemTime::now())
                    .unwrap_or_default(),
                ),
                Some((Expiry::Never, _)) | None => None,
            };
            // What this loop wrote itself is no reason to look again.
            held.borrow_and_update();
            let changed = async { held.changed().await.is_ok() };
            if crate::until_woken(&shutdown, wait, changed).await.is_none() {
                return;
            }
        }
    }
}

fn stale_problem(policy: &str, expires_at: i64) -> String {
    format!(
        "{policy} is stale: it expired at {} and no newer policy has been verified; the agent keeps enforcing it",
        format_timestamp(expires_at)
    )
}
