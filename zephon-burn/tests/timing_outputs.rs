//! The harness end to end on the CPU: `run_timing` on a tiny autoencoder
//! writes the seven files, and they hold what they should.

use burn::optim::AdamConfig;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use zephon_burn::harness::{
    self, BatchSource, HarnessConfig, PLOT_SIZE, SummaryFile, write_chrome_trace,
};
use zephon_burn::models::autoencoder::{Autoencoder, AutoencoderConfig, DummyData};
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
fn two_epochs_write_seven_consistent_files() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let save = dir.path().join("out");
    let trace = dir.path().join("trace.json");
    let started = Instant::now();
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
    let wall = started.elapsed().as_secs_f64() * 1e3;

    for f in [
        "timing_summary.yaml",
        "timing_results.csv",
        "batch_time_breakdown.png",
        "total_batch_time.png",
        "time_distribution_pie.png",
        "pipeline_breakdown.png",
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
    let phases = [
        "data_ms",
        "forward_ms",
        "backward_ms",
        "other_ms",
        "total_ms",
    ]
    .map(col);
    let rows: Vec<Vec<f64>> = lines
        .map(|l| {
            l.split(',')
                .map(|v| v.parse::<f64>().unwrap_or(f64::NAN))
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 10);
    // The file holds what was measured (how the total relates to the clock
    // is checked in `step_totals_match_a_wall_clock_around_each_epoch`).
    for (r, t) in rows.iter().zip(&report.run.timings) {
        let measured = [t.data, t.forward, t.backward, t.other, t.total];
        for (&i, s) in phases.iter().zip(measured) {
            assert!(
                (r[i] - s * 1e3).abs() < 1e-3,
                "{} of step {}: {} in the CSV, {} ms measured",
                header[i],
                t.step,
                r[i],
                s * 1e3
            );
        }
    }
    // The steps are disjoint spans inside the call, which also built the
    // model and wrote the files.
    let steps: f64 = rows.iter().map(|r| r[phases[4]]).sum();
    assert!(
        steps > 0.0 && steps <= wall,
        "steps {steps} ms, call {wall} ms"
    );

    // The YAML files parse back.
    let summary: SummaryFile = serde_yaml_ng::from_str(
        &std::fs::read_to_string(save.join("timing_summary.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(summary, report.summary);
    // The command turns on operator tracking in the dummy pipeline.
    let pipeline = summary.pipeline.as_ref().expect("a pipeline breakdown");
    let names: Vec<&str> = pipeline.operators.iter().map(|o| o.name.as_str()).collect();
    assert!(
        names.contains(&"fetch") && names.contains(&"map_par"),
        "{names:?}"
    );
    assert!(report.table.contains(&pipeline.line));
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
        "pipeline_breakdown.png",
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

/// What the source waits before handing over each batch: a known share of
/// every step's data phase.
const PAUSE: Duration = Duration::from_millis(20);

/// A batch source that notes, by its own clock, when each epoch was asked
/// for and when its batches ran out, and pauses before every batch.
struct Clocked<S> {
    inner: S,
    starts: Vec<Instant>,
    ends: Vec<Instant>,
}

impl<B: 'static, S: BatchSource<B>> BatchSource<B> for Clocked<S> {
    fn epoch(
        &mut self,
        epoch: usize,
    ) -> zephon_burn::Result<Box<dyn Iterator<Item = zephon_burn::Result<B>> + '_>> {
        let Clocked {
            inner,
            starts,
            ends,
        } = self;
        starts.push(Instant::now());
        let mut batches = inner.epoch(epoch)?;
        Ok(Box::new(std::iter::from_fn(move || match batches.next() {
            Some(b) => {
                std::thread::sleep(PAUSE);
                Some(b)
            }
            None => {
                ends.push(Instant::now());
                None
            }
        })))
    }
}

/// The harness's step totals against a clock of the test's own. An epoch's
/// steps tile the span from the end of the previous epoch's last step to the
/// end of its own last step: the first data phase holds dropping the last
/// epoch's pipeline and building the new one. The source's clock brackets
/// that span with the first epoch's start and each epoch's running out, so
/// the two differ by the harness loop's bookkeeping at either end,
/// microseconds; the tolerance is for the scheduler of a loaded machine,
/// which may pause the thread at a boundary for a time slice or two.
#[test]
fn step_totals_match_a_wall_clock_around_each_epoch() {
    let (device, _) = DeviceChoice::Cpu.resolve().unwrap();
    let model = Autoencoder::new(
        &AutoencoderConfig {
            input_dim: 16,
            hidden_dim: 8,
            latent_dim: 4,
        },
        &device,
    );
    let data = DummyData {
        num_samples: 20,
        batch_size: 4,
        input_dim: 16,
        seed: 3,
        workers: 2,
    };
    let mut source = Clocked {
        inner: data.source().unwrap(),
        starts: Vec::new(),
        ends: Vec::new(),
    };
    let config = HarnessConfig {
        epochs: 2,
        warmup_batches: 1,
        ..HarnessConfig::default()
    };
    let (_, run) = harness::run(
        model,
        AdamConfig::new().init(),
        &mut source,
        &device,
        &config,
    )
    .unwrap();
    assert_eq!(run.timings.len(), 10);
    assert_eq!((source.starts.len(), source.ends.len()), (2, 2));
    let mut start = source.starts[0];
    for (epoch, &end) in source.ends.iter().enumerate() {
        let wall = (end - start).as_secs_f64();
        start = end;
        let steps: Vec<_> = run.timings.iter().filter(|t| t.epoch == epoch).collect();
        assert_eq!(steps.len(), 5);
        let total: f64 = steps.iter().map(|t| t.total).sum();
        // 5 pauses of 20 ms: at least 100 ms per epoch, so 10% is 10 ms
        // or more.
        assert!(
            (total - wall).abs() <= 0.1 * wall,
            "epoch {epoch}: steps total {:.1} ms, the test's clock {:.1} ms",
            total * 1e3,
            wall * 1e3
        );
        // The pause falls in the data phase, and only there.
        for t in &steps {
            assert!(
                t.data >= PAUSE.as_secs_f64(),
                "step {}: data {:.1} ms, under the source's pause",
                t.step,
                t.data * 1e3
            );
        }
    }
}

/// A run whose every batch is a warm-up measures nothing: refused before
/// it starts (the source says its length), no summary of zeros written.
#[test]
fn a_run_of_warm_up_batches_only_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    // 20 samples in batches of 4: 5 batches an epoch, 10 in two.
    std::fs::write(
        &config,
        CONFIG.replace("warmup_batches: 2", "warmup_batches: 10"),
    )
    .unwrap();
    let save = dir.path().join("out");
    let err = run_timing(&TimingOptions {
        config,
        epochs: 2,
        save_dir: Some(save.clone()),
        precision: Precision::F32,
        device: DeviceChoice::Cpu,
        trace: None,
        progress: false,
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("timing.warmup_batches") && err.contains("the run has 10 batches"),
        "{err}"
    );
    assert!(!save.join("timing_summary.yaml").exists());
}

/// Where the outputs go is checked before the run: a save folder that is a
/// file, or a trace in a folder that is not there, failed only once every
/// epoch had run (here the run itself would be refused too, later: the
/// error is the folder's).
#[test]
fn an_output_place_that_cannot_be_written_is_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        CONFIG.replace("warmup_batches: 2", "warmup_batches: 10"),
    )
    .unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "mine").unwrap();
    let opts = |save_dir: PathBuf, trace: Option<PathBuf>| TimingOptions {
        config: config.clone(),
        epochs: 2,
        save_dir: Some(save_dir),
        precision: Precision::F32,
        device: DeviceChoice::Cpu,
        trace,
        progress: false,
    };
    let err = run_timing(&opts(file.clone(), None))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&file.display().to_string()) && !err.contains("warmup"),
        "{err}"
    );
    let trace = dir.path().join("not-there/trace.json");
    let err = run_timing(&opts(dir.path().join("out"), Some(trace.clone())))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&trace.display().to_string()) && err.contains("cannot be written"),
        "{err}"
    );
    // A FIFO as the trace: refused before the run, not waited on after it.
    let fifo = dir.path().join("trace.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let err = run_timing(&opts(dir.path().join("out2"), Some(fifo.clone())))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&fifo.display().to_string()) && err.contains("FIFO"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
}
