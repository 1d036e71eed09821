//! Per-batch timings and their summary statistics.

use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// The parts a training step is split into, in the order they happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Waiting for the batch and moving it to the device.
    Data,
    /// The forward pass, up to the loss.
    Forward,
    /// The backward pass.
    Backward,
    /// Optimizer step, loss-scaler update and everything else until the next
    /// batch is asked for.
    Other,
}

impl Phase {
    /// All phases, in step order.
    pub const ALL: [Phase; 4] = [Phase::Data, Phase::Forward, Phase::Backward, Phase::Other];

    /// The lower-case name (`data`, `forward`, `backward`, `other`).
    pub fn name(self) -> &'static str {
        match self {
            Phase::Data => "data",
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Other => "other",
        }
    }

    /// What to look at when this phase takes the largest share of a step.
    pub fn advice(self) -> &'static str {
        match self {
            Phase::Data => {
                "data loading is the bottleneck: raise map_par/fetch parallelism and prefetch depths, \
                 cache shards locally, pre-tokenize"
            }
            Phase::Forward => {
                "the forward pass dominates: consider architecture changes or mixed precision \
                 (--precision 16-mixed or bf16)"
            }
            Phase::Backward => {
                "the backward pass dominates: try gradient accumulation or mixed precision \
                 (--precision 16-mixed or bf16)"
            }
            Phase::Other => {
                "optimizer and other per-step work dominate: try another optimizer (AdamW with \
                 hyperparameters from related work is a good start) and avoid per-step host syncs"
            }
        }
    }
}

/// The timing of one batch, in seconds. `data + forward + backward + other
/// == total`: the parts are measured between consecutive timestamps, each
/// taken after a device synchronisation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchTiming {
    /// Epoch, from 0.
    pub epoch: usize,
    /// Batch within the epoch, from 0.
    pub batch: usize,
    /// Batch over the whole run, from 0.
    pub step: usize,
    /// Whether this batch is a warm-up batch (kept out of the summary).
    pub warmup: bool,
    /// Samples in the batch.
    pub samples: usize,
    /// Seconds waiting for the batch and moving it to the device.
    pub data: f64,
    /// Seconds in the forward pass.
    pub forward: f64,
    /// Seconds in the backward pass.
    pub backward: f64,
    /// Seconds in the optimizer step and the rest.
    pub other: f64,
    /// Seconds for the whole step.
    pub total: f64,
    /// The (unscaled) loss.
    pub loss: f32,
    /// Whether the optimizer step was skipped (loss-scaler overflow).
    pub skipped: bool,
}

impl BatchTiming {
    /// The seconds spent in `phase`.
    pub fn get(&self, phase: Phase) -> f64 {
        match phase {
            Phase::Data => self.data,
            Phase::Forward => self.forward,
            Phase::Backward => self.backward,
            Phase::Other => self.other,
        }
    }
}

/// Takes the boundary timestamps of one step. Each mark is meant to be taken
/// right after `Device::sync`, so asynchronous work lands in the phase that
/// queued it.
#[derive(Debug)]
pub(crate) struct StepClock {
    marks: [Instant; 5],
    next: usize,
}

impl StepClock {
    /// Starts a step at `start` (the end of the previous one, so no time falls
    /// between two steps).
    pub(crate) fn starting_at(start: Instant) -> Self {
        StepClock {
            marks: [start; 5],
            next: 1,
        }
    }

    /// Closes the current phase now.
    pub(crate) fn mark(&mut self) -> Instant {
        let now = Instant::now();
        self.marks[self.next.min(4)] = now;
        self.next += 1;
        now
    }

    /// The durations of data, forward, backward, other, and the total.
    pub(crate) fn parts(&self) -> [Duration; 5] {
        let m = &self.marks;
        [
            m[1] - m[0],
            m[2] - m[1],
            m[3] - m[2],
            m[4] - m[3],
            m[4] - m[0],
        ]
    }
}

/// Summary statistics of one part, in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Mean.
    pub mean_ms: f64,
    /// Median.
    pub median_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// Minimum.
    pub min_ms: f64,
    /// Maximum.
    pub max_ms: f64,
    /// Standard deviation (population).
    pub std_ms: f64,
    /// Share of the mean total step time, in percent.
    pub share_pct: f64,
}

impl Stats {
    /// Statistics of `seconds`; `share_pct` is left at 0 for the caller.
    ///
    /// ```
    /// let s = zephon_burn::harness::Stats::of(&[0.001, 0.002, 0.003]);
    /// assert!((s.mean_ms - 2.0).abs() < 1e-9 && (s.median_ms - 2.0).abs() < 1e-9);
    /// ```
    pub fn of(seconds: &[f64]) -> Stats {
        if seconds.is_empty() {
            return Stats::default();
        }
        let mut v: Vec<f64> = seconds.iter().map(|s| s * 1e3).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        Stats {
            mean_ms: mean,
            median_ms: percentile(&v, 50.0),
            p95_ms: percentile(&v, 95.0),
            min_ms: v[0],
            max_ms: v[v.len() - 1],
            std_ms: var.sqrt(),
            share_pct: 0.0,
        }
    }
}

/// Linear interpolation between closest ranks, as NumPy's default does.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = p / 100.0 * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate() {
        let v: Vec<f64> = (1..=101).map(|x| x as f64).collect();
        assert_eq!(percentile(&v, 50.0), 51.0);
        assert_eq!(percentile(&v, 95.0), 96.0);
        assert_eq!(percentile(&[3.0], 95.0), 3.0);
    }

    #[test]
    fn clock_parts_add_up() {
        let mut c = StepClock::starting_at(Instant::now());
        for _ in 0..4 {
            c.mark();
        }
        let p = c.parts();
        assert_eq!(p[0] + p[1] + p[2] + p[3], p[4]);
    }
}
