//! The version of a remote object a run reads. A shard read by blocks or
//! by ranges is many requests; an object replaced between two of them
//! would hand the reader (and the cache) a mix of two versions. So the
//! version is recorded once, from a stat, when the shard is first read:
//! its ETag where the store gives one (S3's and Azure's change with every
//! write, Google Cloud Storage's with every generation), else its
//! `Last-Modified` and size. Every later request is conditional on it
//! (`If-Match`, else `If-Unmodified-Since`, where the service can send
//! them), an answer carrying another ETag than the one asked for is refused
//! by the transport (a server or proxy that ignores `If-Match`), and cache
//! entries are keyed by it, so bytes of one version are never served for
//! another.

use opendal::Operator;
use opendal::raw::Timestamp;

/// One version of one remote object: what a stat of it said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Version {
    etag: Option<String>,
    modified: Option<Timestamp>,
    size: u64,
    /// The store's own version id where it has one (Google Cloud Storage's
    /// generation): reads are conditional on it too where the service can
    /// say so (`ifGenerationMatch`), which GCS honours for media reads.
    id: Option<String>,
}

impl Version {
    /// The version of `path` now, by one stat.
    pub(crate) async fn stat(op: &Operator, path: &str) -> opendal::Result<Version> {
        let m = op.stat(path).await?;
        Ok(Version {
            etag: m.etag().map(str::to_owned).filter(|e| !e.is_empty()),
            modified: m.last_modified(),
            size: m.content_length(),
            id: m.version().map(str::to_owned).filter(|v| !v.is_empty()),
        })
    }

    /// What names this version in a cache key: empty where the store gave
    /// neither an ETag nor a modification time (nothing tells versions
    /// apart there).
    pub(crate) fn tag(&self) -> String {
        match (&self.etag, self.modified) {
            (Some(e), _) => format!("etag:{e}"),
            (None, Some(m)) => format!("modified:{m}/{}", self.size),
            (None, None) => String::new(),
        }
    }

    /// The object's size in bytes, as the stat gave it.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// This version as a message names it.
    pub(crate) fn describe(&self) -> String {
        match (&self.etag, self.modified) {
            (Some(e), _) => format!("ETag {e}"),
            (None, Some(m)) => format!("Last-Modified {m}, {} bytes", self.size),
            (None, None) => format!("{} bytes, no ETag or Last-Modified", self.size),
        }
    }

    /// A strong ETag: `If-Match` compares strongly, so a weak one
    /// (`W/"..."`) would fail every read of an unchanged object.
    pub(crate) fn strong_etag(&self) -> Option<&str> {
        self.etag.as_deref().filter(|e| !e.starts_with("W/"))
    }
}

/// A reader of `path`, its requests conditional on `version` where the
/// service can make them so (its version id where it has one, and
/// `If-Match` on a strong ETag, else `If-Unmodified-Since`); unconditional
/// without a version. A server that honours none of these and names no
/// version in its answers (gcp-storage-emulator) is caught by the
/// manifest's per-chunk sums, where it has them.
pub(crate) async fn reader(
    op: &Operator,
    path: &str,
    version: Option<&Version>,
) -> opendal::Result<opendal::Reader> {
    let cap = op.info().capability();
    let mut r = op.reader_with(path);
    if let Some(v) = version {
        if let Some(id) = v.id.as_deref().filter(|_| cap.read_with_if_version_match) {
            r = r.if_version_match(id);
        }
        if let Some(e) = v.strong_etag().filter(|_| cap.read_with_if_match) {
            r = r.if_match(e);
        } else if let Some(m) = v.modified.filter(|_| cap.read_with_if_unmodified_since) {
            r = r.if_unmodified_since(m);
        }
    }
    r.await
}

/// Whether `e` says the object is no longer the version a read was
/// conditional on (a `412`, or an answer of another ETag).
pub(crate) fn is_changed(e: &std::io::Error) -> bool {
    e.get_ref()
        .and_then(|e| e.downcast_ref::<opendal::Error>())
        .is_some_and(|e| e.kind() == opendal::ErrorKind::ConditionNotMatch)
}

/// The message of a read refused because the object changed: the version
/// recorded when the shard was opened and the one there now (by a fresh
/// stat, where it answers).
pub(crate) async fn changed(op: &Operator, path: &str, was: &Version) -> String {
    let now = match Version::stat(op, path).await {
        Ok(v) => v.describe(),
        Err(e) => format!("unknown (the stat failed: {e})"),
    };
    format!(
        "the object changed during the run: it was {} when the shard was opened, it is {now} \
         now; nothing of either version was delivered or cached as the other (a new run reads \
         the new version)",
        was.describe()
    )
}

/// Whether an answer with `headers` to a request carrying `If-Match:
/// asked` is of another version: it names an ETag, and not the one asked
/// for. The reason, for the error, where it is.
pub(crate) fn other_etag(asked: &str, headers: &http::HeaderMap) -> Option<String> {
    let got = headers.get(http::header::ETAG)?.to_str().ok()?.trim();
    (got != asked.trim()).then(|| {
        format!(
            "the server answered a read of ETag {asked} with ETag {got} (it ignores If-Match): \
             the object changed"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_names_the_etag_or_the_time_and_size() {
        let v = Version {
            etag: Some("\"a\"".into()),
            modified: None,
            size: 3,
            id: None,
        };
        assert_eq!(v.tag(), "etag:\"a\"");
        assert_eq!(v.strong_etag(), Some("\"a\""));
        let weak = Version {
            etag: Some("W/\"a\"".into()),
            ..v.clone()
        };
        assert_eq!(weak.strong_etag(), None);
        let m = Version {
            etag: None,
            modified: Some(Timestamp::from_second(1).unwrap()),
            size: 3,
            id: None,
        };
        assert!(m.tag().starts_with("modified:") && m.tag().ends_with("/3"));
        let none = Version {
            modified: None,
            ..m
        };
        assert_eq!(none.tag(), "");
    }

    #[test]
    fn an_answer_of_another_etag_is_refused() {
        let mut h = http::HeaderMap::new();
        assert_eq!(other_etag("\"a\"", &h), None);
        h.insert(http::header::ETAG, "\"a\"".parse().unwrap());
        assert_eq!(other_etag("\"a\"", &h), None);
        h.insert(http::header::ETAG, "\"b\"".parse().unwrap());
        let e = other_etag("\"a\"", &h).unwrap();
        assert!(e.contains("\"a\"") && e.contains("\"b\""), "{e}");
    }
}
