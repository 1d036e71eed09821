//! `size_hint` of every adapter over an endless source: the lower bound
//! saturates at `usize::MAX` and the upper bound is `None`, never an
//! arithmetic overflow (a panic in debug builds, a wrapped, too small bound in
//! release).

use futures::{Stream, StreamExt};
use zephon_core::{Dataset, PipelineExt, Record, ShuffleMode, WorkSource};

fn endless() -> WorkSource {
    let ds = Dataset::in_memory(
        "toy",
        vec![(0..64).map(|i| Record::new().with("i", i as i64)).collect()],
    )
    .unwrap();
    WorkSource::builder()
        .dataset(ds, 1.0)
        .seed(3)
        .canonical_lanes(4)
        .repeat()
        .build()
        .unwrap()
}

/// Runs `f` as the inline runner does (`map_par` needs a runtime).
fn block_on<F: Future>(f: F) -> F::Output {
    zephon_core::Runner::Inline.runtime().unwrap().block_on(f)
}

/// Polls `s` a few times, so the adapters hold elements (ready, buffered,
/// in flight), then checks its hint.
fn check<S: Stream + Unpin>(mut s: S, what: &str) {
    block_on(async {
        for _ in 0..5 {
            assert!(s.next().await.is_some(), "{what} ended early");
        }
    });
    let (lo, hi) = s.size_hint();
    assert_eq!((lo, hi), (usize::MAX, None), "{what}");
}

#[test]
fn an_endless_source_saturates_every_adapters_hint() {
    check(endless().stream(), "work source");
    check(endless().stream().fetch(4), "fetch");
    check(endless().stream().fetch(4).map_par(Ok, 2), "map_par");
    check(
        endless()
            .stream()
            .fetch(4)
            .shuffle(8, ShuffleMode::Reservoir, 1),
        "shuffle",
    );
    let lanes = endless().owned_lanes();
    check(
        endless()
            .stream()
            .fetch(4)
            .shuffle(8, ShuffleMode::Reservoir, 1)
            .lane_mux(lanes),
        "lane_mux",
    );
}
