//! Knobs and the tuner cannot change the data: a map_par whose parallelism
//! a random tuner moves at random moments delivers the batches of a fixed
//! run, on both runners, on 1 rank and 4, and across a checkpoint restore;
//! the tuner raises a busy operator's parallelism while the consumer waits
//! and lowers it when the consumer is the limit; bad settings are named.

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use zephon_core::checkpoint::{Checkpoint, CheckpointedExt, Recipe, ResumeExt};
use zephon_core::knob::Knob;
use zephon_core::tune::{Tuner, TunerConfig};
use zephon_core::{Dataset, PipelineExt, Record, Runner, ShuffleMode, Tracking, Value, WorkSource};

fn work(rank: u32, world: u32) -> WorkSource {
    let ds = Dataset::in_memory(
        "toy",
        vec![
            (0..90).map(|i| Record::new().with("i", i as i64)).collect(),
            (90..200)
                .map(|i| Record::new().with("i", i as i64))
                .collect(),
        ],
    )
    .unwrap();
    WorkSource::builder()
        .dataset(ds, 1.0)
        .canonical_lanes(4)
        .seed(5)
        .rank(rank)
        .world_size(world)
        .build()
        .unwrap()
}

/// A record's work: some arithmetic the output depends on.
fn square(mut r: Record) -> zephon_core::Result<Record> {
    let i = r.get("i").and_then(|v| v.as_int()).unwrap_or(0);
    r.set("sq", Value::Int(i * i + 1));
    Ok(r)
}

/// A batch's (id, square) pairs.
type Items = Vec<(i64, i64)>;
type Lanes = BTreeMap<u32, Vec<Items>>;

fn ids(b: &zephon_core::RecordBatch) -> Items {
    b.items
        .iter()
        .map(|r| {
            let get = |f| r.get(f).and_then(|v| v.as_int()).unwrap();
            (get("i"), get("sq"))
        })
        .collect()
}

/// Moves `knob` to seeded random values at seeded random moments until
/// stopped.
struct RandomTuner {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RandomTuner {
    fn start(knob: &Knob, seed: u64) -> Self {
        let (knob, stop) = (knob.clone(), Arc::new(AtomicBool::new(false)));
        let halt = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut x = seed | 1;
            while !halt.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                knob.set((x % 8) as usize + 1, "random");
                std::thread::sleep(Duration::from_micros(x % 700));
            }
        });
        RandomTuner {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for RandomTuner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.take().map(|t| t.join());
    }
}

/// Every batch of every lane the ranks own, from `progress` on, with the
/// map's parallelism and fetch's reads in flight fixed at 2 (no knobs)
/// or moved by random tuners.
fn lanes(world: u32, runner: Runner, tuned: Option<u64>, from: Option<&Checkpoint>) -> Lanes {
    let mut out = Lanes::new();
    for rank in 0..world {
        let ws = work(rank, world);
        let recipe = Recipe::new(&ws);
        let mut progress = match from {
            Some(c) => recipe.resume(&ws, c).unwrap(),
            None => recipe.start(&ws),
        };
        let knob = Knob::parallelism("map_par", 2, 8).unwrap();
        let reads = Knob::parallelism("fetch", 2, 8).unwrap();
        let fetch = ws.stream().fetch(2).max_group(3);
        let fetch = match tuned {
            Some(_) => fetch.tuned(&reads),
            None => fetch,
        };
        let map = fetch.map_par(square, 2).micro_batch(3);
        let map = match tuned {
            Some(_) => map.tuned(&knob),
            None => map,
        };
        let _tuners = tuned.map(|seed| {
            let seed = seed + u64::from(rank);
            (
                RandomTuner::start(&knob, seed),
                RandomTuner::start(&reads, seed ^ 0x5eed),
            )
        });
        let it = map
            .shuffle(16, ShuffleMode::Reservoir, 9)
            .batch(4)
            .resume(&mut progress)
            .prefetch_batches(2)
            .into_blocking_iter(runner)
            .unwrap()
            .checkpointed(progress);
        for b in it {
            let b = b.unwrap();
            out.entry(b.lane).or_default().push(ids(&b));
        }
    }
    out
}

