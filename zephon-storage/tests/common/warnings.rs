//! Warnings logged through `tracing`, kept for tests to read.

use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Layer};

/// A layer keeping the text of every warning (its fields as `name=value`).
pub struct Capture(pub Arc<Mutex<Vec<String>>>);

struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }
}

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN {
            let mut t = Text(String::new());
            event.record(&mut t);
            self.0.lock().unwrap().push(t.0);
        }
    }
}
