//! Compressed shards: `.zst` and `.gz`, decoded with async-compression.

use async_compression::tokio::bufread::{GzipDecoder, ZstdDecoder};
use tokio::io::{AsyncRead, AsyncReadExt};

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
        self.decode_into(data, &mut out).await?;
        Ok(out)
    }

    /// Decodes a whole compressed object into `out` a buffer at a time, so
    /// memory holds one buffer (1 MiB), not the decoded object; returns the
    /// decoded size. Truncated or corrupt input is an error, as is a
    /// failed write.
    ///
    /// ```
    /// use zephon_storage::format::compression::Compression;
    /// let packed = zstd::encode_all(&b"{\"a\":1}\n"[..], 3).unwrap();
    /// let mut out = Vec::new();
    /// let n = futures::executor::block_on(Compression::Zstd.decode_into(&packed, &mut out)).unwrap();
    /// assert_eq!((n, &out[..]), (8, &b"{\"a\":1}\n"[..]));
    /// assert!(futures::executor::block_on(Compression::Zstd.decode_into(&packed[..5], &mut out)).is_err());
    /// ```
    pub async fn decode_into(
        self,
        data: &[u8],
        out: &mut impl std::io::Write,
    ) -> std::io::Result<u64> {
        async fn pump(
            mut from: impl AsyncRead + Unpin,
            out: &mut impl std::io::Write,
        ) -> std::io::Result<u64> {
            let mut buf = vec![0u8; DECODE_BUFFER];
            let mut total = 0;
            loop {
                match from.read(&mut buf).await? {
                    0 => return Ok(total),
                    n => {
                        out.write_all(&buf[..n])?;
                        total += n as u64;
                    }
                }
            }
        }
        match self {
            Compression::None => {
                out.write_all(data)?;
                Ok(data.len() as u64)
            }
            Compression::Zstd => {
                let mut d = ZstdDecoder::new(data);
                d.multiple_members(true);
                pump(d, out).await
            }
            Compression::Gzip => {
                let mut d = GzipDecoder::new(data);
                d.multiple_members(true);
                pump(d, out).await
            }
        }
    }
}

/// Bytes decoded at a time by [`Compression::decode_into`].
const DECODE_BUFFER: usize = 1 << 20;

/// Whether a file name is a JSONL shard this crate reads.
pub fn is_shard_name(path: &str) -> bool {
    [".jsonl", ".jsonl.zst", ".jsonl.zstd", ".jsonl.gz"]
        .iter()
        .any(|s| path.ends_with(s))
}
