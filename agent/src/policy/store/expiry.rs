//! The report of the held policy's expiry: at the instant it passes, so that `stale` and the
//! problem turn together; the policy stays in force (fail-static) until a newer one is
//! verified.

use std::time::{Duration, SystemTime};

use futures::StreamExt as _;
use tenantflux_core::policy::{
    decide::{self, Expiry},
    signing::{self, format_timestamp},
};
use tokio_stream::wrappers::WatchStream;
use tokio_util::sync::CancellationToken;

use super::PolicyStore;
use crate::reconcile::{Next, Wake};

impl PolicyStore {
    /// Reports the held policy as stale once its expiry passes, and again for each policy
    /// accepted later; it stays in force (fail-static) until a newer one is verified.
    pub(super) async fn watch_expiry(&self, shutdown: CancellationToken) {
        let changes = WatchStream::from_changes(self.subscribe()).map(drop);
        let watch = ExpiryWatch { store: self };
        crate::reconcile::run(watch, changes, &shutdown).await;
    }
}

/// The expiry loop: woken by each change of the held policy (its own report of the problem
/// too, which then finds the problem reported and changes nothing) and at the expiry.
struct ExpiryWatch<'a> {
    store: &'a PolicyStore,
}

impl crate::reconcile::Pass for ExpiryWatch<'_> {
    type Event = ();

    async fn pass(&mut self, _: Wake<()>) -> Next {
        let held = &self.store.held;
        let expiry = held.borrow().accepted.as_ref().map(|a| {
            (
                decide::expiry(a.validity, signing::now()),
                a.policy.to_string(),
            )
        });
        match expiry {
            Some((Expiry::Stale { expires_at }, policy)) => {
                let problem = stale_problem(&policy, expires_at);
                if !held.borrow().problems.contains(&problem) {
                    self.store.problem(problem);
                }
                Next::Idle
            }
            Some((Expiry::At(expires_at), _)) => Next::after(
                (SystemTime::UNIX_EPOCH
                    + Duration::from_secs(u64::try_from(expires_at).unwrap_or(0)))
                .duration_since(SystemTime::now())
                .unwrap_or_default(),
            ),
            Some((Expiry::Never, _)) | None => Next::Idle,
        }
    }
}

fn stale_problem(policy: &str, expires_at: i64) -> String {
    format!(
        "{policy} is stale: it expired at {} and no newer policy has been verified; the agent keeps enforcing it",
        format_timestamp(expires_at)
    )
}
