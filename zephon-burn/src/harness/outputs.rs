//! The files a run leaves in its save directory, and the printed table.

use super::TimingRun;
use super::pipeline::PipelineBreakdown;
use super::summary::Summary;
use super::timer::{BatchTiming, Phase, Stats};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What `timing_summary.yaml` holds: the run's context and its [`Summary`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SummaryFile {
    /// The model, as the configuration names it.
    pub model: String,
    /// The device it ran on (`cpu`, `cuda`, `wgpu`).
    pub device: String,
    /// The precision (`32`, `16`, `bf16`, `16-mixed`).
    pub precision: String,
    /// Samples per batch (of the first batch).
    pub batch_size: usize,
    /// Epochs run.
    pub epochs: usize,
    /// Optimizer steps skipped on loss-scaler overflow.
    pub skipped_steps: usize,
    /// The loss scale at the end (`16-mixed` only).
    pub final_loss_scale: Option<f32>,
    /// What to do about the largest share.
    pub advice: Option<String>,
    /// The statistics.
    #[serde(flatten)]
    pub summary: Summary,
    /// The data time split by pipeline operator, when the source is a
    /// Zephon pipeline with tracking on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<PipelineBreakdown>,
}

/// Paths of the files [`write_outputs`] wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputFiles {
    /// `timing_summary.yaml`.
    pub summary_yaml: PathBuf,
    /// `timing_results.csv`.
    pub results_csv: PathBuf,
    /// `batch_time_breakdown.png`.
    pub breakdown_png: PathBuf,
    /// `total_batch_time.png`.
    pub total_png: PathBuf,
    /// `time_distribution_pie.png`.
    pub pie_png: PathBuf,
    /// `pipeline_breakdown.png`.
    pub pipeline_png: PathBuf,
    /// `benchmark_config.yaml`.
    pub config_yaml: PathBuf,
}

impl OutputFiles {
    /// All seven paths.
    pub fn all(&self) -> [&Path; 7] {
        [
            &self.summary_yaml,
            &self.results_csv,
            &self.breakdown_png,
            &self.total_png,
            &self.pie_png,
            &self.pipeline_png,
            &self.config_yaml,
        ]
    }
}

/// Writes the seven output files into `dir` (created if missing):
/// `timing_summary.yaml`, `timing_results.csv`, the four plots, and
/// `benchmark_config.yaml` (whatever `resolved_config` serializes to).
pub fn write_outputs(
    dir: &Path,
    run: &TimingRun,
    model: &str,
    device: &str,
    epochs: usize,
    resolved_config: &impl Serialize,
) -> Result<(SummaryFile, OutputFiles)> {
    std::fs::create_dir_all(dir).map_err(|e| Error::output(dir, e))?;
    let files = OutputFiles {
        summary_yaml: dir.join("timing_summary.yaml"),
        results_csv: dir.join("timing_results.csv"),
        breakdown_png: dir.join("batch_time_breakdown.png"),
        total_png: dir.join("total_batch_time.png"),
        pie_png: dir.join("time_distribution_pie.png"),
        pipeline_png: dir.join("pipeline_breakdown.png"),
        config_yaml: dir.join("benchmark_config.yaml"),
    };
    let summary = run.summary();
    let file = SummaryFile {
        model: model.to_string(),
        device: device.to_string(),
        precision: run.precision.name().to_string(),
        batch_size: run.timings.first().map_or(0, |t| t.samples),
        epochs,
        skipped_steps: run.skipped_steps,
        final_loss_scale: run.final_scale,
        advice: summary.advice().map(str::to_string),
        summary,
        pipeline: run.pipeline.clone(),
    };
    write_yaml(&files.summary_yaml, &file)?;
    write(&files.results_csv, &csv(&run.timings))?;
    write_yaml(&files.config_yaml, resolved_config)?;
    super::plots::write_plots(&run.timings, &file.summary, file.pipeline.as_ref(), &files)?;
    Ok((file, files))
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::output(path, e))
}

fn write_yaml(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_yaml_ng::to_string(value).map_err(|e| Error::output(path, e))?;
    write(path, &text)
}

