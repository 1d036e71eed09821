//! Snapshots as `tracing` events, once or periodically.

use super::Observer;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl Observer {
    /// Emits the snapshots as `tracing` events (target `zephon::observability`,
    /// fields `metrics`, `fetch` and `prefetch` holding JSON) every `every`,
    /// and once more when the returned guard is dropped, on a background
    /// thread. The events go to the subscriber that is the default where this
    /// is called (a scoped one included).
    ///
    /// ```
    /// use std::time::Duration;
    /// use zephon_core::obs::{Observer, Tracking};
    /// let obs = Observer::new(Tracking::Stage);
    /// let guard = obs.report_periodically(Duration::from_secs(10), tracing::Level::INFO);
    /// drop(guard); // emits the last snapshot and stops
    /// ```
    pub fn report_periodically(&self, every: Duration, level: tracing::Level) -> ReporterGuard {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (obs, flag) = (self.clone(), stop.clone());
        // A thread starts with the global default subscriber; the caller's
        // may be a scoped one (a test's, a library user's).
        let dispatch = tracing::dispatcher::get_default(|d| d.clone());
        let handle = std::thread::Builder::new()
            .name("zephon-observability".into())
            .spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    let mut next = Instant::now() + every;
                    while !flag.load(Ordering::Relaxed) {
                        // Parking may end early (the guard's unpark, or
                        // spuriously): emit only when the period is over.
                        let now = Instant::now();
                        if now < next {
                            std::thread::park_timeout(next - now);
                            continue;
                        }
                        obs.emit(level);
                        next = now + every;
                    }
                    // The final state, which the last period may not show.
                    obs.emit(level);
                })
            })
            .ok();
        ReporterGuard { stop, handle }
    }

    /// Emits the snapshots once as `tracing` events.
    pub fn emit(&self, level: tracing::Level) {
        let metrics = serde_json::to_string(&self.metrics_snapshot()).unwrap_or_default();
        let fetch = serde_json::to_string(&self.fetch_timing_snapshot()).unwrap_or_default();
        let prefetch = serde_json::to_string(&self.prefetch_timing_snapshot()).unwrap_or_default();
        macro_rules! ev {
            ($lvl:expr) => {
                tracing::event!(target: "zephon::observability", $lvl, metrics = %metrics, fetch = %fetch, prefetch = %prefetch, "pipeline snapshot")
            };
        }
        match level {
            tracing::Level::ERROR => ev!(tracing::Level::ERROR),
            tracing::Level::WARN => ev!(tracing::Level::WARN),
            tracing::Level::INFO => ev!(tracing::Level::INFO),
            tracing::Level::DEBUG => ev!(tracing::Level::DEBUG),
            tracing::Level::TRACE => ev!(tracing::Level::TRACE),
        }
    }
}

/// Stops a periodic reporter when dropped.
#[derive(Debug)]
pub struct ReporterGuard {
    stop: Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Drop for ReporterGuard {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}
