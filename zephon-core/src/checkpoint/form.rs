//! The two forms of a [`Checkpoint`] (binary and JSON), their checksum, and
//! checkpoint files.
//!
//! Both forms carry a CRC32C of the canonical payload (the magic, then the
//! checkpoint in postcard), so the same checkpoint has the same checksum in
//! either form, and any changed, missing or added byte is refused: a
//! checkpoint silently accepted with one flipped count would drop, repeat
//! or reorder samples. CRC32C detects every error burst of up to 32 bits,
//! so every single changed byte.

use super::state::{CHECKPOINT_VERSION, Checkpoint, err};
use crate::error::{Error, Result};
use serde::Serialize;
use std::path::Path;

/// First bytes of the binary form, so a file is recognised (and a file of
/// something else refused) before decoding.
const MAGIC: &[u8; 4] = b"ZPCK";

/// Bytes of the checksum that ends the binary form.
const CRC_LEN: usize = 4;

/// The JSON form's checksum field, and the prefix of its value.
const CHECKSUM_FIELD: &str = "checksum";
const CHECKSUM_PREFIX: &str = "crc32c:";

/// The canonical payload: the magic, then the checkpoint in postcard.
fn payload(ckpt: &Checkpoint) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    // Writing plain data into a growable Vec cannot fail.
    out.extend(postcard::to_stdvec(ckpt).unwrap_or_default());
    out
}

#[derive(Serialize)]
struct JsonForm<'a> {
    #[serde(flatten)]
    checkpoint: &'a Checkpoint,
    checksum: String,
}

impl Checkpoint {
    /// The checksum both forms carry: CRC32C of the canonical payload.
    pub fn checksum(&self) -> u32 {
        crc32c::crc32c(&payload(self))
    }

    /// Pretty JSON, for people and tools, with a `checksum` field
    /// (`"crc32c:…"`, as in the binary form): an edited file is refused.
    pub fn to_json(&self) -> String {
        let form = JsonForm {
            checkpoint: self,
            checksum: format!("{CHECKSUM_PREFIX}{:08x}", self.checksum()),
        };
        // Plain data with string keys: serialization cannot fail.
        serde_json::to_string_pretty(&form).unwrap_or_default()
    }

    /// Reads the JSON form. A different layout version is refused with an
    /// error saying both versions; a missing or wrong checksum, fields that
    /// contradict each other, and any text but exactly what
    /// [`to_json`](Checkpoint::to_json) writes (trailing bytes, changed white
    /// space) are refused too.
    pub fn from_json(text: &str) -> Result<Self> {
        Self::from_json_at(text, "in-memory JSON")
    }

