//! `pack_sequences`' settings: the packing algorithm, what becomes of a
//! sequence longer than a row, and their documented ranges.

use crate::error::Error;
use crate::fields;
use std::sync::Arc;
use zephon_core::settings::{Range, SEQ_LEN};

/// How sequences are placed into rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PackAlgorithm {
    /// Each sequence goes to the first row with room, in arrival order.
    FirstFit,
    /// Best fit, largest first, per window; never more rows than
    /// [`FirstFit`](PackAlgorithm::FirstFit) on the same window.
    BestFit,
    /// A continuous stream of tokens cut into rows of exactly `max_length`;
    /// no padding, sequences cut at row ends.
    #[default]
    Wrap,
    /// Best fit from a pool of candidates; when nothing fits, the oldest
    /// candidate is split to fill the row (at most one split per row).
    BestFitWrap,
}

/// What `first_fit` and `best_fit` do with a sequence longer than `max_length`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OversizedPolicy {
    /// Drop it, counted in [`TextStats::dropped_oversized`](crate::stats::TextStats::dropped_oversized).
    #[default]
    Drop,
    /// An error naming its source pointer and length.
    Error,
}

/// The options of `pack_sequences`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackConfig {
    /// Tokens per row, at most.
    pub max_length: usize,
    /// The placement algorithm.
    pub algorithm: PackAlgorithm,
    /// Bins per window (`first_fit`, `best_fit`: a window closes once it holds
    /// `num_bins * max_length` tokens) or candidates in the pool
    /// (`best_fit_wrap`). More bins pack tighter and hold more in memory.
    pub num_bins: usize,
    /// At most this many segments per row (not for `wrap`).
    pub max_sequences_per_bin: Option<usize>,
    /// Sequences shorter than this are dropped (empty ones always are).
    pub min_sequence_length: usize,
    /// Oversized sequences under `first_fit` and `best_fit`.
    pub oversized: OversizedPolicy,
    /// At the end of the stream, drops each lane's last row if it is not full
    /// (`wrap`, `best_fit_wrap`); counted in [`TextStats::dropped_tokens`](crate::stats::TextStats::dropped_tokens).
    pub drop_remainder: bool,
    /// `best_fit_wrap` only: a candidate that has waited more than this many
    /// incoming documents of its lane is placed first in the next row, built
    /// at once (see [`wrap::BestFitWrapPacker`](super::wrap::BestFitWrapPacker)); in [`MAX_CANDIDATE_AGE`].
    /// `None` (the default): candidates wait until the pool overflows.
    pub max_candidate_age: Option<u64>,
    /// Homogeneity groups: the record field whose value (text, integer or
    /// boolean) keys separate bins, so a row never mixes documents of two
    /// values; `None` (the default): one group per lane. Each group keeps
    /// its own bins or pool, so a lane holds up to `num_bins` per group, and
    /// at most [`MAX_GROUPS`] groups (a record starting one more is an
    /// error naming it).
    pub group_field: Option<Arc<str>>,
}

/// Most homogeneity groups one lane of packing holds open at once: each
/// holds its own rows until it fills or the input ends, so a field of
/// distinct values (an id) would hold the whole input.
pub const MAX_GROUPS: usize = 4096;

/// Bins per window or candidates per pool: each holds up to a row of tokens.
pub const NUM_BINS: Range = Range::new(1, 65_536, "each bin holds up to a row per lane");

/// Documents a `best_fit_wrap` candidate may wait before it is placed.
pub const MAX_CANDIDATE_AGE: Range = Range::new(
    1,
    1 << 40,
    "0 would close a row per document; a candidate's age is counted in 64 bits",
);

impl PackConfig {
    /// `algorithm` into rows of `max_length`, 64 bins, no other limits.
    /// `max_length` must lie in [`SEQ_LEN`] (1 to 16 Mi tokens); the
    /// operators refuse it otherwise (see [`validate`](Self::validate)).
    pub fn new(max_length: usize, algorithm: PackAlgorithm) -> Self {
        PackConfig {
            max_length,
            algorithm,
            num_bins: 64,
            max_sequences_per_bin: None,
            min_sequence_length: 1,
            oversized: OversizedPolicy::Drop,
            drop_remainder: false,
            max_candidate_age: None,
            group_field: None,
        }
    }

