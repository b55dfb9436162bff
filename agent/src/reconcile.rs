//! The one runner of the agent's background loops (the flux-operator install, the admission
//! objects, the policy's defaults, enforcement, expiry and pull, the stored policy's watches,
//! the discovery of the Flux APIs, the status report and its gauges, the adoption's marks, the
//! CSR sweep): a loop is a [`Pass`], run at the start, at each event of its stream, and at the
//! deadline it asked for. The runner does the waiting, the retry delays (named by the pass that
//! failed, doubling while failures follow each other, reset by any pass that did not fail) and
//! the shutdown; no loop writes them itself. When several are ready at once the shutdown wins,
//! then a deadline that passed, then an event. A pass runs to its end once started: the
//! shutdown is looked at between passes.

use std::time::Duration;

use futures::{Stream, StreamExt as _};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What a pass was run for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wake<E> {
    /// The loop's first pass.
    Start,
    /// An event of the loop's stream.
    Event(E),
    /// The deadline the last pass asked for (or its retry delay) passed.
    Deadline,
}

/// When the next pass is due, as a pass answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// At this instant (a resync, a poll, a debounce), or at an event before it.
    At(Instant),
    /// The pass failed: again after the next of these delays (the first after a pass that did
    /// not fail), or at an event before it.
    Retry(Retry),
    /// Only at an event.
    Idle,
    /// As asked before: an event that called for no work leaves the deadline (and the retry
    /// delays) as they were.
    Keep,
    /// The loop is over: what it serves is gone.
    Stop,
}

impl Next {
    /// After `wait` from now.
    pub(crate) fn after(wait: Duration) -> Next {
        Next::At(Instant::now() + wait)
    }
}

/// One loop's work: what it does when woken, and when it wants to be woken next.
pub(crate) trait Pass {
    /// What the loop's stream yields.
    type Event;

    async fn pass(&mut self, wake: Wake<Self::Event>) -> Next;
}

/// The retry delays of a failing pass: from `min`, doubling, at most `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retry {
    pub min: Duration,
    pub max: Duration,
}

impl Retry {
    /// The same delay every time.
    pub(crate) const fn every(delay: Duration) -> Retry {
        Retry {
            min: delay,
            max: delay,
        }
    }

    fn delays(self) -> impl Iterator<Item = Duration> {
        crate::retry_delays(self.min, self.max)
    }
}

/// When the next pass is due: the answers of the passes so far, with the retry delays of the
/// failures that follow each other.
#[derive(Default)]
struct Schedule {
    failing: Option<(Retry, Box<dyn Iterator<Item = Duration> + Send>)>,
    deadline: Option<Instant>,
}

impl Schedule {
    /// Takes in a pass's answer given `now`: the deadline to wait for (`None`: only an event),
    /// or `None` when the loop is over.
    fn answer(&mut self, next: Next, now: Instant) -> Option<Option<Instant>> {
        self.deadline = match next {
            Next::At(at) => {
                self.failing = None;
                Some(at)
            }
            Next::Retry(retry) => {
                let (_, delays) = match &mut self.failing {
                    Some(failing) if failing.0 == retry => failing,
                    failing => failing.insert((retry, Box::new(retry.delays()))),
                };
                Some(now + delays.next().unwrap_or(retry.max))
            }
            Next::Idle => {
                self.failing = None;
                None
            }
            Next::Keep => self.deadline,
            Next::Stop => return None,
        };
        Some(self.deadline)
    }
}

