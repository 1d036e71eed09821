//! Token-aware mixture weights at the work source.
//!
//! The work source schedules pointers and never sees a token, so a mixture
//! that must hold in tokens is scheduled through each dataset's average
//! tokens per sample: dataset `d` with token weight `w` gets the sample
//! weight `w / tokens_per_sample[d]`. The smooth weighted round robin then
//! holds the token mixture on average, with no buffer downstream; what is
//! left is the spread of document lengths within a dataset, which
//! [`token_share_error`] measures on what was delivered.
//!
//! A chunk holds whole samples, so each dataset's sample share is rounded to
//! `1 / chunk_size`; a dataset of long documents gets few samples per chunk,
//! and that rounding is multiplied by its length in its token share. Give
//! such a mixture a chunk in which every dataset has tens of samples
//! (`WorkSource::mixture().quotas` shows them).

use super::WorkSourceBuilder;
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::hash;
use crate::record::Record;
use crate::settings;

/// Salt of the estimation sample, so it is not the pass order's first samples.
const TOKEN_SAMPLE: u64 = 0x746f_6b65_6e73;

/// One dataset's line of a [`ShareReport`].
#[derive(Clone, Debug, PartialEq)]
pub struct ShareError {
    /// Dataset name.
    pub dataset: String,
    /// The token share the weights ask for.
    pub target: f64,
    /// The token share delivered.
    pub delivered: f64,
    /// `delivered - target`.
    pub error: f64,
}

/// How far delivered token shares are from the target mixture.
#[derive(Clone, Debug, PartialEq)]
pub struct ShareReport {
    /// Per dataset, in catalog order.
    pub datasets: Vec<ShareError>,
    /// The largest `|error|` over the datasets.
    pub max_abs_error: f64,
    /// Tokens delivered in all.
    pub total_tokens: u64,
}

/// Compares `delivered` tokens per dataset with the token shares `weights`
/// ask for (weights need not sum to 1). An empty delivery, or lists of
/// different lengths, are errors naming what is wrong.
///
/// ```
/// use zephon_core::work::token_share_error;
/// let r = token_share_error(&["web", "code"], &[1.0, 1.0], &[700, 300])?;
/// assert!((r.datasets[0].error - 0.2).abs() < 1e-12);
/// assert!((r.max_abs_error - 0.2).abs() < 1e-12);
/// # Ok::<(), zephon_core::Error>(())
/// ```
pub fn token_share_error(
    names: &[&str],
    weights: &[f64],
    delivered: &[u64],
) -> Result<ShareReport> {
    if names.len() != weights.len() || delivered.len() != weights.len() {
        return Err(Error::config(
            "delivered_tokens",
            format!(
                "{} counts for {} datasets ({} weights)",
                delivered.len(),
                names.len(),
                weights.len()
            ),
        ));
    }
    let total: u128 = delivered.iter().map(|&t| t as u128).sum();
    if total == 0 {
        return Err(Error::config(
            "delivered_tokens",
            "no tokens delivered: the share error is undefined",
        ));
    }
    let sum: f64 = weights.iter().sum();
    if !(sum.is_finite() && sum > 0.0) {
        return Err(Error::config("weight", format!("weights summing to {sum}")));
    }
    let datasets: Vec<ShareError> = names
        .iter()
        .zip(weights)
        .zip(delivered)
        .map(|((name, w), &t)| {
            let (target, delivered) = (w / sum, t as f64 / total as f64);
            ShareError {
                dataset: (*name).to_owned(),
                target,
                delivered,
                error: delivered - target,
            }
        })
        .collect();
    let max_abs_error = datasets.iter().map(|d| d.error.abs()).fold(0.0, f64::max);
    Ok(ShareReport {
        datasets,
        max_abs_error,
        total_tokens: total.min(u64::MAX as u128) as u64,
    })
}

