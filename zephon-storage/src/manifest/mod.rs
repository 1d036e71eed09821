//! The `index.json` manifest at a dataset's root: every shard's path, sample
//! count, byte size and checksum, so a dataset opens without listing or
//! downloading anything else. Written by `zephon build-index`.
//!
//! A manifest is input like any other: [`Manifest::parse`] (and serde, for
//! code that deserializes one directly) refuses entries that leave the
//! dataset root (a plain relative path: no `..`, absolute path or URI, no
//! empty, `.` or padded name), the same shard listed twice, and
//! sample counts that cannot be right.

mod mds;

use crate::error::escape_controls;
use crate::format::FormatSpec;
use crate::format::jsonl::LineIndex;
use crate::root::check_relative;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt;

pub use mds::manifest_from_index;

/// The manifest's file name, at the dataset root.
pub const MANIFEST: &str = "index.json";

/// What an error about a manifest past its limit advises, remote or local.
pub(crate) const RAISE_LIMIT: &str =
    "raise StorageOptions::manifest_limit if the dataset's manifest is that large";

/// A dataset manifest. Deserializing one checks it (see [`Manifest::check`]).
///
/// ```
/// use zephon_storage::manifest::{Manifest, ShardEntry};
/// let m = Manifest::new(vec![ShardEntry::new("0.jsonl", 2, 14)]);
/// let back: Manifest = serde_json::from_str(&m.to_json()).unwrap();
/// assert_eq!(back, m);
/// let escape = m.to_json().replace("0.jsonl", "../0.jsonl");
/// assert!(serde_json::from_str::<Manifest>(&escape).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawManifest")]
pub struct Manifest {
    /// Format version (1).
    pub version: u32,
    /// The shards' format; absent means JSONL.
    #[serde(default, skip_serializing_if = "FormatSpec::is_jsonl")]
    pub format: FormatSpec,
    /// The shards, in dataset order.
    pub shards: Vec<ShardEntry>,
}

/// A manifest as it is spelled, before [`Manifest::check`].
#[derive(Deserialize)]
struct RawManifest {
    version: u32,
    #[serde(default)]
    format: FormatSpec,
    shards: Vec<ShardEntry>,
}

impl TryFrom<RawManifest> for Manifest {
    type Error = String;

    fn try_from(raw: RawManifest) -> Result<Self, String> {
        // A later version may mean its fields differently: read as this
        // one, its shards could be cut wrong.
        if raw.version != 1 {
            return Err(format!(
                "version {} is not one this build reads (1)",
                raw.version
            ));
        }
        let m = Manifest {
            version: raw.version,
            format: raw.format,
            shards: raw.shards,
        };
        m.check()?;
        Ok(m)
    }
}

/// Why an `index.json` was not accepted (see [`Manifest::parse`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ManifestError {
    /// It is neither Zephon's manifest nor a Streaming index; the reason
    /// it is not Zephon's.
    Unrecognized(String),
    /// It is a manifest, but an entry is refused; names the entry.
    Invalid(String),
}

/// Shown with control characters escaped: the JSON parser's messages quote
/// the input.
impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ManifestError::Unrecognized(m) => write!(
                f,
                "not a Zephon manifest nor a MosaicML Streaming index: {}",
                escape_controls(m)
            ),
            ManifestError::Invalid(m) => write!(f, "invalid manifest: {}", escape_controls(m)),
        }
    }
}

impl std::error::Error for ManifestError {}

/// One shard of a [`Manifest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEntry {
    /// Path relative to the dataset root.
    pub path: String,
    /// Number of samples.
    pub samples: u64,
    /// Size of the stored object in bytes (compressed size for compressed shards).
    pub bytes: u64,
    /// Size after decompression (equal to `bytes` when uncompressed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncompressed_bytes: Option<u64>,
    /// Hex SHA-256 of the stored object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Path of the index sidecar, relative to the root: the line-offset
    /// index of a JSONL shard (see [`encode_index`]) or a Megatron `.idx`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<String>,
    /// A CRC32C of every chunk of the stored object, which each block of a
    /// remote shard read through the block cache is checked against as it
    /// downloads (the SHA-256 covers the whole object only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<ChunkSums>,
}

/// The CRC32C of each `bytes`-sized chunk of a shard's stored bytes (the
/// last chunk may be shorter), in order: what lets a block be verified
/// alone. Written by `zephon build-index` and `zephon prepare`.
///
/// A block of the cache is verified when it holds whole chunks, so when the
/// cache's block size is a multiple of `bytes` (both are powers of two:
/// the block at least the chunk); a smaller block is checked by its length
/// only, and a warning says so.
///
/// ```
/// use zephon_storage::manifest::ChunkSums;
/// let data = vec![7u8; 200_000];
/// let sums = ChunkSums::of(&data, 64 << 10);
/// assert_eq!(sums.crc32c.len(), 4);
/// // Block 1 of 128 KiB: bytes 131072..200000, chunks 2 and 3.
/// assert!(sums.verify(128 << 10, &data[128 << 10..], 200_000).is_ok());
/// let mut lie = data[128 << 10..].to_vec();
/// lie[5] ^= 1;
/// let err = sums.verify(128 << 10, &lie, 200_000).unwrap_err();
/// assert!(err.contains("chunk 2"), "{err}");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkSums {
    /// The chunk size: a power of two within [`CHUNK_BYTES_RANGE`].
    pub bytes: u64,
    /// One CRC32C per chunk.
    pub crc32c: Vec<u32>,
}

