//! Checkpoint and restore through the text operators: tokenize, shuffle,
//! ensure_mixture, pack_sequences (every algorithm), batch, to_training.
//! Shuffle buffers, mixture queues and deficits, and packing bins come back
//! from the lane cuts, with a filter after fetch too: nothing is replayed.

use proptest::prelude::*;

// The allocator of the zephon binary, for the benchmark at the end.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::collections::BTreeMap;
use zephon_core::checkpoint::{Checkpoint, Progress, Recipe, ResumeExt};
use zephon_core::{
    Dataset, LaneId, PipelineExt, Record, Runner, ShuffleMode, WorkSource, hash::mix64,
};
use zephon_ops::{
    MixtureConfig, PackAlgorithm, PackConfig, SpecialTokens, TextPipelineExt, TokenizeConfig,
    TrainingConfig,
};

const WORDS: &[&str] = &[
    "the", "loader", "streams", "shards", "of", "text", "into", "packed", "rows", "and", "café",
    "日本",
];

/// A document of 3..`max` words.
fn doc(i: u64, max: u64) -> String {
    let mut h = mix64(i);
    let n = 3 + h % max;
    (0..n)
        .map(|_| {
            h = mix64(h);
            WORDS[(h % WORDS.len() as u64) as usize]
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn dataset(name: &str, salt: u64, n: u64, max: u64) -> Dataset {
    // `kind`: a homogeneity group for packing.
    let docs = (0..n).map(|i| {
        Record::new()
            .with("text", doc(salt + i, max))
            .with("kind", (mix64(salt + i) % 3) as i64)
    });
    Dataset::in_memory(name, vec![docs.collect()]).unwrap()
}

const SEQ: usize = 48;

#[derive(Clone, Copy, Debug)]
struct Run {
    algorithm: PackAlgorithm,
    lanes: u32,
    passes: u64,
    /// With ensure_mixture or without.
    mixture: bool,
    /// With a filter after fetch (still restored from cuts).
    filter: bool,
    /// Rows padded by pack_flat.
    flat: bool,
    /// Shuffle the documents before tokenizing them: tokenize's
    /// micro-batches are in flight between shuffle and the next stateful
    /// operator when a cut is taken.
    late_tokenize: bool,
    /// `best_fit_wrap`'s `max_candidate_age`.
    max_age: Option<u64>,
    /// Rows homogeneous in the documents' `kind`.
    group: bool,
}

impl Run {
    fn work(&self, rank: u32, world: u32) -> WorkSource {
        WorkSource::builder()
            .dataset(dataset("short", 0, 90, 12), 0.6)
            .dataset(dataset("long", 10_000, 40, 60), 0.4)
            .seed(5)
            .chunk_size(10)
            .passes(self.passes)
            .canonical_lanes(self.lanes)
            .rank(rank)
            .world_size(world)
            .build()
            .unwrap()
    }

    fn pack(&self) -> PackConfig {
        let mut c = PackConfig::new(SEQ, self.algorithm).num_bins(3);
        if self.group {
            c = c.group_field("kind");
        }
        match self.max_age {
            Some(age) => c.max_candidate_age(age),
            None => c,
        }
    }

    fn mixture(&self) -> MixtureConfig {
        MixtureConfig::new([(0, 0.6), (1, 0.4)]).max_buffer_size(16)
    }

    fn recipe(&self, ws: &WorkSource) -> Recipe {
        let r = Recipe::new(ws)
            .setting("tokenize", "fixture tokenizer, bos+eos")
            .setting("shuffle", (24, ShuffleMode::Reservoir, 5))
            .setting("pack", self.pack())
            .setting("filter", self.filter)
            .setting("flat", self.flat)
            .setting("late_tokenize", self.late_tokenize);
        if self.mixture {
            r.setting("mixture", self.mixture())
        } else {
            r
        }
    }
}

/// (lane, index, digest of the collated batch).
type Out = (LaneId, u64, u64);
/// Per delivered batch: its lane and a digest of each row.
type Rows = Vec<(LaneId, Vec<u64>)>;
/// (step, lane) -> digest of the global batch's part from that lane.
type Global = BTreeMap<(u64, LaneId), u64>;

/// One rank, from `checkpoint` or fresh, at most `take` training batches of
/// `micro` rows; returns them and the rank's checkpoint afterwards.
fn run(
    r: Run,
    (rank, world): (u32, u32),
    micro: usize,
    parallelism: usize,
    checkpoint: Option<&Checkpoint>,
    take: usize,
    until_step: Option<u64>,
) -> (Vec<Out>, Rows, Checkpoint) {
    let ws = r.work(rank, world);
    let recipe = r.recipe(&ws);
    let mut progress: Progress = match checkpoint {
        Some(c) => recipe.resume(&ws, c).unwrap(),
        None => recipe.start(&ws),
    };
    let tok = TokenizeConfig::from_bytes(include_bytes!("fixtures/tokenizer.json"))
        .unwrap()
        .special_tokens(SpecialTokens::BosEos)
        .micro_batch(5);
    let runner = if parallelism > 1 {
        Runner::Threads { workers: 2 }
    } else {
        Runner::Inline
    };
    let fetched = ws.stream().fetch(parallelism);
    // Drops the documents of a length divisible by 3: a lane's documents no
    // longer sit at the work source's positions.
    let fetched: futures::stream::BoxStream<'static, zephon_core::Result<Record>> =
        if r.filter {
            Box::pin(fetched.filter_ok(|d: &Record| {
                !d.text("text").unwrap_or_default().len().is_multiple_of(3)
            }))
        } else {
            Box::pin(fetched)
        };
    let shuffled: futures::stream::BoxStream<'static, zephon_core::Result<Record>> =
        if r.late_tokenize {
            Box::pin(
                fetched
                    .shuffle(24, ShuffleMode::Reservoir, 5)
                    .tokenize(tok, parallelism),
            )
        } else {
            Box::pin(
                fetched
                    .tokenize(tok, parallelism)
                    .shuffle(24, ShuffleMode::Reservoir, 5),
            )
        };
    let mixed: futures::stream::BoxStream<'static, zephon_core::Result<Record>> = if r.mixture {
        Box::pin(shuffled.ensure_mixture(r.mixture()))
    } else {
        Box::pin(shuffled)
    };
    let packed = mixed.pack_sequences(r.pack());
    let rows: futures::stream::BoxStream<'static, zephon_core::Result<Record>> = if r.flat {
        Box::pin(packed.pack_flat(SEQ, 0))
    } else {
        Box::pin(packed)
    };
    let batches = rows
        .batch(micro)
        .resume_from(&progress)
        .lane_mux_from(&progress)
        .to_training(TrainingConfig::new(SEQ))
        .prefetch_batches(parallelism - 1)
        .into_blocking_iter(runner)
        .unwrap();
    let mut batches = batches;
    let obs = batches.enable_observability(zephon_core::Tracking::Operator);
    let mut out = Vec::new();
    let mut rows = Vec::new();
    // The pipeline ran to its end (every lane dry) unless a batch of
    // index `until_step` or the `take` limit stopped the loop first.
    let mut ended = true;
    for (taken, b) in batches.by_ref().enumerate() {
        if taken == take {
            ended = false;
            break;
        }
        let b = b.unwrap();
        // Lanes pack into different row counts, so some run dry early: a
        // checkpoint at step k is taken before the first batch of index k.
        if until_step.is_some_and(|k| b.index >= k) {
            ended = false;
            break;
        }
        // The consumer counts what it trains on; that is the checkpoint.
        progress.record_delivered(&b);
        out.push((
            b.lane,
            b.index,
            zephon_core::hash::bytes(&serde_json::to_vec(&b).unwrap()),
        ));
        let ids = b.input_ids.to_i64();
        let digests = ids.chunks(SEQ).map(|row| {
            row.iter()
                .fold(0, |h, &t| zephon_core::hash::combine(h, t as u64))
        });
        rows.push((b.lane, digests.collect()));
    }
    drop(batches);
    if ended {
        progress.mark_ended();
    }
    // What resume_from dropped: lane-batches replayed rather than restored
    // from a cut.
    let replayed = obs
        .metrics_snapshot()
        .operators
        .iter()
        .find(|o| o.name == "resume_from")
        .map_or(0, |o| o.elements_in - o.elements_out);
    REPLAYED.with(|r| r.set(replayed));
    (out, rows, progress.checkpoint())
}

thread_local! {
    /// Lane-batches the last `run` on this thread replayed.
    static REPLAYED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn algorithms() -> impl Strategy<Value = PackAlgorithm> {
    prop_oneof![
        Just(PackAlgorithm::FirstFit),
        Just(PackAlgorithm::BestFit),
        Just(PackAlgorithm::Wrap),
        Just(PackAlgorithm::BestFitWrap),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A checkpoint after any number of training batches, restored in a
    /// fresh pipeline with other parallelism: the same remaining batches.
    #[test]
    fn exact_resume_through_tokenize_mixture_and_packing(
        algorithm in algorithms(),
        frac in 0.0f64..1.0,
        parallelism in 1usize..4,
        mixture in any::<bool>(),
        filter in any::<bool>(),
        flat in any::<bool>(),
        late_tokenize in any::<bool>(),
        max_age in proptest::option::of(1u64..5),
        group in any::<bool>(),
    ) {
        // Candidates closed by age, their ages restored from the cut.
        let max_age = max_age.filter(|_| algorithm == PackAlgorithm::BestFitWrap);
        let r = Run { algorithm, lanes: 2, passes: 1, mixture, filter, flat, late_tokenize, max_age, group };
        let (full, _, _) = run(r, (0, 1), 3, 1, None, usize::MAX, None);
        // The cut falls `frac` of the way through, never at the end: an
        // empty remainder would make "nothing lost, nothing repeated" hold
        // trivially.
        prop_assert!(!full.is_empty());
        let cut = ((frac * full.len() as f64) as usize).min(full.len() - 1);
        let (head, _, ckpt) = run(r, (0, 1), 3, 1, None, cut, None);
        prop_assert_eq!(&head[..], &full[..cut]);
        let ckpt = Checkpoint::from_json(&ckpt.to_json()).unwrap();
        let (rest, _, _) = run(r, (0, 1), 3, parallelism, Some(&ckpt), usize::MAX, None);
        prop_assert!(!rest.is_empty(), "cut {} of {}: the restore delivered nothing", cut, full.len());
        prop_assert_eq!(&rest[..], &full[cut..]);
        prop_assert_eq!(REPLAYED.with(|r| r.get()), 0, "restored from cuts, nothing replayed");
    }
}

/// Runs all ranks of `world` for `steps` steps; global batches by step and
/// lane, and the merged checkpoint.
fn ranks(
    r: Run,
    world: u32,
    micro: usize,
    checkpoint: Option<&Checkpoint>,
    steps: usize,
) -> (Global, BTreeMap<LaneId, Vec<u64>>, Checkpoint) {
    let mut global = BTreeMap::new();
    let mut lanes: BTreeMap<LaneId, Vec<u64>> = BTreeMap::new();
    let mut parts = Vec::new();
    for rank in 0..world {
        let (out, rows, c) = run(
            r,
            (rank, world),
            micro,
            2,
            checkpoint,
            usize::MAX,
            Some(steps as u64),
        );
        for (lane, index, digest) in out {
            assert!(global.insert((index, lane), digest).is_none());
        }
        for (lane, r) in rows {
            lanes.entry(lane).or_default().extend(r);
        }
        parts.push(c);
    }
    (global, lanes, Checkpoint::merge(parts).unwrap())
}

#[test]
fn elastic_resume_on_4_and_1_ranks_across_epochs() {
    for (algorithm, mixture, filter, flat, late_tokenize) in [
        (PackAlgorithm::BestFit, true, false, false, false),
        (PackAlgorithm::Wrap, false, false, true, true),
        (PackAlgorithm::BestFitWrap, false, true, false, false),
        (PackAlgorithm::FirstFit, false, false, false, true),
        (PackAlgorithm::BestFit, true, true, true, true),
    ] {
        let r = Run {
            algorithm,
            lanes: 8,
            passes: 2,
            mixture,
            filter,
            flat,
            late_tokenize,
            // best_fit_wrap's candidates closed by age across rank counts.
            max_age: (algorithm == PackAlgorithm::BestFitWrap).then_some(2),
            // Homogeneous rows across rank counts.
            group: algorithm == PackAlgorithm::BestFitWrap,
        };
        let (full, _, _) = ranks(r, 2, 2, None, usize::MAX);
        let steps = full.keys().map(|(t, _)| *t).max().unwrap() + 1;
        assert!(steps >= 4, "{algorithm:?}: {steps} steps");
        let (_, _, ckpt) = ranks(r, 2, 2, None, 1);
        assert_eq!(ckpt.cuts.len(), 8, "{algorithm:?}: every lane cut");
        for k in [1, steps / 2, steps - 1] {
            let (_, _, ckpt) = ranks(r, 2, 2, None, k as usize);
            for world in [4, 1] {
                let (rest, _, _) = ranks(r, world, 2, Some(&ckpt), usize::MAX);
                let expected: BTreeMap<_, _> = full
                    .iter()
                    .filter(|((t, _), _)| *t >= k)
                    .map(|(key, d)| (*key, *d))
                    .collect();
                assert_eq!(
                    rest, expected,
                    "{algorithm:?}, mixture {mixture}, filter {filter}, flat {flat}, late tokenize {late_tokenize}, step {k}, {world} ranks"
                );
            }
        }
    }
}

/// Packing and the mixture describe their cuts through the open protocol:
/// documents and queues as preamble pointers, the rest as a state of their
/// own, which a checkpoint still checks on load (the checks they register)
/// and refuses with the file's name when it contradicts itself.
#[test]
fn packing_and_mixture_cuts_are_checked_on_load() {
    use zephon_core::checkpoint::OpState;
    let r = Run {
        algorithm: PackAlgorithm::BestFit,
        lanes: 2,
        passes: 1,
        mixture: true,
        filter: false,
        flat: false,
        late_tokenize: false,
        max_age: None,
        group: false,
    };
    let (_, _, ckpt) = run(r, (0, 1), 3, 1, None, 4, None);
    let find = |c: &Checkpoint, name: &str| -> (LaneId, usize) {
        let (lane, cut) = c
            .cuts
            .iter()
            .find(|(_, cut)| {
                cut.ops
                    .iter()
                    .any(|o| o.op == name && !o.preamble.listed.is_empty())
            })
            .expect("a cut holding documents");
        (*lane, cut.ops.iter().position(|o| o.op == name).unwrap())
    };
    let edit = |name: &str, f: &dyn Fn(&mut serde_json::Value)| {
        let mut c = ckpt.clone();
        let (lane, i) = find(&c, name);
        let op = &mut c.cuts.get_mut(&lane).unwrap().ops[i];
        assert_eq!(op.preamble.computed, 0, "{name} lists its preamble");
        let mut v = op.state.value().clone();
        f(&mut v);
        op.state = OpState::from_value(op.state.version(), v).unwrap();
        Checkpoint::from_slice(&c.to_bytes(), "step4.ckpt")
            .unwrap_err()
            .to_string()
    };
    let e = edit("pack_sequences", &|v| {
        v["open"] = serde_json::json!([[999, 0, 1]])
    });
    assert!(
        e.contains("step4.ckpt") && e.contains("`pack_sequences`") && e.contains("of document 999"),
        "{e}"
    );
    let e = edit("ensure_mixture", &|v| v["pending"] = 1000.into());
    assert!(
        e.contains("step4.ckpt") && e.contains("`ensure_mixture`") && e.contains("1000 pending"),
        "{e}"
    );
    // A cut of packing's first layout (without its candidates' ages) is
    // refused by its version.
    let mut old = ckpt.clone();
    let (lane, i) = find(&old, "pack_sequences");
    let op = &mut old.cuts.get_mut(&lane).unwrap().ops[i];
    let mut v = op.state.value().clone();
    v.as_object_mut().unwrap().remove("ages");
    op.state = OpState::from_value(1, v).unwrap();
    let e = Checkpoint::from_slice(&old.to_bytes(), "step4.ckpt")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`pack_sequences`") && e.contains("layout version 1"),
        "{e}"
    );
    // Untouched, it loads.
    Checkpoint::from_slice(&ckpt.to_bytes(), "step4.ckpt").unwrap();
}

#[test]
fn micro_batch_size_changed_on_restore_keeps_the_rows() {
    let r = Run {
        algorithm: PackAlgorithm::BestFitWrap,
        lanes: 4,
        passes: 1,
        mixture: false,
        filter: false,
        flat: false,
        late_tokenize: false,
        max_age: None,
        group: false,
    };
    // Per step, 4 rows per lane: micro-batches of 4, restored as 2 x 2.
    let (_, full_rows, _) = ranks(r, 2, 4, None, usize::MAX);
    let (_, head_rows, ckpt) = ranks(r, 2, 4, None, 3);
    let (_, rest_rows, _) = ranks(r, 4, 2, Some(&ckpt), usize::MAX);
    let mut joined = head_rows;
    for (lane, rows) in rest_rows {
        joined.entry(lane).or_default().extend(rows);
    }
    assert_eq!(joined, full_rows);
}

/// A shard that makes its token records on demand (lengths 20..200), so
/// the benchmark needs no memory for its millions of samples.
#[derive(Debug)]
struct Synthetic {
    name: String,
    len: u64,
}

impl zephon_core::Shard for Synthetic {
    fn name(&self) -> &str {
        &self.name
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn read_run(
        &self,
        start: u64,
        count: u64,
    ) -> futures::future::BoxFuture<'_, zephon_core::Result<Vec<Record>>> {
        let recs = (start..start + count)
            .map(|i| {
                let h = mix64(i);
                let n = 20 + (h % 180) as u32;
                let ids = (0..n).map(|t| (mix64(h ^ t as u64) % 30_000) as u32);
                Record::new().with("input_ids", zephon_core::Value::Tokens(ids.collect()))
            })
            .collect();
        Box::pin(futures::future::ready(Ok(recs)))
    }
}

/// The benchmark: 64 lanes, shuffle buffer 8192 per lane, best-fit
/// packing; checkpoint size and time, and restore time to the first batch
/// against a fresh start. Run with
/// `cargo test --release -p zephon-ops --test checkpoint -- --ignored --nocapture bench`;
/// with `ZEPHON_BENCH_FILTER=1` a filter after fetch drops about a quarter
/// of the documents (the shuffle then lists what it holds in the cut).
#[test]
#[ignore = "benchmark: run in release, see the doc comment"]
fn bench_checkpoint_and_restore() {
    use std::time::Instant;
    let shards: Vec<std::sync::Arc<dyn zephon_core::Shard>> = (0..16)
        .map(|s| {
            std::sync::Arc::new(Synthetic {
                name: format!("synthetic-{s}"),
                len: 1_000_000,
            }) as _
        })
        .collect();
    let ds = Dataset::new("synthetic", "memory", shards).unwrap();
    let ws = WorkSource::builder()
        .dataset(ds, 1.0)
        .seed(1)
        .canonical_lanes(64)
        .build()
        .unwrap();
    let pack = PackConfig::new(512, PackAlgorithm::BestFitWrap).num_bins(8);
    let filtered = std::env::var_os("ZEPHON_BENCH_FILTER").is_some();
    let recipe = Recipe::new(&ws)
        .setting("shuffle", (8192, ShuffleMode::Reservoir, 1))
        .setting("pack", pack.clone())
        .setting("filter", filtered);
    let pipeline = |p: &Progress| {
        let fetched = ws.stream().fetch(4);
        let fetched = if filtered {
            futures::future::Either::Left(fetched.filter_ok(|r: &Record| {
                !r.tokens("input_ids")
                    .unwrap_or_default()
                    .len()
                    .is_multiple_of(4)
            }))
        } else {
            futures::future::Either::Right(fetched)
        };
        fetched
            .shuffle(8192, ShuffleMode::Reservoir, 1)
            .pack_sequences(pack.clone())
            .batch(8)
            .resume_from(p)
            .lane_mux_from(p)
            .prefetch_batches(8)
            .into_blocking_iter(Runner::threads())
            .unwrap()
    };
    let dir = std::env::temp_dir().join(format!("zephon-ckpt-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // The median of three fresh starts, so a cold first run does not flatter
    // the restores.
    let mut fresh: Vec<_> = (0..3)
        .map(|_| {
            let t = Instant::now();
            let mut it = pipeline(&recipe.start(&ws));
            it.next().unwrap().unwrap();
            t.elapsed()
        })
        .collect();
    fresh.sort();
    let fresh_first = fresh[1];
    println!("fresh start: first batch after {fresh_first:.2?} (median of {fresh:.2?})");
    for steps in [1u64, 25, 100, 400, 2000] {
        let mut p = recipe.start(&ws);
        let t = Instant::now();
        let mut it = pipeline(&p);
        for _ in 0..steps * 64 {
            let b = it.next().unwrap().unwrap();
            p.record_delivered(&b);
        }
        drop(it);
        let run_time = t.elapsed();
        let t = Instant::now();
        let ckpt = p.checkpoint();
        let bin = dir.join("bench.ckpt");
        ckpt.save(&bin).unwrap();
        let ckpt_time = t.elapsed();
        let json = ckpt.to_json().len();
        let size = std::fs::metadata(&bin).unwrap().len();

        // Medians of three, fresh starts and restores alternating: a pass
        // now and then stalls for a second on this machine.
        let median = |mut v: Vec<std::time::Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        let loaded = Checkpoint::load(&bin).unwrap();
        assert_eq!(loaded.cuts.len(), 64, "every lane cut");
        let (mut fresh_now, mut restores) = (Vec::new(), Vec::new());
        let mut first = None;
        for _ in 0..3 {
            let t = Instant::now();
            let mut it = pipeline(&recipe.start(&ws));
            it.next().unwrap().unwrap();
            fresh_now.push(t.elapsed());
            drop(it);
            let t = Instant::now();
            let loaded = Checkpoint::load(&bin).unwrap();
            let resumed = recipe.resume(&ws, &loaded).unwrap();
            let mut it = pipeline(&resumed);
            let b = it.next().unwrap().unwrap();
            restores.push(t.elapsed());
            assert_eq!((b.lane, b.index), (0, steps));
            first = Some(b.items);
        }
        let (fresh_now, restore_first) = (median(fresh_now), median(restores));
        // The same checkpoint without its cuts: what a replay costs.
        let mut uncut = loaded.clone();
        uncut.cuts.clear();
        let t = Instant::now();
        let resumed = recipe.resume(&ws, &uncut).unwrap();
        let mut it = pipeline(&resumed);
        let b2 = it.next().unwrap().unwrap();
        let replay_first = t.elapsed();
        assert_eq!(
            Some(b2.items),
            first,
            "cut and replay restore the same batch"
        );
        let replayed: u64 = loaded.lanes.values().map(|l| l.items).sum();
        println!(
            "step {steps:>4}: {} batches from a fresh start in {run_time:.2?}; checkpoint {size} B binary / {json} B JSON, written in {ckpt_time:.2?}; \
             restore from cuts to first batch {restore_first:.2?} = {:.2}x a fresh start ({fresh_now:.2?}, \
             medians of 3 alternating); by replaying {replayed} delivered rows instead {replay_first:.2?} ({:.2}x)",
            steps * 64,
            restore_first.as_secs_f64() / fresh_now.as_secs_f64(),
            replay_first.as_secs_f64() / fresh_now.as_secs_f64()
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The panic message of `f`, run on a thread of its own; `hung` when it
/// has not ended after two minutes (the thread is left behind).
fn failure_of(f: impl FnOnce() + Send + 'static) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let message = r.err().map(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        });
        let _ = tx.send(message);
    });
    match rx.recv_timeout(std::time::Duration::from_secs(120)) {
        Ok(Some(m)) => m,
        Ok(None) => "ran to its end".into(),
        Err(_) => "hung".into(),
    }
}

/// `ckpt` with the state of the first `op` cut that `pick` accepts edited
/// by `f`, checked as a file is when it is read.
fn edited(
    ckpt: &Checkpoint,
    op: &str,
    pick: &dyn Fn(&serde_json::Value) -> bool,
    f: &dyn Fn(&mut serde_json::Value),
) -> Checkpoint {
    use zephon_core::checkpoint::OpState;
    let mut c = ckpt.clone();
    let state = c
        .cuts
        .values_mut()
        .flat_map(|cut| cut.ops.iter_mut())
        .find(|o| o.op == op && pick(o.state.value()))
        .unwrap_or_else(|| panic!("no cut of {op} to edit"))
        .state
        .clone();
    let mut v = state.value().clone();
    f(&mut v);
    for cut in c.cuts.values_mut() {
        for o in cut.ops.iter_mut().filter(|o| o.op == op) {
            if o.state == state {
                o.state = OpState::from_value(state.version(), v.clone()).unwrap();
            }
        }
    }
    // Consistent in itself: it loads, and only the restore can tell.
    Checkpoint::from_slice(&c.to_bytes(), "edited.ckpt").unwrap()
}

/// Cuts that load but that the run could not go on from (their fields are
/// consistent, but not with the operator's settings) are restore errors
/// naming the lane, not a hang or a row that never closes: a mixture queue
/// under a dataset without a weight was never drained (the restore spun
/// at the end of input), and `wrap`'s open row longer than `max_length`
/// underflowed the room left in it.
#[test]
fn cuts_the_operators_settings_rule_out_are_restore_errors() {
    let mixed = Run {
        algorithm: PackAlgorithm::BestFit,
        lanes: 2,
        passes: 1,
        mixture: true,
        filter: false,
        flat: false,
        late_tokenize: false,
        max_age: None,
        group: false,
    };
    let (_, _, ckpt) = run(mixed, (0, 1), 3, 1, None, 4, None);
    let queued = |v: &serde_json::Value| v["queues"].as_array().is_some_and(|q| !q.is_empty());
    let bad = edited(&ckpt, "ensure_mixture", &queued, &|v| {
        v["queues"][0][0] = 99.into()
    });
    let e = failure_of(move || {
        run(mixed, (0, 1), 3, 1, Some(&bad), usize::MAX, None);
    });
    assert!(
        e.contains("ensure_mixture, lane") && e.contains("queued under dataset 99"),
        "{e}"
    );

    let wrap = Run {
        algorithm: PackAlgorithm::Wrap,
        mixture: false,
        ..mixed
    };
    let (_, _, ckpt) = run(wrap, (0, 1), 3, 1, None, 4, None);
    let open = |v: &serde_json::Value| v["open"].as_array().is_some_and(|o| !o.is_empty());
    // The first open piece again and again: every piece is a range of a
    // listed document, the row far past SEQ.
    let bad = edited(&ckpt, "pack_sequences", &open, &|v| {
        let first = v["open"][0].clone();
        v["open"] = serde_json::Value::Array(vec![first; SEQ + 1]);
    });
    let e = failure_of(move || {
        run(wrap, (0, 1), 3, 1, Some(&bad), usize::MAX, None);
    });
    assert!(
        e.contains("pack_sequences") && e.contains(&format!("max_length {SEQ}")),
        "{e}"
    );
}

/// An operator upstream of packing whose output depends on more than its
/// input record (here, a count of the records it has seen) cannot be
/// restored from packing's cut: the documents the work source sends again
/// are not those packing held. The restore is an error that says so (it
/// blamed the tokenizer alone).
#[test]
fn a_record_changing_operator_upstream_of_packing_is_named_on_restore() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use zephon_core::Value;
    let recs: Vec<Record> = (0..200).map(|_| Record::new()).collect();
    let ws = WorkSource::builder()
        .dataset(Dataset::in_memory("d", vec![recs]).unwrap(), 1.0)
        .seed(4)
        .canonical_lanes(2)
        .build()
        .unwrap();
    let recipe = Recipe::new(&ws);
    let run = |mut p: Progress| {
        // Each document is as long as the count of documents before it.
        let seen = Arc::new(AtomicU64::new(0));
        ws.stream()
            .fetch(2)
            .map_par(
                move |mut r: Record| {
                    let n = seen.fetch_add(1, Ordering::Relaxed) as usize % 40 + 1;
                    r.set("input_ids", Value::Tokens(vec![7; n]));
                    Ok(r)
                },
                1,
            )
            .pack_sequences(PackConfig::new(64, PackAlgorithm::FirstFit).num_bins(4))
            .batch(2)
            .resume(&mut p)
            .into_blocking_iter(Runner::Inline)
            .unwrap()
            .checkpointed(p)
    };
    use zephon_core::checkpoint::CheckpointedExt;
    let mut first = run(recipe.start(&ws));
    for _ in 0..9 {
        first.next().unwrap().unwrap();
    }
    let ckpt = first.checkpoint();
    let e = run(recipe.resume(&ws, &ckpt).unwrap())
        .find_map(Result::err)
        .expect("an error on restore")
        .to_string();
    assert!(e.contains("upstream of packing"), "{e}");
}
