//! Exhaustion policies: each sample arrives exactly as often as the policy
//! says, the same for 1 rank and 4, and across a checkpoint and restore at
//! any point.

use proptest::prelude::*;
use std::collections::BTreeMap;
use zephon_core::checkpoint::{Checkpoint, CheckpointedExt, Progress, Recipe, ResumeExt};
use zephon_core::work::ExhaustedPolicy;
use zephon_core::{
    Dataset, PipelineExt, Record, Runner, SamplePtr, ShuffleMode, WorkSource, WorkSourceBuilder,
    WorkState,
};

const LANES: u32 = 4;

#[derive(Clone, Debug)]
struct Spec {
    /// Per dataset: shard lengths, integer weight, policy.
    datasets: Vec<(Vec<u64>, u32, ExhaustedPolicy)>,
    /// Chunk size as a multiple of the weights' sum, so quotas never round
    /// a dataset to nothing, before or after a redistribution.
    chunks: u64,
    seed: u64,
}

fn policy() -> impl Strategy<Value = ExhaustedPolicy> {
    prop_oneof![
        Just(ExhaustedPolicy::Stop),
        Just(ExhaustedPolicy::Redistribute),
        Just(ExhaustedPolicy::Redistribute),
        (0u64..3).prop_map(|m| ExhaustedPolicy::Repeat {
            max_repeats: Some(m)
        }),
        Just(ExhaustedPolicy::Repeat { max_repeats: None }),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::collection::vec(
            (prop::collection::vec(1u64..10, 1..4), 1u32..5, policy()),
            1..5,
        ),
        1u64..4,
        any::<u64>(),
    )
        .prop_map(|(mut datasets, chunks, seed)| {
            // An uncapped repeat with nothing to end the stream is endless:
            // the first dataset stops it instead, so every run has an end.
            let ends = datasets.iter().any(|d| {
                matches!(
                    d.2,
                    ExhaustedPolicy::Stop
                        | ExhaustedPolicy::Repeat {
                            max_repeats: Some(_)
                        }
                )
            });
            let endless = datasets
                .iter()
                .any(|d| d.2 == ExhaustedPolicy::Repeat { max_repeats: None });
            if endless && !ends {
                datasets[0].2 = ExhaustedPolicy::Stop;
            }
            Spec {
                datasets,
                chunks,
                seed,
            }
        })
}

fn dataset(name: String, shards: &[u64]) -> Dataset {
    Dataset::in_memory(
        name,
        shards
            .iter()
            .map(|&n| vec![Record::new(); n as usize])
            .collect(),
    )
    .unwrap()
}

fn builder(s: &Spec) -> WorkSourceBuilder {
    let chunk = s.chunks * s.datasets.iter().map(|d| d.1 as u64).sum::<u64>();
    let mut b = WorkSource::builder()
        .seed(s.seed)
        .chunk_size(chunk)
        .canonical_lanes(LANES);
    for (i, (shards, w, _)) in s.datasets.iter().enumerate() {
        b = b.dataset(dataset(format!("d{i}"), shards), *w as f64);
    }
    b
}

fn with_policies(s: &Spec) -> WorkSourceBuilder {
    let mut b = builder(s);
    for (i, d) in s.datasets.iter().enumerate() {
        b = b.dataset_policy(&format!("d{i}"), d.2);
    }
    b
}

fn rank(b: WorkSourceBuilder, r: u32) -> WorkSource {
    b.world_size(LANES).rank(r).build().unwrap()
}

/// Per dataset, how often each (shard, sample) arrived.
type Counts = Vec<BTreeMap<(u32, u64), u64>>;

fn counts(ptrs: &[SamplePtr], n: usize) -> Counts {
    let mut c: Counts = vec![BTreeMap::new(); n];
    for p in ptrs {
        *c[p.dataset as usize]
            .entry((p.shard, p.sample))
            .or_default() += 1;
    }
    c
}

