//! The bottleneck report: which stage limits throughput, the evidence, and
//! what to change (following the pipeline tuning guide).

use crate::snapshot::{
    FetchTimingSnapshot, MetricsSnapshot, OperatorMetrics, PrefetchTimingSnapshot,
};
use serde::{Deserialize, Serialize};

/// Below this share of its time waiting for data, the consumer is the bottleneck.
pub const CONSUMER_WAIT_THRESHOLD: f64 = 0.05;
/// Above this busy ratio an operator counts as saturated.
pub const SATURATED: f64 = 0.8;

/// What limits throughput.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Limiter {
    /// The consumer (the training loop): the pipeline keeps up.
    Consumer,
    /// Reading samples: downloads, opens, reads.
    Fetch,
    /// An operator's own work.
    Operator {
        /// Its name.
        name: String,
        /// Its position from the source.
        position: usize,
    },
    /// Not enough has run to tell.
    Unknown,
}

/// The verdict, with the numbers behind it and the advice that fits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BottleneckReport {
    /// What limits throughput.
    pub limiter: Limiter,
    /// One sentence.
    pub summary: String,
    /// The measurements that point there.
    pub evidence: Vec<String>,
    /// What to change, one setting at a time.
    pub advice: Vec<String>,
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// Names the stage that limits throughput. `cores` is the machine's core count.
pub fn analyze(
    m: &MetricsSnapshot,
    fetch: Option<&FetchTimingSnapshot>,
    prefetch: Option<&PrefetchTimingSnapshot>,
    cores: usize,
) -> BottleneckReport {
    let s = &m.startup;
    let consumer_total = s.consumer_wait_s + s.consumer_busy_s;
    if s.batches < 2 || consumer_total <= 0.0 {
        return BottleneckReport {
            limiter: Limiter::Unknown,
            summary: "not enough batches delivered yet to tell".into(),
            evidence: vec![format!("{} batches delivered", s.batches)],
            advice: vec!["run longer with observability on, with representative data".into()],
        };
    }
    let wait_share = s.consumer_wait_s / consumer_total;
    let mut evidence = vec![format!(
        "the consumer waited for data {} of its time ({:.3} s waiting, {:.3} s in its own work)",
        pct(wait_share),
        s.consumer_wait_s,
        s.consumer_busy_s
    )];
    if let Some(t) = s.time_to_first_batch_s {
        evidence.push(format!(
            "start-up: first batch after {:.3} s; steady state: p50 interval {:.2} ms, p99 {:.2} ms",
            t,
            s.interval_p50_s * 1e3,
            s.interval_p99_s * 1e3
        ));
    }
    if wait_share < CONSUMER_WAIT_THRESHOLD {
        return BottleneckReport {
            limiter: Limiter::Consumer,
            summary: "the pipeline is not the bottleneck: the consumer almost never waits for data".into(),
            evidence,
            advice: vec![
                "keep the current settings; more parallelism or prefetch would use more resources without raising throughput".into(),
                "if the training step itself is slow, time the model step (data, forward, backward, other)".into(),
            ],
        };
    }
    let top = m
        .operators
        .iter()
        .filter(|o| o.busy_s > 0.0)
        .max_by(|a, b| a.busy_ratio.total_cmp(&b.busy_ratio));
    for o in &m.operators {
        if o.busy_s > 0.0 {
            evidence.push(format!(
                "{} (parallelism {}): busy {}, waiting for input {}, {:.1} us per element",
                o.name,
                o.parallelism,
                pct(o.busy_ratio),
                pct(o.wait_ratio),
                o.avg_element_s * 1e6
            ));
        }
    }
    let Some(top) = top else {
        return BottleneckReport {
            limiter: Limiter::Unknown,
            summary: "the consumer waits, but no operator reported its busy time (enable per-operator tracking)".into(),
            evidence,
            advice: vec!["enable observability with per-operator tracking".into()],
        };
    };
    // Fetch's own report only when it is saturated: one busy 8% of its
    // capacity does not limit anything, and "raise fetch parallelism"
    // contradicted its own figure.
    if (top.name == "fetch" || top.name == "prefetch") && top.busy_ratio >= SATURATED {
        return fetch_report(top, fetch, prefetch, evidence);
    }
    let mut advice = Vec::new();
    if top.parallelism <= 1 && top.busy_ratio >= SATURATED {
        advice.push(format!(
            "`{}` is sequential and saturated: make its per-element work cheaper, or move CPU work before it into a parallel operator",
            top.name
        ));
    } else if top.busy_ratio >= SATURATED {
        if top.parallelism < cores {
            advice.push(format!(
                "raise `{}` parallelism from {} toward {} (the machine's cores)",
                top.name, top.parallelism, cores
            ));
        } else {
            advice.push(format!(
                "`{}` already uses all {} cores: make its closure cheaper, or move it off the critical path (precompute, pre-tokenize)",
                top.name, cores
            ));
        }
    } else {
        advice.push(format!(
            "no operator is saturated (the busiest, `{}`, is busy {}): the time goes to hand-offs or waits upstream; raise prefetch_batches to absorb hiccups and fetch parallelism if reads are slow",
            top.name,
            pct(top.busy_ratio)
        ));
    }
    BottleneckReport {
        limiter: Limiter::Operator {
            name: top.name.clone(),
            position: top.position,
        },
        summary: format!(
            "`{}` limits throughput (busy {} of its capacity)",
            top.name,
            pct(top.busy_ratio)
        ),
        evidence,
        advice,
    }
}

