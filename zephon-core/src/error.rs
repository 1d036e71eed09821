//! The crate's error type.

use crate::pointer::SamplePtr;

/// A boxed error from another crate (storage, ops, user closures).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with [`Error`] as the error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a Zephon pipeline. Each variant names what
/// failed and where: dataset, shard, sample, line, path or URI.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A sample could not be parsed.
    #[error("dataset `{dataset}`, shard `{shard}`, line {line}: malformed record: {message}")]
    MalformedRecord {
        /// Dataset name.
        dataset: String,
        /// Shard path or URI.
        shard: String,
        /// 1-based line number in the shard.
        line: u64,
        /// What was wrong.
        message: String,
    },
    /// A dataset could not be opened (missing or empty folder, no shards, ...).
    #[error("dataset `{dataset}` at `{location}`: {message}")]
    Dataset {
        /// Dataset name.
        dataset: String,
        /// Path or URI of the dataset.
        location: String,
        /// What was wrong.
        message: String,
    },
    /// A sample index past the end of a shard.
    #[error(
        "dataset `{dataset}`, shard `{shard}`: sample {sample} out of range (shard has {len} samples)"
    )]
    SampleOutOfRange {
        /// Dataset name.
        dataset: String,
        /// Shard path or URI.
        shard: String,
        /// The requested sample.
        sample: u64,
        /// The shard's sample count.
        len: u64,
    },
    /// A pointer names a dataset or shard that the catalog does not have.
    #[error("pointer {ptr} names no shard of the catalog")]
    UnknownPointer {
        /// The offending pointer.
        ptr: SamplePtr,
    },
    /// An invalid configuration value.
    #[error("invalid configuration `{key}`: {message}")]
    Config {
        /// The configuration key.
        key: String,
        /// What was wrong and what is allowed.
        message: String,
    },
    /// An I/O error with the path it happened on.
    #[error("I/O error on `{path}`: {source}")]
    Io {
        /// File path or URI.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An operator failed (a user closure returned an error, or panicked).
    #[error("operator `{op}`: {message}")]
    Operator {
        /// Operator name.
        op: &'static str,
        /// What happened.
        message: String,
    },
    /// A panic inside the pipeline: in an operator's closure or task (`op`
    /// names it), or elsewhere in the task driving the pipeline. The pipeline
    /// cannot go on after it: whatever the panicking code held is lost, so
    /// continuing would drop samples silently. It ends after this error.
    #[error("{}", panic_text(.op, .payload))]
    Panic {
        /// The operator whose closure or task panicked, where known.
        op: Option<&'static str>,
        /// The panic's message.
        payload: String,
    },
    /// An operator failed on one sample: a field it needs is missing, a
    /// document it cannot encode, a sequence it cannot place.
    #[error("operator `{op}`: {sample}: {message}")]
    Sample {
        /// Operator name.
        op: &'static str,
        /// The sample, by pointer and, once
        /// [`name_sources`](Error::name_sources) ran, by dataset name and
        /// shard path.
        sample: SampleSource,
        /// What was wrong with it.
        message: String,
    },
    /// A checkpoint could not be read or written, or does not fit this run.
    #[error("checkpoint `{origin}`: {message}")]
    Checkpoint {
        /// The checkpoint file, or where the checkpoint came from.
        origin: String,
        /// What was wrong.
        message: String,
    },
    /// An error from another crate, with the context it happened in.
    #[error("{context}: {source}")]
    External {
        /// Where it happened (dataset, shard, URI, operator).
        context: String,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
}

fn panic_text(op: &Option<&'static str>, payload: &str) -> String {
    match op {
        Some(op) => format!("operator `{op}`: panic in pipeline: {payload}"),
        None => format!("panic in pipeline: {payload}"),
    }
}

/// Where a sample came from, for messages: its pointer and, once resolved
/// against the pipeline's catalog, its dataset's name and shard's path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SampleSource {
    /// The sample's pointer (the first of its lineage), if it has one.
    pub ptr: Option<SamplePtr>,
    /// The dataset's name and the shard's path or URI (boxed: every
    /// `Result` of the pipeline is as large as its largest error, and
    /// results are moved through each stage).
    pub names: Option<Box<(String, String)>>,
}

impl SampleSource {
    /// The source of a sample with pointer `ptr` (none: no lineage).
    pub fn new(ptr: Option<SamplePtr>) -> Self {
        SampleSource { ptr, names: None }
    }
}

impl std::fmt::Display for SampleSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.ptr, &self.names) {
            (None, _) => f.write_str("a sample without lineage"),
            (Some(p), Some(names)) => write!(
                f,
                "dataset `{}`, shard `{}`, sample {}",
                names.0, names.1, p.sample
            ),
            (Some(p), None) => write!(
                f,
                "dataset {}, shard {}, sample {} (lane {})",
                p.dataset, p.shard, p.sample, p.lane
            ),
        }
    }
}

impl Error {
    /// The error for a caught panic: `op` is the operator whose closure or
    /// task panicked, where known.
    pub fn panic(op: Option<&'static str>, payload: Box<dyn std::any::Any + Send>) -> Self {
        Error::Panic {
            op,
            payload: panic_message(payload.as_ref()),
        }
    }

    /// Whether this is a caught panic, after which the pipeline ends.
    pub fn is_panic(&self) -> bool {
        matches!(self, Error::Panic { .. })
    }

    /// A configuration error for `key`.
    pub fn config(key: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Config {
            key: key.into(),
            message: message.into(),
        }
    }

    /// Wraps an error from another crate with its context.
    pub fn external(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::External {
            context: context.into(),
            source: source.into(),
        }
    }
}

/// The text of a panic payload (`panic!` with a literal or a formatted message).
///
/// ```
/// let p = std::panic::catch_unwind(|| panic!("bad {}", 7)).unwrap_err();
/// assert_eq!(zephon_core::error::panic_message(&*p), "bad 7");
/// ```
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(a panic payload that is not a string)".into())
}

#[cfg(test)]
mod tests {
    use super::Error;
    use crate::record::Record;

    /// Every poll of every stage moves a `Result<Record>`, as large as the
    /// larger of a record and an error: an error variant that grows past a
    /// record makes all of them move more.
    #[test]
    fn an_error_is_no_larger_than_a_record() {
        let (error, record) = (size_of::<Error>(), size_of::<Record>());
        assert!(error <= record, "Error is {error} bytes, Record {record}");
        // A tag at most: the result weighs what the record does.
        assert!(size_of::<Result<Record, Error>>() <= record + 8);
    }
}
