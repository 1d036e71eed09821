//! What a mixture schedule handed out: per phase, each dataset's samples
//! beside its target share.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Per phase of a mixture schedule, the samples a work source handed out of
/// each dataset beside the phase's target share (zephon-core's
/// `WorkSource::phase_shares`, and the `schedule` of a
/// [`MetricsSnapshot`](crate::MetricsSnapshot)).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseShares {
    /// What the schedule's positions count: `samples`, `global_batches`
    /// or `tokens`.
    pub unit: String,
    /// Samples per global batch, for a schedule by global batches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_batch: Option<u64>,
    /// Every phase, in order.
    pub phases: Vec<PhaseShare>,
    /// The phase of the last pointer handed out (`None` before the first).
    pub current: Option<usize>,
}

/// One phase's figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseShare {
    /// The phase's first position: a global index (the samples before it,
    /// all ranks together) or, for a schedule by tokens, a token position.
    pub start: u64,
    /// Every dataset of the work source, in catalog order.
    pub datasets: Vec<DatasetShare>,
}

/// One dataset in one phase.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DatasetShare {
    /// The dataset's name.
    pub name: String,
    /// Its target share of the phase's samples (0: out of the phase).
    pub target: f64,
    /// Samples of it handed out in the phase.
    pub handed_out: u64,
}

impl PhaseShare {
    /// Samples handed out in the phase, every dataset together.
    pub fn handed_out(&self) -> u64 {
        self.datasets.iter().map(|d| d.handed_out).sum()
    }

    /// Each dataset's share of the samples handed out in the phase (all 0
    /// before the phase begins).
    pub fn shares(&self) -> Vec<f64> {
        let total = self.handed_out();
        self.datasets
            .iter()
            .map(|d| match total {
                0 => 0.0,
                t => d.handed_out as f64 / t as f64,
            })
            .collect()
    }
}

impl fmt::Display for PhaseShares {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = |start: u64| match (self.unit.as_str(), self.global_batch) {
            ("global_batches", Some(size)) => format!("global batch {}", start / size.max(1)),
            ("tokens", _) => format!("token {start}"),
            _ => format!("sample {start}"),
        };
        match self.current {
            Some(c) => writeln!(
                f,
                "schedule: the work source is in phase {} of {} (from {}; the samples handed out include those still in the queues)",
                c + 1,
                self.phases.len(),
                at(self.phases[c].start)
            )?,
            None => writeln!(f, "schedule: {} phases, none begun", self.phases.len())?,
        }
        // A linear schedule has one phase per step: the begun ones are
        // listed, the first and last few when there are many.
        let begun: Vec<(usize, &PhaseShare)> = self
            .phases
            .iter()
            .enumerate()
            .filter(|(_, p)| p.handed_out() > 0)
            .collect();
        const SHOWN: usize = 8;
        for (k, (i, p)) in begun.iter().enumerate() {
            if begun.len() > SHOWN && k == SHOWN / 2 {
                writeln!(f, "  ... {} more phases", begun.len() - SHOWN)?;
            }
            if begun.len() > SHOWN && k >= SHOWN / 2 && k < begun.len() - SHOWN / 2 {
                continue;
            }
            let shares = p.shares();
            let parts: Vec<String> = p
                .datasets
                .iter()
                .zip(shares)
                .filter(|(d, _)| d.target > 0.0 || d.handed_out > 0)
                .map(|(d, s)| {
                    format!(
                        "{} {:.1}% (target {:.1}%)",
                        d.name,
                        100.0 * s,
                        100.0 * d.target
                    )
                })
                .collect();
            writeln!(
                f,
                "  phase {} from {}: {} samples handed out; {}",
                i + 1,
                at(p.start),
                p.handed_out(),
                parts.join(", ")
            )?;
        }
        Ok(())
    }
}