/// One row per batch; times in milliseconds.
fn csv(timings: &[BatchTiming]) -> String {
    let mut out = String::from(
        "epoch,batch,step,warmup,samples,data_ms,forward_ms,backward_ms,other_ms,total_ms,loss,skipped\n",
    );
    for t in timings {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{},{}",
            t.epoch,
            t.batch,
            t.step,
            t.warmup,
            t.samples,
            t.data * 1e3,
            t.forward * 1e3,
            t.backward * 1e3,
            t.other * 1e3,
            t.total * 1e3,
            t.loss,
            t.skipped
        );
    }
    out
}

/// The summary table with the advice that fits the largest share, as printed
/// at the end of a run.
///
/// ```
/// use zephon_burn::harness::{print_table, SummaryFile, Summary};
/// let file = SummaryFile {
///     model: "m".into(), device: "cpu".into(), precision: "32".into(), batch_size: 4,
///     epochs: 1, skipped_steps: 0, final_loss_scale: None, advice: None, summary: Summary::default(),
///     pipeline: None,
/// };
/// assert!(print_table(&file).contains("forward"));
/// ```
pub fn print_table(file: &SummaryFile) -> String {
    let s = &file.summary;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Timing summary: {} on {}, precision {}, batch size {}, {} batches measured ({} warm-up left out)",
        file.model, file.device, file.precision, file.batch_size, s.batches, s.warmup_batches
    );
    let _ = writeln!(
        out,
        "{:<9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7}",
        "part", "mean ms", "median ms", "p95 ms", "min ms", "max ms", "std ms", "share"
    );
    let row = |out: &mut String, name: &str, st: &Stats| {
        let _ = writeln!(
            out,
            "{:<9} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>6.1}%",
            name,
            st.mean_ms,
            st.median_ms,
            st.p95_ms,
            st.min_ms,
            st.max_ms,
            st.std_ms,
            st.share_pct
        );
    };
    for phase in Phase::ALL {
        row(&mut out, phase.name(), s.get(phase));
    }
    row(&mut out, "total", &s.total);
    let _ = writeln!(
        out,
        "throughput: {:.1} samples/s; data stall: {:.1}% of step time",
        s.samples_per_second,
        100.0 * s.data_stall_fraction
    );
    if file.skipped_steps > 0 || file.final_loss_scale.is_some() {
        let _ = writeln!(
            out,
            "loss scaler: {} steps skipped, final scale {}",
            file.skipped_steps,
            file.final_loss_scale.unwrap_or(1.0)
        );
    }
    if let (Some(b), Some(advice)) = (s.bottleneck, s.advice()) {
        let _ = writeln!(
            out,
            "largest share: {} ({:.1}%): {advice}",
            b.name(),
            s.get(b).share_pct
        );
    }
    if let Some(p) = &file.pipeline {
        let _ = writeln!(out, "{}", p.line);
    }
    out
}

/// A folder named `base`, or `base_2`, `base_3`, ... when that one exists:
/// made here, so two runs started in the same second (a sweep over
/// precisions) each get their own, where the second overwrote the first's
/// files and both said they had written them.
pub(crate) fn fresh_folder(base: &Path) -> Result<PathBuf> {
    if let Some(parent) = base.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::output(parent, e))?;
    }
    for n in 1..=1000u32 {
        let dir = match n {
            1 => base.to_path_buf(),
            _ => PathBuf::from(format!("{}_{n}", base.display())),
        };
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::output(&dir, e)),
        }
    }
    Err(Error::output(
        base,
        "a thousand result folders of this second exist already",
    ))
}

/// Whether a file can be made in `dir`: a file there is written and removed.
pub(crate) fn check_writable(dir: &Path) -> Result<()> {
    let probe = dir.join(format!(".zephon-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| Error::output(dir, e))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_folder_is_never_shared_by_two_runs() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().join("results/benchmark/20261204_120000");
        let first = fresh_folder(&base).unwrap();
        let second = fresh_folder(&base).unwrap();
        assert_eq!(first, base);
        assert_eq!(second, t.path().join("results/benchmark/20261204_120000_2"));
        assert!(first.is_dir() && second.is_dir());
    }
}
