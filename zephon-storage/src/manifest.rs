//! The `index.json` manifest at a dataset's root: every shard's path, sample
//! count, byte size and checksum, so a dataset opens without listing or
//! downloading anything else. Written by `zephon build-index`.

use crate::format::FormatSpec;
use crate::format::jsonl::LineIndex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The manifest's file name, at the dataset root.
pub const MANIFEST: &str = "index.json";

/// A dataset manifest.
///
/// ```
/// use zephon_storage::manifest::{Manifest, ShardEntry};
/// let m = Manifest::new(vec![ShardEntry::new("0.jsonl", 2, 14)]);
/// let back: Manifest = serde_json::from_str(&m.to_json()).unwrap();
/// assert_eq!(back, m);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version (1).
    pub version: u32,
    /// The shards' format; absent means JSONL.
    #[serde(default, skip_serializing_if = "FormatSpec::is_jsonl")]
    pub format: FormatSpec,
    /// The shards, in dataset order.
    pub shards: Vec<ShardEntry>,
}

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
}

impl ShardEntry {
    /// An entry with no checksum and no index.
    pub fn new(path: impl Into<String>, samples: u64, bytes: u64) -> Self {
        ShardEntry {
            path: path.into(),
            samples,
            bytes,
            uncompressed_bytes: None,
            sha256: None,
            index: None,
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
    index.starts.iter().flat_map(|s| s.to_le_bytes()).collect()
}

/// Decodes a sidecar written by [`encode_index`]; `None` if it is malformed.
pub fn decode_index(data: &[u8]) -> Option<LineIndex> {
    if !data.len().is_multiple_of(8) || data.is_empty() {
        return None;
    }
    let starts: Vec<u64> = data
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    (starts[0] == 0 && starts.windows(2).all(|w| w[0] < w[1])).then_some(LineIndex { starts })
}
