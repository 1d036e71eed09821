//! The harness end to end on the CPU: `run_timing` on a tiny autoencoder
//! writes the six files, and they hold what they should.

use std::path::Path;
use zephon_burn::harness::{PLOT_SIZE, SummaryFile, write_chrome_trace};
use zephon_burn::{DeviceChoice, Precision, TimingOptions, run_timing};

const CONFIG: &str = "\
model:
  name: autoencoder
  input_dim: 16
  hidden_dim: 8
  latent_dim: 4
data:
  name: dummy
  num_samples: 20
  batch_size: 4
  input_dim: 16
  seed: 3
  workers: 2
optimizer:
  name: adam
  lr: 0.01
timing:
  warmup_batches: 2
";

fn png_size(path: &Path) -> (u32, u32) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    (info.width, info.height)
}

#[test]
fn two_epochs_write_six_consistent_files() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let save = dir.path().join("out");
    let trace = dir.path().join("trace.json");
    let report = run_timing(&TimingOptions {
        config,
        epochs: 2,
        save_dir: Some(save.clone()),
        precision: Precision::F32,
        device: DeviceChoice::Cpu,
        trace: Some(trace.clone()),
        progress: false,
    })
    .unwrap();

    for f in [
        "timing_summary.yaml",
        "timing_results.csv",
        "batch_time_breakdown.png",
        "total_batch_time.png",
        "time_distribution_pie.png",
        "benchmark_config.yaml",
    ] {
        assert!(save.join(f).is_file(), "{f} missing");
    }

    // One row per batch: 2 epochs x 5 batches.
    let csv = std::fs::read_to_string(save.join("timing_results.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    };
    let parts = ["data_ms", "forward_ms", "backward_ms", "other_ms"].map(col);
    let total = col("total_ms");
    let rows: Vec<Vec<f64>> = lines
        .map(|l| {
            l.split(',')
                .map(|v| v.parse::<f64>().unwrap_or(f64::NAN))
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 10);
    for r in &rows {
        let sum: f64 = parts.iter().map(|&i| r[i]).sum();
        assert!(r[total] > 0.0);
        assert!(
            (sum - r[total]).abs() <= 0.05 * r[total],
            "parts {sum} vs total {}",
            r[total]
        );
    }

    // The YAML files parse back.
    let summary: SummaryFile = serde_yaml_ng::from_str(
        &std::fs::read_to_string(save.join("timing_summary.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(summary, report.summary);
    assert_eq!(
        (summary.summary.batches, summary.summary.warmup_batches),
        (8, 2)
    );
    assert_eq!(
        (
            summary.device.as_str(),
            summary.precision.as_str(),
            summary.batch_size
        ),
        ("cpu", "32", 4)
    );
    assert!(summary.summary.samples_per_second > 0.0);
    assert!(summary.advice.is_some());
    let resolved: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(save.join("benchmark_config.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(resolved["overrides"]["epochs"].as_u64(), Some(2));
    assert_eq!(resolved["config"]["model"]["hidden_dim"].as_u64(), Some(8));
    assert_eq!(resolved["versions"]["burn"].as_str(), Some("0.22.1"));

    // Each PNG decodes at the documented size.
    for f in [
        "batch_time_breakdown.png",
        "total_batch_time.png",
        "time_distribution_pie.png",
    ] {
        assert_eq!(png_size(&save.join(f)), PLOT_SIZE, "{f}");
    }

    // The trace: a step event and four phases per batch.
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    assert_eq!(events.iter().filter(|e| e["ph"] == "X").count(), 10 * 5);
    assert!(report.table.contains("largest share"));

    // Writing the trace on its own works too.
    let t2 = dir.path().join("nested/t.json");
    write_chrome_trace(&report.run.timings, &t2).unwrap();
    assert!(t2.is_file());
}
