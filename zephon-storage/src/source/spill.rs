//! Compressed shards decoded into an unnamed file in the system's temporary
//! folder (`TMPDIR`) and mapped, local or downloaded (a downloaded one read
//! through a shard cache with a disk tier is decoded into the tier's file
//! instead, [`crate::source::compressed`]): the decoded bytes are
//! page cache, which the kernel can write out and drop, not the process's
//! own memory, and the file goes when the last map of it does. The folder
//! must hold the decoded size; where it is a tmpfs, that is memory.
//!
//! What a shard decodes to is input: a small compressed file can decode to
//! terabytes. Where no manifest or cache bounds it, a write into the folder
//! still stops short of filling it ([`Room`]), so a hostile or broken shard
//! fails with an error naming it, not after it took the last free byte from
//! everything else on that filesystem.

use crate::format::compression::Compression;
use bytes::Bytes;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

/// Bytes written to the temporary file at once.
const WRITE_BUFFER: usize = 1 << 20;

/// The most a write into the temporary folder leaves free for others: a
/// twentieth of the filesystem, up to this.
const RESERVE_MAX: u64 = 1 << 30;

/// The most written between two looks at the folder's free space.
const CHECK_EVERY: u64 = 64 << 20;

/// Keeps writes into the temporary folder from filling it: before a write
/// it may look at the filesystem's free space, and refuses a write that
/// would leave less than the reserve (a twentieth of the filesystem, at
/// most [`RESERVE_MAX`]). It looks again after at most half the space
/// above the reserve was written (at most [`CHECK_EVERY`]), so writes
/// between two looks cannot pass the reserve by themselves; a look costs
/// one `statvfs` call.
#[derive(Debug)]
pub(crate) struct Room {
    dir: PathBuf,
    /// Bytes to leave free; `None`: a twentieth of the filesystem.
    reserve: Option<u64>,
    /// Bytes written so far at which to look again.
    next_look: u64,
    /// What to do about it, said when a write is stopped.
    advice: &'static str,
}

impl Room {
    /// The guard of a write into the temporary folder (`TMPDIR`).
    pub(crate) fn new() -> Self {
        Room {
            dir: std::env::temp_dir(),
            reserve: None,
            next_look: 0,
            advice: "point TMPDIR at a folder with more room (the README, \"Local data\")",
        }
    }

    /// The guard of a write into the shard cache's folder `dir`.
    pub(crate) fn in_cache(dir: &std::path::Path) -> Self {
        Room {
            dir: dir.to_owned(),
            advice: "give the shard cache a folder with more room (cache.root)",
            ..Room::new()
        }
    }

    /// Before writing `more` bytes after `written`: an error of kind
    /// `StorageFull` saying how much is free when they would leave less
    /// than the reserve. A filesystem that cannot say its free space is
    /// written to as before (a full one still fails the write).
    pub(crate) fn check(&mut self, written: u64, more: u64) -> io::Result<()> {
        let after = written.saturating_add(more);
        if after < self.next_look {
            return Ok(());
        }
        let Ok(stats) = fs4::statvfs(&self.dir) else {
            self.next_look = after.saturating_add(CHECK_EVERY);
            return Ok(());
        };
        let reserve = self
            .reserve
            .unwrap_or_else(|| (stats.total_space() / 20).min(RESERVE_MAX));
        let spare = stats.available_space().saturating_sub(reserve);
        if spare < more {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "{} MiB free after {} MiB written, and {} MiB of the filesystem are left \
                     to others: stopped; {}",
                    stats.available_space() >> 20,
                    written >> 20,
                    reserve >> 20,
                    self.advice
                ),
            ));
        }
        self.next_look = after.saturating_add((spare / 2).clamp(1, CHECK_EVERY));
        Ok(())
    }
}

/// Why writing a shard into the cache's disk tier failed: the disk tier (a write, the
/// room, a rename), or the body's own writer (`E`: the shard cannot be
/// decoded).
#[derive(Debug)]
pub(crate) enum Written<E> {
    Disk(io::Error),
    Body(E),
}

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

/// Where an unnamed file is written: the temporary folder, or a shard
/// cache's folder (a download the cache will decode into its own file:
/// the cache's disk is sized for shards, the temporary folder often a
/// small tmpfs, that is memory).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Folder<'a> {
    Temp,
    Cache(&'a std::path::Path),
}

