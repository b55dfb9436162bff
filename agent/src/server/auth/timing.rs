//! Where an agent call's time goes, for a caller that asks (`x-tenantflux-timings` metadata):
//! the TokenReview, SubjectAccessReview and CSR reads the call made and the whole handler,
//! answered in a `server-timing` header (`tokenreview;dur=1.20, handler;dur=3.10`), which
//! `TENANTFLUX_TIMINGS=1 kubectl tenantflux status` prints. Durations and fixed names only.

use std::{cell::RefCell, future::Future, time::Duration};

/// The metadata a caller sends to be told the timings.
pub const REQUEST_METADATA: &str = "x-tenantflux-timings";
pub const RESPONSE_HEADER: &str = "server-timing";

tokio::task_local! {
    static PHASES: RefCell<Vec<(&'static str, Duration)>>;
}

/// Records `phase` for the call being served, when its caller asked (no-op otherwise).
pub fn record(phase: &'static str, took: Duration) {
    let _ = PHASES.try_with(|phases| phases.borrow_mut().push((phase, took)));
}

/// Runs `future` (a call's handler), collecting what it records.
pub async fn collect<F: Future>(future: F) -> (F::Output, Vec<(&'static str, Duration)>) {
    PHASES
        .scope(RefCell::new(Vec::new()), async {
            let output = future.await;
            let phases = PHASES.with(|phases| phases.take());
            (output, phases)
        })
        .await
}

/// `name;dur=MS, …`, the handler's whole time last.
pub fn header_value(phases: &[(&'static str, Duration)], handler: Duration) -> String {
    phases
        .iter()
        .chain([&("handler", handler)])
        .map(|(name, took)| format!("{name};dur={:.2}", took.as_secs_f64() * 1000.0))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {

    use super::*;

    #[tokio::test]
    async fn phases_are_collected_per_call_and_rendered_as_server_timing() {
        record("outside", Duration::from_millis(1));
        let ((), phases) = collect(async {
            record("tokenreview", Duration::from_micros(1250));
            record("subjectaccessreview", Duration::from_micros(500));
        })
        .await;
        assert_eq!(
            header_value(&phases, Duration::from_millis(3)),
            "tokenreview;dur=1.25, subjectaccessreview;dur=0.50, handler;dur=3.00"
        );
    }
}
