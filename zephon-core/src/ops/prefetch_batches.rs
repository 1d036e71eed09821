//! `prefetch_batches`: finished elements buffered ahead of the consumer.

use crate::context::Probe;
use crate::error::{Error, Result};
use crate::obs::{Explain, StageDescription};
use futures::{FutureExt, Stream, StreamExt};
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// The deepest queue `prefetch_batches` keeps (tokio's channels refuse more).
pub const MAX_DEPTH: usize = usize::MAX >> 4;

enum State<S: Stream> {
    Idle(Pin<Box<S>>),
    Running {
        rx: mpsc::Receiver<S::Item>,
        task: tokio::task::JoinHandle<()>,
    },
    Inline(Pin<Box<S>>),
    Taken,
}

/// Drives the upstream on its own task, keeping up to `n` finished elements
/// (usually batches) ready for the consumer, so short hiccups upstream do not
/// stall the training loop. The data and its order are unchanged. With `n = 0`
/// it passes elements straight through; polled outside a tokio runtime it
/// cannot drive its upstream on a task, and its first item is an
/// [`Error::Operator`] saying so (then it ends). The depth lies in
/// [`PREFETCH_DEPTH`](crate::settings::PREFETCH_DEPTH) (0 to 65,536): one
/// outside it makes the first item an [`Error::Config`] naming
/// `prefetch_batches.depth` (then it ends), as the other operators'
/// settings do (a depth of ten million let the task read a dataset ahead
/// into memory).
///
/// A panic upstream, on the task it drives, is an
/// [`Error::Panic`] naming `prefetch_batches`, and the
/// stream ends after it.
///
/// Created by [`PipelineExt::prefetch_batches`](crate::PipelineExt::prefetch_batches).
///
/// ```
/// use zephon_core::{PipelineExt, Record, Runner};
/// let s = futures::stream::iter((0..20).map(|_| Ok(Record::new())));
/// let v: Vec<usize> = s.batch(4).prefetch_batches(2).into_blocking_iter(Runner::threads()).unwrap()
///     .map(|b| b.unwrap().len()).collect();
/// assert_eq!(v, vec![4; 5]);
/// ```
#[must_use = "streams do nothing unless polled"]
pub struct PrefetchBatches<S: Stream> {
    state: State<S>,
    depth: usize,
    probe: Probe,
    /// The end was handed out.
    ended: bool,
}

impl<S: Stream> PrefetchBatches<S> {
    /// Buffers up to `depth` elements ahead.
    pub fn new(inner: S, depth: usize) -> Self {
        let inner = Box::pin(inner);
        PrefetchBatches {
            state: if depth == 0 {
                State::Inline(inner)
            } else {
                State::Idle(inner)
            },
            depth,
            probe: Probe::default(),
            ended: false,
        }
    }

    /// The prefetch depth.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The upstream, until the first poll hands it to a task of its own
    /// (`None` from then on; always there with depth 0).
    pub fn get_ref(&self) -> Option<&S> {
        match &self.state {
            State::Idle(s) | State::Inline(s) => Some(s.as_ref().get_ref()),
            State::Running { .. } | State::Taken => None,
        }
    }

    /// The upstream, pinned (it is boxed inside), mutably; `None` once it
    /// runs on its own task. Taking items from it directly bypasses the
    /// buffer.
    pub fn get_mut(&mut self) -> Option<Pin<&mut S>> {
        match &mut self.state {
            State::Idle(s) | State::Inline(s) => Some(s.as_mut()),
            State::Running { .. } | State::Taken => None,
        }
    }

    /// The upstream, boxed; `None` once it runs on its own task (which
    /// this drops).
    pub fn into_inner(mut self) -> Option<Pin<Box<S>>> {
        match std::mem::replace(&mut self.state, State::Taken) {
            State::Idle(s) | State::Inline(s) => Some(s),
            running => {
                self.state = running;
                None
            }
        }
    }
}

impl<S: Stream + fmt::Debug> fmt::Debug for PrefetchBatches<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Idle(_) => "idle",
            State::Running { .. } => "running",
            State::Inline(_) => "inline",
            State::Taken => "taken",
        };
        f.debug_struct("PrefetchBatches")
            .field("inner", &self.get_ref())
            .field("depth", &self.depth)
            .field("state", &state)
            .finish()
    }
}

