//! Reads of one object of a backend into memory, conditional on the
//! version a shard was opened at where given, and the error a failed read
//! of a shard is.

use super::Backend;
use super::version::{self, Version};
use crate::error::shard_error;
use bytes::Bytes;
use zephon_core::Error;

/// The error of a failed read of `path` (`uri`) of `backend`: `what`
/// failed, or, where the read was conditional on `version` and the object
/// is no longer that version, what changed (both versions named).
pub(crate) async fn read_failed(
    backend: &Backend,
    dataset: &str,
    uri: &str,
    path: &str,
    version: Option<&Version>,
    what: &str,
    e: &std::io::Error,
) -> Error {
    match version.filter(|_| version::is_changed(e)) {
        Some(v) => shard_error(
            dataset,
            uri,
            format!("{what}: {}", version::changed(&backend.op, path, v).await),
        ),
        None => shard_error(dataset, uri, format!("{what} failed: {e}")),
    }
}

/// Most of a read's buffer reserved before its bytes come: the size it is
/// told is input (a manifest's), so more than this is grown into as the
/// bytes arrive rather than reserved on trust.
const RESERVE_AHEAD: u64 = 64 << 20;

/// The bytes `range` of `path`, copied into one buffer as the response's
/// chunks come, each freed once copied: a download holds its size once,
/// where collecting the chunks and then joining them held it twice (a cold
/// pass over the block cache, eight 4 MiB blocks in flight, had 44 MiB of
/// response chunks beside 34 MiB of joined copies at its peak). Reading
/// stops once more than `expect` bytes came; the caller checks the length.
/// The request is conditional on `version` where given (see
/// [`version::reader`]).
pub(crate) async fn read_version(
    op: &opendal::Operator,
    path: &str,
    range: impl std::ops::RangeBounds<u64>,
    expect: u64,
    version: Option<&Version>,
) -> std::io::Result<Bytes> {
    read_into(op, path, range, expect, expect.min(RESERVE_AHEAD), version).await
}

/// The whole object `path` if it has at most `limit` bytes; reading stops
/// once more than `limit` came (the caller checks the length), with
/// nothing reserved ahead: `limit` bounds an object of unknown size (a
/// manifest), it is not its size.
pub(crate) async fn read_at_most(
    op: &opendal::Operator,
    path: &str,
    limit: u64,
) -> std::io::Result<Bytes> {
    read_into(op, path, .., limit, 0, None).await
}

async fn read_into(
    op: &opendal::Operator,
    path: &str,
    range: impl std::ops::RangeBounds<u64>,
    stop_past: u64,
    reserve: u64,
    version: Option<&Version>,
) -> std::io::Result<Bytes> {
    use futures::TryStreamExt;
    let reader = version::reader(op, path, version).await?;
    let mut body = reader.into_bytes_stream(range).await?;
    let mut out = bytes::BytesMut::with_capacity(reserve as usize);
    while let Some(chunk) = body.try_next().await? {
        out.extend_from_slice(&chunk);
        if out.len() as u64 > stop_past {
            break;
        }
    }
    Ok(out.freeze())
}
