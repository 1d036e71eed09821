//! `zephon run RECIPE.toml`: a pipeline declared in a recipe, run from the
//! command line with a progress bar, periodic snapshots and a bottleneck report.

pub mod build;
pub mod check;
pub mod media;
pub mod recipe;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use zephon_core::BlockingIter;

/// Options of `zephon run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The recipe (TOML): datasets, work source, operators, runner.
    pub recipe: PathBuf,
    /// Print observability snapshots every this many seconds (0.1 to
    /// 86400), and the bottleneck report at the end.
    #[arg(long, value_name = "SECONDS", value_parser = super::flags::seconds)]
    pub observe: Option<f64>,
    /// Machine-readable output: JSON lines on stdout, no progress bar.
    #[arg(long)]
    pub json: bool,
    /// Stop after this many batches, at least 1 (overrides the recipe's
    /// `run.max_batches`).
    #[arg(long, value_parser = super::flags::ranged::<u64>(super::flags::AT_LEAST_ONE))]
    pub max_batches: Option<u64>,
    /// Print the plan and exit without running.
    #[arg(long)]
    pub explain: bool,
    /// Serve the pipeline's metrics in the Prometheus text format at
    /// `http://ADDR/metrics` while it runs (`host:port`, a loopback address
    /// unless `--metrics-public`; port 0 picks a free one, printed).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<String>,
    /// Let `--metrics-addr` listen on any interface, for a scraper on
    /// another machine.
    #[arg(long, requires = "metrics_addr")]
    pub metrics_public: bool,
    /// Keep serving the metrics this many seconds after the run ends
    /// (0.1 to 86400), so a scraper reads the final figures.
    #[arg(long, value_name = "SECONDS", value_parser = super::flags::seconds, requires = "metrics_addr")]
    pub metrics_hold: Option<f64>,
    /// `auto`: a tuner moves the `tokenize` operator's parallelism while
    /// the run goes (the batches do not change); over the recipe's
    /// `run.tuning`.
    #[arg(long, value_enum, value_name = "fixed|auto")]
    pub tuning: Option<recipe::TuningKind>,
    /// Workers the tuned operators may use together (1 to 4096; default:
    /// the machine's cores); over the recipe's `run.tuning_cores`.
    #[arg(long, value_name = "N")]
    pub tuning_cores: Option<usize>,
    /// Anonymous memory the tuned process may hold, in bytes (1 MiB to
    /// 1 PiB); over the recipe's `run.tuning_memory`.
    #[arg(long, value_name = "BYTES")]
    pub tuning_memory: Option<u64>,
    /// Storage settings, over the recipe's `[storage]`.
    #[command(flatten)]
    pub storage: StorageFlags,
}

/// `zephon run`'s storage flags: each overrides the key of the recipe's
/// `[storage]` table of the same name, and is checked against the same
/// range when the pipeline is built.
#[derive(Debug, Default, clap::Args)]
pub struct StorageFlags {
    /// Retries of a failed storage request (0 to 100; default 3).
    #[arg(long, value_name = "N")]
    pub retries: Option<u64>,
    /// Limit of each wait for a body's bytes, in milliseconds (1 to
    /// 86,400,000; default 10,000).
    #[arg(long, value_name = "MS")]
    pub io_timeout_ms: Option<u64>,
    /// Longest time one block or request may take, retries included, in
    /// milliseconds (100 to 86,400,000; default 120,000).
    #[arg(long, value_name = "MS")]
    pub block_deadline_ms: Option<u64>,
    /// Slowest response body accepted, in bytes a second (0, off, to 1 GiB;
    /// default 1,024).
    #[arg(long, value_name = "BYTES")]
    pub min_rate: Option<u64>,
    /// Size of the shard cache's blocks, in bytes (64 KiB to 256 MiB;
    /// default 4 MiB).
    #[arg(long, value_name = "BYTES")]
    pub block_bytes: Option<u64>,
}

impl StorageFlags {
    /// `spec` with the flags given put over its keys.
    pub fn apply(&self, spec: &mut recipe::StorageSpec) {
        let over = |flag: Option<u64>, key: &mut Option<u64>| {
            if flag.is_some() {
                *key = flag;
            }
        };
        over(self.retries, &mut spec.retries);
        over(self.io_timeout_ms, &mut spec.io_timeout_ms);
        over(self.block_deadline_ms, &mut spec.block_deadline_ms);
        over(self.min_rate, &mut spec.min_rate);
        over(self.block_bytes, &mut spec.block_bytes);
    }
}

