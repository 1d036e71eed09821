//! [`MediaStats`]: what the media operators decoded and skipped.

use zephon_metrics::Counter;

/// Live counters of a decode operator, shared (`Arc`) and cheap enough to
/// leave on: one relaxed atomic add per sample.
#[derive(Debug, Default)]
pub struct MediaStats {
    /// Samples decoded.
    pub decoded: Counter,
    /// Pixels decoded (width × height, before any crop).
    pub pixels: Counter,
    /// Audio frames decoded (samples per channel, at the stream's own rate).
    pub frames: Counter,
    /// Samples dropped under [`OnError::Skip`](crate::OnError::Skip).
    pub skipped: Counter,
}