/// The pointers of dataset `d` form whole passes then one partial pass:
/// every sample `k` or `k + 1` times, exactly `n mod total` of them `k + 1`.
fn assert_passes(
    c: &BTreeMap<(u32, u64), u64>,
    shards: &[u64],
    d: usize,
) -> Result<u64, TestCaseError> {
    let total: u64 = shards.iter().sum();
    let n: u64 = c.values().sum();
    let (k, extra) = (n / total, n % total);
    let mut more = 0;
    for (s, &len) in shards.iter().enumerate() {
        for i in 0..len {
            let got = c.get(&(s as u32, i)).copied().unwrap_or(0);
            prop_assert!(
                got == k || got == k + 1,
                "dataset {d}: sample {s}/{i} arrived {got} times in {n} pointers over {total}"
            );
            more += (got == k + 1) as u64;
        }
    }
    prop_assert_eq!(more, extra, "dataset {}: partial pass", d);
    Ok(n)
}

/// The same run from 4 ranks, each restored from `state` (when given),
/// equals the single-rank run from that point, lane by lane.
fn assert_ranks(
    b: &WorkSourceBuilder,
    full: &[SamplePtr],
    from: usize,
    state: Option<&WorkState>,
) -> Result<(), TestCaseError> {
    for r in 0..LANES {
        let mut ws = rank(b.clone(), r);
        if let Some(st) = state {
            ws.restore(st).unwrap();
        }
        let want: Vec<SamplePtr> = full[from..]
            .iter()
            .filter(|p| p.lane == r)
            .copied()
            .collect();
        prop_assert_eq!(ws.len(), Some(want.len() as u64));
        let got: Vec<SamplePtr> = ws.stream().pointers().collect();
        prop_assert_eq!(got, want, "rank {} from {}", r, from);
    }
    Ok(())
}

/// A checkpoint after `k` pointers, through its serialized form.
fn checkpoint(b: &WorkSourceBuilder, k: usize) -> WorkState {
    let mut ws = b.clone().build().unwrap();
    let mut s = ws.stream();
    for _ in 0..k {
        s.next_pointer().unwrap();
    }
    ws.seek(s.position());
    serde_json::from_str(&serde_json::to_string(&ws.state()).unwrap()).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn per_dataset_policies_deliver_what_they_say(s in spec(), at in 0.0f64..1.0) {
        let b = with_policies(&s);
        let ws = b.clone().build().unwrap();
        let full: Vec<SamplePtr> = ws.stream().pointers().collect();
        prop_assert_eq!(ws.global_len(), Some(full.len() as u64));
        let c = counts(&full, s.datasets.len());
        let mut ended_by = None;
        for (d, (shards, _, p)) in s.datasets.iter().enumerate() {
            let n = assert_passes(&c[d], shards, d)?;
            let total: u64 = shards.iter().sum();
            let limit = match p {
                ExhaustedPolicy::Stop | ExhaustedPolicy::Redistribute => Some(total),
                ExhaustedPolicy::Repeat { max_repeats } => max_repeats.map(|m| (m + 1) * total),
            };
            if let Some(l) = limit {
                prop_assert!(n <= l, "dataset {d} ({p:?}): {n} pointers over its limit {l}");
                if n == l && *p != ExhaustedPolicy::Redistribute {
                    ended_by = Some(d);
                }
            }
        }
        let all_leave = s.datasets.iter().all(|d| d.2 == ExhaustedPolicy::Redistribute);
        if all_leave {
            // Every dataset leaves after its pass: each sample exactly once.
            let want: u64 = s.datasets.iter().flat_map(|d| &d.0).sum();
            prop_assert_eq!(full.len() as u64, want);
        } else {
            // Something with a limit ended the stream, at its limit; every
            // dataset that leaves is either gone whole or was still in.
            prop_assert!(ended_by.is_some(), "the stream ended with no dataset at its limit");
        }
        assert_ranks(&b, &full, 0, None)?;
        let k = (at * full.len() as f64) as usize;
        let st = checkpoint(&b, k);
        prop_assert_eq!(st.next_global, k as u64);
        assert_ranks(&b, &full, k, Some(&st))?;
    }

    #[test]
    fn stop_after_passes_reads_every_dataset_that_often(s in spec(), passes in 1u64..4, at in 0.0f64..1.0) {
        let b = builder(&s).stop_after_passes(passes);
        let ws = b.clone().build().unwrap();
        let full: Vec<SamplePtr> = ws.stream().pointers().collect();
        prop_assert_eq!(ws.global_len(), Some(full.len() as u64));
        let c = counts(&full, s.datasets.len());
        let mut exact = Vec::new();
        for (d, (shards, _, _)) in s.datasets.iter().enumerate() {
            let n = assert_passes(&c[d], shards, d)?;
            let want = passes * shards.iter().sum::<u64>();
            prop_assert!(n >= want, "dataset {d}: {n} pointers, fewer than {passes} passes");
            if n == want {
                exact.push(d as u32);
            }
        }
        // The last pointer completes the last dataset's last pass.
        let last = full.last().unwrap().dataset;
        prop_assert!(exact.contains(&last), "the last pointer ({last}) completes no pass; exact {exact:?}");
        assert_ranks(&b, &full, 0, None)?;
        let k = (at * full.len() as f64) as usize;
        assert_ranks(&b, &full, k, Some(&checkpoint(&b, k)))?;
    }

    #[test]
    fn stop_after_passes_of_the_first_still_ends_at_the_first(s in spec(), passes in 1u64..3) {
        let ws = builder(&s).passes(passes).build().unwrap();
        let full: Vec<SamplePtr> = ws.stream().pointers().collect();
        let c = counts(&full, s.datasets.len());
        let mut at_limit = 0;
        for (d, (shards, _, _)) in s.datasets.iter().enumerate() {
            let n = assert_passes(&c[d], shards, d)?;
            let want = passes * shards.iter().sum::<u64>();
            prop_assert!(n <= want);
            at_limit += (n == want) as u32;
        }
        prop_assert!(at_limit >= 1);
    }
}