/// Runs `work` until the shutdown, until it answers [`Next::Stop`], or until its `events` end
/// while it waits for nothing else.
pub(crate) async fn run<P: Pass>(
    mut work: P,
    events: impl Stream<Item = P::Event>,
    shutdown: &CancellationToken,
) {
    let mut events = std::pin::pin!(events.fuse());
    let mut schedule = Schedule::default();
    let mut wake = Wake::Start;
    loop {
        let next = work.pass(wake).await;
        let Some(deadline) = schedule.answer(next, Instant::now()) else {
            return;
        };
        let mut due = std::pin::pin!(async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        });
        wake = loop {
            if shutdown.is_cancelled() || (events.is_done() && deadline.is_none()) {
                return;
            }
            // The shutdown first, then a deadline that passed (a stream of events that never
            // pauses must not hold a retry back; the timer may only tell at its next tick),
            // then an event.
            if deadline.is_some_and(|at| at <= Instant::now()) {
                break Wake::Deadline;
            }
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return,
                () = &mut due => break Wake::Deadline,
                event = events.next(), if !events.is_done() => if let Some(event) = event {
                    break Wake::Event(event);
                },
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOUBLING: Retry = Retry {
        min: Duration::from_secs(1),
        max: Duration::from_secs(4),
    };

    #[test]
    fn retries_double_to_the_cap_and_any_other_answer_starts_them_anew() {
        let mut schedule = Schedule::default();
        let now = Instant::now();
        let mut waits = Vec::new();
        for _ in 0..4 {
            let at = schedule
                .answer(Next::Retry(DOUBLING), now)
                .unwrap()
                .unwrap();
            waits.push((at - now).as_secs());
        }
        assert_eq!(waits, [1, 2, 4, 4]);
        let later = now + Duration::from_secs(10);
        assert_eq!(schedule.answer(Next::At(later), now), Some(Some(later)));
        let at = schedule
            .answer(Next::Retry(DOUBLING), now)
            .unwrap()
            .unwrap();
        assert_eq!(
            (at - now).as_secs(),
            1,
            "a pass that did not fail starts the delays anew"
        );
        schedule.answer(Next::Retry(DOUBLING), now);
        assert_eq!(schedule.answer(Next::Idle, now), Some(None));
        let at = schedule
            .answer(Next::Retry(DOUBLING), now)
            .unwrap()
            .unwrap();
        assert_eq!((at - now).as_secs(), 1, "so does an idle pass");
    }

    #[test]
    fn a_failure_with_other_delays_starts_those_from_their_first() {
        let mut schedule = Schedule::default();
        let now = Instant::now();
        schedule.answer(Next::Retry(DOUBLING), now);
        schedule.answer(Next::Retry(DOUBLING), now);
        let other = Retry::every(Duration::from_secs(30));
        let at = schedule.answer(Next::Retry(other), now).unwrap().unwrap();
        assert_eq!((at - now).as_secs(), 30);
        let at = schedule
            .answer(Next::Retry(DOUBLING), now)
            .unwrap()
            .unwrap();
        assert_eq!((at - now).as_secs(), 1, "back to the first delay");
    }

    #[test]
    fn keep_holds_the_deadline_and_its_delays_and_stop_ends() {
        let mut schedule = Schedule::default();
        let now = Instant::now();
        let at = schedule.answer(Next::Retry(DOUBLING), now).unwrap();
        assert_eq!(
            schedule.answer(Next::Keep, now + Duration::from_secs(1)),
            Some(at)
        );
        let at = schedule
            .answer(Next::Retry(DOUBLING), now)
            .unwrap()
            .unwrap();
        assert_eq!((at - now).as_secs(), 2, "Keep left the delays as they were");
        assert_eq!(schedule.answer(Next::Idle, now), Some(None));
        assert_eq!(schedule.answer(Next::Keep, now), Some(None));
        assert_eq!(schedule.answer(Next::Stop, now), None);
    }

    /// Records what woke it and answers from a script (then [`Next::Stop`]).
    struct Scripted {
        script: std::collections::VecDeque<Next>,
        woken: Vec<Wake<u32>>,
    }

    impl Pass for &mut Scripted {
        type Event = u32;

        async fn pass(&mut self, wake: Wake<u32>) -> Next {
            self.woken.push(wake);
            self.script.pop_front().unwrap_or(Next::Stop)
        }
    }

    fn scripted(script: &[Next]) -> Scripted {
        Scripted {
            script: script.iter().copied().collect(),
            woken: Vec::new(),
        }
    }

    const SHORT: Retry = Retry::every(Duration::from_millis(1));

    #[tokio::test]
    async fn events_and_deadlines_wake_passes_in_their_order() {
        // An event before the deadline wakes a pass; Keep then waits for the same deadline.
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(7).unwrap();
        let events = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
        let mut work = scripted(&[
            Next::after(Duration::from_millis(20)),
            Next::Keep,
            Next::Retry(SHORT),
            Next::Stop,
        ]);
        run(&mut work, events, &CancellationToken::new()).await;
        assert_eq!(
            work.woken,
            [Wake::Start, Wake::Event(7), Wake::Deadline, Wake::Deadline]
        );
        drop(tx);

        // A deadline that passed comes before an event that is ready too.
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(8).unwrap();
        let events = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
        let mut work = scripted(&[Next::At(Instant::now()), Next::Idle, Next::Stop]);
        run(&mut work, events, &CancellationToken::new()).await;
        assert_eq!(work.woken, [Wake::Start, Wake::Deadline, Wake::Event(8)]);
    }

    #[tokio::test]
    async fn the_shutdown_wins_and_ended_events_end_an_idle_loop() {
        // The shutdown, an event and the deadline all ready: no pass after the first.
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let mut work = scripted(&[Next::At(Instant::now())]);
        run(&mut work, futures::stream::iter([1u32]), &shutdown).await;
        assert_eq!(work.woken, [Wake::Start]);

        // Idle, and the events are over: nothing can wake it again, so the loop returns.
        let mut work = scripted(&[Next::Idle, Next::Idle, Next::Idle]);
        run(
            &mut work,
            futures::stream::iter([1u32]),
            &CancellationToken::new(),
        )
        .await;
        assert_eq!(work.woken, [Wake::Start, Wake::Event(1)]);

        // Events over, but a deadline is asked for: it still comes.
        let mut work = scripted(&[Next::Retry(SHORT), Next::Stop]);
        run(
            &mut work,
            futures::stream::empty(),
            &CancellationToken::new(),
        )
        .await;
        assert_eq!(work.woken, [Wake::Start, Wake::Deadline]);
    }
}
