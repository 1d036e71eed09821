//! Byte-range reads of remote shards: wanted sample ranges are planned into
//! spans (neighbours within the backend's gap share one, up to
//! [`RANGE_SPAN`] bytes); over HTTP many spans travel in one request (see
//! [`RangePlan::parts`]); many requests go out at once, and every response
//! is checked to hold exactly the bytes asked for.

use crate::error::shard_error;
use crate::metrics::CacheMetrics;
use crate::options::RANGE_SPAN;
use crate::source::backend::http::{Answer, HttpRanges, MAX_RANGE_HEADER};
use crate::source::backend::read::{read_failed, read_version};
use crate::source::backend::version::Version;
use crate::source::backend::{Backend, RangePlan, runtime};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use zephon_core::Result;

/// The requests that cover `ranges` (`(from, to)` byte offsets, sorted by
/// `from`): a range starting no more than `gap` bytes past the current
/// request's end joins it while the request stays within `max_span` bytes
/// (a single range longer than that is one request of its own). Every range
/// lies wholly inside the last request starting at or before it.
pub(crate) fn plan_spans(
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
/// [`plan_spans`] plans them with the backend's [`RangePlan`] (its
/// `part_gap` where the spans go out in multi-range requests), keeping
/// `concurrency` requests in flight (over HTTP each asks for up to
/// `parts` spans); the bytes count as downloads. Returns each span's start
/// offset and bytes, in offset order; a range's bytes lie in the last
/// chunk starting at or before it. A response of another length than asked
/// (a shard that shrank, a server that cut the body short) or a multipart
/// part that is not a span asked for, whole, is an error naming the
/// dataset, the shard's URI and the range. Every request is conditional on
/// the version the backend recorded for `path` on its first read
/// ([`Backend::version`]): a shard replaced meanwhile is an error naming
/// both versions.
pub(crate) async fn fetch_spans(
    backend: &Backend,
    path: &str,
    dataset: &str,
    uri: &str,
    ranges: impl IntoIterator<Item = (u64, u64)>,
    metrics: &CacheMetrics,
) -> Result<Vec<(u64, Bytes)>> {
    let RangePlan {
        concurrency,
        gap,
        part_gap,
        parts,
    } = backend.ranges;
    let multi = backend.http.clone().filter(|h| parts > 1 && h.enabled());
    let single_gap = gap;
    let gap = if multi.is_some() { part_gap } else { gap };
    let spans = plan_spans(ranges, gap, RANGE_SPAN);
    let groups = match multi {
        Some(_) => pack(&spans, parts),
        None => spans.iter().map(|&s| vec![s]).collect(),
    };
    let version = backend.version(dataset, path).await?;
    let (backend, path) = (backend.clone(), path.to_owned());
    let (dataset, uri) = (dataset.to_owned(), uri.to_owned());
    let started = std::time::Instant::now();
    let chunks: Vec<Vec<(u64, Bytes)>> = runtime::spawn(uri.clone(), async move {
        futures::stream::iter(groups)
            .map(|group| {
                let read = Read {
                    backend: backend.clone(),
                    version: version.clone(),
                    path: path.clone(),
                    dataset: dataset.clone(),
                    uri: uri.clone(),
                    gap: single_gap,
                };
                let multi = multi.clone();
                async move {
                    let (first, last) = (group[0].0, group[group.len() - 1].1);
                    let what = format!("the range read of bytes {first}..{last}");
                    let names = (read.dataset.as_str(), read.uri.as_str(), what.as_str());
                    let got = read.group(multi.as_deref(), group.clone());
                    read.backend.within(names, 1, got, || {}).await
                }
            })
            .buffered(concurrency.max(1))
            .try_collect()
            .await
    })
    .await?;
    let chunks: Vec<(u64, Bytes)> = chunks.into_iter().flatten().collect();
    metrics.download_time.record(started.elapsed());
    metrics
        .bytes_downloaded
        .add(chunks.iter().map(|(_, b)| b.len() as u64).sum());
    Ok(chunks)
}

/// Cuts `spans` into the groups one multi-range request each asks for:
/// consecutive spans, at most `parts` of them, within [`RANGE_SPAN`] bytes
/// (a single larger span goes alone) and a `Range` header of
/// [`MAX_RANGE_HEADER`] characters.
fn pack(spans: &[(u64, u64)], parts: usize) -> Vec<Vec<(u64, u64)>> {
    let mut groups: Vec<Vec<(u64, u64)>> = Vec::new();
    let (mut bytes, mut header) = (0u64, 0usize);
    for &(from, to) in spans {
        // "FROM-LAST,"
        let digits = |n: u64| n.checked_ilog10().map_or(1, |d| d as usize + 1);
        let text = digits(from) + digits(to.saturating_sub(1)) + 2;
        let fits = groups.last().is_some_and(|g| {
            g.len() < parts
                && bytes + (to - from) <= RANGE_SPAN
                && header + text <= MAX_RANGE_HEADER
        });
        if !fits {
            groups.push(Vec::new());
            (bytes, header) = (0, "bytes=".len());
        }
        groups.last_mut().expect("a group").push((from, to));
        bytes += to - from;
        header += text;
    }
    groups
}

/// One shard's names for the reads of one [`fetch_spans`] call.
struct Read {
    backend: Backend,
    /// The version every request is conditional on.
    version: Version,
    path: String,
    dataset: String,
    uri: String,
    /// The backend's `range_gap`: spans read one request each merge
    /// across it.
    gap: u64,
}

impl Read {
    /// The chunks covering `group`: by one multi-range request where the
    /// backend has them, else (or when that answer is unusable) one range
    /// at a time through the operator, the spans of an unusable
    /// multi-range request merged within `range_gap` first.
    async fn group(
        &self,
        multi: Option<&HttpRanges>,
        group: Vec<(u64, u64)>,
    ) -> Result<Vec<(u64, Bytes)>> {
        let asked: Vec<(u64, u64)> = group.iter().copied().filter(|(f, t)| f < t).collect();
        let mut attempt = 0;
        while let (Some(h), false) = (multi, asked.is_empty()) {
            match h.fetch(&self.path, &asked, &self.version).await {
                Ok(Answer::Chunks(chunks)) => {
                    let mut chunks = chunks.into_iter();
                    return Ok(group
                        .iter()
                        .map(|&(f, t)| match f == t {
                            true => (f, Bytes::new()),
                            false => chunks.next().expect("one chunk per range asked"),
                        })
                        .collect());
                }
                Ok(Answer::Retry(why)) => {
                    tracing::debug!(uri = %self.uri, %why, "multi-range request unusable; reading its ranges one by one");
                    break;
                }
                // A broken answer (a part cut short, a part not asked for)
                // is asked again, as a failed request is retried, under
                // the same policy; its bytes are never used.
                Err(why) if self.backend.retry_short(attempt).await => {
                    tracing::debug!(uri = %self.uri, %why, attempt, "broken multi-range answer; asking again");
                    attempt += 1;
                }
                Err(e) => {
                    let (first, last) = (asked[0].0, asked[asked.len() - 1].1);
                    return Err(shard_error(
                        &self.dataset,
                        &self.uri,
                        format!(
                            "multi-range read of {} ranges in bytes {first}..{last}: {e} \
                             (on each of {} tries)",
                            asked.len(),
                            attempt + 1
                        ),
                    ));
                }
            }
        }
        // Planned again for requests of one range each: spans of a
        // multi-range request keep gaps wider than `range_part_gap` on the
        // server, and each would now cost a request of its own.
        let spans = match multi {
            Some(_) => plan_spans(group, self.gap, RANGE_SPAN),
            None => group,
        };
        let mut out = Vec::with_capacity(spans.len());
        for (from, to) in spans {
            out.push(self.single(from, to).await?);
        }
        Ok(out)
    }

    /// Bytes `from..to` by one range request through the operator.
    async fn single(&self, from: u64, to: u64) -> Result<(u64, Bytes)> {
        if from == to {
            return Ok((from, Bytes::new()));
        }
        // Read as it comes and stopped past the range: a server that
        // ignores the range and sends the whole object is not read whole.
        let (op, path, v) = (&self.backend.op, &self.path, Some(&self.version));
        let mut attempt = 0;
        let b = loop {
            let b = match read_version(op, path, from..to, to - from, v).await {
                Ok(b) => b,
                Err(e) => {
                    let what = format!("range read of bytes {from}..{to}");
                    let (backend, dataset, uri) = (&self.backend, &self.dataset, &self.uri);
                    return Err(read_failed(backend, dataset, uri, path, v, &what, &e).await);
                }
            };
            // Short: tried again under the one retry policy (see
            // `StorageOptions::retries`), as a cache block is.
            if (b.len() as u64) < to - from && self.backend.retry_short(attempt).await {
                attempt += 1;
                continue;
            }
            break b;
        };
        if b.len() as u64 != to - from {
            let why = if b.len() as u64 > to - from {
                "more: the server ignored the range"
            } else {
                "fewer: the object is shorter than its manifest says, or the server cut the response"
            };
            return Err(shard_error(
                &self.dataset,
                &self.uri,
                format!(
                    "range read of bytes {from}..{to} returned {} bytes, not {} ({why})",
                    b.len(),
                    to - from
                ),
            ));
        }
        Ok((from, b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_keeps_each_request_within_its_parts_bytes_and_header() {
        let spans: Vec<(u64, u64)> = (0..1000u64)
            .map(|i| (i * 10_000_000, i * 10_000_000 + 4096))
            .collect();
        for parts in [1, 7, 256, 4096] {
            let groups = pack(&spans, parts);
            assert_eq!(groups.concat(), spans);
            for g in &groups {
                let header: Vec<String> = g.iter().map(|(f, t)| format!("{f}-{}", t - 1)).collect();
                assert!(g.len() <= parts);
                assert!("bytes=".len() + header.join(",").len() <= MAX_RANGE_HEADER);
            }
            // Full groups up to the header's room: no more requests than that needs.
            assert!(
                groups.len() <= (1000 / parts.min(180)) + 1,
                "{parts}: {}",
                groups.len()
            );
        }
        let big = [(0, 5 << 20), (6 << 20, 11 << 20), (12 << 20, 12 << 20)];
        assert_eq!(pack(&big, 256).len(), 2);
    }
}

#[cfg(test)]
mod plan_tests {
    use super::plan_spans;

    #[test]
    fn neighbours_merge_within_the_gap_and_the_span() {
        // Adjacent ranges merge; one 10 bytes away does not with a gap of 4.
        assert_eq!(
            plan_spans([(0, 4), (4, 8), (18, 20)], 4, 1 << 20),
            vec![(0, 8), (18, 20)]
        );
        // A span stops growing at max_span.
        assert_eq!(
            plan_spans([(0, 4), (4, 8), (8, 12)], 0, 8),
            vec![(0, 8), (8, 12)]
        );
    }
}