    pub(super) fn from_json_at(text: &str, origin: &str) -> Result<Self> {
        let mut value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| err(origin, format!("not valid JSON: {e}")))?;
        let version = value
            .get("version")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| err(origin, "no `version` field: not a Zephon checkpoint"))?;
        check_version(version, origin)?;
        let stored = value
            .as_object_mut()
            .and_then(|o| o.remove(CHECKSUM_FIELD))
            .ok_or_else(|| err(origin, "no `checksum` field"))?;
        let stored = stored
            .as_str()
            .and_then(|s| s.strip_prefix(CHECKSUM_PREFIX))
            // One spelling only: lower-case hex, as written.
            .filter(|h| h.len() == 8 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or_else(|| {
                err(
                    origin,
                    format!("`checksum` {stored} is not `{CHECKSUM_PREFIX}` and 8 hex digits"),
                )
            })?;
        let ckpt: Checkpoint = serde_json::from_value(value)
            .map_err(|e| err(origin, format!("malformed checkpoint: {e}")))?;
        let computed = ckpt.checksum();
        if computed != stored {
            return Err(err(
                origin,
                format!(
                    "checksum mismatch (the file says {stored:08x}, its content gives {computed:08x}): the file is corrupt or was edited"
                ),
            ));
        }
        ckpt.check_consistent(origin)?;
        // The checksum covers the content; the layout must be the one
        // written too, so no byte of the file can change unnoticed.
        if text != ckpt.to_json() {
            return Err(err(
                origin,
                "the JSON is not laid out as Zephon writes it (white space changed or re-formatted)",
            ));
        }
        Ok(ckpt)
    }

    /// The compact binary form: a 4-byte magic, the checkpoint in postcard,
    /// then its CRC32C (4 bytes, little-endian).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = payload(self);
        let crc = crc32c::crc32c(&out);
        out.extend(crc.to_le_bytes());
        out
    }

    /// Reads the binary form. A different layout version is refused with an
    /// error saying both versions; a wrong checksum, missing or trailing
    /// bytes, and fields that contradict each other are refused too.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        Self::from_bytes_at(bytes, "in-memory bytes")
    }

    pub(super) fn from_bytes_at(bytes: &[u8], origin: &str) -> Result<Self> {
        let body = bytes
            .strip_prefix(MAGIC)
            .ok_or_else(|| err(origin, "does not start with the checkpoint magic `ZPCK`"))?;
        // The version leads the layout, so it can be read whatever follows.
        let (version, _) = postcard::take_from_bytes::<u32>(body)
            .map_err(|e| err(origin, format!("truncated before the version: {e}")))?;
        check_version(version as u64, origin)?;
        let Some(split) = bytes
            .len()
            .checked_sub(CRC_LEN)
            .filter(|&n| n > MAGIC.len())
        else {
            return Err(err(origin, "truncated: shorter than a checkpoint"));
        };
        let (signed, tail) = bytes.split_at(split);
        let stored = u32::from_le_bytes(tail.try_into().unwrap_or_default());
        let computed = crc32c::crc32c(signed);
        if stored != computed {
            return Err(err(origin, mismatch(bytes, stored, computed)));
        }
        let (ckpt, rest) = postcard::take_from_bytes::<Checkpoint>(&signed[MAGIC.len()..])
            .map_err(|e| err(origin, format!("corrupt: {e}")))?;
        if !rest.is_empty() {
            return Err(err(
                origin,
                format!("{} bytes after the checkpoint", rest.len()),
            ));
        }
        ckpt.check_consistent(origin)?;
        Ok(ckpt)
    }

    /// Writes the checkpoint to `path`: JSON when the name ends in `.json`,
    /// the binary form otherwise. The file is replaced atomically (written
    /// beside it, then renamed), so a crash never leaves half a checkpoint.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let data = if path.extension().is_some_and(|e| e == "json") {
            self.to_json().into_bytes()
        } else {
            self.to_bytes()
        };
        // Written whole under a unique temporary name, then renamed: a
        // failed write or a kill leaves the old checkpoint (see `output`).
        crate::output::write_atomic(path, &data).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })
    }

    /// Reads a checkpoint file in either form (recognised by its first
    /// bytes). Errors name the file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let origin = path.display().to_string();
        // Only a regular file: a FIFO or a device in its place would hang
        // the load or read without end.
        let bytes = crate::input::read_file(path, u64::MAX).map_err(|source| Error::Io {
            path: origin.clone(),
            source,
        })?;
        Self::from_slice(&bytes, &origin)
    }

    /// Reads either form (recognised by its first bytes) from bytes read
    /// elsewhere (an object store, a socket); errors name `origin`.
    ///
    /// ```
    /// use zephon_core::checkpoint::{Checkpoint, Recipe};
    /// use zephon_core::{Dataset, Record, WorkSource};
    /// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 10]])?;
    /// let ws = WorkSource::builder().dataset(ds, 1.0).canonical_lanes(2).build()?;
    /// let ckpt = Recipe::new(&ws).start(&ws).checkpoint();
    /// assert_eq!(Checkpoint::from_slice(ckpt.to_json().as_bytes(), "a")?, ckpt);
    /// let mut bytes = ckpt.to_bytes();
    /// bytes[9] ^= 1;
    /// let e = Checkpoint::from_slice(&bytes, "s3://run/rank0.ckpt").unwrap_err();
    /// assert!(e.to_string().starts_with("checkpoint `s3://run/rank0.ckpt`"));
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn from_slice(bytes: &[u8], origin: &str) -> Result<Self> {
        if bytes.starts_with(MAGIC) {
            Self::from_bytes_at(bytes, origin)
        } else {
            let text = std::str::from_utf8(bytes)
                .map_err(|_| err(origin, "neither the binary form nor UTF-8 JSON"))?;
            Self::from_json_at(text, origin)
        }
    }

    /// Reads the checkpoint files of all ranks of a run and merges them.
    /// They must be of the same run and step, and together cover every
    /// canonical lane exactly once; otherwise the error names the file at
    /// fault (or the lanes none covers).
    pub fn load_all<P: AsRef<Path>>(paths: impl IntoIterator<Item = P>) -> Result<Self> {
        let mut parts = Vec::new();
        for p in paths {
            let name = p.as_ref().display().to_string();
            parts.push((Self::load(p)?, name));
        }
        let names: Vec<String> = parts.iter().map(|(_, n)| n.clone()).collect();
        let merged = Self::merge_named(parts)?;
        let missing = merged.missing_lanes();
        if !missing.is_empty() {
            return Err(err(
                &names.join(", "),
                format!(
                    "lanes {} are in none of these files, which cover {}: merge the checkpoints of all ranks",
                    super::lane_runs(missing),
                    super::lane_runs(merged.lanes.keys().copied())
                ),
            ));
        }
        Ok(merged)
    }
}

/// Why a binary form's checksum does not match: bytes appended after a
/// whole checkpoint are said so, anything else is corruption.
fn mismatch(bytes: &[u8], stored: u32, computed: u32) -> String {
    if let Ok((_, rest)) = postcard::take_from_bytes::<Checkpoint>(&bytes[MAGIC.len()..])
        && rest.len() > CRC_LEN
    {
        let end = bytes.len() - rest.len();
        if rest[..CRC_LEN] == crc32c::crc32c(&bytes[..end]).to_le_bytes() {
            return format!(
                "{} bytes of trailing data after the checkpoint's checksum",
                rest.len() - CRC_LEN
            );
        }
    }
    format!(
        "checksum mismatch (the file says {stored:08x}, its content gives {computed:08x}): the file is corrupt or truncated"
    )
}

pub(super) fn check_version(version: u64, origin: &str) -> Result<()> {
    if version != CHECKPOINT_VERSION as u64 {
        let why = if version < CHECKPOINT_VERSION as u64 {
            "it was written by an earlier Zephon, in a layout this build does not read; \
             restore it with that build, or restart the run"
        } else {
            "it was written by a later Zephon; restore it with that build"
        };
        return Err(err(
            origin,
            format!(
                "format version {version} is not supported (this build reads version {CHECKPOINT_VERSION}): {why}"
            ),
        ));
    }
    Ok(())
}