#[test]
fn redistribution_keeps_the_survivors_proportions() {
    // `a` (weight 2) leaves after its 10 samples; `b` and `c` (1 : 3) go on
    // repeating in the same proportion, now with all of the stream.
    let s = Spec {
        datasets: vec![
            (vec![10], 2, ExhaustedPolicy::Redistribute),
            (
                vec![7],
                1,
                ExhaustedPolicy::Repeat {
                    max_repeats: Some(9),
                },
            ),
            (vec![30], 3, ExhaustedPolicy::Repeat { max_repeats: None }),
        ],
        chunks: 2,
        seed: 5,
    };
    let ws = with_policies(&s).build().unwrap();
    let full: Vec<SamplePtr> = ws.stream().pointers().collect();
    // `b` ends the run where it asks for an 11th pass: 70 samples, and 3
    // times as many of `c` (give or take the end of the last chunk).
    let c = counts(&full, 3);
    let n: Vec<u64> = c.iter().map(|m| m.values().sum()).collect();
    assert_eq!(n[..2], [10, 70]);
    assert!((210..=213).contains(&n[2]), "{n:?}");
    let gone = full.iter().rposition(|p| p.dataset == 0).unwrap();
    let after: Vec<u32> = full[gone + 1..].iter().map(|p| p.dataset).collect();
    assert!(after.len() > 200);
    for chunk in after.chunks(4).take(after.len() / 4 - 1) {
        // Chunks of 12 with quotas 3 : 9 spread as 1 : 3 in every 4.
        assert_eq!(chunk.iter().filter(|&&d| d == 1).count(), 1, "{after:?}");
    }
}

#[test]
fn a_restore_into_a_different_policy_is_refused() {
    let s = Spec {
        datasets: vec![
            (vec![10], 1, ExhaustedPolicy::Redistribute),
            (vec![10], 1, ExhaustedPolicy::Stop),
        ],
        chunks: 1,
        seed: 0,
    };
    let st = checkpoint(&with_policies(&s), 5);
    let mut other = builder(&s)
        .dataset_policy("d0", ExhaustedPolicy::Stop)
        .dataset_policy("d1", ExhaustedPolicy::Stop)
        .build()
        .unwrap();
    let e = other.restore(&st).unwrap_err().to_string();
    assert!(e.contains("fingerprint"), "{e}");
}

