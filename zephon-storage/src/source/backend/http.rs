//! Byte ranges over plain HTTP(S) with one request for many ranges
//! (`Range: bytes=a-b,c-d,...`), answered as `206 multipart/byteranges`:
//! the cost of a request (client, server, round trip) is shared by all
//! its ranges. A server that ignores the ranges or merges them into one
//! is still read correctly: the request is sent again, one range at a
//! time, through the backend's operator.

use super::multipart;
use crate::options::StorageOptions;
use crate::source::backend::pace::{Pace, Pacing};
use crate::source::backend::transport;
use crate::source::backend::version::{Version, other_etag};
use bytes::{Bytes, BytesMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::sync::Semaphore;

/// Longest `Range` header sent: servers refuse longer header lines (nginx
/// answers 400 past its 8 KiB `large_client_header_buffers`).
pub(crate) const MAX_RANGE_HEADER: usize = 4096;

/// Bytes a part's boundary and headers may add (servers send about 100).
const PART_OVERHEAD: u64 = 1024;

/// The direct HTTP client of one backend for multi-range reads.
#[derive(Debug)]
pub(crate) struct HttpRanges {
    base: reqwest::Url,
    client: OnceLock<Result<reqwest::Client, String>>,
    timeouts: (std::time::Duration, std::time::Duration),
    /// The slowest body accepted (see [`Pacing`]).
    pacing: Pacing,
    /// Requests in flight at once, shared with nothing else: the
    /// backend's `concurrency`.
    limit: Semaphore,
    /// Cleared when the server answers a multi-range request with the
    /// whole object: it does not do multi-range, so stop asking.
    multi: AtomicBool,
}

/// What a multi-range request brought back.
pub(crate) enum Answer {
    /// Each range asked, in the order asked: its start and bytes.
    Chunks(Vec<(u64, Bytes)>),
    /// Nothing usable, for a reason that is not the data's fault (a
    /// transport error, a status other than 206, a whole-object answer):
    /// read the ranges one by one instead.
    Retry(String),
}

impl HttpRanges {
    /// The client for the dataset folder `base` (`http(s)://host/path`).
    pub(crate) fn new(base: &str, opts: &StorageOptions) -> Option<Self> {
        let base = reqwest::Url::parse(&format!("{}/", base.trim_end_matches('/'))).ok()?;
        Some(HttpRanges {
            base,
            client: OnceLock::new(),
            timeouts: (opts.timeout, opts.io_timeout),
            pacing: opts.pacing(),
            limit: Semaphore::new(opts.concurrency.max(1)),
            multi: AtomicBool::new(true),
        })
    }

    /// Whether multi-range requests are still worth sending.
    pub(crate) fn enabled(&self) -> bool {
        self.multi.load(Ordering::Relaxed)
    }

    fn client(&self) -> Result<&reqwest::Client, String> {
        self.client
            .get_or_init(|| {
                let timeouts = |b: reqwest::ClientBuilder| {
                    b.connect_timeout(self.timeouts.0)
                        .read_timeout(self.timeouts.1)
                };
                // A redirect to HTTPS comes back as a status other than
                // 206: its ranges are then read through the operator.
                if self.base.scheme() == "http" {
                    transport::plain_client(timeouts)
                } else {
                    timeouts(reqwest::Client::builder()).build()
                }
                .map_err(|e| crate::source::backend::error_chain(&e))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Asks for `asked` (sorted, disjoint, non-empty half-open ranges) of
    /// `path` in one request. `Err` is a broken answer (a part not asked
    /// for, cut short or missing), which no retry mends. The request is
    /// conditional on `version`'s ETag where it has a strong one, and an
    /// answer of another ETag is read again through the operator (whose
    /// reads report the change).
    pub(crate) async fn fetch(
        &self,
        path: &str,
        asked: &[(u64, u64)],
        version: &Version,
    ) -> Result<Answer, String> {
        let client = match self.client() {
            Ok(c) => c,
            Err(e) => return Ok(Answer::Retry(format!("no HTTP client: {e}"))),
        };
        let mut url = self.base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().extend(path.split('/'));
        }
        let mut header = String::from("bytes=");
        for (i, (from, to)) in asked.iter().enumerate() {
            if i > 0 {
                header.push(',');
            }
            header.push_str(&format!("{from}-{}", to - 1));
        }
        let _permit = self.limit.acquire().await.map_err(|e| e.to_string())?;
        let mut req = client.get(url).header("Range", header);
        if let Some(e) = version.strong_etag() {
            req = req.header(http::header::IF_MATCH, e);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return Ok(Answer::Retry(format!("request failed: {e}"))),
        };
        let status = resp.status().as_u16();
        if status == 200 && asked.len() > 1 {
            // The whole object: dropping the response closes the
            // connection rather than download it.
            self.multi.store(false, Ordering::Relaxed);
            return Ok(Answer::Retry(
                "the server ignores multi-range requests".into(),
            ));
        }
        if status != 206 {
            return Ok(Answer::Retry(format!("status {status}")));
        }
        if let Some(why) = version
            .strong_etag()
            .and_then(|e| other_etag(e, resp.headers()))
        {
            return Ok(Answer::Retry(why));
        }
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        };
        let wanted: u64 = asked.iter().map(|(f, t)| t - f).sum();
        let (first, last) = (asked[0].0, asked[asked.len() - 1].1);
        if let Some(boundary) = header("content-type")
            .as_deref()
            .and_then(multipart::boundary)
            .map(str::to_owned)
        {
            let cap = wanted + asked.len() as u64 * PART_OVERHEAD + 4096;
            let body = match read_body(resp, cap, self.pacing).await? {
                Some(b) => b,
                None => {
                    return Ok(Answer::Retry(
                        "the body was cut off or came too slowly".into(),
                    ));
                }
            };
            return multipart::split(&body, &boundary, asked).map(Answer::Chunks);
        }
        // One range: the one asked, or one covering all asked (a server
        // may merge neighbours); anything else is read again range by range.
        let Some((from, to)) = header("content-range")
            .as_deref()
            .and_then(multipart::content_range)
        else {
            return Ok(Answer::Retry(
                "a 206 answer without a usable Content-Range".into(),
            ));
        };
        if asked.len() == 1 && from == first && to != last {
            return Err(format!(
                "bytes {first}..{last} came back as bytes {from}..{to} \
                 (the object is shorter than its manifest says, or the server cut the range)"
            ));
        }
        if from > first || to < last || to - from > wanted.max(crate::options::RANGE_SPAN) {
            return Ok(Answer::Retry(format!(
                "one range {from}..{to} for {} asked",
                asked.len()
            )));
        }
        let body = match read_body(resp, to - from, self.pacing).await? {
            Some(b) => b,
            None => {
                return Ok(Answer::Retry(
                    "the body was cut off or came too slowly".into(),
                ));
            }
        };
        if body.len() as u64 != to - from {
            return Err(format!(
                "bytes {from}..{to} came with {} bytes, not {}",
                body.len(),
                to - from
            ));
        }
        let cut = |(f, t): (u64, u64)| (f, body.slice((f - from) as usize..(t - from) as usize));
        Ok(Answer::Chunks(asked.iter().copied().map(cut).collect()))
    }
}

/// The body, at most `cap` bytes (more is an error: a server does not get
/// to fill memory); `None` when the connection broke first.
async fn read_body(
    mut resp: reqwest::Response,
    cap: u64,
    pacing: Pacing,
) -> Result<Option<Bytes>, String> {
    let too_long = |n: u64| format!("an answer of {n} bytes or more where at most {cap} were due");
    if let Some(n) = resp.content_length().filter(|&n| n > cap) {
        return Err(too_long(n));
    }
    let mut buf = BytesMut::with_capacity(resp.content_length().unwrap_or(cap).min(cap) as usize);
    let mut pace = Pace::new(pacing);
    loop {
        let asked = std::time::Instant::now();
        match resp.chunk().await {
            Ok(Some(c)) => {
                if (buf.len() + c.len()) as u64 > cap {
                    return Err(too_long((buf.len() + c.len()) as u64));
                }
                // Too slow is the transport's trouble, not the data's: the
                // ranges are read again one by one, through the operator.
                if let Err(why) = pace.add(c.len() as u64, asked.elapsed()) {
                    tracing::debug!(%why, "multi-range answer too slow");
                    return Ok(None);
                }
                buf.extend_from_slice(&c);
            }
            Ok(None) => return Ok(Some(buf.freeze())),
            Err(_) => return Ok(None),
        }
    }
}
/// A multi-range client for `uri` when it is plain HTTP(S).
pub(crate) fn http_client(uri: &str, opts: &StorageOptions) -> Option<Arc<HttpRanges>> {
    let scheme = uri.split_once("://")?.0.to_ascii_lowercase();
    matches!(scheme.as_str(), "http" | "https")
        .then(|| HttpRanges::new(uri, opts))
        .flatten()
        .map(Arc::new)
}
