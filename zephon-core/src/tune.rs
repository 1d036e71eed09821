//! A tuner that moves [`Knob`]s while the pipeline runs, from its live
//! per-operator metrics, within a CPU budget. It cannot change the data:
//! the knobs it moves are parallelisms, and an operator delivers the same
//! elements in the same order whatever its parallelism.
//!
//! Every [`TunerConfig::interval`] it compares the last interval's figures:
//! the consumer's wait for the pipeline, and each knob's operator's busy
//! time over its workers. An operator busy on nearly all its workers while
//! the consumer waits gets one worker more (while the workers of all knobs
//! stay within the budget); one busy on less than half its workers while
//! the consumer hardly waits (the consumer is the limit: a slow training
//! step) gets one fewer, so the loader uses less CPU. Each change is
//! recorded on its knob with what the tuner saw ([`Tuner::report`]).

use crate::error::{Error, Result};
use crate::knob::Knob;
use crate::obs::Observer;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// A [`Tuner`]'s settings.
#[derive(Clone, Debug, PartialEq)]
pub struct TunerConfig {
    /// Workers all the knobs together may use (1 to 4096; default: the
    /// machine's cores).
    pub cores: usize,
    /// How often it looks (10 ms to an hour; default 250 ms).
    pub interval: Duration,
    /// The consumer's share of wall time spent waiting above which the
    /// pipeline is the limit (0 to 1; default 0.05).
    pub wait_high: f64,
    /// Below it, the consumer is the limit (0 to `wait_high`; default 0.01).
    pub wait_low: f64,
    /// Anonymous memory (`RssAnon`: heap, stacks, buffers) the process may
    /// hold, in bytes (1 MiB to 1 PiB; default none): above it the tuner
    /// adds no worker, and takes one back from the knob with the most at
    /// each look until the process is under it again. Only where the
    /// kernel reports `RssAnon` (Linux); elsewhere a budget is an error.
    pub memory: Option<u64>,
}

/// The range of [`TunerConfig::memory`].
pub const MEMORY: crate::settings::Range =
    crate::settings::Range::new(1 << 20, 1 << 50, "bytes of anonymous memory");

impl Default for TunerConfig {
    fn default() -> Self {
        TunerConfig {
            cores: crate::settings::num_cpus(),
            interval: Duration::from_millis(250),
            wait_high: 0.05,
            wait_low: 0.01,
            memory: None,
        }
    }
}

impl TunerConfig {
    fn check(&self) -> Result<()> {
        crate::settings::PARALLELISM.check_usize("tuner.cores", self.cores)?;
        if !(Duration::from_millis(10)..=Duration::from_secs(3600)).contains(&self.interval) {
            return Err(Error::config(
                "tuner.interval",
                format!("{:?} is outside 10 ms to an hour", self.interval),
            ));
        }
        if !(0.0..=1.0).contains(&self.wait_high)
            || !(0.0..=self.wait_high).contains(&self.wait_low)
        {
            return Err(Error::config(
                "tuner.wait",
                format!(
                    "wait_low {} and wait_high {} must satisfy 0 <= wait_low <= wait_high <= 1",
                    self.wait_low, self.wait_high
                ),
            ));
        }
        if let Some(m) = self.memory {
            MEMORY.check("tuner.memory", m)?;
            if zephon_metrics::memory::rss_anon().is_none() {
                return Err(Error::config(
                    "tuner.memory",
                    "this system does not report the process's anonymous memory (RssAnon): no budget can be kept",
                ));
            }
        }
        Ok(())
    }
}

