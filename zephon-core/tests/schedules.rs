//! Mixture schedules: the pointer at every global index is a pure function
//! of it, so a scheduled run is the same on any rank count and across
//! restores at any step, and each phase delivers its target shares.

use proptest::prelude::*;
use zephon_core::checkpoint::{Checkpoint, CheckpointedExt, Recipe, ResumeExt};
use zephon_core::work::{ExhaustedPolicy, MixtureSchedule, ScheduleUnit};
use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};

const NAMES: [&str; 3] = ["web", "code", "books"];

/// Dataset `d`'s sample `i` carries id `d * 1_000_000 + i`.
fn datasets(sizes: [u64; 3]) -> Vec<Dataset> {
    NAMES
        .iter()
        .zip(sizes)
        .enumerate()
        .map(|(d, (name, n))| {
            let recs = (0..n)
                .map(|i| Record::new().with("id", (d as i64) * 1_000_000 + i as i64))
                .collect();
            Dataset::in_memory(*name, vec![recs]).unwrap()
        })
        .collect()
}

fn work(schedule: &MixtureSchedule, lanes: u32, rank: u32, world: u32) -> WorkSource {
    let mut b = WorkSource::builder();
    for (d, w) in datasets([300, 200, 100]).into_iter().zip([2.0, 1.0, 1.0]) {
        b = b.dataset(d, w);
    }
    b.seed(7)
        .chunk_size(8)
        .repeat()
        .canonical_lanes(lanes)
        .rank(rank)
        .world_size(world)
        .mixture_schedule(schedule.clone())
        .build()
        .unwrap()
}

/// The id of the sample at global index `g`, from the pointer alone.
fn id_at(ws: &WorkSource, g: u64) -> i64 {
    let p = ws.pointer_at(g);
    p.dataset as i64 * 1_000_000 + p.sample as i64
}

fn ids(b: &zephon_core::RecordBatch) -> Vec<i64> {
    b.items
        .iter()
        .map(|r| r.get("id").and_then(|v| v.as_int()).unwrap())
        .collect()
}

