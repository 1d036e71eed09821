//! A compressed shard, downloaded and checked (or a local file's map), and
//! its decode: into an unnamed temporary file (`TMPDIR`) and mapped, or
//! straight into the file the shard cache publishes, so that a cached
//! shard's decoded bytes are written once rather than decoded into a
//! temporary file and copied (and a cached shard's download goes to the
//! cache's folder too, so the temporary folder holds neither).
//!
//! What a shard decodes to is input: the decode stops past the size its
//! manifest entry gives (a shard that decodes to more is refused, not
//! decoded whole) or, where it gives none, past what the cache holds, and a
//! shard that decodes to less than its entry says is refused too.

use crate::error::shard_error;
use crate::format::compression::Compression;
use crate::source::spill::{self, Folder, Room, SpillError, Written};
use bytes::Bytes;
use std::fs::File;
use zephon_core::{Error, Result};

/// What a download hands the cache for one entry.
pub(crate) enum Fetched {
    /// The entry's bytes.
    Bytes(Bytes),
    /// A compressed shard, downloaded and checked, still to decode: where
    /// it is published, it is decoded straight into the disk tier's file,
    /// so its decoded bytes are written once.
    Decode(Compressed),
}

/// A compressed shard to decode, with what bounds its decoded size.
#[derive(Clone, Debug)]
pub(crate) struct Compressed {
    pub(crate) dataset: String,
    /// The shard's URI or path, for errors.
    pub(crate) uri: String,
    pub(crate) compression: Compression,
    /// The compressed bytes (a mapped temporary or shard file).
    pub(crate) raw: Bytes,
    /// The decoded size the manifest entry gives.
    pub(crate) want: Option<u64>,
    /// Where the entry gives none, the most the shard cache holds.
    pub(crate) cap: Option<u64>,
}

impl Compressed {
    /// Decoded into an unnamed temporary file, mapped.
    pub(crate) fn decode(&self) -> Result<Bytes> {
        let decoded =
            spill::decode(self.compression, &self.raw, self.limit()).map_err(|e| match e {
                SpillError::Disk(source) => Folder::Temp.error("decoding", &self.uri, source),
                e => self.error(e),
            })?;
        self.check_len(decoded.len() as u64)?;
        Ok(decoded)
    }

    /// Decoded into `file` from its current position, its writes kept
    /// within `room`; returns the decoded length. A write that fails is
    /// [`Written::Disk`] (the caller may decode elsewhere), a shard that
    /// cannot be decoded [`Written::Body`].
    pub(crate) fn decode_into(&self, file: &File, room: Room) -> Result<u64, Written<Error>> {
        match spill::decode_to(self.compression, &self.raw, self.limit(), room, file) {
            Ok(n) => self.check_len(n).map(|()| n).map_err(Written::Body),
            Err(SpillError::Disk(e)) => Err(Written::Disk(e)),
            Err(e) => Err(Written::Body(self.error(e))),
        }
    }

    fn limit(&self) -> Option<u64> {
        self.want.or(self.cap)
    }

    fn error(&self, e: SpillError) -> Error {
        let message = match e {
            SpillError::Data(e) => {
                format!("corrupt or truncated {:?} data: {e}", self.compression)
            }
            SpillError::Disk(e) => format!("decoding: {e}"),
            SpillError::TooLarge(written) => match self.want {
                Some(n) => format!(
                    "decompressed size mismatch: expected {n} bytes, got more \
                     (stopped after {written})"
                ),
                None => format!(
                    "decodes to more than {} bytes, what the shard cache holds \
                     (cache.limit_bytes); raise the limit, or store the shard \
                     uncompressed so that it is cached in blocks",
                    self.cap.unwrap_or_default()
                ),
            },
        };
        shard_error(&self.dataset, &self.uri, message)
    }

    fn check_len(&self, len: u64) -> Result<()> {
        match self.want {
            Some(n) if n != len => Err(shard_error(
                &self.dataset,
                &self.uri,
                format!("decompressed size mismatch: expected {n} bytes, got {len}"),
            )),
            _ => Ok(()),
        }
    }
}
