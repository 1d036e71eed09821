//! Byte-range reads of remote shards: wanted sample ranges are planned into
//! requests (neighbours within the backend's gap share one, up to
//! [`RANGE_SPAN`] bytes), many requests go out at once, and every response
//! is checked to hold exactly the bytes asked for.

use crate::backend::{Backend, RangePlan, runtime};
use crate::download::shard_error;
use crate::metrics::CacheMetrics;
use crate::options::RANGE_SPAN;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use zephon_core::Result;

/// The requests that cover `ranges` (`(from, to)` byte offsets, sorted by
/// `from`): a range starting no more than `gap` bytes past the current
/// request's end joins it while the request stays within `max_span` bytes
/// (a single range longer than that is one request of its own). Every range
/// lies wholly inside the last request starting at or before it.
///
/// ```
/// use zephon_storage::ranges::plan_spans;
/// // Adjacent ranges merge; one 10 bytes away does not with a gap of 4.
/// assert_eq!(plan_spans([(0, 4), (4, 8), (18, 20)], 4, 1 << 20), vec![(0, 8), (18, 20)]);
/// // A span stops growing at max_span.
/// assert_eq!(plan_spans([(0, 4), (4, 8), (8, 12)], 0, 8), vec![(0, 8), (8, 12)]);
/// ```
pub fn plan_spans(
    ranges: impl IntoIterator<Item = (u64, u64)>,
    gap: u64,
    max_span: u64,
) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for (from, to) in ranges {
        match spans.last_mut() {
            Some(s) if from <= s.1.saturating_add(gap) && to.max(s.1) - s.0 <= max_span => {
                s.1 = s.1.max(to);
            }
            _ => spans.push((from, to)),
        }
    }
    spans
}

/// Fetches the byte ranges `(from, to)` (sorted by `from`) of `path` as
/// [`plan_spans`] plans them with the backend's [`RangePlan`], keeping
/// `concurrency` requests in flight; the bytes count as downloads. Returns
/// each request's start offset and bytes, in offset order; a range's bytes
/// lie in the last chunk starting at or before it. A response of another
/// length than asked (a shard that shrank, a server that cut the body
/// short) is an error naming the dataset, the shard's URI and the range.
pub(crate) async fn fetch_spans(
    backend: &Backend,
    path: &str,
    dataset: &str,
    uri: &str,
    ranges: impl IntoIterator<Item = (u64, u64)>,
    metrics: &CacheMetrics,
) -> Result<Vec<(u64, Bytes)>> {
    let RangePlan { concurrency, gap } = backend.ranges;
    let spans = plan_spans(ranges, gap, RANGE_SPAN);
    let (op, path) = (backend.op.clone(), path.to_owned());
    let (dataset, uri) = (dataset.to_owned(), uri.to_owned());
    let started = std::time::Instant::now();
    let chunks: Vec<(u64, Bytes)> = runtime::spawn(uri.clone(), async move {
        futures::stream::iter(spans)
            .map(|(from, to)| {
                let (op, path, dataset, uri) =
                    (op.clone(), path.clone(), dataset.clone(), uri.clone());
                async move {
                    if from == to {
                        return Ok((from, Bytes::new()));
                    }
                    let b = op
                        .read_with(&path)
                        .range(from..to)
                        .await
                        .map_err(|e| {
                            shard_error(
                                &dataset,
                                &uri,
                                format!("range read of bytes {from}..{to} failed: {e}"),
                            )
                        })?
                        .to_bytes();
                    if b.len() as u64 != to - from {
                        return Err(shard_error(
                            &dataset,
                            &uri,
                            format!(
                                "range read of bytes {from}..{to} returned {} bytes, not {} \
                                 (the object is shorter than its manifest says, or the server cut the response)",
                                b.len(),
                                to - from
                            ),
                        ));
                    }
                    Ok((from, b))
                }
            })
            .buffered(concurrency.max(1))
            .try_collect()
            .await
    })
    .await?;
    metrics.download_time.record(started.elapsed());
    metrics
        .bytes_downloaded
        .add(chunks.iter().map(|(_, b)| b.len() as u64).sum());
    Ok(chunks)
}