/// Records that name themselves, so a batch's digests identify its samples.
fn named(s: &Spec) -> WorkSourceBuilder {
    let chunk = s.chunks * s.datasets.iter().map(|d| d.1 as u64).sum::<u64>();
    let mut b = WorkSource::builder()
        .seed(s.seed)
        .chunk_size(chunk)
        .canonical_lanes(LANES);
    for (i, (shards, w, p)) in s.datasets.iter().enumerate() {
        let shards = shards
            .iter()
            .enumerate()
            .map(|(k, &n)| {
                (0..n)
                    .map(|j| Record::new().with("text", format!("{i}/{k}/{j}")))
                    .collect()
            })
            .collect();
        let name = format!("d{i}");
        b = b
            .dataset(Dataset::in_memory(&name, shards).unwrap(), *w as f64)
            .dataset_policy(&name, *p);
    }
    b
}

/// Per lane, the digests of what `world` ranks delivered, at most `take`
/// batches per lane, from `ckpt` or fresh; and the merged checkpoint.
fn pipeline(
    b: &WorkSourceBuilder,
    world: u32,
    ckpt: Option<&Checkpoint>,
    take: usize,
) -> (BTreeMap<u32, Vec<u64>>, Checkpoint) {
    let mut lanes: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut parts = Vec::new();
    for r in 0..world {
        let ws = rank_of(b, world, r);
        let recipe = Recipe::new(&ws).setting("shuffle", (5, ShuffleMode::Reservoir, 3));
        let progress: Progress = match ckpt {
            Some(c) => recipe.resume(&ws, c).unwrap(),
            None => recipe.start(&ws),
        };
        let batches = ws
            .stream()
            .fetch(2)
            .shuffle(5, ShuffleMode::Reservoir, 3)
            .batch(2)
            .resume_from(&progress)
            .lane_mux_from(&progress);
        let mut it = batches
            .into_blocking_iter(Runner::Inline)
            .unwrap()
            .checkpointed(progress);
        let per_rank = (LANES / world) as usize;
        for batch in it.by_ref().take(take.saturating_mul(per_rank)) {
            let batch = batch.unwrap();
            lanes
                .entry(batch.lane)
                .or_default()
                .extend(batch.items.iter().map(Record::digest));
        }
        parts.push(it.checkpoint());
    }
    (lanes, Checkpoint::merge(parts).unwrap())
}

fn rank_of(b: &WorkSourceBuilder, world: u32, r: u32) -> WorkSource {
    b.clone().world_size(world).rank(r).build().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A pipeline with a shuffle over a redistributed (or capped) schedule,
    /// checkpointed on 2 ranks at any step and restored on 4 from the lane
    /// cuts, continues every lane exactly.
    #[test]
    fn a_pipeline_checkpoint_mid_schedule_continues_exactly(s in spec(), at in 0.0f64..1.0) {
        let b = named(&s);
        let (full, _) = pipeline(&b, 2, None, usize::MAX / 8);
        let longest = full.values().map(Vec::len).max().unwrap_or(0).div_ceil(2);
        let k = ((at * longest as f64) as usize).min(longest.saturating_sub(1));
        let (head, ckpt) = pipeline(&b, 2, None, k);
        let ckpt = Checkpoint::from_bytes(&ckpt.to_bytes()).unwrap();
        let (rest, _) = pipeline(&b, 4, Some(&ckpt), usize::MAX / 8);
        prop_assert!(!rest.is_empty(), "cut after {} of {} batches: nothing left to restore", k, longest);
        let mut joined = head;
        for (lane, items) in rest {
            joined.entry(lane).or_default().extend(items);
        }
        prop_assert_eq!(joined, full, "cut after {} batches per lane", k);
    }
}
