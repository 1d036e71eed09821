//! [`prefetch`]: asking the processor for bytes a reader will decode soon,
//! and [`each_prefetched`]: decoding samples in turn, each asked for a few
//! samples before its turn.

/// Bytes of a cache line.
const LINE: usize = 64;

/// Bytes of each sample a read brings into the cache ahead of decoding it:
/// text and numbers whole; of a large sample (an image) its head, so a read
/// of many does not push the rest out of the cache.
const TOUCH: usize = 1024;
/// Samples ahead of the one decoded whose bytes are asked for: enough for
/// their misses (a few hundred nanoseconds each) to land while the samples
/// before them decode, few enough that they are still in the cache then.
const AHEAD: usize = 8;

/// Decodes the samples at `spans` (byte ranges of `data`) in turn, each by
/// `one(k, from, to)`, the bytes of the sample [`AHEAD`] places on asked
/// for first ([`prefetch`]: their first [`TOUCH`] bytes). A span outside
/// `data` is asked for up to `data`'s end only; `one` checks its own.
pub(crate) fn each_prefetched<E>(
    data: &[u8],
    spans: &[(usize, usize)],
    mut one: impl FnMut(usize, usize, usize) -> Result<(), E>,
) -> Result<(), E> {
    let ask = |&(from, to): &(usize, usize)| {
        let end = to.min(from.saturating_add(TOUCH)).min(data.len());
        if let Some(b) = data.get(from..end) {
            prefetch(b);
        }
    };
    spans.iter().take(AHEAD).for_each(ask);
    for (k, &(from, to)) in spans.iter().enumerate() {
        if let Some(next) = spans.get(k + AHEAD) {
            ask(next);
        }
        one(k, from, to)?;
    }
    Ok(())
}

/// Asks the processor to bring `bytes` (a sample a reader decodes a few
/// samples from now) into its cache, without waiting for them. Shuffled
/// samples lie anywhere in a shard, each a few cache misses: a load that
/// misses holds every later instruction back, so touching the samples
/// first waited for all their misses before decoding any, while a
/// prefetch a few samples ahead lets the misses of the next samples
/// overlap the decoding of this one. Elsewhere than on x86-64 it does
/// nothing.
#[inline]
pub(crate) fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for at in (0..bytes.len()).step_by(LINE) {
        // SAFETY: SSE, which the instruction needs, is part of every
        // x86-64 processor; a prefetch reads nothing into the program and
        // never faults, and the address lies in `bytes` anyway.
        unsafe {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            _mm_prefetch::<_MM_HINT_T0>(bytes.as_ptr().add(at).cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// Splits `indices` into runs of consecutive samples, in request order:
/// each run's first sample and its length.
pub(crate) fn runs(indices: &[u64]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < indices.len() {
        let mut j = i + 1;
        while j < indices.len() && indices[j] == indices[j - 1] + 1 {
            j += 1;
        }
        out.push((indices[i], (j - i) as u64));
        i = j;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_keep_the_request_order() {
        assert_eq!(runs(&[4, 5, 6, 1, 9, 10]), vec![(4, 3), (1, 1), (9, 2)]);
        assert_eq!(runs(&[3, 2, 1]), vec![(3, 1), (2, 1), (1, 1)]);
        assert!(runs(&[]).is_empty());
    }

    #[test]
    fn every_span_is_decoded_once_in_order_and_an_error_stops_the_rest() {
        let data = vec![7u8; 100];
        // More spans than AHEAD, one past the data's end, one empty.
        let mut spans: Vec<(usize, usize)> = (0..20).map(|i| (i * 5, i * 5 + 5)).collect();
        spans.push((90, 4000));
        spans.push((5000, 5000));
        let mut seen = Vec::new();
        each_prefetched(&data, &spans, |k, from, to| {
            seen.push((k, from, to));
            Ok::<_, ()>(())
        })
        .unwrap();
        let expected: Vec<_> = spans
            .iter()
            .enumerate()
            .map(|(k, &(f, t))| (k, f, t))
            .collect();
        assert_eq!(seen, expected);
        let mut calls = 0;
        let r = each_prefetched(&data, &spans, |k, _, _| {
            calls += 1;
            if k == 3 { Err(k) } else { Ok(()) }
        });
        assert_eq!((r, calls), (Err(3), 4));
    }
}
