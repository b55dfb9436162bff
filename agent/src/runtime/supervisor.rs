//! The agent's background tasks under one supervisor: each is registered by name and handed
//! the one shutdown token, and a task that ends or panics while the agent runs takes the agent
//! down (not ready, every other task stopped, exit non-zero, the task named in the log), so the
//! kubelet restarts it. Without this, a panicking admission or enforcement loop left an agent
//! that answered health checks and guarded nothing.

use std::{collections::HashMap, fmt, future::Future, sync::Arc};

use tokio::task::{Id, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::status::Readiness;

/// How a supervised task is expected to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lifetime {
    /// Runs until the shutdown: ending before it is a failure.
    UntilShutdown,
    /// Does one job at start (resuming an upgrade): ending is fine, panicking is not.
    Once,
}

/// Which task took the agent down, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskDied {
    pub task: &'static str,
    pub how: String,
}

impl fmt::Display for TaskDied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the agent's task {:?} {}", self.task, self.how)
    }
}

pub struct Supervisor {
    tasks: JoinSet<String>,
    names: HashMap<Id, (&'static str, Lifetime)>,
    shutdown: CancellationToken,
    readiness: Arc<Readiness>,
}

impl Supervisor {
    pub fn new(shutdown: CancellationToken, readiness: Arc<Readiness>) -> Self {
        Self {
            tasks: JoinSet::new(),
            names: HashMap::new(),
            shutdown,
            readiness,
        }
    }

    /// A task that must run until the shutdown, made from the shutdown token.
    pub fn spawn<F>(&mut self, name: &'static str, task: impl FnOnce(CancellationToken) -> F)
    where
        F: Future<Output: fmt::Debug + Send> + Send + 'static,
    {
        let task = task(self.shutdown.clone());
        self.start(name, Lifetime::UntilShutdown, task);
    }

    /// A task that does one job and ends, made from the shutdown token.
    pub fn spawn_once<F>(&mut self, name: &'static str, task: impl FnOnce(CancellationToken) -> F)
    where
        F: Future<Output: fmt::Debug + Send> + Send + 'static,
    {
        let task = task(self.shutdown.clone());
        self.start(name, Lifetime::Once, task);
    }

    fn start<T: fmt::Debug + Send + 'static>(
        &mut self,
        name: &'static str,
        lifetime: Lifetime,
        task: impl Future<Output = T> + Send + 'static,
    ) {
        let handle = self.tasks.spawn(async move {
            // The fault tests' way in: `TENANTFLUX_FAILPOINTS=panic:NAME` panics the task
            // named NAME once it started.
            crate::panicpoint(name);
            format!("{:?}", task.await)
        });
        self.names.insert(handle.id(), (name, lifetime));
    }

    /// Waits for every task. The first one that ends before the shutdown (or panics, at any
    /// time) marks the agent not ready and cancels the shutdown token, which stops the rest;
    /// it is returned once all have stopped.
    pub async fn wait(mut self) -> Option<TaskDied> {
        let mut first: Option<TaskDied> = None;
        while let Some(joined) = self.tasks.join_next_with_id().await {
            let (id, how) = match joined {
                Ok((id, output)) => (id, format!("ended with {output}")),
                Err(err) => {
                    let how = if err.is_panic() {
                        "panicked".to_owned()
                    } else {
                        "was cancelled".to_owned()
                    };
                    (err.id(), how)
                }
            };
            let (task, lifetime) = self
                .names
                .remove(&id)
                .unwrap_or(("unknown", Lifetime::UntilShutdown));
            let failed = how == "panicked"
                || (lifetime == Lifetime::UntilShutdown && !self.shutdown.is_cancelled());
            if !failed {
                continue;
            }
            let died = TaskDied { task, how };
            tracing::error!(task, error = %died, "a task of the agent stopped while the agent runs: stopping the agent so that it is restarted");
            self.readiness.set_task_died(died.to_string());
            self.shutdown.cancel();
            first.get_or_insert(died);
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn supervisor() -> (Supervisor, CancellationToken, Arc<Readiness>) {
        let shutdown = CancellationToken::new();
        let readiness = Arc::new(Readiness::new());
        (
            Supervisor::new(shutdown.clone(), readiness.clone()),
            shutdown,
            readiness,
        )
    }

    #[tokio::test]
    async fn a_task_that_ends_early_stops_the_others_and_is_named() {
        let (mut tasks, shutdown, readiness) = supervisor();
        tasks.spawn("admission", |token| async move { token.cancelled().await });
        tasks.spawn("enforcement", |_| async { Err::<(), _>("the watch ended") });
        let died = tokio::time::timeout(Duration::from_secs(5), tasks.wait())
            .await
            .expect("the supervisor stops everything");
        let died = died.expect("a task died");
        assert_eq!(died.task, "enforcement");
        assert!(died.how.contains("the watch ended"), "{}", died.how);
        assert!(shutdown.is_cancelled());
        assert!(readiness.check().unwrap_err().contains("\"enforcement\""));
    }

    #[tokio::test]
    async fn a_panic_is_a_death_even_in_a_task_that_may_end() {
        let (mut tasks, _, _) = supervisor();
        tasks.spawn_once("resume", |_| async { panic!("boom") });
        let died = tasks.wait().await.expect("a panic is a death");
        assert_eq!((died.task, died.how.as_str()), ("resume", "panicked"));
    }

    #[tokio::test]
    async fn tasks_that_end_as_expected_are_not_deaths() {
        let (mut tasks, shutdown, readiness) = supervisor();
        tasks.spawn_once("resume", |_| async {});
        tasks.spawn("admission", |token| async move { token.cancelled().await });
        shutdown.cancel();
        assert_eq!(tasks.wait().await, None);
        assert!(!readiness.check().unwrap_err().contains("task"));
    }
}
