//! Live per-operator counters.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;
use zephon_metrics::{Counter, DurationCounter, MaxGauge, OperatorMetrics};

/// Sync operators time one element in this many: the work per element is
/// often cheaper than reading the clock twice.
pub const SAMPLE_EVERY: u32 = 64;

/// Live counters of one operator.
#[derive(Debug)]
pub struct OpStats {
    /// Operator name.
    pub name: &'static str,
    /// Its parallelism when it was registered (see
    /// [`parallelism_now`](OpStats::parallelism_now) for a tuned one's).
    pub parallelism: usize,
    /// Its parallelism now: a tuned operator's moves with its knob.
    current: AtomicUsize,
    /// Its queue capacity, if any.
    pub capacity: Option<u64>,
    /// Elements consumed.
    pub elements_in: Counter,
    /// Elements produced.
    pub elements_out: Counter,
    /// Payload bytes consumed.
    pub bytes_in: Counter,
    /// Payload bytes produced.
    pub bytes_out: Counter,
    /// Own work time (per element where measured per element).
    pub busy: DurationCounter,
    /// Nanoseconds spent with nothing to do, input pending.
    pub wait_input_ns: Counter,
    /// Nanoseconds finished output waited for the next stage.
    pub blocked_output_ns: Counter,
    /// Deepest internal queue.
    pub max_queue: MaxGauge,
    // Set by the probe that first attaches (in the context layer).
    pub(crate) started: OnceLock<Instant>,
    registered: AtomicU64,
    ticks: AtomicU64,
    /// Probes reporting into these counters now: counters nobody reports
    /// into any more are taken over by the next operator of the same name
    /// and settings (a `flat_map`'s inner streams, one after the other).
    pub(crate) live: AtomicU32,
}

impl OpStats {
    pub(crate) fn new(
        name: &'static str,
        parallelism: usize,
        capacity: Option<u64>,
        seq: u64,
    ) -> Self {
        OpStats {
            name,
            parallelism,
            current: AtomicUsize::new(parallelism),
            capacity,
            elements_in: Counter::default(),
            elements_out: Counter::default(),
            bytes_in: Counter::default(),
            bytes_out: Counter::default(),
            busy: DurationCounter::default(),
            wait_input_ns: Counter::default(),
            blocked_output_ns: Counter::default(),
            max_queue: MaxGauge::default(),
            started: OnceLock::new(),
            registered: AtomicU64::new(seq),
            ticks: AtomicU64::new(0),
            live: AtomicU32::new(1),
        }
    }

    /// Its parallelism now.
    pub fn parallelism_now(&self) -> usize {
        self.current.load(Ordering::Relaxed)
    }

    /// Records a change of its parallelism while it runs (a tuned
    /// operator's knob moved), so snapshots give the workers it has now
    /// and its busy share of them.
    pub fn set_parallelism(&self, k: usize) {
        self.current.store(k, Ordering::Relaxed);
    }

    /// A shared counter for sampling decisions made on worker threads.
    pub fn tick(&self) -> u64 {
        self.ticks.fetch_add(1, Ordering::Relaxed)
    }

    /// Takes over these counters for one more probe if no probe reports
    /// into them now and they describe an operator `name` with these
    /// settings.
    pub(crate) fn take_over(&self, name: &str, parallelism: usize, capacity: Option<u64>) -> bool {
        self.name == name
            && self.parallelism == parallelism
            && self.capacity == capacity
            && self
                .live
                .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    pub(crate) fn seq(&self) -> u64 {
        self.registered.load(Ordering::Relaxed)
    }

    pub(crate) fn snapshot(&self, position: usize) -> OperatorMetrics {
        let busy = self.busy.stats();
        let elapsed = self
            .started
            .get()
            .map_or(0.0, |t| t.elapsed().as_secs_f64());
        let wait = self.wait_input_ns.get() as f64 / 1e9;
        let parallelism = self.parallelism_now();
        OperatorMetrics {
            position,
            name: self.name.to_owned(),
            parallelism,
            elements_in: self.elements_in.get(),
            elements_out: self.elements_out.get(),
            bytes_in: self.bytes_in.get(),
            bytes_out: self.bytes_out.get(),
            busy_s: busy.total_s,
            wait_input_s: wait,
            blocked_output_s: self.blocked_output_ns.get() as f64 / 1e9,
            min_element_s: busy.min_s,
            avg_element_s: busy.avg_s,
            max_element_s: busy.max_s,
            max_queue_depth: self.max_queue.get(),
            queue_capacity: self.capacity,
            wait_ratio: if elapsed > 0.0 {
                (wait / elapsed).min(1.0)
            } else {
                0.0
            },
            busy_ratio: if elapsed > 0.0 {
                (busy.total_s / (elapsed * parallelism.max(1) as f64)).min(1.0)
            } else {
                0.0
            },
        }
    }
}
