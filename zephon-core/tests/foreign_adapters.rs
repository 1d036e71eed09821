//! Zephon's chain methods mix with `futures::StreamExt` and
//! `tokio_stream::StreamExt` adapters: no method of `PipelineExt` has the
//! name of one of theirs, so a chain with either trait in scope compiles
//! without naming traits, and gives what the plain operators give.
//!
//! (The two foreign traits clash with each other on `map`, `filter` and
//! `take`, so each gets a module of its own, as in a user's crate.)

use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};

fn source() -> WorkSource {
    let ds = Dataset::in_memory(
        "toy",
        vec![(0..40).map(|i| Record::new().with("i", i as i64)).collect()],
    )
    .unwrap();
    WorkSource::builder()
        .dataset(ds, 1.0)
        .seed(5)
        .build()
        .unwrap()
}

fn ints(r: &Record) -> i64 {
    r.get("i").and_then(|v| v.as_int()).unwrap()
}

/// The reference: Zephon's operators only.
fn expected() -> Vec<Vec<i64>> {
    source()
        .stream()
        .fetch(2)
        .filter_ok(|r: &Record| ints(r) % 2 == 0)
        .batch(4)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .take(3)
        .map(|b| b.unwrap().items.iter().map(|r| ints(r) * 10).collect())
        .collect()
}

mod with_futures {
    use super::*;
    use futures::StreamExt;

    #[test]
    fn futures_adapters_chain_between_zephon_operators() {
        let ws = source();
        let pointers = ws.stream().take(40).chain(futures::stream::empty());
        let batches: Vec<Vec<i64>> = pointers
            .fetch_from(ws.catalog().clone(), 2)
            .map(|r| r.map(|r| r.with("x", 1)))
            .filter(|r| futures::future::ready(r.is_ok()))
            .filter_ok(|r: &Record| ints(r) % 2 == 0)
            .map_par(|r: Record| Ok(r), 2)
            .boxed()
            .batch(4)
            .map(|b| b.map(|b| b.items.iter().map(|r| ints(r) * 10).collect::<Vec<_>>()))
            .take(3)
            .into_blocking_iter(Runner::threads())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(batches, expected());
    }
    /// `explain()` compiles on a chain with futures' adapters and shows each
    /// as an opaque stage; a `.boxed()` stream is one opaque stage that
    /// hides what it wraps, `boxed_pipeline()` keeps it.
    #[test]
    fn explain_shows_futures_adapters_as_opaque_stages() {
        use zephon_core::obs::PlanDescription;
        let ws = source();
        let stages = |p: &PlanDescription| -> Vec<(String, bool)> {
            p.stages
                .iter()
                .map(|s| (s.name.clone(), s.opaque))
                .collect()
        };
        let own = |n: &str| (n.to_owned(), false);
        let opaque = |n: &str| (n.to_owned(), true);

        let plan = ws
            .stream()
            .fetch(2)
            .map(|r| r.map(|r| r.with("x", 1)))
            .take(30)
            .batch(4)
            .boxed()
            .map(|b| b)
            .prefetch_batches(2)
            .explain(Runner::threads());
        assert_eq!(
            stages(&plan),
            [opaque("boxed"), opaque("map"), own("prefetch_batches")]
        );
        assert!(plan.to_string().contains("(opaque)"), "{plan}");

        let plan = ws
            .stream()
            .fetch(2)
            .map(|r| r.map(|r| r.with("x", 1)))
            .take(30)
            .batch(4)
            .boxed_pipeline()
            .map(|b| b)
            .prefetch_batches(2)
            .explain(Runner::threads());
        assert_eq!(
            stages(&plan),
            [
                own("work_source"),
                own("fetch"),
                opaque("map"),
                opaque("take"),
                own("batch"),
                opaque("map"),
                own("prefetch_batches"),
            ]
        );
    }
}

mod with_tokio_stream {
    use super::*;
    use tokio_stream::StreamExt;

    #[test]
    fn tokio_stream_adapters_chain_between_zephon_operators() {
        let ws = source();
        let batches: Vec<Vec<i64>> = ws
            .stream()
            .take(40)
            .fetch_from(ws.catalog().clone(), 2)
            .filter(|r| r.is_ok())
            .filter_ok(|r: &Record| ints(r) % 2 == 0)
            .batch(4)
            .map(|b| b.map(|b| b.items.iter().map(|r| ints(r) * 10).collect::<Vec<_>>()))
            .take(3)
            .into_blocking_iter(Runner::Inline)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(batches, expected());
    }

    /// `explain()` compiles on a chain with tokio-stream's adapters (it did
    /// not): each is an opaque stage, and as they do not hand out their
    /// upstream, the plan starts at the last of them.
    #[test]
    fn explain_shows_tokio_stream_adapters_as_opaque_stages() {
        let ws = source();
        let plan = ws
            .stream()
            .fetch(2)
            .filter(|r| r.is_ok())
            .batch(4)
            .map(|b| b)
            .prefetch_batches(2)
            .explain(Runner::threads());
        let names: Vec<(&str, bool)> = plan
            .stages
            .iter()
            .map(|s| (s.name.as_str(), s.opaque))
            .collect();
        assert_eq!(
            names,
            [("tokio_stream map", true), ("prefetch_batches", false)]
        );
        assert!(
            plan.to_string().contains("stages before it are hidden"),
            "{plan}"
        );
    }
}
