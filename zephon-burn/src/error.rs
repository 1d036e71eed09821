//! The crate's error type.

use std::path::PathBuf;

/// `Result` with [`Error`] as the error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while feeding Burn or timing a model. Each
/// variant names what failed: the configuration key, the device, the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is missing, mistyped or out of range.
    #[error("invalid configuration `{key}`: {message}")]
    Config {
        /// The key, as a dotted path (`model.hidden_dim`).
        key: String,
        /// What was wrong and what is allowed.
        message: String,
    },
    /// A configuration file could not be read.
    #[error("cannot read configuration file `{path}`: {source}")]
    ConfigFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The requested device is unknown, not compiled in, or not present.
    #[error("device `{device}`: {message}")]
    Device {
        /// The device as asked for.
        device: String,
        /// Why it cannot be used.
        message: String,
    },
    /// The requested precision is unknown or not supported by the device.
    #[error("precision `{precision}`: {message}")]
    Precision {
        /// The precision as asked for.
        precision: String,
        /// Why it cannot be used.
        message: String,
    },
    /// The device reported an execution failure.
    #[error("device execution failed: {0}")]
    Execution(String),
    /// The data pipeline failed.
    #[error(transparent)]
    Pipeline(#[from] zephon_core::Error),
    /// A Burn data loader failed to produce a batch.
    #[error("data loader: {0}")]
    DataLoader(String),
    /// A batch does not have the shape a conversion expects.
    #[error("batch shape: {0}")]
    Shape(String),
    /// A training checkpoint folder is missing a file, corrupt, or from
    /// another run or step.
    #[error("training checkpoint `{path}`: {message}")]
    Checkpoint {
        /// The file (or folder) at fault.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// An output file could not be written.
    #[error("cannot write `{path}`: {message}")]
    Output {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

impl Error {
    /// A [`Error::Config`] for `key`.
    pub fn config(key: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Config {
            key: key.into(),
            message: message.into(),
        }
    }

    /// An [`Error::Output`] for `path`.
    pub fn output(path: impl Into<PathBuf>, message: impl std::fmt::Display) -> Self {
        Error::Output {
            path: path.into(),
            message: message.to_string(),
        }
    }
}

impl From<burn::tensor::ExecutionError> for Error {
    fn from(e: burn::tensor::ExecutionError) -> Self {
        Error::Execution(format!("{e:?}"))
    }
}
