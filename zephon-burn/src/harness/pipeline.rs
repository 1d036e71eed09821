//! Stall attribution: which pipeline operator the data time of a step
//! belongs to, from the pipeline's own per-operator observability.

use super::summary::Summary;
use serde::{Deserialize, Serialize};
use zephon_core::Observer;
use zephon_core::metrics::{Limiter, OperatorMetrics};

/// One operator's part of the pipeline's work.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OperatorShare {
    /// Operator name (`fetch`, `map_par`, `batch`, ...).
    pub name: String,
    /// Position in the pipeline, from the source (0).
    pub position: usize,
    /// Workers or requests in flight it may use.
    pub parallelism: usize,
    /// Seconds of its own work, summed over its workers and over the epochs.
    pub busy_s: f64,
    /// How saturated it was (busy time over elapsed time x parallelism), in
    /// the epoch the bottleneck report looked at.
    pub busy_ratio: f64,
    /// Its share of the pipeline's busy time (0 to 1); the shares of all
    /// operators sum to 1.
    pub share: f64,
    /// The mean data time of a step charged to it: `share` x the mean `data` ms.
    pub data_ms: f64,
}

/// Where the fetch operator's time went, from the fetch timing snapshot.
/// These are parts of fetch's own busy time, not extra to it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FetchWaits {
    /// Seconds opening shards (downloading remote ones).
    pub open_s: f64,
    /// Seconds reading and parsing samples.
    pub read_s: f64,
    /// Seconds of storage downloads, over all storages.
    pub download_s: f64,
    /// `open_s` over the pipeline's busy time (0 to 1).
    pub open_share: f64,
    /// `read_s` over the pipeline's busy time (0 to 1).
    pub read_share: f64,
}

/// The data time of a step, split by pipeline operator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PipelineBreakdown {
    /// The tracking level the pipeline ran with.
    pub tracking: String,
    /// Share of the step spent on data (0 to 1), as in the summary.
    pub data_share_of_step: f64,
    /// Mean `data` time of a measured step, ms.
    pub data_mean_ms: f64,
    /// Cores the bottleneck report reasoned with.
    pub cores: usize,
    /// Operators, from the source, with their shares.
    pub operators: Vec<OperatorShare>,
    /// Opening versus reading inside fetch, where the pipeline fetches.
    pub fetch: Option<FetchWaits>,
    /// The operator the bottleneck report names (`consumer` when the
    /// pipeline keeps up, `unknown` when it cannot tell).
    pub bottleneck: String,
    /// The bottleneck report's verdict.
    pub verdict: String,
    /// The bottleneck report's advice, one setting at a time.
    pub advice: Vec<String>,
    /// One sentence: the data share, the operator it belongs to, the knob.
    pub line: String,
}

impl PipelineBreakdown {
    /// Splits the data time of `summary` by the operators `observers` saw
    /// (one observer per epoch). Busy times are summed over the epochs; the
    /// verdict and advice come from the last epoch's
    /// [`bottleneck_report`](Observer::bottleneck_report), which is past
    /// start-up. `None` when no observer tracked operators.
    pub fn of(observers: &[Observer], summary: &Summary) -> Option<PipelineBreakdown> {
        let last = observers.last()?;
        let mut ops: Vec<OperatorMetrics> = Vec::new();
        let mut fetch = FetchWaits::default();
        let mut fetched = false;
        for obs in observers {
            for o in obs.metrics_snapshot().operators {
                match ops
                    .iter_mut()
                    .find(|a| a.position == o.position && a.name == o.name)
                {
                    Some(a) => a.busy_s += o.busy_s,
                    None => ops.push(o),
                }
            }
            let f = obs.fetch_timing_snapshot();
            fetched |= f.totals.groups > 0;
            fetch.open_s += f.totals.open_s;
            fetch.read_s += f.totals.read_s;
            fetch.download_s += f.storage.iter().map(|(_, io)| io.download_s).sum::<f64>();
        }
        if ops.is_empty() {
            return None;
        }
        let last_ops = last.metrics_snapshot().operators;
        let report = last.bottleneck_report();
        let total_busy: f64 = ops.iter().map(|o| o.busy_s).sum();
        let frac = |x: f64| {
            if total_busy > 0.0 {
                (x / total_busy).clamp(0.0, 1.0)
            } else {
                0.0
            }
        };
        let data_mean_ms = summary.data.mean_ms;
        let operators: Vec<OperatorShare> = ops
            .iter()
            .map(|o| OperatorShare {
                name: o.name.clone(),
                position: o.position,
                parallelism: o.parallelism,
                busy_s: o.busy_s,
                busy_ratio: last_ops
                    .iter()
                    .find(|l| l.position == o.position)
                    .map_or(o.busy_ratio, |l| l.busy_ratio),
                share: frac(o.busy_s),
                data_ms: frac(o.busy_s) * data_mean_ms,
            })
            .collect();
        if fetched {
            fetch.open_share = frac(fetch.open_s);
            fetch.read_share = frac(fetch.read_s);
        }
        let largest = operators.iter().max_by(|a, b| a.share.total_cmp(&b.share));
        // The report's limiter decides which operator the sentence names, so
        // the advice that follows is about that operator; the largest share
        // stands in when the report names none.
        let (bottleneck, named) = match &report.limiter {
            Limiter::Operator { name, position } => (
                name.clone(),
                operators.iter().find(|o| o.position == *position),
            ),
            Limiter::Fetch => (
                "fetch".to_string(),
                operators.iter().find(|o| o.name == "fetch"),
            ),
            Limiter::Consumer => ("consumer".to_string(), largest),
            Limiter::Unknown => ("unknown".to_string(), largest),
        };
        let cores = zephon_core::runner::num_cpus();
        let mut line = format!(
            "data is {:.1}% of the step",
            100.0 * summary.data_stall_fraction
        );
        if let Some(o) = named {
            line.push_str(&format!(
                "; `{}` is {:.1}% of the pipeline's busy time at parallelism {} on {} cores",
                o.name,
                100.0 * o.share,
                o.parallelism,
                cores
            ));
        }
        if let Some(a) = report.advice.first() {
            line.push_str(": ");
            line.push_str(a);
        }
        Some(PipelineBreakdown {
            tracking: format!("{:?}", last.tracking()).to_lowercase(),
            data_share_of_step: summary.data_stall_fraction,
            data_mean_ms,
            cores,
            operators,
            fetch: fetched.then_some(fetch),
            bottleneck,
            verdict: report.summary,
            advice: report.advice,
            line,
        })
    }

    /// The operator with the largest share of the pipeline's busy time.
    pub fn largest(&self) -> Option<&OperatorShare> {
        self.operators
            .iter()
            .max_by(|a, b| a.share.total_cmp(&b.share))
    }
}