impl Folder<'_> {
    /// A new unnamed file there.
    pub(crate) fn file(self) -> io::Result<File> {
        match self {
            Folder::Temp => tempfile::tempfile(),
            Folder::Cache(dir) => tempfile::tempfile_in(dir),
        }
    }

    /// The guard of writes there.
    pub(crate) fn room(self) -> Room {
        match self {
            Folder::Temp => Room::new(),
            Folder::Cache(dir) => Room::in_cache(dir),
        }
    }

    /// An error there while `doing` `what`, naming both.
    pub(crate) fn error(self, doing: &str, what: &str, source: io::Error) -> zephon_core::Error {
        let path = match self {
            Folder::Temp => format!(
                "{} ({doing} {what} into the temporary folder)",
                std::env::temp_dir().display()
            ),
            Folder::Cache(dir) => {
                format!(
                    "{} ({doing} {what} into the shard cache's folder)",
                    dir.display()
                )
            }
        };
        zephon_core::Error::Io { path, source }
    }
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
    decode_in(compression, raw, limit, Folder::Temp.room())
}

/// As [`decode`], its writes kept within `room`.
fn decode_in(
    compression: Compression,
    raw: &[u8],
    limit: Option<u64>,
    room: Room,
) -> Result<Bytes, SpillError> {
    let file = Folder::Temp.file().map_err(SpillError::Disk)?;
    decode_to(compression, raw, limit, room, &file)?;
    map(&file).map_err(SpillError::Disk)
}

/// `raw` decoded into `file` from its current position, a buffer at a
/// time, its writes kept within `room` and stopped past `limit`; returns
/// the decoded length.
pub(crate) fn decode_to(
    compression: Compression,
    raw: &[u8],
    limit: Option<u64>,
    room: Room,
    file: &File,
) -> Result<u64, SpillError> {
    let mut out = Tracked {
        inner: BufWriter::with_capacity(WRITE_BUFFER, file),
        failed: None,
        written: 0,
        limit,
        room,
    };
    let decoded = futures::executor::block_on(compression.decode_into(raw, &mut out));
    if let Some(e) = out.failed.take() {
        return Err(match e {
            Stop::Disk(e) => SpillError::Disk(e),
            Stop::Limit => SpillError::TooLarge(out.written),
        });
    }
    let len = decoded.map_err(SpillError::Data)?;
    out.inner.flush().map_err(SpillError::Disk)?;
    Ok(len)
}

/// What stopped the writer.
enum Stop {
    Disk(io::Error),
    Limit,
}

/// A writer that keeps the first error it met, so a failed write (a full
/// disk, or one the folder's [`Room`] refused) or the limit is told from a
/// failed decode, and counts what it took.
struct Tracked<W> {
    inner: W,
    failed: Option<Stop>,
    written: u64,
    limit: Option<u64>,
    room: Room,
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
        if let Err(e) = self.room.check(self.written, buf.len() as u64) {
            return Err(self.kept(e));
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

    /// A room leaving `reserve` bytes of the temporary folder's filesystem.
    fn leaving(reserve: u64) -> Room {
        Room {
            reserve: Some(reserve),
            ..Room::new()
        }
    }

    fn available() -> u64 {
        fs4::available_space(std::env::temp_dir()).unwrap()
    }

    #[test]
    fn a_decode_stops_short_of_filling_the_temporary_folder() {
        let data = vec![0u8; 64 << 20];
        let z = zstd(&data);
        // Room for 4 MiB more than the reserve: stopped after about that.
        let room = leaving(available().saturating_sub(4 << 20));
        match decode_in(Compression::Zstd, &z, None, room) {
            Err(SpillError::Disk(e)) => {
                assert_eq!(e.kind(), io::ErrorKind::StorageFull, "{e}");
                let text = e.to_string();
                assert!(
                    text.contains("MiB free") && text.contains("TMPDIR"),
                    "{text}"
                );
            }
            other => panic!("{other:?}"),
        }
        // No room at all: refused before the first write.
        let mut room = leaving(u64::MAX / 2);
        assert_eq!(
            room.check(0, 1).unwrap_err().kind(),
            io::ErrorKind::StorageFull
        );
        // Room to spare: decoded whole, the folder looked at only a few
        // times (every half of the spare room, at most every 64 MiB).
        let got = decode_in(Compression::Zstd, &z, None, leaving(0)).unwrap();
        assert_eq!(got.len(), data.len());
    }

    #[test]
    fn looks_again_before_the_spare_room_could_be_written() {
        let mut room = leaving(available().saturating_sub(10 << 20));
        room.check(0, 1 << 20).unwrap();
        // Half of the ~10 MiB spare, at most: the next look comes before
        // the writes in between could use the rest.
        assert!(room.next_look <= 6 << 20, "{}", room.next_look);
        let mut roomy = leaving(0);
        roomy.check(0, 1 << 20).unwrap();
        assert_eq!(roomy.next_look, (1 << 20) + CHECK_EVERY);
    }
}