    /// Sets `group_field`: rows never mix documents whose `field` differs.
    /// The name is owned (a `&str`, a `String` or an `Arc<str>`), so one
    /// read from a recipe at run time needs no `'static` copy.
    ///
    /// ```
    /// use zephon_core::{Record, Value};
    /// use zephon_ops::{PackAlgorithm, PackConfig, Packer};
    /// let mut p = Packer::new(PackConfig::new(4, PackAlgorithm::Wrap).group_field("lang"));
    /// for (doc, lang) in [(vec![1, 2], "en"), (vec![3, 4], "fr"), (vec![5, 6], "en")] {
    ///     p.push(
    ///         Record::new()
    ///             .with("input_ids", Value::Tokens(doc))
    ///             .with("lang", Value::Text(lang.into())),
    ///     )?;
    /// }
    /// p.finish();
    /// let rows: Vec<Record> = std::iter::from_fn(|| p.pop()).collect();
    /// assert_eq!(rows[0].tokens("input_ids").unwrap(), &[1, 2, 5, 6]);
    /// assert_eq!(rows[1].tokens("input_ids").unwrap(), &[3, 4]);
    /// # Ok::<(), zephon_ops::Error>(())
    /// ```
    pub fn group_field(mut self, field: impl Into<Arc<str>>) -> Self {
        self.group_field = Some(field.into());
        self
    }

    /// Sets `max_candidate_age`, in [`MAX_CANDIDATE_AGE`] (1 to 2^40
    /// documents); `best_fit_wrap` only.
    ///
    /// ```
    /// use zephon_core::{Record, Value};
    /// use zephon_ops::{PackAlgorithm, PackConfig, Packer};
    /// let c = PackConfig::new(8, PackAlgorithm::BestFitWrap)
    ///     .num_bins(64)
    ///     .max_candidate_age(1);
    /// let mut p = Packer::new(c);
    /// for doc in [vec![1, 2], vec![3], vec![4]] {
    ///     p.push(Record::new().with("input_ids", Value::Tokens(doc)))?;
    /// }
    /// // The first document waited two documents: its row closes unfilled.
    /// assert_eq!(p.pop().unwrap().tokens("input_ids").unwrap(), &[1, 2, 3, 4]);
    /// # Ok::<(), zephon_ops::Error>(())
    /// ```
    pub fn max_candidate_age(mut self, n: u64) -> Self {
        self.max_candidate_age = Some(n);
        self
    }

    /// Sets `num_bins`, in [`NUM_BINS`] (1 to 65,536).
    pub fn num_bins(mut self, n: usize) -> Self {
        self.num_bins = n;
        self
    }

    /// Sets `max_sequences_per_bin` (at least 1).
    pub fn max_sequences_per_bin(mut self, n: usize) -> Self {
        self.max_sequences_per_bin = Some(n);
        self
    }

    /// Checks every option against its documented range; the pack
    /// operators report the error at their first poll.
    ///
    /// ```
    /// use zephon_ops::{PackAlgorithm, PackConfig};
    /// assert!(PackConfig::new(128, PackAlgorithm::Wrap).validate().is_ok());
    /// let e = PackConfig::new(0, PackAlgorithm::Wrap).validate().unwrap_err();
    /// assert!(e.to_string().contains("pack.max_length"), "{e}");
    /// ```
    pub fn validate(&self) -> Result<(), Error> {
        Error::in_range(SEQ_LEN, "pack.max_length", self.max_length)?;
        Error::in_range(NUM_BINS, "pack.num_bins", self.num_bins)?;
        if self.max_sequences_per_bin == Some(0) {
            return Err(Error::Config {
                key: "pack.max_sequences_per_bin",
                message: "0 sequences per row leaves every row empty; use at least 1".into(),
            });
        }
        if self
            .group_field
            .as_deref()
            .is_some_and(|f| f.is_empty() || f == fields::INPUT_IDS)
        {
            return Err(Error::Config {
                key: "pack.group_field",
                message: "must be a non-empty field name other than `input_ids`".into(),
            });
        }
        if let Some(age) = self.max_candidate_age {
            if self.algorithm != PackAlgorithm::BestFitWrap {
                return Err(Error::Config {
                    key: "pack.max_candidate_age",
                    message:
                        "applies to best_fit_wrap only (other algorithms hold no candidate pool)"
                            .into(),
                });
            }
            if !MAX_CANDIDATE_AGE.contains(age) {
                return Err(Error::Config {
                    key: "pack.max_candidate_age",
                    message: MAX_CANDIDATE_AGE.message(age),
                });
            }
        }
        Ok(())
    }

    /// Sets `min_sequence_length`.
    pub fn min_sequence_length(mut self, n: usize) -> Self {
        self.min_sequence_length = n;
        self
    }

    /// Sets the oversized policy.
    pub fn oversized(mut self, p: OversizedPolicy) -> Self {
        self.oversized = p;
        self
    }

    /// Sets `drop_remainder`.
    pub fn drop_remainder(mut self, on: bool) -> Self {
        self.drop_remainder = on;
        self
    }

    pub(crate) fn seq_limit(&self) -> usize {
        self.max_sequences_per_bin.unwrap_or(usize::MAX)
    }
}
