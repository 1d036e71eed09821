//! Statistics of the text operators: what tokenize truncated or skipped, how
//! well pack filled its rows, what ensure_mixture dropped.

use serde::{Deserialize, Serialize};
use zephon_metrics::{Counter, Histogram, HistogramSnapshot, MaxGauge};

/// Live counters, shared (`Arc`) by the operators that count into them and
/// cheap enough to leave on: one relaxed atomic add per document or row.
#[derive(Debug, Default)]
pub struct TextStats {
    /// Documents tokenized.
    pub docs_tokenized: Counter,
    /// Ids produced by tokenize (special tokens included).
    pub tokens_tokenized: Counter,
    /// Documents truncated to `max_length`.
    pub truncated_docs: Counter,
    /// Ids cut off by truncation.
    pub truncated_tokens: Counter,
    /// Documents split into several records.
    pub split_docs: Counter,
    /// Records skipped because the text field was missing.
    pub skipped_missing: Counter,
    /// Sequences that entered pack.
    pub sequences_in: Counter,
    /// Packed rows emitted.
    pub rows: Counter,
    /// Real tokens in emitted rows.
    pub row_tokens: Counter,
    /// Padding a row of `max_length` would need (`max_length - len` per row).
    pub padding_tokens: Counter,
    /// Sequences longer than `max_length`, dropped.
    pub dropped_oversized: Counter,
    /// Sequences shorter than `min_sequence_length`, dropped.
    pub dropped_short: Counter,
    /// Tokens lost with dropped sequences and dropped remainders.
    pub dropped_tokens: Counter,
    /// Sequences cut across two rows (wrap, best_fit_wrap).
    pub split_sequences: Counter,
    /// Segments per row, as a histogram of counts.
    pub segments_per_row: Histogram,
    /// The most segments in one row.
    pub max_segments_per_row: MaxGauge,
    /// Records dropped by ensure_mixture to hold the mixture exactly.
    pub mixture_dropped: Counter,
    /// Conversations dropped by tokenize_chat: under two tokens, or no
    /// supervised token (no assistant turn, or truncated away).
    pub chat_dropped: Counter,
}

impl TextStats {
    pub(crate) fn record_row(&self, len: usize, segments: usize, max_length: usize) {
        self.rows.inc();
        self.row_tokens.add(len as u64);
        self.padding_tokens
            .add(max_length.saturating_sub(len) as u64);
        self.segments_per_row.record_nanos(segments as u64);
        self.max_segments_per_row.observe(segments as u64);
    }

    /// A plain copy, with the derived ratios.
    pub fn snapshot(&self) -> TextStatsSnapshot {
        let rows = self.rows.get();
        let row_tokens = self.row_tokens.get();
        let padding = self.padding_tokens.get();
        let seg_hist = self.segments_per_row.snapshot();
        let segments: u64 = seg_hist.buckets.iter().map(|&(v, c)| v * c).sum();
        TextStatsSnapshot {
            docs_tokenized: self.docs_tokenized.get(),
            tokens_tokenized: self.tokens_tokenized.get(),
            truncated_docs: self.truncated_docs.get(),
            truncated_tokens: self.truncated_tokens.get(),
            split_docs: self.split_docs.get(),
            skipped_missing: self.skipped_missing.get(),
            sequences_in: self.sequences_in.get(),
            rows,
            row_tokens,
            padding_tokens: padding,
            padding_fraction: ratio(padding, row_tokens + padding),
            sequences_per_row: ratio(segments, rows),
            max_segments_per_row: self.max_segments_per_row.get(),
            segments_per_row: seg_hist,
            dropped_oversized: self.dropped_oversized.get(),
            dropped_short: self.dropped_short.get(),
            dropped_tokens: self.dropped_tokens.get(),
            split_sequences: self.split_sequences.get(),
            mixture_dropped: self.mixture_dropped.get(),
            chat_dropped: self.chat_dropped.get(),
        }
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// A plain, serializable copy of [`TextStats`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TextStatsSnapshot {
    /// Documents tokenized.
    pub docs_tokenized: u64,
    /// Ids produced by tokenize.
    pub tokens_tokenized: u64,
    /// Documents truncated.
    pub truncated_docs: u64,
    /// Ids cut off by truncation.
    pub truncated_tokens: u64,
    /// Documents split into several records.
    pub split_docs: u64,
    /// Records skipped for a missing field.
    pub skipped_missing: u64,
    /// Sequences that entered pack.
    pub sequences_in: u64,
    /// Packed rows.
    pub rows: u64,
    /// Real tokens in rows.
    pub row_tokens: u64,
    /// Padding tokens (to `max_length`).
    pub padding_tokens: u64,
    /// `padding_tokens / (row_tokens + padding_tokens)`.
    pub padding_fraction: f64,
    /// Mean segments (documents or pieces) per row.
    pub sequences_per_row: f64,
    /// The most segments in one row.
    pub max_segments_per_row: u64,
    /// Segments per row, `(count, rows)` buckets.
    pub segments_per_row: HistogramSnapshot,
    /// Oversized sequences dropped.
    pub dropped_oversized: u64,
    /// Short sequences dropped.
    pub dropped_short: u64,
    /// Tokens dropped.
    pub dropped_tokens: u64,
    /// Sequences cut across rows.
    pub split_sequences: u64,
    /// Records dropped by ensure_mixture.
    pub mixture_dropped: u64,
    /// Conversations dropped by tokenize_chat (nothing to supervise).
    #[serde(default)]
    pub chat_dropped: u64,
}
