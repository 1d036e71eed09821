//! A Chrome trace (JSON) of the per-batch phases, for Perfetto or
//! `chrome://tracing`.

use super::timer::{BatchTiming, Phase};
use crate::error::{Error, Result};
use serde_json::{Value, json};
use std::path::Path;

/// Writes the phases of every batch as complete (`"ph": "X"`) events: one
/// `step N` event per batch with its four phases nested inside, on one track.
/// Steps follow each other without gaps, as they were measured.
///
/// ```
/// use zephon_burn::harness::{write_chrome_trace, BatchTiming};
/// let t = BatchTiming { epoch: 0, batch: 0, step: 0, warmup: false, samples: 4, data: 0.001,
///     forward: 0.002, backward: 0.003, other: 0.001, total: 0.007, loss: 1.0, skipped: false };
/// let path = std::env::temp_dir().join("zephon-doc-trace.json");
/// write_chrome_trace(&[t], &path).unwrap();
/// let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
/// assert_eq!(v["traceEvents"].as_array().unwrap().len(), 6); // metadata + step + 4 phases
/// ```
pub fn write_chrome_trace(timings: &[BatchTiming], path: &Path) -> Result<()> {
    let mut events: Vec<Value> = vec![json!({
        "name": "thread_name", "ph": "M", "pid": 1, "tid": 1,
        "args": { "name": "training step" }
    })];
    let mut ts = 0.0f64;
    for t in timings {
        events.push(json!({
            "name": format!("step {}", t.step),
            "cat": if t.warmup { "warmup" } else { "step" },
            "ph": "X", "pid": 1, "tid": 1,
            "ts": ts, "dur": t.total * 1e6,
            "args": { "epoch": t.epoch, "batch": t.batch, "samples": t.samples,
                      "loss": t.loss, "skipped": t.skipped }
        }));
        let mut start = ts;
        for phase in Phase::ALL {
            let dur = t.get(phase) * 1e6;
            events.push(json!({
                "name": phase.name(), "cat": "phase", "ph": "X", "pid": 1, "tid": 1,
                "ts": start, "dur": dur
            }));
            start += dur;
        }
        ts += t.total * 1e6;
    }
    let doc = json!({ "traceEvents": events, "displayTimeUnit": "ms" });
    let text = serde_json::to_string(&doc).map_err(|e| Error::output(path, e))?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| Error::output(parent, e))?;
    }
    // Written beside its name and renamed: a failed write (a full disk)
    // leaves the trace that was there, and nothing half-written.
    zephon_core::output::write_atomic(path, text.as_bytes()).map_err(|e| Error::output(path, e))
}