/// The first `n` batches of a tuned run on one rank, and its checkpoint.
fn head(n: usize, seed: u64) -> (Vec<(u32, Items)>, Checkpoint) {
    let ws = work(0, 1);
    let mut p = Recipe::new(&ws).start(&ws);
    let knob = Knob::parallelism("map_par", 1, 8).unwrap();
    let _tuner = RandomTuner::start(&knob, seed);
    let mut it = ws
        .stream()
        .fetch(2)
        .map_par(square, 1)
        .tuned(&knob)
        .shuffle(16, ShuffleMode::Reservoir, 9)
        .batch(4)
        .resume(&mut p)
        .into_blocking_iter(Runner::threads())
        .unwrap()
        .checkpointed(p);
    let got = it
        .by_ref()
        .take(n)
        .map(|b| {
            let b = b.unwrap();
            (b.lane, ids(&b))
        })
        .collect();
    (got, it.checkpoint())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn a_randomly_tuned_run_delivers_the_batches_of_a_fixed_one(
        seed in any::<u64>(),
        world in prop::sample::select(vec![1u32, 4]),
        threads in any::<bool>(),
    ) {
        let runner = if threads { Runner::threads() } else { Runner::Inline };
        let fixed = lanes(1, Runner::Inline, None, None);
        let items: usize = fixed.values().flatten().map(Vec::len).sum();
        prop_assert_eq!(items, 200);
        prop_assert_eq!(&lanes(world, runner, Some(seed), None), &fixed);
    }

    #[test]
    fn a_tuned_run_restored_from_a_checkpoint_goes_on_as_a_fixed_one(
        seed in any::<u64>(),
        taken in 0usize..50,
        world in prop::sample::select(vec![1u32, 4]),
    ) {
        let fixed = lanes(1, Runner::Inline, None, None);
        let (first, ckpt) = head(taken, seed);
        let ckpt = Checkpoint::from_bytes(&ckpt.to_bytes()).unwrap();
        let rest = lanes(world, Runner::threads(), Some(seed ^ 1), Some(&ckpt));
        // Lane by lane: the batches before the checkpoint, then after it,
        // are the fixed run's.
        let mut joined = Lanes::new();
        for (lane, b) in first {
            joined.entry(lane).or_default().push(b);
        }
        for (lane, b) in rest {
            joined.entry(lane).or_default().extend(b);
        }
        prop_assert_eq!(joined, fixed);
    }
}

fn slow_pipeline(
    n: u64,
    k: usize,
    max: usize,
    work_us: u64,
) -> (Knob, zephon_core::BlockingIter<u64>) {
    let knob = Knob::parallelism("map_par", k, max).unwrap();
    let it = futures::stream::iter((0..n).map(Ok::<_, zephon_core::Error>))
        .map_par(
            move |x| {
                std::thread::sleep(Duration::from_micros(work_us));
                Ok(x)
            },
            k,
        )
        .micro_batch(1)
        .tuned(&knob)
        .into_blocking_iter(Runner::threads())
        .unwrap();
    (knob, it)
}

fn config(cores: usize) -> TunerConfig {
    TunerConfig {
        cores,
        interval: Duration::from_millis(40),
        ..TunerConfig::default()
    }
}

#[test]
fn the_tuner_adds_workers_where_the_consumer_waits_on_a_busy_operator() {
    let (knob, mut it) = slow_pipeline(400, 1, 4, 2000);
    let obs = it.enable_observability(Tracking::Operator);
    let tuner = Tuner::start(&obs, vec![knob.clone()], config(4)).unwrap();
    let out: Vec<u64> = it.map(Result::unwrap).collect();
    assert_eq!(out, (0..400).collect::<Vec<_>>());
    let changes = knob.changes();
    assert!(changes.iter().any(|c| c.to > c.from), "{}", tuner.report());
    assert!(knob.get() <= 4);
    let report = tuner.report();
    assert!(report.starts_with("map_par 1 -> 2 at "), "{report}");
    assert!(report.contains("the consumer waiting"), "{report}");
}

