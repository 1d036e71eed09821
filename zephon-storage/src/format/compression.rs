//! Compressed shards: `.zst` and `.gz`, decoded with async-compression.

use async_compression::tokio::bufread::{GzipDecoder, ZstdDecoder};
use tokio::io::AsyncReadExt;

/// How a shard file is compressed, from its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// Plain bytes.
    None,
    /// Zstandard (`.zst`, `.zstd`).
    Zstd,
    /// Gzip (`.gz`).
    Gzip,
}

impl Compression {
    /// The compression a file name implies.
    ///
    /// ```
    /// use zephon_storage::format::compression::Compression;
    /// assert_eq!(Compression::from_path("a/0.jsonl.zst"), Compression::Zstd);
    /// assert_eq!(Compression::from_path("0.jsonl"), Compression::None);
    /// ```
    pub fn from_path(path: &str) -> Self {
        if path.ends_with(".zst") || path.ends_with(".zstd") {
            Compression::Zstd
        } else if path.ends_with(".gz") {
            Compression::Gzip
        } else {
            Compression::None
        }
    }

    /// Decodes a whole compressed object. Truncated or corrupt input is an
    /// error (never a short result).
    pub async fn decode(self, data: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(data.len() * 4);
        match self {
            Compression::None => out.extend_from_slice(data),
            Compression::Zstd => {
                let mut d = ZstdDecoder::new(data);
                d.multiple_members(true);
                d.read_to_end(&mut out).await?;
            }
            Compression::Gzip => {
                let mut d = GzipDecoder::new(data);
                d.multiple_members(true);
                d.read_to_end(&mut out).await?;
            }
        }
        Ok(out)
    }
}

/// Whether a file name is a JSONL shard this crate reads.
pub fn is_shard_name(path: &str) -> bool {
    [".jsonl", ".jsonl.zst", ".jsonl.zstd", ".jsonl.gz"]
        .iter()
        .any(|s| path.ends_with(s))
}
