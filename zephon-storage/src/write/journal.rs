//! The journal a [`DatasetWriter`](super::DatasetWriter) keeps at the
//! destination (`prepare.json`): what produced the output, and every
//! finished shard with the input position it ends at, so a run started
//! again with the same settings keeps those shards and redoes the rest.

use crate::error::shard_error;
use crate::format::FormatSpec;
use crate::manifest::ShardEntry;
use crate::source::backend::{Backend, runtime};
use serde::{Deserialize, Serialize};
use zephon_core::Result;

/// The journal's file name, at the destination's root.
pub const JOURNAL: &str = "prepare.json";

/// Where in the input a finished shard ends: documents wholly written, and
/// tokens already written of the next one (flat token files cut
/// documents across shards).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// Documents wholly written.
    pub documents: u64,
    /// Tokens of the next document already written.
    pub tokens: u64,
}

/// A finished shard and where the input stood after it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finished {
    /// The shard, as the manifest lists it (with its SHA-256).
    pub entry: ShardEntry,
    /// Hex SHA-256 of its index sidecar (a Megatron `.idx`), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_sha256: Option<String>,
    /// The input position after it.
    pub end: Position,
}

/// The journal's content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Journal {
    /// Format version (1).
    pub version: u32,
    /// What produced the output ([`WriteOptions::settings`](super::WriteOptions::settings)
    /// and the format's own choices); a run with other settings is refused.
    pub settings: String,
    /// The shards' format, as the manifest records it.
    pub format: FormatSpec,
    /// Finished shards, in order.
    pub shards: Vec<Finished>,
    /// Whether the manifest was written: the output is whole.
    pub complete: bool,
}

impl Journal {
    /// Reads the journal at `backend`'s root: `None` where there is none.
    pub(crate) fn read(backend: &Backend, dataset: &str) -> Result<Option<Journal>> {
        let uri = backend.uri_of(JOURNAL);
        let bytes = match runtime::block_on(backend.op.read(JOURNAL)) {
            Ok(b) => b.to_vec(),
            Err(e) if e.kind() == opendal::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(shard_error(dataset, &uri, format!("cannot read: {e}"))),
        };
        let j: Journal = serde_json::from_slice(&bytes).map_err(|e| {
            shard_error(
                dataset,
                &uri,
                format!("not a prepare journal ({e}); remove it, or give another destination"),
            )
        })?;
        if j.version != 1 {
            return Err(shard_error(
                dataset,
                &uri,
                format!(
                    "journal version {} is not one this build reads (1)",
                    j.version
                ),
            ));
        }
        Ok(Some(j))
    }

    /// Writes the journal, whole or not at all.
    pub(crate) fn write(&self, backend: &Backend, dataset: &str) -> Result<()> {
        let json = serde_json::to_vec_pretty(self).expect("a journal serializes");
        put(backend, dataset, JOURNAL, json)
    }
}

/// Writes `path` so that no reader ever sees part of it under that name: a
/// local file is written beside it and renamed into place; an object store
/// makes an object visible only once its upload completed.
pub(crate) fn put(backend: &Backend, dataset: &str, path: &str, data: Vec<u8>) -> Result<()> {
    let err = |e: opendal::Error| {
        shard_error(dataset, &backend.uri_of(path), format!("cannot write: {e}"))
    };
    let op = &backend.op;
    let renames = op.info().capability().rename;
    runtime::block_on(async {
        if renames {
            let partial = format!("{path}.partial");
            op.write_with(&partial, data).await.map_err(err)?;
            op.rename(&partial, path).await.map_err(err)?;
        } else {
            // Large shards go up in parts (a multipart upload on S3).
            op.write_with(path, data)
                .chunk(16 << 20)
                .await
                .map_err(err)?;
        }
        Ok(())
    })
}