/// A running tuner; dropping it stops it (the knobs keep their values).
///
/// ```
/// use zephon_core::knob::Knob;
/// use zephon_core::tune::{Tuner, TunerConfig};
/// use zephon_core::{PipelineExt, Runner, Tracking};
/// let knob = Knob::parallelism("work", 1, 2)?;
/// let s = futures::stream::iter((0..400u64).map(Ok::<_, zephon_core::Error>));
/// let mut it = s
///     .map_par(|x| { std::thread::sleep(std::time::Duration::from_micros(200)); Ok(x) }, 1)
///     .tuned(&knob)
///     .into_blocking_iter(Runner::threads())?;
/// let obs = it.enable_observability(Tracking::Operator);
/// let config = TunerConfig { cores: 2, interval: std::time::Duration::from_millis(20), ..TunerConfig::default() };
/// let tuner = Tuner::start(&obs, vec![knob.clone()], config)?;
/// let out: Vec<u64> = it.map(Result::unwrap).collect();
/// assert_eq!(out, (0..400).collect::<Vec<_>>()); // whatever the tuner did
/// println!("{}", tuner.report());
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Debug)]
pub struct Tuner {
    knobs: Vec<Knob>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Tuner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What one look at the metrics found for one knob.
struct Seen {
    busy_s: f64,
}

impl Tuner {
    /// Starts tuning `knobs` from `observer`'s metrics (observability at
    /// [`Tracking::Operator`](crate::Tracking::Operator)); each knob's name
    /// is the operator it drives, matched to the first operator of that
    /// name. Settings out of range, a knob whose starting values already
    /// exceed the budget, or no knob are errors naming the setting.
    pub fn start(observer: &Observer, knobs: Vec<Knob>, config: TunerConfig) -> Result<Self> {
        config.check()?;
        if knobs.is_empty() {
            return Err(Error::config("tuner.knobs", "no knob to tune"));
        }
        let using: usize = knobs.iter().map(Knob::get).sum();
        if using > config.cores {
            return Err(Error::config(
                "tuner.cores",
                format!(
                    "the knobs start at {using} workers, above the budget of {}",
                    config.cores
                ),
            ));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (obs, turn, halt) = (observer.clone(), knobs.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("zephon-tuner".into())
            .spawn(move || run(obs, turn, config, halt))
            .map_err(|e| Error::config("tuner", format!("cannot start its thread: {e}")))?;
        Ok(Tuner {
            knobs,
            stop,
            thread: Some(thread),
        })
    }

    /// Every change of every knob, a line each: `map_par 1 -> 2 at 0.8 s:
    /// busy 97% of 1 worker, the consumer waiting 41%`.
    pub fn report(&self) -> String {
        let mut lines = Vec::new();
        for k in &self.knobs {
            for c in k.changes() {
                lines.push(format!("{} {c}", k.name()));
            }
        }
        if lines.is_empty() {
            "the tuner changed nothing".to_owned()
        } else {
            lines.join("\n")
        }
    }
}

fn run(obs: Observer, knobs: Vec<Knob>, config: TunerConfig, stop: Arc<AtomicBool>) {
    let mut last: Option<(f64, f64, Vec<Option<Seen>>)> = None;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(config.interval);
        let m = obs.metrics_snapshot();
        let seen: Vec<Option<Seen>> = knobs
            .iter()
            .map(|k| {
                m.operators
                    .iter()
                    .find(|o| o.name == k.name())
                    .map(|o| Seen { busy_s: o.busy_s })
            })
            .collect();
        let now = (m.elapsed_s, m.startup.consumer_wait_s);
        if let Some((t0, wait0, before)) = last.take() {
            let span = now.0 - t0;
            if span > 0.0 {
                let waiting = ((now.1 - wait0) / span).clamp(0.0, 1.0);
                let mut in_use: usize = knobs.iter().map(Knob::get).sum();
                let over = config.memory.and_then(|budget| {
                    zephon_metrics::memory::rss_anon()
                        .filter(|&held| held > budget)
                        .map(|held| (held, budget))
                });
                if let Some((held, budget)) = over {
                    // Workers hold what they work on: the knob with the
                    // most gives one back.
                    if let Some(knob) = knobs.iter().filter(|k| k.get() > 1).max_by_key(|k| k.get())
                    {
                        let k = knob.get();
                        knob.set(
                            k - 1,
                            format!(
                                "anonymous memory {:.1} MB, above the budget of {:.1} MB",
                                held as f64 / 1e6,
                                budget as f64 / 1e6
                            ),
                        );
                    }
                    last = Some((now.0, now.1, seen));
                    continue;
                }
                for ((knob, b), a) in knobs.iter().zip(&before).zip(&seen) {
                    let (Some(b), Some(a)) = (b, a) else { continue };
                    let k = knob.get();
                    let busy = ((a.busy_s - b.busy_s) / (span * k as f64)).max(0.0);
                    let saw = format!(
                        "busy {:.0}% of {k} worker{}, the consumer waiting {:.0}%",
                        busy * 100.0,
                        if k == 1 { "" } else { "s" },
                        waiting * 100.0
                    );
                    if waiting > config.wait_high
                        && busy > 0.85
                        && k < knob.max()
                        && in_use < config.cores
                    {
                        knob.set(k + 1, saw);
                        in_use += 1;
                    } else if waiting < config.wait_low && busy < 0.5 && k > 1 {
                        knob.set(k - 1, saw);
                        in_use -= 1;
                    }
                }
            }
        }
        last = Some((now.0, now.1, seen));
    }
}