impl<S: Stream> Drop for PrefetchBatches<S> {
    fn drop(&mut self) {
        if let State::Running { task, .. } = &self.state {
            task.abort();
        }
    }
}

// Ends once the end was handed out, or once the task driving the
// upstream finished and everything it sent was received.
impl<S, T> futures::stream::FusedStream for PrefetchBatches<S>
where
    S: Stream<Item = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    fn is_terminated(&self) -> bool {
        self.ended
            || match &self.state {
                State::Running { rx, .. } => rx.is_closed() && rx.is_empty(),
                State::Taken => true,
                State::Idle(_) | State::Inline(_) => false,
            }
    }
}

impl<S, T> Stream for PrefetchBatches<S>
where
    S: Stream<Item = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    type Item = Result<T>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<T>>> {
        // `State` holds only boxed streams and handles, so it is `Unpin`.
        let this = &mut *self;
        this.probe
            .attach("prefetch_batches", 1, Some(this.depth as u64));
        if !matches!(this.state, State::Taken)
            && let Err(e) =
                crate::settings::PREFETCH_DEPTH.check_usize("prefetch_batches.depth", this.depth)
        {
            this.state = State::Taken;
            return Poll::Ready(Some(Err(e)));
        }
        if matches!(this.state, State::Idle(_)) {
            let State::Idle(mut s) = std::mem::replace(&mut this.state, State::Taken) else {
                unreachable!("checked above")
            };
            this.state = match tokio::runtime::Handle::try_current() {
                Ok(handle) => {
                    let (tx, rx) = mpsc::channel(this.depth.min(MAX_DEPTH));
                    let stats = this.probe.shared();
                    let drive = async move {
                        loop {
                            // The upstream is dropped after a panic, never
                            // polled again: its state is unknown.
                            let x =
                                match std::panic::AssertUnwindSafe(s.next()).catch_unwind().await {
                                    Ok(Some(x)) => x,
                                    Ok(None) => break,
                                    Err(payload) => {
                                        let e = Error::Panic {
                                            op: Some("prefetch_batches"),
                                            payload: format!(
                                                "{} (upstream, on the task it drives)",
                                                crate::error::panic_message(payload.as_ref())
                                            ),
                                        };
                                        let _ = tx.send(Err(e)).await;
                                        break;
                                    }
                                };
                            let t = stats.as_ref().map(|_| std::time::Instant::now());
                            if tx.send(x).await.is_err() {
                                break;
                            }
                            if let (Some(st), Some(t)) = (&stats, t) {
                                st.blocked_output_ns.add(t.elapsed().as_nanos() as u64);
                            }
                        }
                    };
                    // The upstream runs on its own task: carry the
                    // pipeline context there.
                    let task = handle.spawn(crate::context::in_context(drive));
                    State::Running { rx, task }
                }
                Err(_) => {
                    // Passing elements straight through would hide that
                    // nothing is prefetched.
                    this.state = State::Taken;
                    return Poll::Ready(Some(Err(crate::runner::outside_runtime(
                        "prefetch_batches",
                    ))));
                }
            };
        }
        let out = match &mut this.state {
            State::Inline(s) => s.poll_next_unpin(cx),
            State::Running { rx, .. } => {
                if let Some(s) = this.probe.stats() {
                    s.max_queue.observe(rx.len() as u64);
                }
                rx.poll_recv(cx)
            }
            State::Taken => Poll::Ready(None),
            State::Idle(_) => unreachable!("state set above"),
        };
        match &out {
            Poll::Ready(Some(_)) => {
                this.probe.input();
                this.probe.output();
            }
            Poll::Pending => this.probe.input_pending(),
            Poll::Ready(None) => {
                this.ended = true;
                this.probe.finish();
            }
        }
        out
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.state {
            State::Idle(s) | State::Inline(s) => s.size_hint(),
            State::Running { rx, .. } => (rx.len(), None),
            State::Taken => (0, None),
        }
    }
}

impl<S: Stream + Explain> Explain for PrefetchBatches<S> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        if let State::Idle(s) | State::Inline(s) = &self.state {
            s.as_ref().get_ref().describe(out);
        }
        out.push(
            StageDescription::new(
                "prefetch_batches",
                1,
                Some(self.depth as u64),
                "upstream on its own task",
            )
            .execution_only(),
        );
    }
}