/// The chunk size `build-index` and `prepare` write: 1 MiB, which keeps a
/// manifest near 10 bytes per MiB of data and divides every block size of
/// 1 MiB and more (the cache's default is 4 MiB).
pub const CHUNK_BYTES: u64 = 1 << 20;

/// Allowed values of [`ChunkSums::bytes`]: the cache's block sizes, 64 KiB
/// to 256 MiB (powers of two).
pub const CHUNK_BYTES_RANGE: std::ops::RangeInclusive<u64> = (64 << 10)..=(256 << 20);

impl ChunkSums {
    /// The sums of `data` in chunks of `bytes`.
    pub fn of(data: &[u8], bytes: u64) -> ChunkSums {
        let mut sums = ChunkSummer::new(bytes);
        sums.update(data);
        sums.finish()
    }

    /// Checks `data`, the bytes at offset `from` of a shard of `len` bytes,
    /// against the chunks it holds whole; `Err` names the first chunk that
    /// differs, with both sums. Chunks only partly inside `data` are not
    /// checked.
    pub fn verify(&self, from: u64, data: &[u8], len: u64) -> Result<(), String> {
        let to = from + data.len() as u64;
        for c in from.div_ceil(self.bytes).. {
            let lo = c * self.bytes;
            let hi = ((c + 1) * self.bytes).min(len);
            let Some(&want) = self.crc32c.get(c as usize) else {
                break;
            };
            if hi > to || lo >= hi {
                break;
            }
            let got = zephon_core::hash::crc32c(&data[(lo - from) as usize..(hi - from) as usize]);
            if got != want {
                return Err(format!(
                    "chunk {c} (bytes {lo}..{hi}) has CRC32C {got:08x}, the manifest's is {want:08x}"
                ));
            }
        }
        Ok(())
    }

    /// Whether blocks of `block` bytes hold whole chunks (so every block is
    /// verified).
    pub fn verifies_blocks_of(&self, block: u64) -> bool {
        block >= self.bytes && block.is_multiple_of(self.bytes)
    }

    /// Checks the sums against the entry's size: a chunk size in
    /// [`CHUNK_BYTES_RANGE`], a power of two, one sum per chunk.
    fn check(&self, bytes: u64) -> Result<(), String> {
        if !CHUNK_BYTES_RANGE.contains(&self.bytes) || !self.bytes.is_power_of_two() {
            return Err(format!(
                "chunks.bytes {} is not a power of two within {}..={}",
                self.bytes,
                CHUNK_BYTES_RANGE.start(),
                CHUNK_BYTES_RANGE.end()
            ));
        }
        let want = bytes.div_ceil(self.bytes);
        if self.crc32c.len() as u64 != want {
            return Err(format!(
                "chunks.crc32c holds {} sums; {bytes} bytes in chunks of {} take {want}",
                self.crc32c.len(),
                self.bytes
            ));
        }
        Ok(())
    }
}

/// [`ChunkSums`] computed as the bytes come, in pieces of any size.
#[derive(Clone, Debug)]
pub struct ChunkSummer {
    bytes: u64,
    sums: Vec<u32>,
    /// The running CRC of the chunk being filled and how much it holds.
    crc: u32,
    filled: u64,
}

impl ChunkSummer {
    /// Sums in chunks of `bytes` (a power of two within [`CHUNK_BYTES_RANGE`]).
    pub fn new(bytes: u64) -> ChunkSummer {
        ChunkSummer {
            bytes,
            sums: Vec::new(),
            crc: 0,
            filled: 0,
        }
    }

    /// Adds the next bytes.
    pub fn update(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let take = ((self.bytes - self.filled) as usize).min(data.len());
            self.crc = zephon_core::hash::crc32c_append(self.crc, &data[..take]);
            self.filled += take as u64;
            data = &data[take..];
            if self.filled == self.bytes {
                self.sums.push(self.crc);
                (self.crc, self.filled) = (0, 0);
            }
        }
    }

    /// The sums, the last (shorter) chunk included.
    pub fn finish(mut self) -> ChunkSums {
        if self.filled > 0 {
            self.sums.push(self.crc);
        }
        ChunkSums {
            bytes: self.bytes,
            crc32c: self.sums,
        }
    }
}

impl ShardEntry {
    /// What the entry says of its object's content, as a
    /// [`Shard::fingerprint`](zephon_core::Shard::fingerprint): its size,
    /// and its SHA-256 where the manifest has one.
    pub fn fingerprint(&self) -> u64 {
        let sha = self
            .sha256
            .as_deref()
            .map_or(0, |s| zephon_core::hash::bytes(s.as_bytes()));
        zephon_core::hash::key(&[self.bytes, sha])
    }

