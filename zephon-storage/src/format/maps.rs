//! Local shards mapped while they are read, not for their dataset's life.
//!
//! The kernel allows a process a bounded number of memory maps
//! (`vm.max_map_count`, 65,530 by default on Linux): with every shard of a
//! local dataset mapped from open to close, a folder of more shards than
//! that (WebDataset collections run to hundreds of thousands of tars)
//! failed to open with "Cannot allocate memory". A [`LocalFile`] is mapped
//! when it is read; the process keeps at most [`mapped_files`] of them
//! mapped, and the ones read longest ago are unmapped to make room
//! (records still reading from one keep its pages until they are dropped).

use bytes::Bytes;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Most local shard files the process keeps mapped at once: half the
/// kernel's limit of maps per process (`vm.max_map_count`, 65,530 by
/// default on Linux; read once), which the allocator, thread stacks and
/// the shard cache's entries share, and 32,768 where there is no such
/// file. With each shard mapped for the dataset's life, a local dataset
/// of more shards than the limit could not be opened. Past this many, the
/// file read longest ago is unmapped, and mapped again when it is next
/// read (records still reading from it keep its pages until they are
/// dropped). Plain JSONL, flat token, Megatron (`.bin` and `.idx`), MDS,
/// Parquet and WebDataset shards are mapped this way; a compressed shard's
/// decoded temporary file stays mapped for the dataset's life.
///
/// ```
/// assert!(zephon_storage::local::mapped_files() >= 1024);
/// ```
pub fn mapped_files() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        // A bound the unit tests can pass with a few files.
        if cfg!(test) {
            return 64;
        }
        std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .map_or(32_768, |n| (n / 2).clamp(1024, 1 << 20))
    })
}

/// A local file, mapped when read (see the module's docs).
#[derive(Clone, Debug)]
pub(crate) struct LocalFile {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    /// The file as it was opened: mapped again, it must be the same.
    identity: Identity,
    map: Mutex<Option<Bytes>>,
    /// When it was last read, on [`TICK`]'s clock.
    used: AtomicU64,
}

/// What tells one file from another at a path: a file replaced (renamed
/// over) or rewritten since the dataset was opened no longer matches the
/// index built from it, and mapping it again would read other bytes as
/// its samples.
#[derive(Debug, PartialEq)]
struct Identity {
    len: u64,
    modified: Option<std::time::SystemTime>,
    #[cfg(unix)]
    inode: (u64, u64),
}

impl Identity {
    fn of(meta: &std::fs::Metadata) -> Self {
        Identity {
            len: meta.len(),
            modified: meta.modified().ok(),
            #[cfg(unix)]
            inode: {
                use std::os::unix::fs::MetadataExt;
                (meta.dev(), meta.ino())
            },
        }
    }
}

/// A clock of reads: the file read longest ago has the smallest `used`.
static TICK: AtomicU64 = AtomicU64::new(0);

/// The files mapped now. A file is in the list while it is mapped; a
/// file whose dataset was dropped leaves it (and is unmapped) with it.
static MAPPED: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());

impl LocalFile {
    /// Maps `path` (a regular file: see [`zephon_core::input`]) and returns
    /// its bytes with it, to index; the map is kept while the file is among
    /// those read last.
    pub(crate) fn open(path: &Path) -> std::io::Result<(Self, Bytes)> {
        let (bytes, meta) = map_file_with_metadata(path)?;
        let inner = Arc::new(Inner {
            path: path.to_owned(),
            identity: Identity::of(&meta),
            map: Mutex::new(Some(bytes.clone())),
            used: AtomicU64::new(TICK.fetch_add(1, Ordering::Relaxed)),
        });
        mapped(&inner);
        Ok((LocalFile { inner }, bytes))
    }

    /// The file's bytes, mapped again if they were unmapped to make room;
    /// an error names the file. A file whose length changed since it was
    /// opened is an error: its index no longer describes it.
    pub(crate) fn bytes(&self) -> zephon_core::Result<Bytes> {
        self.map().map_err(|source| zephon_core::Error::Io {
            path: self.inner.path.display().to_string(),
            source,
        })
    }

    fn map(&self) -> std::io::Result<Bytes> {
        let inner = &self.inner;
        inner
            .used
            .store(TICK.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        let mut map = inner.map.lock().expect("poisoned");
        if let Some(b) = &*map {
            return Ok(b.clone());
        }
        let (bytes, meta) = map_file_with_metadata(&inner.path)?;
        let now = Identity::of(&meta);
        if now != inner.identity {
            let what = if now.len != inner.identity.len {
                format!(
                    "its length changed from {} to {} bytes",
                    inner.identity.len, now.len
                )
            } else {
                "it was replaced or rewritten".to_owned()
            };
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{what} since the dataset was opened"),
            ));
        }
        *map = Some(bytes.clone());
        // The list is locked with no file's map held: an eviction holds
        // the list while it takes a file's map.
        drop(map);
        mapped(inner);
        Ok(bytes)
    }
}

