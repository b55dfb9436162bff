//! Whether the agent is ready to serve, as `/readyz` reports it.

use std::sync::{
    Mutex,
    atomic::{AtomicBool, Ordering},
};

/// What `/readyz` waits for: the gRPC listener bound and one answer from the Kubernetes API.
#[derive(Debug, Default)]
pub struct Readiness {
    grpc_bound: AtomicBool,
    kube_api: Mutex<KubeApi>,
    /// Set when a task the agent needs stopped: the agent exits next, and is not ready meanwhile.
    task_died: Mutex<Option<String>>,
}

#[derive(Debug, Default)]
enum KubeApi {
    #[default]
    NotAsked,
    Failed(String),
    Answered,
}

impl Readiness {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn set_grpc_bound(&self) {
        self.grpc_bound.store(true, Ordering::Release);
    }

    /// Records that the Kubernetes API answered. Readiness stays once reached: losing the API
    /// later is reported in the status (`problems`), and restarting would not bring it back.
    pub fn set_kube_api_answered(&self) {
        *self.lock() = KubeApi::Answered;
    }

    /// Records why the Kubernetes API did not answer, while it never has.
    pub fn set_kube_api_failed(&self, reason: impl Into<String>) {
        let mut state = self.lock();
        if !matches!(*state, KubeApi::Answered) {
            *state = KubeApi::Failed(reason.into());
        }
    }

    /// Records that a task the agent needs stopped (see `runtime::supervisor`).
    pub fn set_task_died(&self, what: String) {
        let mut died = self.task_died.lock().unwrap_or_else(|p| p.into_inner());
        died.get_or_insert(what);
    }

    /// `Ok` when ready, else every reason why not.
    pub fn check(&self) -> Result<(), String> {
        let mut reasons = Vec::new();
        if let Some(died) = &*self.task_died.lock().unwrap_or_else(|p| p.into_inner()) {
            reasons.push(format!("{died}; the agent is stopping"));
        }
        if !self.grpc_bound.load(Ordering::Acquire) {
            reasons.push("the gRPC listener is not bound yet".to_owned());
        }
        match &*self.lock() {
            KubeApi::Answered => {}
            KubeApi::NotAsked => reasons.push("the Kubernetes API has not answered yet".into()),
            KubeApi::Failed(reason) => {
                reasons.push(format!("the Kubernetes API has not answered: {reason}"))
            }
        }
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons.join("; "))
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, KubeApi> {
        self.kube_api.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_with_listener_bound_and_api_answered() {
        let readiness = Readiness::new();
        let reason = readiness.check().unwrap_err();
        assert!(reason.contains("gRPC listener is not bound"), "{reason}");
        assert!(
            reason.contains("Kubernetes API has not answered yet"),
            "{reason}"
        );

        readiness.set_grpc_bound();
        readiness.set_kube_api_failed("connection refused");
        assert_eq!(
            readiness.check().unwrap_err(),
            "the Kubernetes API has not answered: connection refused"
        );

        readiness.set_kube_api_answered();
        assert_eq!(readiness.check(), Ok(()));
        readiness.set_kube_api_failed("later failure");
        assert_eq!(readiness.check(), Ok(()), "readiness latches");
    }
}