    /// An entry with no checksum and no index.
    pub fn new(path: impl Into<String>, samples: u64, bytes: u64) -> Self {
        ShardEntry {
            path: path.into(),
            samples,
            bytes,
            uncompressed_bytes: None,
            sha256: None,
            index: None,
            chunks: None,
        }
    }

    /// The decompressed size when known.
    pub fn decoded_bytes(&self) -> Option<u64> {
        self.uncompressed_bytes.or_else(|| {
            (crate::format::compression::Compression::from_path(&self.path)
                == crate::format::compression::Compression::None)
                .then_some(self.bytes)
        })
    }
}

impl Manifest {
    /// A version-1 manifest of `shards`.
    pub fn new(shards: Vec<ShardEntry>) -> Self {
        Manifest {
            version: 1,
            format: FormatSpec::Jsonl,
            shards,
        }
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a manifest serializes")
    }

    /// Reads an `index.json`: Zephon's manifest, or MosaicML Streaming's
    /// index (as a manifest of [`FormatSpec::Mds`]), checked either way.
    ///
    /// ```
    /// use zephon_storage::manifest::{Manifest, ManifestError};
    /// let ok = br#"{"version":1,"shards":[{"path":"a.jsonl","samples":2,"bytes":14}]}"#;
    /// assert_eq!(Manifest::parse(ok).unwrap().shards[0].path, "a.jsonl");
    /// let twice = br#"{"version":1,"shards":[{"path":"a.jsonl","samples":2,"bytes":14},
    ///                                        {"path":"a.jsonl","samples":2,"bytes":14}]}"#;
    /// assert!(matches!(Manifest::parse(twice), Err(ManifestError::Invalid(_))));
    /// assert!(matches!(Manifest::parse(b"[1]"), Err(ManifestError::Unrecognized(_))));
    /// ```
    pub fn parse(data: &[u8]) -> Result<Manifest, ManifestError> {
        match serde_json::from_slice::<RawManifest>(data) {
            Ok(raw) => Manifest::try_from(raw).map_err(ManifestError::Invalid),
            Err(e) => match manifest_from_index(data) {
                Ok(Some(m)) => Ok(m),
                Ok(None) => Err(ManifestError::Unrecognized(e.to_string())),
                Err(m) => Err(ManifestError::Invalid(m)),
            },
        }
    }

    /// Checks what can be checked without reading the shards: every path
    /// and sidecar is a plain relative path under the root, no shard is
    /// listed twice, the sample counts add up without overflowing, and no
    /// shard claims more samples than it has bytes (for formats whose every
    /// sample takes at least one). The error names the entry.
    pub fn check(&self) -> Result<(), String> {
        let mut seen: HashMap<&str, usize> = HashMap::with_capacity(self.shards.len());
        let mut total: u64 = 0;
        for (i, e) in self.shards.iter().enumerate() {
            let entry = format!("shards[{i}] {:?}", e.path);
            check_relative(&e.path).map_err(|m| format!("{entry}: the path {m}"))?;
            if let Some(side) = &e.index {
                check_relative(side)
                    .map_err(|m| format!("{entry}: the index sidecar {side:?} {m}"))?;
            }
            if let Some(sums) = &e.chunks {
                sums.check(e.bytes).map_err(|m| format!("{entry}: {m}"))?;
            }
            if let Some(first) = seen.insert(&e.path, i) {
                return Err(format!(
                    "shards[{first}] and shards[{i}] both name {:?}; a shard may be listed once",
                    e.path
                ));
            }
            total = total.checked_add(e.samples).ok_or_else(|| {
                format!(
                    "{entry}: the sample counts add up past {} (at {} samples)",
                    u64::MAX,
                    e.samples
                )
            })?;
            let one_byte_each = matches!(
                self.format,
                FormatSpec::Jsonl
                    | FormatSpec::Tokens { .. }
                    | FormatSpec::Mds { .. }
                    | FormatSpec::WebDataset
            );
            if let Some(bytes) = e.decoded_bytes()
                && one_byte_each
                && e.samples > bytes
            {
                return Err(format!(
                    "{entry}: claims {} samples in {bytes} bytes; a {} sample takes at least one byte",
                    e.samples,
                    self.format.name()
                ));
            }
        }
        Ok(())
    }
}

/// Hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The path of the index sidecar of shard `path`.
pub fn index_path(path: &str) -> String {
    format!("{path}.idx")
}

/// Encodes a line-offset index as little-endian `u64` offsets (the sidecar format).
pub fn encode_index(index: &LineIndex) -> Vec<u8> {
    index.starts().flat_map(|s| s.to_le_bytes()).collect()
}

/// Decodes a sidecar written by [`encode_index`]; `None` if it is malformed.
pub fn decode_index(data: &[u8]) -> Option<LineIndex> {
    if !data.len().is_multiple_of(8) {
        return None;
    }
    LineIndex::from_starts(
        data.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))),
    )
}
