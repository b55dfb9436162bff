//! One shutdown signal shared by every task: SIGTERM or SIGINT triggers it, and the gRPC
//! server, open WatchStatus streams, the admin server and the watchers all end on it.

use std::sync::Arc;

use tokio::sync::watch;

/// A cloneable handle to trigger and await the shutdown.
#[derive(Clone, Debug)]
pub struct Shutdown(Arc<watch::Sender<bool>>);

impl Default for Shutdown {
    fn default() -> Self {
        Self(Arc::new(watch::Sender::new(false)))
    }
}

impl Shutdown {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn trigger(&self) {
        self.0.send_replace(true);
    }

    pub fn is_triggered(&self) -> bool {
        *self.0.borrow()
    }

    /// Completes once the shutdown is triggered (at once if it already was).
    pub async fn wait(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives in `self`, so `wait_for` cannot fail while we are awaiting it.
        let _ = rx.wait_for(|triggered| *triggered).await;
    }

    /// Triggers the shutdown on the first SIGTERM or SIGINT.
    pub async fn on_signal(self) -> std::io::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
            () = self.wait() => return Ok(()),
        };
        tracing::info!(signal = name, "shutting down: draining gRPC calls");
        self.trigger();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn wait_returns_once_triggered_even_if_late() {
        let shutdown = Shutdown::new();
        let waiter = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { shutdown.wait().await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished());
        shutdown.trigger();
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("waiter woke")
            .unwrap();
        assert!(shutdown.is_triggered());
        tokio::time::timeout(Duration::from_secs(1), shutdown.wait())
            .await
            .expect("already triggered");
    }
}
