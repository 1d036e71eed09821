//! The crate's error type.

use zephon_core::SamplePtr;
use zephon_core::error::SampleSource;

/// `Result` with [`zephon_core::Error`], the pipeline's error type: every
/// operator of this crate reports through it.
pub type Result<T, E = zephon_core::Error> = std::result::Result<T, E>;

/// What can go wrong in the media operators. Each variant names the
/// operator and the sample (its pointer, and its member key where the
/// record has one); [`zephon_core::Error::name_sources`] then names the
/// dataset and shard.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MediaError {
    /// Bytes that do not decode: truncated, corrupt, or not an image of a
    /// supported format whatever the member's name says.
    #[error("{op}: sample {ptr}{key}: {message}")]
    Decode {
        /// Operator name.
        op: &'static str,
        /// The sample's source pointer.
        ptr: PtrDisplay,
        /// The sample's member key (` (key ...)`), if it has one.
        key: KeyDisplay,
        /// What was wrong.
        message: String,
    },
    /// A header declaring more pixels than allowed, refused before any
    /// pixel buffer is allocated.
    #[error("{op}: sample {ptr}{key}: {width}x{height} is more than max_pixels {max_pixels}")]
    TooLarge {
        /// Operator name.
        op: &'static str,
        /// The sample's source pointer.
        ptr: PtrDisplay,
        /// The sample's member key, if it has one.
        key: KeyDisplay,
        /// Declared width.
        width: u32,
        /// Declared height.
        height: u32,
        /// The limit.
        max_pixels: u64,
    },
    /// A stream beyond a limit of `decode_audio` (duration, sample count,
    /// sample rate, channel count), refused before its sample buffer is
    /// allocated when the header declares it.
    #[error("{op}: sample {ptr}{key}: {message}")]
    Limit {
        /// Operator name.
        op: &'static str,
        /// The sample's source pointer.
        ptr: PtrDisplay,
        /// The sample's member key, if it has one.
        key: KeyDisplay,
        /// Which limit, and what the stream declared or held.
        message: String,
    },
    /// A record without the field an operator reads, or with a value of
    /// another kind.
    #[error("{op}: sample {ptr}{key} has no {expected} field `{field}`{found}")]
    MissingField {
        /// Operator name.
        op: &'static str,
        /// The field.
        field: String,
        /// What kind of value was expected.
        expected: &'static str,
        /// ` (found ...)` when the field exists with another kind.
        found: String,
        /// The sample's source pointer.
        ptr: PtrDisplay,
        /// The sample's member key, if it has one.
        key: KeyDisplay,
    },
    /// An image an operator cannot take (f32 pixels before a geometric
    /// operator, images of different sizes in one batch).
    #[error("{op}: sample {ptr}: {message}")]
    Unsupported {
        /// Operator name.
        op: &'static str,
        /// The sample's source pointer.
        ptr: PtrDisplay,
        /// What was wrong.
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

impl From<MediaError> for zephon_core::Error {
    /// The operator, then the sample (which
    /// [`zephon_core::Error::name_sources`] can name by dataset and shard),
    /// then what was wrong.
    fn from(e: MediaError) -> Self {
        use zephon_core::Error as Core;
        let sample = |op, ptr: PtrDisplay, message| Core::Sample {
            op,
            sample: SampleSource::new(ptr.0),
            message,
        };
        match e {
            MediaError::Config { key, message } => Core::config(key, message),
            MediaError::Decode {
                op,
                ptr,
                key,
                message,
            }
            | MediaError::Limit {
                op,
                ptr,
                key,
                message,
            } => sample(op, ptr, format!("{}{message}", key.prefix())),
            MediaError::TooLarge {
                op,
                ptr,
                key,
                width,
                height,
                max_pixels,
            } => sample(
                op,
                ptr,
                format!(
                    "{}{width}x{height} is more than max_pixels {max_pixels}",
                    key.prefix()
                ),
            ),
            MediaError::MissingField {
                op,
                field,
                expected,
                found,
                ptr,
                key,
            } => sample(
                op,
                ptr,
                format!("{}no {expected} field `{field}`{found}", key.prefix()),
            ),
            MediaError::Unsupported { op, ptr, message } => sample(op, ptr, message),
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

/// A sample's member key (WebDataset's `__key__`) for messages, if it has
/// one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyDisplay(pub Option<String>);

impl KeyDisplay {
    /// The key of `record`, from its `__key__` text field.
    pub fn of(record: &zephon_core::Record) -> Self {
        KeyDisplay(record.text(KEY_FIELD).map(str::to_owned))
    }

    fn prefix(&self) -> String {
        match &self.0 {
            Some(k) => format!("member key `{k}`: "),
            None => String::new(),
        }
    }
}

impl std::fmt::Display for KeyDisplay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(k) => write!(f, " (member key `{k}`)"),
            None => Ok(()),
        }
    }
}

/// The field WebDataset readers put each sample's member key in.
pub const KEY_FIELD: &str = "__key__";

/// `Ok(())` if `ok`, else a [`MediaError::Config`] naming `key`.
pub(crate) fn check(ok: bool, key: &'static str, message: impl Into<String>) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(MediaError::Config {
            key,
            message: message.into(),
        }
        .into())
    }
}