/// A tuned operator's metrics give the workers it has now, and its
/// `explain()` line names the knob and its last change.
#[test]
fn metrics_and_explain_show_what_the_knob_says_now() {
    let knob = Knob::parallelism("map_par", 1, 4).unwrap();
    let pipeline = |knob: &Knob| {
        futures::stream::iter((0..200u64).map(Ok::<_, zephon_core::Error>))
            .map_par(Ok, 1)
            .tuned(knob)
    };
    let explained = |knob: &Knob| pipeline(knob).explain(Runner::threads()).to_string();
    let mut it = pipeline(&knob)
        .into_blocking_iter(Runner::threads())
        .unwrap();
    let obs = it.enable_observability(Tracking::Operator);
    let parallelism = |obs: &zephon_core::Observer| {
        let m = obs.metrics_snapshot();
        let op = m.operators.iter().find(|o| o.name == "map_par").cloned();
        op.unwrap().parallelism
    };
    let first: Vec<u64> = it.by_ref().take(10).map(Result::unwrap).collect();
    assert_eq!(parallelism(&obs), 1);
    let before = explained(&knob);
    assert!(
        before.contains("tuned by knob `map_par` (1 to 4): no change yet"),
        "{before}"
    );
    knob.set(3, "busy 99% of 1 worker, the consumer waiting 90%");
    let rest: Vec<u64> = it.by_ref().map(Result::unwrap).collect();
    assert_eq!([first, rest].concat(), (0..200).collect::<Vec<_>>());
    assert_eq!(parallelism(&obs), 3);
    let after = explained(&knob);
    assert!(
        after.contains("1 change, last 1 -> 3 at ") && after.contains("busy 99%"),
        "{after}"
    );
}

#[test]
fn the_tuner_takes_workers_back_when_the_consumer_is_the_limit() {
    let (knob, mut it) = slow_pipeline(300, 3, 3, 0);
    let obs = it.enable_observability(Tracking::Operator);
    let tuner = Tuner::start(&obs, vec![knob.clone()], config(3)).unwrap();
    let mut out = Vec::new();
    for x in it {
        // A slow training step.
        std::thread::sleep(Duration::from_millis(4));
        out.push(x.unwrap());
    }
    assert_eq!(out, (0..300).collect::<Vec<_>>());
    assert!(knob.get() < 3, "{}", tuner.report());
}

/// Under a memory budget the process is above (1 MiB: any test binary
/// holds more), the tuner adds no worker where the consumer waits on a
/// busy operator, and takes workers back, saying why; the output is the
/// same.
#[test]
fn above_its_memory_budget_the_tuner_takes_workers_back_and_adds_none() {
    let (knob, mut it) = slow_pipeline(300, 3, 4, 2000);
    let obs = it.enable_observability(Tracking::Operator);
    let budget = TunerConfig {
        memory: Some(1 << 20),
        ..config(4)
    };
    let tuner = Tuner::start(&obs, vec![knob.clone()], budget).unwrap();
    let out: Vec<u64> = it.map(Result::unwrap).collect();
    assert_eq!(out, (0..300).collect::<Vec<_>>());
    let changes = knob.changes();
    let report = tuner.report();
    assert!(changes.iter().all(|c| c.to < c.from), "{report}");
    assert!(!changes.is_empty(), "{report}");
    assert!(report.contains("above the budget of 1.0 MB"), "{report}");
}

#[test]
fn bad_knobs_and_tuner_settings_are_named() {
    for (made, want) in [
        (Knob::parallelism("map_par", 0, 4), "map_par.parallelism"),
        (Knob::parallelism("map_par", 5, 4), "map_par.parallelism"),
        (
            Knob::parallelism("map_par", 1, 5000),
            "map_par.max_parallelism",
        ),
    ] {
        let e = made.unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
    }
    let (knob, mut it) = slow_pipeline(4, 2, 4, 0);
    let obs = it.enable_observability(Tracking::Operator);
    for (c, want) in [
        (
            TunerConfig {
                cores: 0,
                ..config(4)
            },
            "tuner.cores",
        ),
        (
            TunerConfig {
                cores: 1,
                ..config(4)
            },
            "tuner.cores",
        ),
        (
            TunerConfig {
                interval: Duration::ZERO,
                ..config(4)
            },
            "tuner.interval",
        ),
        (
            TunerConfig {
                memory: Some(1000),
                ..config(4)
            },
            "tuner.memory",
        ),
        (
            TunerConfig {
                wait_low: 0.5,
                wait_high: 0.1,
                ..config(4)
            },
            "tuner.wait",
        ),
    ] {
        let e = Tuner::start(&obs, vec![knob.clone()], c)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}");
    }
    let e = Tuner::start(&obs, vec![], config(4))
        .unwrap_err()
        .to_string();
    assert!(e.contains("tuner.knobs"), "{e}");
    assert_eq!(it.count(), 4);
}