/// Counts `inner` as mapped; past [`mapped_files`], unmaps the files read
/// longest ago, an eighth of the bound at once so that the scan for them
/// is paid once per that many maps rather than once per map.
fn mapped(inner: &Arc<Inner>) {
    let mut all = MAPPED.lock().expect("poisoned");
    all.push(Arc::downgrade(inner));
    let bound = mapped_files();
    if all.len() <= bound {
        return;
    }
    let mut live: Vec<(u64, Arc<Inner>)> = all
        .iter()
        .filter_map(Weak::upgrade)
        .map(|f| (f.used.load(Ordering::Relaxed), f))
        .collect();
    let keep = bound - bound / 8;
    if live.len() > keep {
        let cut = live.len() - keep;
        live.select_nth_unstable_by_key(cut - 1, |(used, _)| *used);
        for (_, f) in live.drain(..cut) {
            f.map.lock().expect("poisoned").take();
        }
    }
    *all = live.iter().map(|(_, f)| Arc::downgrade(f)).collect();
}

/// A handle of its own on a shard's bytes, for one read: the views its
/// records keep (text, bytes and token fields) count on this handle, not
/// on the shard's. Every thread that decodes the shard, and every thread
/// that frees the records, would otherwise update that one count, a
/// record at a time, and the cache line moving between cores made reads
/// on two threads slower than on one (`zephon-bench formats`, the `2t`
/// columns). One allocation a read, a few hundred samples.
pub(crate) fn read_handle(data: Bytes) -> Bytes {
    if data.is_empty() {
        return data;
    }
    Bytes::from_owner(data)
}

pub(crate) fn map_file(path: &Path) -> std::io::Result<Bytes> {
    map_file_with_metadata(path).map(|(bytes, _)| bytes)
}

/// [`map_file`], with the metadata of the file mapped (the same open file,
/// so the two describe one file even if the path is replaced meanwhile).
pub(crate) fn map_file_with_metadata(path: &Path) -> std::io::Result<(Bytes, std::fs::Metadata)> {
    let file = zephon_core::input::open_file(path)?;
    let meta = file.metadata()?;
    if meta.len() == 0 {
        return Ok((Bytes::new(), meta));
    }
    // SAFETY: shards are read-only inputs; a file truncated underneath a
    // running job is outside what any reader can defend against.
    let map = unsafe { memmap2::Mmap::map(&file)? };
    Ok((Bytes::from_owner(map), meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped_now() -> usize {
        let all = MAPPED.lock().unwrap();
        all.iter()
            .filter_map(Weak::upgrade)
            .filter(|f| f.map.lock().unwrap().is_some())
            .count()
    }

    /// More files than may stay mapped: each reads its own bytes however
    /// often it was unmapped, at most `mapped_files()` stay mapped, the one
    /// read last stays, and a file that changed length or was replaced is
    /// refused by name.
    #[test]
    fn files_past_the_bound_are_unmapped_and_mapped_again_when_read() {
        let dir = tempfile::tempdir().unwrap();
        let n = mapped_files() + 200;
        let files: Vec<LocalFile> = (0..n)
            .map(|i| {
                let p = dir.path().join(format!("{i}"));
                std::fs::write(&p, format!("file {i}")).unwrap();
                LocalFile::open(&p).unwrap().0
            })
            .collect();
        assert!(mapped_now() <= mapped_files());
        assert!(files[0].inner.map.lock().unwrap().is_none());
        for round in 0..2 {
            for (i, f) in files.iter().enumerate().rev() {
                let b = f.bytes().unwrap();
                assert_eq!(&b[..], format!("file {i}").as_bytes(), "round {round}");
            }
            assert!(mapped_now() <= mapped_files());
            assert!(files[0].inner.map.lock().unwrap().is_some());
        }
        // Unmapped, then grown by a byte.
        let last = &files[n - 1];
        for f in &files[..mapped_files()] {
            f.bytes().unwrap();
        }
        assert!(last.inner.map.lock().unwrap().is_none());
        std::fs::write(
            dir.path().join(format!("{}", n - 1)),
            format!("file {}!", n - 1),
        )
        .unwrap();
        let e = last.bytes().unwrap_err().to_string();
        assert!(e.contains("length changed"), "{e}");
        // Unmapped, then replaced by another file of the same length (a
        // rename over it): its bytes would be read as samples the index
        // never described.
        let other = &files[n - 2];
        assert!(other.inner.map.lock().unwrap().is_none());
        let swap = dir.path().join("swap");
        std::fs::write(&swap, format!("FILE {}", n - 2)).unwrap();
        std::fs::rename(&swap, dir.path().join(format!("{}", n - 2))).unwrap();
        let e = other.bytes().unwrap_err().to_string();
        assert!(e.contains("replaced or rewritten"), "{e}");
        // Dropped with their dataset, they are unmapped at once.
        let weak: Vec<Weak<Inner>> = files.iter().map(|f| Arc::downgrade(&f.inner)).collect();
        drop(files);
        assert!(weak.iter().all(|w| w.upgrade().is_none()));
    }
}
