//! The probe each operator carries: it attaches to the pipeline context
//! once and reports into the operator's counters.

use crate::context::{CutRole, Joined, PipelineContext};
use crate::error::Result;
use crate::obs::{OpStats, SAMPLE_EVERY};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// What an operator carries to report into the pipeline it runs in. It
/// attaches to the [`PipelineContext`] once, at the operator's first poll;
/// off, it costs one branch per element.
#[derive(Debug, Default)]
pub struct Probe {
    attached: bool,
    stats: Option<std::sync::Arc<OpStats>>,
    pending_since: Option<Instant>,
    tick: u32,
    // Counted locally and published in bunches: an atomic add per element
    // would cost more than many operators' own work.
    local_in: u32,
    local_out: u32,
}

/// Elements counted locally before they are published to the shared counters.
const PUBLISH_EVERY: u32 = 64;

impl Probe {
    /// Attaches a stateless operator to the current pipeline context on the
    /// first call; the stats when per-operator tracking is on.
    #[inline]
    pub fn attach(
        &mut self,
        name: &'static str,
        parallelism: usize,
        capacity: Option<u64>,
    ) -> Option<&OpStats> {
        if !self.attached {
            // A stateless operator's registration cannot fail.
            let _ = self.join(name, parallelism, capacity, || CutRole::Stateless);
        }
        self.stats.as_deref()
    }

    /// Attaches an operator to the current pipeline context on the first
    /// call, with its part in checkpoint cuts (`cut` is called only in a
    /// checkpointed pipeline); `Ok(Some(_))` the first time only, and only
    /// in a checkpointed pipeline where the operator is on the board. An
    /// error (the checkpoint was written by another pipeline) is returned
    /// once, by the first call.
    #[inline]
    pub fn join(
        &mut self,
        name: &'static str,
        parallelism: usize,
        capacity: Option<u64>,
        cut: impl FnOnce() -> CutRole,
    ) -> Result<Option<Joined>> {
        if self.attached {
            return Ok(None);
        }
        self.attached = true;
        let Some(ctx) = PipelineContext::current() else {
            return Ok(None);
        };
        let a = ctx.register(name, parallelism, capacity, cut)?;
        self.stats = a.stats;
        if let Some(s) = &self.stats {
            let _ = s.started.set(Instant::now());
        }
        Ok(a.joined)
    }

    /// Whether the operator has attached (it was polled).
    pub fn attached(&self) -> bool {
        self.attached
    }

    /// The stats, if attached and on.
    #[inline]
    pub fn stats(&self) -> Option<&OpStats> {
        self.stats.as_deref()
    }

    /// A shared handle to the stats (for work done on other threads).
    pub fn shared(&self) -> Option<std::sync::Arc<OpStats>> {
        self.stats.clone()
    }

    /// The input was pending and the operator had nothing else to do.
    #[inline]
    pub fn input_pending(&mut self) {
        if self.stats.is_some() {
            self.publish();
            if self.pending_since.is_none() {
                self.pending_since = Some(Instant::now());
            }
        }
    }

    /// An input element arrived.
    #[inline]
    pub fn input(&mut self) {
        if self.stats.is_some() {
            self.local_in += 1;
            self.arrived();
            if self.local_in >= PUBLISH_EVERY {
                self.publish();
            }
        }
    }

    /// Ends a wait for input (see [`input_pending`](Probe::input_pending))
    /// without counting an element: for operators that count their input
    /// in bunches with [`input_n`](Probe::input_n).
    #[inline]
    pub fn arrived(&mut self) {
        if self.pending_since.is_some() {
            self.end_wait();
        }
    }

    #[cold]
    fn end_wait(&mut self) {
        if let (Some(t), Some(s)) = (self.pending_since.take(), &self.stats) {
            s.wait_input_ns.add(t.elapsed().as_nanos() as u64);
        }
    }

    /// Counts `n` elements in at once (a read group, a finished batch), so
    /// a cheap operator pays nothing per element. Does not end a wait: call
    /// [`arrived`](Probe::arrived) when an element arrives.
    #[inline]
    pub fn input_n(&mut self, n: usize) {
        if self.stats.is_some() {
            self.local_in = self.local_in.saturating_add(n as u32);
            if self.local_in >= PUBLISH_EVERY {
                self.publish();
            }
        }
    }

    /// Counts `n` elements out at once.
    #[inline]
    pub fn output_n(&mut self, n: usize) {
        if self.stats.is_some() {
            self.local_out = self.local_out.saturating_add(n as u32);
            if self.local_out >= PUBLISH_EVERY {
                self.publish();
            }
        }
    }

    /// An output element left.
    #[inline]
    pub fn output(&mut self) {
        if self.stats.is_some() {
            self.local_out += 1;
            if self.local_out >= PUBLISH_EVERY {
                self.publish();
            }
        }
    }

    /// The stream ended: publish what is counted locally.
    #[inline]
    pub fn finish(&mut self) {
        self.publish();
    }

    /// Publishes the locally counted elements to the shared counters.
    pub fn publish(&mut self) {
        if let Some(s) = &self.stats {
            if self.local_in > 0 {
                s.elements_in.add(self.local_in as u64);
                self.local_in = 0;
            }
            if self.local_out > 0 {
                s.elements_out.add(self.local_out as u64);
                self.local_out = 0;
            }
        }
    }

    /// Whether to time this element (one in [`SAMPLE_EVERY`]).
    #[inline]
    pub fn sample(&mut self) -> Option<Instant> {
        self.stats.as_ref()?;
        self.tick = self.tick.wrapping_add(1);
        self.tick.is_multiple_of(SAMPLE_EVERY).then(Instant::now)
    }

    /// Ends a sample taken over one unit of work that handles `elements`
    /// elements (a whole batch): the time is spread over them.
    #[inline]
    pub fn sampled_as(&self, start: Option<Instant>, elements: u64) {
        if let (Some(s), Some(t)) = (&self.stats, start) {
            let n = t.elapsed().as_nanos() as u64;
            s.busy.record_many(
                n * SAMPLE_EVERY as u64,
                SAMPLE_EVERY as u64 * elements.max(1),
            );
        }
    }

    /// Records a sampled element's own work, scaled to stand for the elements not timed.
    #[inline]
    pub fn sampled(&self, start: Option<Instant>) {
        if let (Some(s), Some(t)) = (&self.stats, start) {
            let n = t.elapsed().as_nanos() as u64;
            s.busy
                .record_many(n * SAMPLE_EVERY as u64, SAMPLE_EVERY as u64);
        }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.publish();
        if let Some(s) = &self.stats {
            s.live.fetch_sub(1, Ordering::AcqRel);
        }
    }
}
