//! Backends: a URI becomes an opendal [`Operator`] with retry (jitter),
//! timeout, concurrency-limit and tracing layers.
//!
//! | URI | service |
//! |---|---|
//! | `/data/x`, `file:///data/x` | local file system |
//! | `s3://bucket/prefix` | S3 and S3-compatible servers (path-style when an endpoint is set) |
//! | `gs://bucket/prefix` (or `gcs://`) | Google Cloud Storage (`STORAGE_EMULATOR_HOST` for an emulator, `GOOGLE_APPLICATION_CREDENTIALS`) |
//! | `azblob://container/prefix` | Azure Blob Storage (`AZURE_STORAGE_CONNECTION_STRING`, or `AZURE_STORAGE_ACCOUNT` and `AZURE_STORAGE_KEY` / `AZURE_STORAGE_SAS_TOKEN`) |
//! | `http://host/path/`, `https://...` | plain HTTP(S); cannot list, so needs `index.json` |
//! | `memory://name` | process memory, one store per URI (tests) |
//! | `hf://datasets/org/name` | Hugging Face (feature `hf`; `HF_TOKEN`, `HF_ENDPOINT` for a mirror; built in CI, not tested against a hub) |

#[cfg(any(feature = "gcs", feature = "azblob"))]
mod cloud;
pub(crate) mod content_range;
pub(crate) mod http;
mod multipart;
pub(crate) mod pace;
pub(crate) mod read;
pub mod runtime;
pub(crate) mod transport;
pub(crate) mod version;

use crate::options::StorageOptions;
use opendal::layers::{ConcurrentLimitLayer, RetryLayer, TimeoutLayer, TracingLayer};
use opendal::{Operator, services};
use serde::Serialize;
use std::sync::Arc;
use zephon_core::{Error, Result};
use zephon_metrics::Counter;

/// Request counters of one backend.
#[derive(Debug, Default)]
pub struct BackendMetrics {
    /// Retried requests (each retry of each request counts once).
    pub retries: Counter,
}

/// A serializable copy of [`BackendMetrics`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BackendStats {
    /// Retried requests.
    pub retries: u64,
}

impl BackendMetrics {
    /// The counters now.
    pub fn snapshot(&self) -> BackendStats {
        BackendStats {
            retries: self.retries.get(),
        }
    }
}

/// An opened backend: the operator rooted at the dataset, and what it can do.
#[derive(Clone, Debug)]
pub struct Backend {
    /// The operator, rooted at the dataset folder.
    pub op: Operator,
    /// The dataset URI as given (without a trailing slash), for names and errors.
    pub uri: String,
    /// Whether the service can list a folder.
    pub can_list: bool,
    /// Retry counters.
    pub metrics: Arc<BackendMetrics>,
    /// How byte-range reads are planned: requests in flight per read, and
    /// the largest gap one request spans (from [`StorageOptions`]).
    pub ranges: RangePlan,
    /// The multi-range client of a plain HTTP(S) backend.
    pub(crate) http: Option<Arc<http::HttpRanges>>,
    /// Largest `index.json` read ([`StorageOptions::manifest_limit`]).
    pub(crate) manifest_limit: u64,
    /// The version of each object read by range, recorded by its first
    /// read (see [`version`]): shared by every clone, so all of a run's
    /// range reads of one object are of one version.
    pub(crate) versions: Arc<std::sync::Mutex<Versions>>,
    /// [`StorageOptions::block_deadline`].
    pub(crate) deadline: std::time::Duration,
    /// The retry policy's count and delays, for the answers the retry
    /// layer cannot see are wrong (a `206` of fewer bytes than asked).
    pub(crate) retry: (usize, std::time::Duration, std::time::Duration),
}

/// The versions a backend's range reads are at, by path.
pub(crate) type Versions =
    std::collections::HashMap<String, Arc<tokio::sync::OnceCell<version::Version>>>;

/// How byte-range reads of one backend are planned: neighbours within
/// `gap` bytes (`part_gap` in a multi-range request) share a span (up to
/// [`RANGE_SPAN`](crate::options::RANGE_SPAN) bytes), and one read keeps
/// `concurrency` requests in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangePlan {
    /// Requests one read keeps in flight.
    pub concurrency: usize,
    /// Largest gap, in bytes, between two wanted ranges that one request spans.
    pub gap: u64,
    /// The same within one span of a multi-range HTTP request, where a
    /// further span costs a part header rather than a request.
    pub part_gap: u64,
    /// Most spans one HTTP request asks for (multi-range requests).
    pub parts: usize,
}

