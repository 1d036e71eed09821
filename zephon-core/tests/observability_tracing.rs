//! Snapshots emitted periodically as `tracing` events, received by a
//! `tracing-subscriber` layer.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::{Layer, registry::Registry};
use zephon_core::obs::Tracking;
use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
use zephon_metrics::{FetchTimingSnapshot, MetricsSnapshot};

/// One event: its level and its fields as text.
type Seen = (tracing::Level, Vec<(String, String)>);

/// Keeps the events of the observability target.
#[derive(Clone, Default)]
struct Collect(Arc<Mutex<Vec<Seen>>>);

struct Fields(Vec<(String, String)>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
}

impl<S: tracing::Subscriber> Layer<S> for Collect {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != "zephon::observability" {
            return;
        }
        let mut f = Fields(Vec::new());
        event.record(&mut f);
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), f.0));
    }
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> &'a str {
    &fields
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no field {name} in {fields:?}"))
        .1
}

#[test]
fn snapshots_reach_a_subscriber_layer_periodically_and_at_the_end() {
    let collect = Collect::default();
    // A scoped default, as a test or a library user would set it: the
    // reporter's thread must still reach it.
    let _scope = tracing::subscriber::set_default(Registry::default().with(collect.clone()));
    let ds = Dataset::in_memory(
        "traced",
        vec![(0..60).map(|i| Record::new().with("i", i as i64)).collect()],
    )
    .unwrap();
    let ws = WorkSource::builder().dataset(ds, 1.0).build().unwrap();
    let mut it = ws
        .stream()
        .fetch(2)
        .map_par(
            |r| {
                std::thread::sleep(Duration::from_millis(3));
                Ok(r)
            },
            2,
        )
        .batch(6)
        .into_blocking_iter(Runner::Threads { workers: 2 })
        .unwrap();
    let obs = it.enable_observability(Tracking::Operator);
    let guard = obs.report_periodically(Duration::from_millis(10), tracing::Level::INFO);
    let mut n = 0;
    for b in it.by_ref() {
        b.unwrap();
        n += 1;
    }
    assert_eq!(n, 10);
    drop(guard);

    let events = collect.0.lock().unwrap().clone();
    // 60 elements at 3 ms on 2 workers take at least 90 ms: several periods of
    // 10 ms, and the final event.
    assert!(events.len() >= 3, "{} events", events.len());
    assert!(events.iter().all(|(l, _)| *l == tracing::Level::INFO));
    let last = &events.last().unwrap().1;
    let m: MetricsSnapshot = serde_json::from_str(field(last, "metrics")).unwrap();
    assert_eq!(m.startup.batches, 10, "the final event has the whole run");
    let names: Vec<&str> = m.operators.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["fetch", "map_par", "batch"]);
    assert_eq!(m.operators[1].elements_out, 60);
    let f: FetchTimingSnapshot = serde_json::from_str(field(last, "fetch")).unwrap();
    assert_eq!(f.totals.samples, 60);
    // Earlier events show the run in progress.
    let first: MetricsSnapshot = serde_json::from_str(field(&events[0].1, "metrics")).unwrap();
    assert!(first.startup.batches <= m.startup.batches);
}