/// A random schedule: up to 4 points over the first 2,000 samples, each
/// naming a random non-empty subset of the datasets.
fn schedules() -> impl Strategy<Value = MixtureSchedule> {
    let point = (
        1u64..500,
        prop::collection::vec(prop::option::of(1u32..5), 3),
    );
    (
        prop::collection::vec(point, 1..4),
        prop::bool::ANY,
        1u64..64,
    )
        .prop_map(|(points, linear, step)| {
            let mut s = if linear {
                MixtureSchedule::linear(ScheduleUnit::Samples, step)
            } else {
                MixtureSchedule::phases(ScheduleUnit::Samples)
            };
            let mut at = 0;
            for (gap, weights) in points {
                at += gap;
                let mut w: Vec<(&str, f64)> = NAMES
                    .iter()
                    .zip(&weights)
                    .filter_map(|(n, w)| w.map(|w| (*n, w as f64)))
                    .collect();
                if w.is_empty() {
                    w.push(("books", 1.0));
                }
                s = s.at(at, &w);
            }
            s
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Checkpointed after a random number of batches on 1 rank, resumed on
    /// 1, 2 or 4: every lane's batches are those the pointers alone give
    /// (lane `l` holds global indices `l, l + L, ...`), under a random
    /// schedule.
    #[test]
    fn a_scheduled_run_resumes_exactly_on_any_rank_count(
        schedule in schedules(),
        taken in 0usize..60,
        world in prop::sample::select(vec![1u32, 2, 4]),
    ) {
        const LANES: u32 = 4;
        const BATCH: usize = 4;
        const STEPS: u64 = 40;
        let reference = work(&schedule, LANES, 0, 1);
        let expected = |lane: u32, index: u64| -> Vec<i64> {
            (0..BATCH as u64)
                .map(|j| id_at(&reference, lane as u64 + (index * BATCH as u64 + j) * LANES as u64))
                .collect()
        };
        let ws = work(&schedule, LANES, 0, 1);
        let mut p = Recipe::new(&ws).start(&ws);
        let mut it = ws.stream().fetch(2).batch(BATCH).resume(&mut p)
            .into_blocking_iter(Runner::Inline).unwrap().checkpointed(p);
        for _ in 0..taken {
            let b = it.next().unwrap().unwrap();
            prop_assert_eq!(ids(&b), expected(b.lane, b.index));
        }
        let bytes = it.checkpoint().to_bytes();
        for r in 0..world {
            let ws = work(&schedule, LANES, r, world);
            let mut p = Recipe::new(&ws).resume(&ws, &Checkpoint::from_bytes(&bytes).unwrap()).unwrap();
            let it = ws.stream().fetch(3).batch(BATCH).resume(&mut p).prefetch_batches(2)
                .into_blocking_iter(Runner::threads()).unwrap().checkpointed(p);
            for b in it.take((STEPS as usize) * ws.owned_lanes().len()) {
                let b = b.unwrap();
                prop_assert_eq!(ids(&b), expected(b.lane, b.index), "rank {} of {}", r, world);
            }
        }
    }

    /// What the streams of 1, 2 or 4 ranks hand out (pointer by pointer,
    /// or in runs as `fetch` takes them) is counted per phase and dataset
    /// as the pointers alone say: summed over the ranks, every count is
    /// that of the global indices they covered, and the current phase is
    /// the one of the last of them.
    #[test]
    fn phase_shares_count_what_the_streams_handed_out(
        schedule in schedules(),
        per_rank in 0usize..1500,
        world in prop::sample::select(vec![1u32, 2, 4]),
        in_runs in prop::bool::ANY,
    ) {
        use zephon_core::Catalogued;
        const LANES: u32 = 4;
        let reference = work(&schedule, LANES, 0, 1);
        let starts: Vec<u64> = reference.phase_shares().unwrap().phases.iter().map(|p| p.start).collect();
        let phase_of = |g: u64| starts.partition_point(|&s| s <= g) - 1;
        let mut expected = vec![[0u64; 3]; starts.len()];
        let mut counted = vec![[0u64; 3]; starts.len()];
        let mut last_g = None;
        for r in 0..world {
            let ws = work(&schedule, LANES, r, world);
            let owned = ws.owned_lanes();
            // Each stream is dropped before the counts are read: it adds
            // what it counted then.
            let got: Vec<_> = if in_runs {
                let mut s = ws.stream();
                let mut got = Vec::new();
                while got.len() < per_rank {
                    let want = (per_rank - got.len()).min(37);
                    if std::pin::Pin::new(&mut s).next_pointers(&mut got, want) == Some(0) {
                        break;
                    }
                }
                got
            } else {
                ws.stream().pointers().take(per_rank).collect()
            };
            let mut globals = (0u64..).filter(|g| owned.contains(&((g % LANES as u64) as u32)));
            for p in &got {
                let g = globals.next().unwrap();
                prop_assert_eq!(reference.pointer_at(g).dataset, p.dataset);
                expected[phase_of(g)][p.dataset as usize] += 1;
                last_g = last_g.max(Some(g));
            }
            let shares = ws.phase_shares().unwrap();
            prop_assert_eq!(shares.phases.len(), starts.len());
            for (i, ph) in shares.phases.iter().enumerate() {
                for (d, ds) in ph.datasets.iter().enumerate() {
                    counted[i][d] += ds.handed_out;
                }
            }
            if world == 1 {
                prop_assert_eq!(shares.current, last_g.map(phase_of));
            }
        }
        prop_assert_eq!(counted, expected);
    }

    /// In every phase of a piecewise-constant schedule, each dataset's
    /// share of the phase's global indices is its target share, within
    /// one chunk's rounding and the partial chunks at the phase's ends.
    #[test]
    fn each_phase_delivers_its_target_shares(
        weights in prop::collection::vec(prop::collection::vec(1u32..6, 3), 1..4),
        length in 400u64..1200,
    ) {
        let mut s = MixtureSchedule::phases(ScheduleUnit::Samples);
        for (i, w) in weights.iter().enumerate() {
            let w: Vec<(&str, f64)> = NAMES.iter().zip(w).map(|(n, w)| (*n, *w as f64)).collect();
            s = s.at(i as u64 * length, &w);
        }
        let ws = work(&s, 1, 0, 1);
        for (i, w) in weights.iter().enumerate() {
            let total: u32 = w.iter().sum();
            let start = i as u64 * length;
            let mut count = [0u64; 3];
            for g in start..start + length {
                count[ws.pointer_at(g).dataset as usize] += 1;
            }
            for d in 0..3 {
                let share = count[d] as f64 / length as f64;
                let target = w[d] as f64 / total as f64;
                // Quotas are exact per chunk of 8, up to one slot of
                // rounding; the phase need not start on a chunk.
                let tolerance = 1.0 / 8.0 + 2.0 * 8.0 / length as f64;
                prop_assert!((share - target).abs() <= tolerance,
                    "phase {}: `{}` share {} target {}", i, NAMES[d], share, target);
            }
        }
    }
}

#[test]
fn three_phases_by_global_batch_with_a_dataset_entering_and_leaving() {
    // 10 global batches of 16 on web and code, 10 with books added, then
    // books alone (an anneal).
    let s = MixtureSchedule::phases(ScheduleUnit::GlobalBatches { size: 16 })
        .at(0, &[("web", 1.0), ("code", 1.0)])
        .at(10, &[("web", 1.0), ("code", 1.0), ("books", 2.0)])
        .at(20, &[("books", 1.0)]);
    let ws = work(&s, 4, 0, 1);
    let shares = |from: u64, to: u64| {
        let mut c = [0u64; 3];
        for g in from * 16..to * 16 {
            c[ws.pointer_at(g).dataset as usize] += 1;
        }
        c
    };
    assert_eq!(shares(0, 10), [80, 80, 0]);
    assert_eq!(shares(10, 20), [40, 40, 80]);
    assert_eq!(shares(20, 30), [0, 0, 160]);
    assert_eq!(ws.segments().len(), 3);
    // `explain()` says where the stream stands in the schedule.
    let mut at = ws.clone();
    at.seek(170);
    let plan = at.stream().explain(Runner::Inline).to_string();
    assert!(
        plan.contains("from 20 {books 1}; at global index 170, in phase 2 of 3;"),
        "{plan}"
    );
}

#[test]
fn a_phase_whose_datasets_have_all_left_ends_the_stream() {
    let s = MixtureSchedule::phases(ScheduleUnit::Samples)
        .at(0, &[("web", 1.0), ("code", 1.0)])
        .at(100, &[("books", 1.0)]);
    let mut b = WorkSource::builder();
    for (d, w) in datasets([300, 200, 100]).into_iter().zip([1.0, 1.0, 1.0]) {
        b = b.dataset(d, w);
    }
    let ws = b
        .chunk_size(8)
        .exhausted_policy(ExhaustedPolicy::Redistribute)
        .mixture_schedule(s)
        .build()
        .unwrap();
    // 100 of web and code, then books' 100 samples once: the end.
    assert_eq!(ws.global_len(), Some(200));
    let books: Vec<u64> = (100..200).map(|g| ws.pointer_at(g).sample).collect();
    let mut sorted = books.clone();
    sorted.sort();
    assert_eq!(sorted, (0..100).collect::<Vec<_>>());
}

#[test]
fn a_resume_under_another_schedule_is_refused() {
    let a = MixtureSchedule::phases(ScheduleUnit::Samples).at(100, &[("web", 1.0)]);
    let b = MixtureSchedule::phases(ScheduleUnit::Samples).at(101, &[("web", 1.0)]);
    let ws = work(&a, 2, 0, 1);
    let ckpt = Recipe::new(&ws).start(&ws).checkpoint();
    let other = work(&b, 2, 0, 1);
    let e = Recipe::new(&other)
        .resume(&other, &ckpt)
        .unwrap_err()
        .to_string();
    assert!(e.contains("work source fingerprint differs"), "{e}");
}

#[test]
fn bad_schedules_are_errors_naming_the_setting_and_the_point() {
    let build = |s: MixtureSchedule| {
        let mut b = WorkSource::builder();
        for (d, w) in datasets([30, 20, 10]).into_iter().zip([1.0, 1.0, 1.0]) {
            b = b.dataset(d, w);
        }
        b.repeat()
            .mixture_schedule(s)
            .build()
            .unwrap_err()
            .to_string()
    };
    let p = || MixtureSchedule::phases(ScheduleUnit::Samples);
    let cases: Vec<(MixtureSchedule, &str)> = vec![
        (p(), "at least one point"),
        (
            p().at(10, &[("web", 1.0)]).at(10, &[("code", 1.0)]),
            "point 1: position 10 is not after",
        ),
        (
            p().at(10, &[("web", 1.0)]).at(5, &[("code", 1.0)]),
            "point 1: position 5",
        ),
        (p().at(0, &[("nope", 1.0)]), "point 0: names dataset `nope`"),
        (
            p().at(0, &[("web", 0.0)]),
            "point 0: no dataset has a positive weight",
        ),
        (p().at(0, &[("web", -1.0)]), "weight -1"),
        (p().at(0, &[("web", f64::NAN)]), "weight NaN"),
        (
            MixtureSchedule::phases(ScheduleUnit::GlobalBatches { size: 0 }).at(0, &[("web", 1.0)]),
            "global batches of 0",
        ),
        (
            MixtureSchedule::phases(ScheduleUnit::GlobalBatches { size: u64::MAX })
                .at(2, &[("web", 1.0)]),
            "overflows",
        ),
        (
            MixtureSchedule::linear(ScheduleUnit::Samples, 0).at(0, &[("web", 1.0)]),
            "linear step of 0",
        ),
        (
            MixtureSchedule::linear(ScheduleUnit::Samples, 1)
                .at(0, &[("web", 1.0)])
                .at(1 << 20, &[("code", 1.0)]),
            "linear steps",
        ),
    ];
    for (s, want) in cases {
        let e = build(s);
        assert!(
            e.contains("`mixture_schedule`") && e.contains(want),
            "{want}: {e}"
        );
    }
    let e = MixtureSchedule::anneal(ScheduleUnit::Samples, 100, 1.5, &[("web", 1.0)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("anneal fraction 1.5"), "{e}");
}

#[test]
fn a_schedule_by_tokens_switches_where_the_estimated_tokens_reach_the_point() {
    // web samples count 10 tokens, code 30: token shares 1:1 from 0 are
    // sample shares 3:1; from 6,000 tokens on, code alone.
    let s = MixtureSchedule::phases(ScheduleUnit::Tokens)
        .at(0, &[("web", 1.0), ("code", 1.0)])
        .at(6_000, &[("code", 1.0)]);
    let mut b = WorkSource::builder();
    for (d, w) in datasets([300, 200, 100]).into_iter().zip([1.0, 1.0, 1.0]) {
        b = b.dataset(d, w);
    }
    let ws = b
        .chunk_size(8)
        .repeat()
        .tokens_per_sample("web", 10.0)
        .tokens_per_sample("code", 30.0)
        .tokens_per_sample("books", 20.0)
        .mixture_schedule(s.clone())
        .build()
        .unwrap();
    let per_sample = [10.0, 30.0, 20.0];
    let mut tokens = 0.0;
    let mut switched = None;
    for g in 0..2_000u64 {
        let d = ws.pointer_at(g).dataset as usize;
        if tokens >= 6_000.0 {
            switched.get_or_insert(g);
            assert_eq!(d, 1, "index {g}: code alone once 6,000 tokens are reached");
        } else {
            assert_ne!(d, 2, "books is in no phase");
        }
        tokens += per_sample[d];
    }
    let first = switched.unwrap();
    let web = (0..first)
        .filter(|&g| ws.pointer_at(g).dataset == 0)
        .count() as f64;
    // Token shares of the first phase: 1:1 within a chunk's rounding.
    let share = web * 10.0 / 6_000.0;
    assert!((share - 0.5).abs() < 0.05, "web's token share {share}");
    // Without tokens per sample a schedule by tokens is refused.
    let mut b = WorkSource::builder();
    for (d, w) in datasets([30, 20, 10]).into_iter().zip([1.0, 1.0, 1.0]) {
        b = b.dataset(d, w);
    }
    let e = b
        .repeat()
        .mixture_schedule(s)
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`mixture_schedule`") && e.contains("tokens per sample"),
        "{e}"
    );
}

/// The observer of a scheduled pipeline carries what the work source
/// handed out per phase: in its snapshots and in the Prometheus series.
#[test]
fn the_observer_shows_each_phases_target_and_handed_out_samples() {
    let s = MixtureSchedule::phases(ScheduleUnit::GlobalBatches { size: 16 })
        .at(0, &[("web", 1.0), ("code", 1.0)])
        .at(10, &[("web", 1.0), ("code", 1.0), ("books", 2.0)])
        .at(20, &[("books", 1.0)]);
    let ws = work(&s, 1, 0, 1);
    let mut it = ws
        .stream()
        .fetch(2)
        .batch(16)
        .into_blocking_iter(Runner::Inline)
        .unwrap();
    let obs = it.enable_observability(zephon_core::Tracking::Operator);
    assert_eq!(it.by_ref().take(30).count(), 30);
    // The stream adds its last counts when it is dropped.
    drop(it);
    let shares = obs.metrics_snapshot().schedule.expect("a schedule");
    assert_eq!(shares, ws.phase_shares().unwrap());
    assert_eq!(shares.current, Some(2));
    let handed = |p: usize| -> Vec<u64> {
        shares.phases[p]
            .datasets
            .iter()
            .map(|d| d.handed_out)
            .collect()
    };
    assert_eq!(handed(0), [80, 80, 0]);
    assert_eq!(handed(1), [40, 40, 80]);
    assert!(handed(2)[2] >= 160, "{shares:?}");
    let shown = obs.metrics_snapshot().to_string();
    assert!(
        shown.contains("phase 2 from global batch 10: 160 samples handed out; web 25.0% (target 25.0%), code 25.0% (target 25.0%), books 50.0% (target 50.0%)"),
        "{shown}"
    );
    #[cfg(feature = "prometheus")]
    {
        let text = obs.prometheus_text();
        for line in [
            "zephon_schedule_phase 3.0",
            r#"zephon_schedule_target_share{phase="2",dataset="books"} 0.5"#,
            r#"zephon_schedule_samples_total{phase="2",dataset="books"} 80"#,
            r#"zephon_schedule_samples_total{phase="1",dataset="books"} 0"#,
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
    }
}