impl Backend {
    /// Opens the backend for `uri`. `dataset` names the dataset in errors.
    pub fn open(dataset: &str, uri: &str, opts: &StorageOptions) -> Result<Self> {
        let err = |message: String| Error::Dataset {
            dataset: dataset.to_owned(),
            location: uri.to_owned(),
            message,
        };
        let ext = |e: opendal::Error| err(format!("cannot configure the backend: {e}"));
        opts.validate()?;
        // An empty URI would otherwise be the filesystem's root (as `/`
        // is), and `build-index` would write its manifest there.
        if uri.trim().is_empty() {
            return Err(err("an empty URI: give a folder or a URI".into()));
        }
        let trimmed = uri.trim_end_matches('/');
        // The scheme is found before trailing slashes are trimmed: trimmed
        // first, `s3://` would be the local path `s3:`. `after` is what
        // follows `://` as written.
        let (scheme, after) = match uri.split_once("://") {
            Some((s, r)) => (s.to_ascii_lowercase(), Some(r)),
            None => ("file".to_owned(), None),
        };
        let rest = after.map_or(trimmed, |r| r.trim_end_matches('/'));
        let (op, can_list) = match scheme.as_str() {
            "file" => {
                if after == Some("") {
                    return Err(err("a file:// URI needs a path: file:///data/web".into()));
                }
                let path = std::path::absolute(if rest.is_empty() { "/" } else { rest })
                    .map_err(|e| err(format!("bad path: {e}")))?;
                // opendal would create a missing root, so a mistyped path
                // would open as an empty dataset (and leave a folder behind).
                match std::fs::metadata(&path) {
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => return Err(err("not a folder".into())),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        return Err(err("the dataset folder does not exist".into()));
                    }
                    Err(e) => return Err(err(format!("cannot read the folder: {e}"))),
                }
                let b = services::Fs::default().root(&path.to_string_lossy());
                (Operator::new(b).map_err(ext)?, true)
            }
            "memory" => {
                // One store per memory:// URI in the process, so every
                // backend opened on it sees what the others wrote.
                static STORES: std::sync::Mutex<
                    Option<std::collections::HashMap<String, Operator>>,
                > = std::sync::Mutex::new(None);
                let mut stores = STORES.lock().expect("memory store lock");
                let stores = stores.get_or_insert_with(Default::default);
                let op = match stores.get(rest) {
                    Some(op) => op.clone(),
                    None => {
                        let op = Operator::new(services::Memory::default()).map_err(ext)?;
                        stores.insert(rest.to_owned(), op.clone());
                        op
                    }
                };
                (op, true)
            }
            #[cfg(feature = "s3")]
            "s3" => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(err("an s3:// URI needs a bucket: s3://bucket/prefix".into()));
                }
                let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
                let mut b = services::S3::default()
                    .bucket(bucket)
                    .root(&format!("/{prefix}"));
                let endpoint = opts
                    .endpoint
                    .clone()
                    .or_else(|| env("AWS_ENDPOINT_URL_S3"))
                    .or_else(|| env("AWS_ENDPOINT_URL"));
                if let Some(e) = &endpoint {
                    b = b.endpoint(e);
                }
                let region = opts
                    .region
                    .clone()
                    .or_else(|| env("AWS_REGION"))
                    .or_else(|| env("AWS_DEFAULT_REGION"))
                    .unwrap_or_else(|| "us-east-1".into());
                b = b.region(&region);
                if let Some(k) = opts
                    .access_key_id
                    .clone()
                    .or_else(|| env("AWS_ACCESS_KEY_ID"))
                {
                    b = b.access_key_id(&k);
                }
                if let Some(k) = opts
                    .secret_access_key
                    .clone()
                    .or_else(|| env("AWS_SECRET_ACCESS_KEY"))
                {
                    b = b.secret_access_key(&k);
                }
                if let Some(t) = opts
                    .session_token
                    .clone()
                    .or_else(|| env("AWS_SESSION_TOKEN"))
                {
                    b = b.session_token(&t);
                }
                if opts.anonymous {
                    b = b.skip_signature();
                }
                (Operator::new(b).map_err(ext)?, true)
            }
            #[cfg(feature = "gcs")]
            "gs" | "gcs" => {
                let (bucket, prefix) = cloud::split_root(&scheme, "bucket", rest).map_err(err)?;
                (cloud::gcs(bucket, prefix, opts).map_err(ext)?, true)
            }
            #[cfg(feature = "azblob")]
            "azblob" => {
                let (container, prefix) =
                    cloud::split_root(&scheme, "container", rest).map_err(err)?;
                (cloud::azblob(container, prefix, opts).map_err(err)?, true)
            }
            #[cfg(feature = "http")]
            "http" | "https" => {
                let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
                if host.is_empty() {
                    return Err(err(format!(
                        "an {scheme}:// URI needs a host: {scheme}://host/path"
                    )));
                }
                let b = services::Http::default()
                    .endpoint(&format!("{scheme}://{host}"))
                    .root(&format!("/{path}/"));
                (Operator::new(b).map_err(ext)?, false)
            }
            #[cfg(feature = "hf")]
            "hf" => {
                // hf://datasets/org/name[/path]
                let mut parts = rest.splitn(4, '/');
                let kind = parts.next().unwrap_or_default();
                let repo = format!(
                    "{}/{}",
                    parts.next().unwrap_or_default(),
                    parts.next().unwrap_or_default()
                );
                let root = parts.next().unwrap_or_default();
                let mut b = services::Hf::default()
                    .repo_type(kind)
                    .repo_id(&repo)
                    .root(&format!("/{root}"));
                if let Ok(t) = std::env::var("HF_TOKEN") {
                    b = b.token(&t);
                }
                // A mirror, as the Hugging Face tools take it.
                let endpoint = opts
                    .endpoint
                    .clone()
                    .or_else(|| std::env::var("HF_ENDPOINT").ok().filter(|v| !v.is_empty()));
                if let Some(e) = &endpoint {
                    b = b.endpoint(e);
                }
                (Operator::new(b).map_err(ext)?, true)
            }
            other => {
                if let Some(feature) = feature_of(other) {
                    return Err(err(format!(
                        "`{other}://` needs zephon-storage's feature `{feature}`, which this \
                         build leaves out (it is on by default)"
                    )));
                }
                return Err(err(format!(
                    "unsupported scheme `{other}://` (supported: {})",
                    supported_schemes().join(", ")
                )));
            }
        };
        let metrics = Arc::new(BackendMetrics::default());
        let m = metrics.clone();
        let retry = RetryLayer::new()
            .with_jitter()
            .with_max_times(opts.retries)
            .with_min_delay(opts.retry_min_delay)
            .with_max_delay(opts.retry_max_delay.max(opts.retry_min_delay))
            .with_notify(move |e: opendal::layers::RetryEvent<'_>| {
                m.retries.inc();
                tracing::warn!(op = ?e.op, attempt = e.attempt, error = %e.err, "retrying a storage request");
            });
        // Timeout below retry: each attempt is timed out, then retried.
        let op = op
            .with_context(
                opendal::OperationContext::new()
                    .with_http_transport(transport::Transport::transporter(opts.pacing())),
            )
            .layer(
                TimeoutLayer::new()
                    .with_timeout(opts.timeout)
                    .with_io_timeout(opts.io_timeout),
            )
            .layer(retry)
            .layer(ConcurrentLimitLayer::new(opts.concurrency.max(1)))
            .layer(TracingLayer::new());
        Ok(Backend {
            op,
            uri: trimmed.to_owned(),
            can_list,
            metrics,
            ranges: RangePlan {
                concurrency: opts.range_concurrency,
                gap: opts.range_gap,
                part_gap: opts.range_part_gap,
                parts: opts.range_parts,
            },
            http: http::http_client(trimmed, opts),
            manifest_limit: opts.manifest_limit,
            versions: Arc::default(),
            deadline: opts.block_deadline,
            retry: (
                opts.retries,
                opts.retry_min_delay,
                opts.retry_max_delay.max(opts.retry_min_delay),
            ),
        })
    }

    /// The version `path` is read at: recorded by a stat on the first
    /// call for it, the same for every later one of this backend and its
    /// clones. `dataset` names the dataset in the error.
    pub(crate) async fn version(&self, dataset: &str, path: &str) -> Result<version::Version> {
        let cell = self
            .versions
            .lock()
            .expect("versions lock")
            .entry(path.to_owned())
            .or_default()
            .clone();
        cell.get_or_try_init(|| async {
            version::Version::stat(&self.op, path).await.map_err(|e| {
                crate::error::shard_error(
                    dataset,
                    &self.uri_of(path),
                    format!("cannot stat the shard to record its version: {e}"),
                )
            })
        })
        .await
        .cloned()
    }

    /// Whether a read whose `attempt`-th try (from 0) came back short is
    /// tried again: after the retry policy's delay (doubling from
    /// `retry_min_delay` up to `retry_max_delay`), while `retries` last,
    /// counted as retries.
    pub(crate) async fn retry_short(&self, attempt: usize) -> bool {
        let (times, min, max) = self.retry;
        if attempt >= times {
            return false;
        }
        self.metrics.retries.inc();
        let delay = min.saturating_mul(1 << attempt.min(20)).min(max);
        tokio::time::sleep(delay).await;
        true
    }

    /// `fut`, a read of `what` (`uri`) that may take `spans` deadlines
    /// ([`StorageOptions::block_deadline`] each), or an error naming the
    /// shard and the deadline once they are spent (`expired` is called
    /// then): progress does not extend it.
    pub(crate) async fn within<T>(
        &self,
        (dataset, uri, what): (&str, &str, &str),
        spans: u64,
        fut: impl Future<Output = Result<T>>,
        expired: impl FnOnce(),
    ) -> Result<T> {
        let limit = self
            .deadline
            .saturating_mul(u32::try_from(spans.max(1)).unwrap_or(u32::MAX));
        match tokio::time::timeout(limit, fut).await {
            Ok(out) => out,
            Err(_) => Err({
                expired();
                crate::error::shard_error(
                    dataset,
                    uri,
                    format!(
                        "{what} did not finish within {limit:?} (block_deadline {:?}{}): the server \
                     stalls or sends too slowly; every try and retry counts toward it",
                        self.deadline,
                        if spans > 1 {
                            format!(" for each of its {spans} parts of up to 64 MiB")
                        } else {
                            String::new()
                        }
                    ),
                )
            }),
        }
    }

    /// The full URI of `path` (relative to the dataset root).
    pub fn uri_of(&self, path: &str) -> String {
        format!("{}/{}", self.uri, path)
    }

    /// The dataset's `index.json`: `None` where there is none, an error
    /// (the reason, for a message naming the manifest) where it cannot be
    /// read or is longer than `manifest_limit`, which is as far as it is
    /// read.
    pub(crate) async fn read_manifest(&self) -> std::result::Result<Option<bytes::Bytes>, String> {
        let limit = self.manifest_limit;
        match read::read_at_most(&self.op, crate::manifest::MANIFEST, limit).await {
            Ok(b) if b.len() as u64 > limit => Err(format!(
                "the manifest is longer than manifest_limit ({limit} bytes; read no further); {}",
                crate::manifest::RAISE_LIMIT
            )),
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read the manifest: {e}")),
        }
    }
}

