//! The summary of a run: statistics per part, throughput, the bottleneck.

use super::timer::{BatchTiming, Phase, Stats};
use serde::{Deserialize, Serialize};

/// Statistics of the measured (non-warm-up) batches of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Batches in the summary.
    pub batches: usize,
    /// Warm-up batches left out of it.
    pub warmup_batches: usize,
    /// Samples per second over the measured batches.
    pub samples_per_second: f64,
    /// Share of step time spent waiting for data (0 to 1): above a few
    /// percent, the accelerator idles for the loader.
    pub data_stall_fraction: f64,
    /// `data`.
    pub data: Stats,
    /// `forward`.
    pub forward: Stats,
    /// `backward`.
    pub backward: Stats,
    /// `other`.
    pub other: Stats,
    /// The whole step.
    pub total: Stats,
    /// The part with the largest mean share.
    pub bottleneck: Option<Phase>,
}

impl Summary {
    /// Summarises the non-warm-up entries of `timings`.
    pub fn of(timings: &[BatchTiming]) -> Summary {
        let measured: Vec<&BatchTiming> = timings.iter().filter(|t| !t.warmup).collect();
        let column =
            |f: &dyn Fn(&BatchTiming) -> f64| measured.iter().map(|t| f(t)).collect::<Vec<f64>>();
        let total_s: f64 = measured.iter().map(|t| t.total).sum();
        let samples: usize = measured.iter().map(|t| t.samples).sum();
        let mut s = Summary {
            batches: measured.len(),
            warmup_batches: timings.len() - measured.len(),
            samples_per_second: if total_s > 0.0 {
                samples as f64 / total_s
            } else {
                0.0
            },
            data_stall_fraction: 0.0,
            data: Stats::of(&column(&|t| t.data)),
            forward: Stats::of(&column(&|t| t.forward)),
            backward: Stats::of(&column(&|t| t.backward)),
            other: Stats::of(&column(&|t| t.other)),
            total: Stats::of(&column(&|t| t.total)),
            bottleneck: None,
        };
        let mean_total = s.total.mean_ms;
        if mean_total > 0.0 {
            for phase in Phase::ALL {
                let st = s.get_mut(phase);
                st.share_pct = 100.0 * st.mean_ms / mean_total;
            }
            s.total.share_pct = 100.0;
            s.data_stall_fraction = s.data.mean_ms / mean_total;
            s.bottleneck = Phase::ALL
                .into_iter()
                .max_by(|a, b| s.get(*a).share_pct.total_cmp(&s.get(*b).share_pct));
        }
        s
    }

    /// The statistics of `phase`.
    pub fn get(&self, phase: Phase) -> &Stats {
        match phase {
            Phase::Data => &self.data,
            Phase::Forward => &self.forward,
            Phase::Backward => &self.backward,
            Phase::Other => &self.other,
        }
    }

    fn get_mut(&mut self, phase: Phase) -> &mut Stats {
        match phase {
            Phase::Data => &mut self.data,
            Phase::Forward => &mut self.forward,
            Phase::Backward => &mut self.backward,
            Phase::Other => &mut self.other,
        }
    }

    /// The advice that fits the bottleneck.
    pub fn advice(&self) -> Option<&'static str> {
        self.bottleneck.map(Phase::advice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(step: usize, warmup: bool, parts: [f64; 4]) -> BatchTiming {
        BatchTiming {
            epoch: 0,
            batch: step,
            step,
            warmup,
            samples: 10,
            data: parts[0],
            forward: parts[1],
            backward: parts[2],
            other: parts[3],
            total: parts.iter().sum(),
            loss: 0.0,
            skipped: false,
        }
    }

    #[test]
    fn warmup_is_left_out_and_the_largest_share_wins() {
        let timings = vec![
            t(0, true, [9.0, 9.0, 9.0, 9.0]),
            t(1, false, [0.1, 0.2, 0.6, 0.1]),
            t(2, false, [0.1, 0.2, 0.6, 0.1]),
        ];
        let s = Summary::of(&timings);
        assert_eq!((s.batches, s.warmup_batches), (2, 1));
        assert_eq!(s.bottleneck, Some(Phase::Backward));
        assert!((s.backward.share_pct - 60.0).abs() < 1e-6);
        assert!((s.data_stall_fraction - 0.1).abs() < 1e-9);
        assert!((s.samples_per_second - 10.0).abs() < 1e-9);
        assert!(s.advice().unwrap().contains("gradient accumulation"));
    }
}