fn fetch_report(
    top: &OperatorMetrics,
    fetch: Option<&FetchTimingSnapshot>,
    prefetch: Option<&PrefetchTimingSnapshot>,
    mut evidence: Vec<String>,
) -> BottleneckReport {
    let mut advice = Vec::new();
    if let Some(f) = fetch {
        let t = &f.totals;
        evidence.push(format!(
            "fetch: {} groups, {}, {:.3} s opening/downloading, {:.3} s reading",
            t.groups,
            f.cache_summary(),
            t.open_s,
            t.read_s
        ));
        let thrashing = f.storage.iter().any(|(_, s)| s.thrashing);
        if thrashing {
            evidence
                .push("the shard cache evicts and re-downloads the same shards (thrashing)".into());
            advice.push("raise the shard cache's capacity or lower the prefetch buffer: evicted shards are downloaded again".into());
        }
        if t.open_s > t.read_s {
            if prefetch.is_none_or(|p| p.requests == 0) {
                advice.push("downloads dominate: add `.prefetch(buffer_size, parallelism)` ahead of fetch to warm shards before they are read".into());
            } else {
                advice.push("downloads dominate even with prefetch: raise prefetch parallelism or buffer size, or use byte-range reads for uncompressed indexed shards".into());
            }
        } else {
            advice.push(format!(
                "reading and parsing dominate: raise fetch parallelism from {}",
                top.parallelism
            ));
        }
    } else {
        advice.push(format!(
            "raise fetch parallelism from {}, and prefetch shards from remote storage",
            top.parallelism
        ));
    }
    if let Some(p) = prefetch.filter(|p| p.requests > 0) {
        evidence.push(format!(
            "prefetch: {} requests, success rate {}, {:.3} s downloading",
            p.requests,
            pct(p.success_rate),
            p.download_s
        ));
    }
    BottleneckReport {
        limiter: Limiter::Fetch,
        summary: format!(
            "fetch limits throughput (busy {} of its capacity)",
            pct(top.busy_ratio)
        ),
        evidence,
        advice,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::StartupSnapshot;

    fn snap(wait: f64, busy: f64, ops: Vec<OperatorMetrics>) -> MetricsSnapshot {
        MetricsSnapshot {
            tracking: "operator".into(),
            elapsed_s: 10.0,
            operators: ops,
            startup: StartupSnapshot {
                batches: 100,
                consumer_wait_s: wait,
                consumer_busy_s: busy,
                ..Default::default()
            },
            total_wait_ratio: wait / 10.0,
            schedule: None,
        }
    }

    fn op(name: &str, position: usize, parallelism: usize, busy_ratio: f64) -> OperatorMetrics {
        OperatorMetrics {
            name: name.into(),
            position,
            parallelism,
            busy_s: busy_ratio * 10.0 * parallelism as f64,
            busy_ratio,
            ..Default::default()
        }
    }

    #[test]
    fn a_consumer_that_never_waits_is_the_bottleneck() {
        let r = analyze(
            &snap(0.01, 9.0, vec![op("map_par", 1, 4, 0.9)]),
            None,
            None,
            8,
        );
        assert_eq!(r.limiter, Limiter::Consumer);
        assert!(r.summary.contains("not the bottleneck"));
    }

    #[test]
    fn the_busiest_operator_is_named_with_advice() {
        let r = analyze(
            &snap(
                8.0,
                2.0,
                vec![
                    op("fetch", 0, 2, 0.2),
                    op("map_par", 1, 2, 0.95),
                    op("batch", 2, 1, 0.1),
                ],
            ),
            None,
            None,
            8,
        );
        assert_eq!(
            r.limiter,
            Limiter::Operator {
                name: "map_par".into(),
                position: 1
            }
        );
        assert!(r.advice[0].contains("parallelism from 2"), "{:?}", r.advice);
    }

    #[test]
    fn slow_downloads_point_at_prefetch() {
        let fetch = FetchTimingSnapshot {
            totals: ShardFetchStatsBuilder::open_read(5.0, 1.0),
            ..Default::default()
        };
        let r = analyze(
            &snap(8.0, 2.0, vec![op("fetch", 0, 4, 0.9)]),
            Some(&fetch),
            None,
            8,
        );
        assert_eq!(r.limiter, Limiter::Fetch);
        assert!(
            r.advice.iter().any(|a| a.contains("prefetch")),
            "{:?}",
            r.advice
        );
    }

    #[test]
    fn a_fetch_far_from_saturated_is_not_told_to_go_wider() {
        let fetch = FetchTimingSnapshot {
            totals: ShardFetchStatsBuilder::open_read(0.1, 1.0),
            ..Default::default()
        };
        let r = analyze(
            &snap(8.0, 2.0, vec![op("fetch", 0, 64, 0.08)]),
            Some(&fetch),
            None,
            8,
        );
        assert_ne!(r.limiter, Limiter::Fetch);
        assert!(
            r.advice
                .iter()
                .all(|a| !a.contains("raise fetch parallelism from"))
                && r.advice
                    .iter()
                    .any(|a| a.contains("no operator is saturated")),
            "{:?}",
            r.advice
        );
    }

    struct ShardFetchStatsBuilder;
    impl ShardFetchStatsBuilder {
        fn open_read(open: f64, read: f64) -> crate::snapshot::ShardFetchStats {
            crate::snapshot::ShardFetchStats {
                open_s: open,
                read_s: read,
                groups: 10,
                ..Default::default()
            }
        }
    }
}