/// An error and its sources, joined: foyer wraps a download's error (its
/// waiters see only the wrapper), and reqwest's says "builder error" with
/// the reason in its source.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

/// The feature of zephon-storage that reads `scheme://` URIs, for the
/// remote schemes that have one.
fn feature_of(scheme: &str) -> Option<&'static str> {
    match scheme {
        "s3" => Some("s3"),
        "gs" | "gcs" => Some("gcs"),
        "azblob" => Some("azblob"),
        "http" | "https" => Some("http"),
        "hf" => Some("hf"),
        _ => None,
    }
}

/// The URI schemes this build reads, by the features it was built with.
///
/// ```
/// let schemes = zephon_storage::backend::supported_schemes();
/// assert!(schemes.contains(&"file") && schemes.contains(&"memory"));
/// // The default features bring every remote store but Hugging Face.
/// assert!(schemes.contains(&"s3") && schemes.contains(&"https"));
/// ```
pub fn supported_schemes() -> Vec<&'static str> {
    let mut out = vec!["file"];
    if cfg!(feature = "s3") {
        out.push("s3");
    }
    if cfg!(feature = "gcs") {
        out.push("gs");
    }
    if cfg!(feature = "azblob") {
        out.push("azblob");
    }
    if cfg!(feature = "http") {
        out.extend(["http", "https"]);
    }
    out.push("memory");
    if cfg!(feature = "hf") {
        out.push("hf");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A remote scheme this build leaves out is an error naming the feature
    /// that reads it; one it has opens (no request is sent at open).
    #[test]
    fn a_scheme_whose_feature_is_off_names_the_feature() {
        let opts = StorageOptions::default().endpoint("http://127.0.0.1:9");
        for (uri, scheme) in [
            ("s3://bkt/ds", "s3"),
            ("gs://bkt/ds", "gs"),
            ("azblob://box/ds", "azblob"),
            ("http://127.0.0.1:9/ds", "http"),
        ] {
            let feature = feature_of(scheme).unwrap();
            let got = Backend::open("d", uri, &opts);
            if supported_schemes().contains(&scheme) {
                if let Err(e) = got {
                    assert!(!e.to_string().contains("feature"), "{uri}: {e}");
                }
            } else {
                let e = got.unwrap_err().to_string();
                assert!(e.contains(&format!("feature `{feature}`")), "{uri}: {e}");
            }
        }
        let e = Backend::open("d", "ftp://x/y", &opts)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unsupported scheme") && e.contains("file"),
            "{e}"
        );
    }
}
