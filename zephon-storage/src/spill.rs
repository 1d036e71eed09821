//! Compressed shards decoded into an unnamed file in the system's temporary
//! folder (`TMPDIR`) and mapped, local or downloaded: the decoded bytes are
//! page cache, which the kernel can write out and drop, not the process's
//! own memory, and the file goes when the last map of it does. The folder
//! must hold the decoded size; where it is a tmpfs, that is memory.

use crate::format::compression::Compression;
use bytes::Bytes;
use std::fs::File;
use std::io::{self, BufWriter, Write};

/// Bytes written to the temporary file at once.
const WRITE_BUFFER: usize = 1 << 20;

/// Why decoding into a temporary file failed.
#[derive(Debug)]
pub(crate) enum SpillError {
    /// The compressed data is corrupt or truncated.
    Data(io::Error),
    /// The temporary folder could not take the decoded bytes (full, gone).
    Disk(io::Error),
    /// The data decodes to more than the limit it was given (the shard's
    /// manifest says how large it is): what the decoder had made when it
    /// was stopped.
    TooLarge(u64),
}

/// An error of the temporary folder while `doing` (downloading, decoding)
/// `what` (a shard's path or URI) into it, naming both.
pub(crate) fn error(doing: &str, what: &str, source: io::Error) -> zephon_core::Error {
    zephon_core::Error::Io {
        path: format!(
            "{} ({doing} {what} into the temporary folder)",
            std::env::temp_dir().display()
        ),
        source,
    }
}

/// A new unnamed file in the temporary folder.
pub(crate) fn file() -> io::Result<File> {
    tempfile::tempfile()
}

/// `file` mapped whole (nothing for an empty file).
pub(crate) fn map(file: &File) -> io::Result<Bytes> {
    if file.metadata()?.len() == 0 {
        return Ok(Bytes::new());
    }
    // SAFETY: the file has no name, so nothing else can open, truncate or
    // rewrite it; this process wrote it and no longer does.
    let map = unsafe { memmap2::Mmap::map(file) }?;
    Ok(Bytes::from_owner(map))
}

/// `raw`, compressed with `compression`, decoded a buffer at a time into a
/// new temporary file and mapped; past `limit` decoded bytes (when given)
/// it stops with [`SpillError::TooLarge`] rather than fill the folder.
pub(crate) fn decode(
    compression: Compression,
    raw: &[u8],
    limit: Option<u64>,
) -> Result<Bytes, SpillError> {
    let file = file().map_err(SpillError::Disk)?;
    let mut out = Tracked {
        inner: BufWriter::with_capacity(WRITE_BUFFER, &file),
        failed: None,
        written: 0,
        limit,
    };
    let decoded = futures::executor::block_on(compression.decode_into(raw, &mut out));
    if let Some(e) = out.failed.take() {
        return Err(match e {
            Stop::Disk(e) => SpillError::Disk(e),
            Stop::Limit => SpillError::TooLarge(out.written),
        });
    }
    decoded.map_err(SpillError::Data)?;
    out.inner.flush().map_err(SpillError::Disk)?;
    drop(out);
    map(&file).map_err(SpillError::Disk)
}

/// What stopped the writer.
enum Stop {
    Disk(io::Error),
    Limit,
}

/// A writer that keeps the first error it met, so a failed write (a full
/// disk) or the limit is told from a failed decode, and counts what it took.
struct Tracked<W> {
    inner: W,
    failed: Option<Stop>,
    written: u64,
    limit: Option<u64>,
}

impl<W> Tracked<W> {
    /// Keeps `e` (the first one) and hands back a copy of it.
    fn kept(&mut self, e: io::Error) -> io::Error {
        let again = io::Error::new(e.kind(), e.to_string());
        self.failed.get_or_insert(Stop::Disk(e));
        again
    }
}

impl<W: Write> Write for Tracked<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let after = self.written + buf.len() as u64;
        if self.limit.is_some_and(|l| after > l) {
            self.written = after;
            self.failed.get_or_insert(Stop::Limit);
            return Err(io::Error::other("decoded size limit"));
        }
        let n = self.inner.write(buf).map_err(|e| self.kept(e))?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush().map_err(|e| self.kept(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zstd(data: &[u8]) -> Vec<u8> {
        zstd::encode_all(data, 3).unwrap()
    }

    #[test]
    fn decodes_to_a_mapped_file() {
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let got = decode(Compression::Zstd, &zstd(&data), None).unwrap();
        assert_eq!(&got[..], &data[..]);
        assert!(
            decode(Compression::Zstd, &zstd(b""), None)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn stops_past_the_limit_and_tells_corrupt_data_apart() {
        let data = vec![7u8; 5 << 20];
        match decode(Compression::Zstd, &zstd(&data), Some(1 << 20)) {
            Err(SpillError::TooLarge(n)) => assert!(n > 1 << 20 && n < 5 << 20, "{n}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            &decode(Compression::Zstd, &zstd(&data), Some(5 << 20)).unwrap()[..],
            &data[..]
        );
        let z = zstd(&data);
        assert!(matches!(
            decode(Compression::Zstd, &z[..z.len() / 2], None),
            Err(SpillError::Data(_))
        ));
    }
}
