//! Every adapter of this crate shows its inner stream in `Debug` and hands it
//! out through `get_ref`, `get_mut` and `into_inner`; the ones that can tell
//! when they are done are `FusedStream`s. Listed one by one, so a missing
//! method is a compile error here.

use futures::StreamExt;
use futures::stream::FusedStream;
use std::fmt::Debug;
use zephon_core::checkpoint::{CheckpointedStreamExt, Recipe, ResumeExt};
use zephon_core::context::PipelineContext;
use zephon_core::{
    Dataset, Error, Observer, PipelineExt, Record, ShuffleMode, Tracking, WorkSource,
};

fn source() -> WorkSource {
    let ds = Dataset::in_memory(
        "toy",
        vec![(0..8).map(|i| Record::new().with("i", i as i64)).collect()],
    )
    .unwrap();
    WorkSource::builder()
        .dataset(ds, 1.0)
        .canonical_lanes(2)
        .build()
        .unwrap()
}

/// A recognisable inner stream: its `Debug` names it.
fn records()
-> futures::stream::Fuse<futures::stream::Iter<std::vec::IntoIter<Result<Record, Error>>>> {
    futures::stream::iter((0..4).map(|_| Ok(Record::new())).collect::<Vec<_>>()).fuse()
}

fn shows_inner<A: Debug>(a: &A, inner: &str) {
    let shown = format!("{a:?}");
    assert!(shown.contains(inner), "{shown}");
}

fn fused<A: FusedStream>(_: &A) {}

macro_rules! accessors {
    ($a:expr, $inner:literal) => {{
        let mut a = $a;
        shows_inner(&a, $inner);
        let _ = a.get_ref();
        let _ = a.get_mut();
        let _ = a.into_inner();
    }};
}

#[test]
fn every_adapter_shows_and_hands_out_its_inner_stream() {
    let ws = source();
    let progress = Recipe::new(&ws).start(&ws);
    accessors!(ws.stream().fetch(2), "PointerStream");
    accessors!(records().map_par(Ok, 2), "Fuse");
    accessors!(records().filter_ok(|_| true), "Fuse");
    accessors!(records().filter_map_ok(|r| Ok(Some(r))), "Fuse");
    accessors!(records().shuffle(4, ShuffleMode::Reservoir, 1), "Fuse");
    accessors!(records().batch(2), "Fuse");
    accessors!(records().lane_mux(vec![0]), "Fuse");
    accessors!(records().batch(2).resume_from(&progress), "Batcher");
    accessors!(
        records().batch(2).checkpointed_stream(progress.clone()),
        "Batcher"
    );
    accessors!(Observer::new(Tracking::Operator).observe(records()), "Fuse");
    let ctx = PipelineContext::new(None, None);
    accessors!(ctx.scope_stream(records()), "Fuse");
    // The upstream of prefetch_batches moves to a task of its own when it
    // starts: until then it is there.
    let mut p = records().prefetch_batches(2);
    shows_inner(&p, "Fuse");
    assert!(p.get_ref().is_some() && p.get_mut().is_some());
    assert!(p.into_inner().is_some());
}

#[test]
fn adapters_that_know_their_end_are_fused() {
    let ws = source();
    let progress = Recipe::new(&ws).start(&ws);
    fused(&records().filter_ok(|_| true));
    fused(&records().filter_map_ok(|r| Ok(Some(r))));
    fused(&records().batch(2).fuse().resume_from(&progress));
    fused(&records().batch(2).checkpointed_stream(progress.clone()));
    fused(&Observer::new(Tracking::Operator).observe(records()));
    fused(&PipelineContext::new(None, None).scope_stream(records()));

    let mut b = records().batch(3);
    let mut s = records().shuffle(2, ShuffleMode::Reservoir, 1);
    assert!(!b.is_terminated() && !s.is_terminated());
    let (nb, ns) = futures::executor::block_on(async {
        let nb = b.by_ref().count().await;
        let ns = s.by_ref().count().await;
        (nb, ns)
    });
    assert_eq!((nb, ns), (2, 4));
    assert!(b.is_terminated() && s.is_terminated());
}

/// Drains `a` to its end on a runtime (map_par and prefetch_batches need
/// one): not terminated before, terminated after; the element count.
fn ends_fused<A: FusedStream + Unpin>(rt: &tokio::runtime::Runtime, mut a: A, what: &str) -> usize {
    assert!(!a.is_terminated(), "{what} terminated before its end");
    let n = rt.block_on(a.by_ref().count());
    assert!(a.is_terminated(), "{what} not terminated after its end");
    n
}

#[test]
fn fetch_map_par_lane_mux_and_prefetch_batches_know_their_end() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let ws = source();
    assert_eq!(ends_fused(&rt, ws.stream().fetch(2), "fetch"), 8);
    assert_eq!(ends_fused(&rt, records().map_par(Ok, 2), "map_par"), 4);
    assert_eq!(
        ends_fused(&rt, ws.stream().fetch(2).lane_mux(vec![0, 1]), "lane_mux"),
        8
    );
    assert_eq!(
        ends_fused(&rt, records().prefetch_batches(2), "prefetch_batches"),
        4
    );
    assert_eq!(
        ends_fused(&rt, records().prefetch_batches(0), "prefetch_batches(0)"),
        4
    );
    // An invalid setting is an error first, then the end.
    let mut bad = records().lane_mux(vec![]);
    assert!(!bad.is_terminated());
    let out: Vec<_> = rt.block_on(bad.by_ref().collect());
    assert!(out.len() == 1 && out[0].is_err());
    assert!(bad.is_terminated());
}

/// Wrappers that add no stage explain as the pipeline they wrap.
#[test]
fn wrappers_explain_as_what_they_wrap() {
    use zephon_core::Runner;
    let ws = source();
    let progress = Recipe::new(&ws).start(&ws);
    let names = |p: zephon_core::obs::PlanDescription| -> Vec<String> {
        p.stages.into_iter().map(|s| s.name).collect()
    };
    let plain = names(ws.stream().fetch(2).batch(2).explain(Runner::Inline));
    let obs = Observer::new(Tracking::Operator);
    let observed = obs.observe(ws.stream().fetch(2).batch(2));
    assert_eq!(names(observed.explain(Runner::Inline)), plain);
    let scoped = PipelineContext::new(None, None).scope_stream(ws.stream().fetch(2).batch(2));
    assert_eq!(names(scoped.explain(Runner::Inline)), plain);
    let counted = ws.stream().fetch(2).batch(2).checkpointed_stream(progress);
    assert_eq!(names(counted.explain(Runner::Inline)), plain);
}