impl WorkSourceBuilder {
    /// Estimates the average tokens per sample of every dataset that was
    /// not given one ([`tokens_per_sample`](Self::tokens_per_sample)), so
    /// the weights become token shares. `estimator` counts the tokens of a
    /// record (zephon-core knows no tokenizer); it sees `samples` records
    /// per dataset (all of a smaller one), drawn by a permutation keyed by
    /// the seed and the dataset's name: the same on every rank and every
    /// run, so the estimate, and with it the schedule, is deterministic.
    /// It is kept in the work state ([`WorkState::tokens_per_sample`](super::WorkState::tokens_per_sample)).
    ///
    /// `samples` is in [`settings::TOKEN_SAMPLES`]. A read that fails, an
    /// estimator error, or a dataset whose sample has no tokens at all is an
    /// error naming the dataset.
    ///
    /// ```
    /// use zephon_core::{Dataset, Record, WorkSource};
    /// let doc = |n: usize| Record::new().with("text", "tok ".repeat(n));
    /// let short = Dataset::in_memory("short", vec![(0..50).map(|_| doc(10)).collect()])?;
    /// let long = Dataset::in_memory("long", vec![(0..50).map(|_| doc(90)).collect()])?;
    /// let words = |r: &Record| Ok(r.text("text").unwrap_or("").split_whitespace().count() as u64);
    /// let ws = futures::executor::block_on(
    ///     WorkSource::builder().dataset(short, 1.0).dataset(long, 1.0).chunk_size(100)
    ///         .estimate_tokens(16, words),
    /// )?.build()?;
    /// assert_eq!(ws.tokens_per_sample(), Some(&[10.0, 90.0][..]));
    /// // Equal token shares: nine short documents for each long one.
    /// assert_eq!(ws.mixture().quotas, vec![90, 10]);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub async fn estimate_tokens<F>(mut self, samples: u64, mut estimator: F) -> Result<Self>
    where
        F: FnMut(&Record) -> Result<u64>,
    {
        settings::TOKEN_SAMPLES.check("token_samples", samples)?;
        for (ds, _) in &self.datasets {
            if self.config.tokens_per_sample.contains_key(ds.name()) {
                continue;
            }
            let t = estimate(ds, self.config.seed, samples, &mut estimator).await?;
            self.config
                .tokens_per_sample
                .insert(ds.name().to_owned(), t);
        }
        Ok(self)
    }
}

/// The average tokens per sample of `samples` records of `ds`.
async fn estimate<F>(ds: &Dataset, seed: u64, samples: u64, estimator: &mut F) -> Result<f64>
where
    F: FnMut(&Record) -> Result<u64>,
{
    let fail = |message: String| Error::Dataset {
        dataset: ds.name().into(),
        location: ds.location().into(),
        message,
    };
    let total = ds.num_samples();
    if total == 0 {
        return Err(fail(
            "has no samples to estimate tokens per sample from".into(),
        ));
    }
    let k = samples.min(total);
    let key = hash::key(&[seed, hash::bytes(ds.name().as_bytes()), TOKEN_SAMPLE]);
    let mut picked = vec![0; k as usize];
    hash::Permutation::new(total, key).fill(0, &mut picked);
    picked.sort_unstable();
    let mut tokens: u128 = 0;
    let mut first = 0u64;
    let mut next = 0usize;
    for shard in ds.shards() {
        let end = first + shard.len();
        let from = next;
        while next < picked.len() && picked[next] < end {
            next += 1;
        }
        let indices: Vec<u64> = picked[from..next].iter().map(|g| g - first).collect();
        first = end;
        if indices.is_empty() {
            continue;
        }
        let records = shard.read_indices(&indices).await?;
        if records.len() != indices.len() {
            return Err(fail(format!(
                "shard `{}` gave {} records for {} indices while estimating tokens per sample",
                shard.name(),
                records.len(),
                indices.len()
            )));
        }
        for (r, i) in records.iter().zip(&indices) {
            let t = estimator(r).map_err(|e| {
                fail(format!(
                    "estimating tokens of sample {i} of shard `{}`: {e}",
                    shard.name()
                ))
            })?;
            tokens += t as u128;
        }
    }
    if tokens == 0 {
        return Err(fail(format!(
            "the estimator counted no tokens in {k} sampled records; a dataset without tokens cannot hold a token share"
        )));
    }
    Ok(tokens as f64 / k as f64)
}
