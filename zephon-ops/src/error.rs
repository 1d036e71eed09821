//! The crate's error type.

use zephon_core::SamplePtr;

/// `Result` with [`Error`] as the error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong in the text operators. Each variant names what failed
/// and where (the field, the source pointer, the row).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The tokenizer could not be loaded.
    #[error("tokenizer `{source_name}`: {message}")]
    Tokenizer {
        /// File path, or `<bytes>`.
        source_name: String,
        /// What was wrong.
        message: String,
    },
    /// Encoding a document failed.
    #[error("tokenize: encoding field `{field}` of sample {ptr}: {message}")]
    Encode {
        /// The source field.
        field: String,
        /// The record's source pointer (or `(no lineage)`).
        ptr: PtrDisplay,
        /// The tokenizer's message.
        message: String,
    },
    /// A record lacks the field an operator reads.
    #[error("{op}: sample {ptr} has no {expected} field `{field}`{found}")]
    MissingField {
        /// Operator name.
        op: &'static str,
        /// The field.
        field: String,
        /// What kind of value was expected (`text`, `tokens`).
        expected: &'static str,
        /// What was found instead, if the field exists with another kind.
        found: FoundKind,
        /// The record's source pointer.
        ptr: PtrDisplay,
    },
    /// A sequence longer than the row, under the `error` policy.
    #[error("pack_sequences: sample {ptr} has {len} tokens, more than max_length {max_length}")]
    Oversized {
        /// The record's source pointer.
        ptr: PtrDisplay,
        /// Its length.
        len: usize,
        /// The row length.
        max_length: usize,
    },
    /// A per-token field whose length is not its record's number of ids.
    #[error("{op}: sample {ptr} has {len} values in `{field}` for {ids} input ids")]
    Misaligned {
        /// Operator name.
        op: &'static str,
        /// The field.
        field: String,
        /// The record's source pointer.
        ptr: PtrDisplay,
        /// Values in the field.
        len: usize,
        /// Input ids of the record.
        ids: usize,
    },
    /// A row that does not fit the batch being collated.
    #[error("to_training: row {row} of batch (lane {lane}, index {index}): {message}")]
    BadRow {
        /// Lane of the batch.
        lane: u32,
        /// Index of the batch.
        index: u64,
        /// The row within the batch.
        row: usize,
        /// What was wrong.
        message: String,
    },
    /// A conversation that `tokenize_chat` cannot render or mask.
    #[error("tokenize_chat: sample {ptr}: {message}")]
    Chat {
        /// The record's source pointer.
        ptr: PtrDisplay,
        /// What was wrong (the message, or the template line).
        message: String,
    },
    /// An invalid option.
    #[error("invalid option `{key}`: {message}")]
    Config {
        /// The option.
        key: &'static str,
        /// What was wrong and what is allowed.
        message: String,
    },
}

impl From<Error> for zephon_core::Error {
    /// Each context said once: the operator, then the sample (which
    /// [`zephon_core::Error::name_sources`] can name by dataset and shard),
    /// then what was wrong.
    fn from(e: Error) -> Self {
        use zephon_core::Error as Core;
        use zephon_core::error::SampleSource;
        let sample = |op, ptr: PtrDisplay, message| Core::Sample {
            op,
            sample: SampleSource::new(ptr.0),
            message,
        };
        match e {
            Error::Config { key, message } => Core::config(key, message),
            Error::Encode {
                field,
                ptr,
                message,
            } => sample(
                "tokenize",
                ptr,
                format!("encoding field `{field}`: {message}"),
            ),
            Error::Chat { ptr, message } => sample("tokenize_chat", ptr, message),
            Error::MissingField {
                op,
                field,
                expected,
                found,
                ptr,
            } => sample(op, ptr, format!("no {expected} field `{field}`{found}")),
            Error::Misaligned {
                op,
                field,
                ptr,
                len,
                ids,
            } => sample(
                op,
                ptr,
                format!("{len} values in `{field}` for {ids} input ids"),
            ),
            Error::Oversized {
                ptr,
                len,
                max_length,
            } => sample(
                "pack_sequences",
                ptr,
                format!("{len} tokens, more than max_length {max_length}"),
            ),
            other @ Error::Tokenizer { .. } => Core::Operator {
                op: "tokenize",
                message: other.to_string(),
            },
            Error::BadRow {
                lane,
                index,
                row,
                message,
            } => Core::Operator {
                op: "to_training",
                message: format!("row {row} of batch (lane {lane}, index {index}): {message}"),
            },
        }
    }
}

/// A source pointer for messages: the first of the lineage, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PtrDisplay(pub Option<SamplePtr>);

impl std::fmt::Display for PtrDisplay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(p) => write!(f, "{p}"),
            None => f.write_str("(no lineage)"),
        }
    }
}

/// The kind of value found where another was expected, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoundKind(pub Option<&'static str>);

impl std::fmt::Display for FoundKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(k) => write!(f, " (found {k})"),
            None => Ok(()),
        }
    }
}

impl Error {
    /// `n` if `range` holds it, else a [`Error::Config`] naming `key`.
    pub(crate) fn in_range(
        range: zephon_core::settings::Range,
        key: &'static str,
        n: usize,
    ) -> Result<usize> {
        if range.contains(n as u64) {
            Ok(n)
        } else {
            Err(Error::Config {
                key,
                message: range.message(n),
            })
        }
    }

    pub(crate) fn missing(
        op: &'static str,
        field: &str,
        expected: &'static str,
        r: &zephon_core::Record,
    ) -> Self {
        Error::MissingField {
            op,
            field: field.to_owned(),
            expected,
            found: FoundKind(r.get(field).map(|v| v.kind())),
            ptr: PtrDisplay(r.source().copied()),
        }
    }
}