/// What a run delivered.
#[derive(Debug, serde::Serialize)]
pub struct Summary {
    /// Elements (batches) delivered.
    pub batches: u64,
    /// Samples in them.
    pub samples: u64,
    /// Tokens in them.
    pub tokens: u64,
    /// Wall seconds.
    pub seconds: f64,
    /// Tokens per second.
    pub tokens_per_s: f64,
    /// Batches per second.
    pub batches_per_s: f64,
    /// Seconds to the first batch.
    pub time_to_first_batch_s: Option<f64>,
    /// Conversations `tokenize_chat` dropped (nothing to supervise), where
    /// the recipe has a `tokenize_chat`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat_dropped: Option<u64>,
}

/// Runs a recipe.
pub fn run(args: Args) -> Result<()> {
    let mut recipe = recipe::Recipe::load(&args.recipe)?;
    args.storage.apply(&mut recipe.storage);
    if let Some(t) = args.tuning {
        recipe.run.tuning = t;
    }
    if args.tuning_cores.is_some() {
        recipe.run.tuning_cores = args.tuning_cores;
    }
    if args.tuning_memory.is_some() {
        recipe.run.tuning_memory = args.tuning_memory;
    }
    let base = args
        .recipe
        .parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                p.to_owned()
            }
        })
        .unwrap_or_else(|| PathBuf::from("."));
    let built = build::build(&recipe, &base)
        .with_context(|| format!("recipe {}", args.recipe.display()))?;
    if args.json {
        println!("{}", serde_json::json!({ "plan": &built.plan }));
    } else {
        println!("{}", built.plan);
    }
    if args.explain {
        return Ok(());
    }
    let max_batches = args.max_batches.or(recipe.run.max_batches);
    let mut it = BlockingIter::new(built.stream, built.runner)?;
    // The tuner reads the operators' metrics: per operator, whatever the
    // recipe's tracking for `--observe`.
    let tracking = match built.tuning {
        Some(_) => zephon_core::Tracking::Operator,
        None => recipe.run.tracking.into(),
    };
    let observer =
        (args.observe.is_some() || args.metrics_addr.is_some() || built.tuning.is_some())
            .then(|| it.enable_observability(tracking));
    let tuner = match (&built.tuning, &observer) {
        (Some((knobs, cores)), Some(obs)) => {
            let config = zephon_core::tune::TunerConfig {
                cores: *cores,
                memory: recipe.run.tuning_memory,
                ..Default::default()
            };
            Some(zephon_core::tune::Tuner::start(obs, knobs.clone(), config)?)
        }
        _ => None,
    };
    let metrics = match (&args.metrics_addr, &observer) {
        (Some(addr), Some(obs)) => {
            let exposure = match args.metrics_public {
                true => zephon_core::obs::Exposure::AnyInterface,
                false => zephon_core::obs::Exposure::Loopback,
            };
            let server = obs.serve_prometheus(addr, exposure)?;
            // On stderr, so JSON lines on stdout stay machine-readable.
            eprintln!("metrics at http://{}/metrics", server.addr());
            Some(server)
        }
        _ => None,
    };

    let done = Arc::new(AtomicBool::new(false));
    let reporter = match (&observer, args.observe) {
        (Some(obs), Some(every)) => {
            let (obs, done, json) = (obs.clone(), done.clone(), args.json);
            let every = Duration::from_secs_f64(every);
            Some(std::thread::spawn(move || {
                let mut next = Instant::now() + every;
                while !done.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                    if Instant::now() >= next {
                        next += every;
                        print_snapshots(&obs, json);
                    }
                }
            }))
        }
        _ => None,
    };

    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        let bar = match built.samples {
            Some(n) => ProgressBar::new(n),
            None => ProgressBar::new_spinner(),
        };
        bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(4));
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} samples {msg} ETA {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    };

    let start = Instant::now();
    let mut s = Summary {
        batches: 0,
        samples: 0,
        tokens: 0,
        seconds: 0.0,
        tokens_per_s: 0.0,
        batches_per_s: 0.0,
        time_to_first_batch_s: None,
        chat_dropped: None,
    };
    // The first error ends the run (after a panic the pipeline has ended
    // anyway); it is reported once the progress bar and the reporter are
    // stopped, so it is the last thing on stderr.
    let mut failed = None;
    for item in it.by_ref() {
        let item = match item {
            Ok(item) => item,
            Err(e) => {
                failed = Some(e.name_sources(&built.catalog));
                break;
            }
        };
        let (samples, tokens) = item.counts();
        s.batches += 1;
        s.samples += samples;
        s.tokens += tokens;
        if s.time_to_first_batch_s.is_none() {
            s.time_to_first_batch_s = Some(start.elapsed().as_secs_f64());
        }
        if s.batches.is_multiple_of(16) {
            let secs = start.elapsed().as_secs_f64();
            bar.set_position(s.samples);
            bar.set_message(format!(
                "{} batches, {:.0} tokens/s",
                s.batches,
                s.tokens as f64 / secs
            ));
        }
        if max_batches.is_some_and(|m| s.batches >= m) {
            break;
        }
    }
    bar.finish_and_clear();
    // Stops the pipeline and publishes the consumer timing it still holds.
    drop(it);
    done.store(true, Ordering::Relaxed);
    if let Some(r) = reporter {
        let _ = r.join();
    }
    if let Some(e) = failed {
        return Err(anyhow::Error::new(e).context(format!(
            "recipe {}: the run failed after {} batches",
            args.recipe.display(),
            s.batches
        )));
    }
    s.seconds = start.elapsed().as_secs_f64();
    s.tokens_per_s = s.tokens as f64 / s.seconds;
    s.batches_per_s = s.batches as f64 / s.seconds;
    s.chat_dropped = built.chat_stats.as_ref().map(|c| c.chat_dropped.get());
    let tuning = tuner.map(|t| {
        let report = t.report();
        drop(t);
        report
    });
    // Every stream of the work source is dropped with the pipeline above,
    // so its counts are all in.
    let schedule = built.work_source.phase_shares();
    if args.json {
        println!("{}", serde_json::json!({ "summary": &s }));
        if let Some(shares) = &schedule {
            println!("{}", serde_json::json!({ "schedule": shares }));
        }
        if let Some(report) = &tuning {
            let lines: Vec<&str> = report.lines().collect();
            println!("{}", serde_json::json!({ "tuning": lines }));
        }
        if let Some(obs) = observer.as_ref().filter(|_| args.observe.is_some()) {
            print_snapshots(obs, true);
            println!(
                "{}",
                serde_json::json!({ "bottleneck": obs.bottleneck_report() })
            );
        }
    } else {
        println!(
            "{} batches, {} samples, {} tokens in {:.2} s: {:.1} batches/s, {:.0} tokens/s; first batch after {}",
            s.batches,
            s.samples,
            s.tokens,
            s.seconds,
            s.batches_per_s,
            s.tokens_per_s,
            s.time_to_first_batch_s
                .map_or("-".into(), |t| format!("{t:.3} s"))
        );
        if let Some(n) = s.chat_dropped {
            let noun = if n == 1 {
                "conversation"
            } else {
                "conversations"
            };
            println!("{n} {noun} dropped by tokenize_chat (nothing to supervise)");
        }
        if let Some(shares) = &schedule {
            print!("{shares}");
        }
        if let Some(report) = &tuning {
            println!("tuning:");
            for line in report.lines() {
                println!("  {line}");
            }
        }
        if let Some(obs) = observer.as_ref().filter(|_| args.observe.is_some()) {
            print_snapshots(obs, false);
            println!("\n{}", obs.bottleneck_report());
        }
    }
    if let (Some(server), Some(hold)) = (metrics, args.metrics_hold) {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        std::thread::sleep(Duration::from_secs_f64(hold));
        drop(server);
    }
    Ok(())
}

fn print_snapshots(obs: &zephon_core::Observer, json: bool) {
    let (m, f, p) = (
        obs.metrics_snapshot(),
        obs.fetch_timing_snapshot(),
        obs.prefetch_timing_snapshot(),
    );
    if json {
        println!(
            "{}",
            serde_json::json!({ "metrics": m, "fetch": f, "prefetch": p })
        );
    } else {
        println!("\n{m}\n{f}\n{p}");
    }
}
