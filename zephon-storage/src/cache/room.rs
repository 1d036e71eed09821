//! Room in the disk tier's folder: the ledger that spares a scan of the
//! folder for most publishes, and the scan that evicts.
//!
//! Counting the folder means a `stat` of every entry, under the folder
//! lock, for every block published by any process of the node: with
//! thousands of blocks that bounded a cold pass to a few blocks per count
//! (`zephon-bench tokens --serve http --shuffle block --cache-block-bytes
//! 262144` publishes many small blocks). The ledger, a small file in the
//! folder read and written under the folder lock, keeps the bytes the
//! folder held at its last scan plus the room given since; a publish that
//! fits it takes its room there. A scan happens when the ledger says the
//! folder is full (it then evicts down to [`SLACK`] below the capacity, so
//! the next scan is that many bytes of publishes away), when the ledger is
//! missing or unreadable, and after a process has given an eighth of the
//! capacity by the ledger since it last scanned, which bounds what a ledger
//! gone wrong (entries copied in by hand, a file overwritten) can let the
//! folder overfill by.
//!
//! The ledger errs high, never low, on its own: an entry removed as
//! corrupt, a write that failed, a temp file left by a process that died
//! are counted until the next scan recounts them.

use super::disk::{DiskTier, SHARD, TEMP, create_anew, on_disk};
use super::lock;
use std::fs;
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

/// The ledger's file in the folder.
pub(super) const LEDGER: &str = "room.ledger";

/// A scan that must evict frees this share of the capacity past the room
/// asked for (1/32), so the folder is scanned once per that many bytes of
/// publishes, not once per block.
pub(super) const SLACK: u64 = 32;

/// A process scans after giving this share of the capacity (1/8) by the
/// ledger since its last scan.
const RESCAN: u64 = 8;

/// The bytes the ledger in `dir` records; `None` when it is missing or is
/// anything but one decimal number and a newline.
fn read(dir: &Path) -> Option<u64> {
    // Read as an input: a FIFO or a device planted under the ledger's name
    // is refused, not waited on or read without end.
    let text = zephon_core::input::read_file(&dir.join(LEDGER), 32).ok()?;
    let text = std::str::from_utf8(&text).ok()?.strip_suffix('\n')?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Records `used` bytes in the ledger of `dir`. A ledger that could not be
/// written is removed, so the next publish scans rather than trusting it.
///
/// The ledger is made anew each time (removed, then created only where no
/// file is): whatever had its name, a link to a file outside the folder or
/// a FIFO, is replaced, never written through.
fn write(dir: &Path, used: u64) {
    let path = dir.join(LEDGER);
    let written = create_anew(&path).and_then(|mut f| f.write_all(format!("{used}\n").as_bytes()));
    if written.is_err() {
        let _ = fs::remove_file(&path);
    }
}

/// What [`DiskTier::make_room`] did: the entries it evicted, and whether
/// the room asked for was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Made {
    pub(super) evicted: u64,
    /// `false` when, every entry evicted, the temp files of entries being
    /// written still leave too little room: so many are written at once
    /// (a read fetches up to 16 blocks together, prefetch more) that a
    /// small tier cannot hold them all. The entry is then not published,
    /// rather than the folder filled past its capacity.
    pub(super) given: bool,
}

impl DiskTier {
    /// Makes room for `need` more bytes (call with the folder lock held):
    /// taken from the ledger when it has it, or by a scan that deletes
    /// stale temp files and the least recently used entries; `own`, the
    /// temp file of the entry `need` is for when it is already written, is
    /// not counted by a scan.
    pub(super) fn make_room(&self, need: u64, own: Option<&Path>) -> io::Result<Made> {
        let given = &self.room_given;
        if given.load(Ordering::Relaxed) < self.capacity / RESCAN
            && let Some(used) = read(&self.dir)
            && let Some(after) = used.checked_add(need).filter(|&u| u <= self.capacity)
        {
            write(&self.dir, after);
            given.fetch_add(need, Ordering::Relaxed);
            return Ok(Made {
                evicted: 0,
                given: true,
            });
        }
        let (evicted, used) = self.scan(need, own)?;
        let fits = used + need <= self.capacity;
        write(&self.dir, if fits { used + need } else { used });
        given.store(0, Ordering::Relaxed);
        Ok(Made {
            evicted,
            given: fits,
        })
    }

    /// Counts the folder, deleting stale temp files, and evicts least
    /// recently used entries until `need` more bytes fit the capacity, with
    /// [`SLACK`] to spare when it evicts at all. Returns the entries
    /// evicted and the bytes the folder then holds.
    fn scan(&self, need: u64, own: Option<&Path>) -> io::Result<(u64, u64)> {
        let mut entries = Vec::new();
        let (mut used, mut writing) = (0, 0);
        for e in fs::read_dir(&self.dir)? {
            let e = e?;
            let path = e.path();
            // Only entries and temp files count: the lock files beside
            // them, as many, are not looked at.
            let kind = match path.extension().and_then(|x| x.to_str()) {
                Some(k @ (SHARD | TEMP)) => k,
                _ => continue,
            };
            let Ok(meta) = e.metadata() else { continue };
            if kind == SHARD {
                used += on_disk(meta.len());
                entries.push((
                    meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    on_disk(meta.len()),
                    path,
                ));
            } else if Some(path.as_path()) != own {
                // A temp file whose key lock is free belongs to a process
                // that died mid-write.
                if lock::try_lock(&path.with_extension("lock"))?.is_some() {
                    let _ = fs::remove_file(&path);
                } else {
                    used += on_disk(meta.len());
                    writing += on_disk(meta.len());
                }
            }
        }
        // Entries being written leave too little room even with every
        // entry gone: evicting them would only lose them (blocks warmed
        // ahead of their reads among them), and the room is asked for
        // again once some of those being written are in place.
        if used + need <= self.capacity || writing + need > self.capacity {
            return Ok((0, used));
        }
        let target = self.capacity - (self.capacity / SLACK).min(self.capacity - need);
        entries.sort();
        let mut evicted = 0;
        for (_, len, path) in entries {
            if used + need <= target {
                break;
            }
            match fs::remove_file(&path) {
                Ok(()) => {
                    used -= len;
                    evicted += 1;
                    // Its lock file goes too when no process holds it, so
                    // the folder does not fill with the lock files of every
                    // block ever read. Should another process have opened
                    // it meanwhile, two may download the block at once: a
                    // clash of their writes fails the entry's checksum and
                    // is fetched again, never served.
                    let lock = path.with_extension("lock");
                    if let Ok(Some(_held)) = lock::try_lock(&lock) {
                        let _ = fs::remove_file(&lock);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => used -= len,
                Err(e) => return Err(e),
            }
        }
        Ok((evicted, used))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::disk::{HEADER, Lookup};
    use bytes::Bytes;

    /// A temp file no process holds the key lock of, which only a scan
    /// removes: whether it is still there says whether a scan ran.
    fn stale_temp(d: &Path) -> std::path::PathBuf {
        let p = d.join(format!("stale.{TEMP}"));
        fs::write(&p, b"").unwrap();
        p
    }

    #[tokio::test]
    async fn publishes_take_room_from_the_ledger_and_scan_every_eighth_of_the_capacity() {
        let t = tempfile::tempdir().unwrap();
        let (one, unit) = crate::cache::disk::one_kb();
        let d = DiskTier::new(t.path(), 64 * unit);
        // No ledger yet: the first publish scans, and writes one.
        let stale = stale_temp(t.path());
        d.publish("k0", &one).await.unwrap();
        assert!(!stale.exists());
        assert_eq!(read(t.path()), Some(unit));
        // An eighth of the capacity by the ledger: no scan.
        let stale = stale_temp(t.path());
        for i in 1..9 {
            d.publish(&format!("k{i}"), &one).await.unwrap();
        }
        assert!(stale.exists());
        assert_eq!(read(t.path()), Some(9 * unit));
        // Then a scan, which finds the stale file.
        d.publish("k9", &one).await.unwrap();
        assert!(!stale.exists());
        assert_eq!(read(t.path()), Some(10 * unit));
    }

    #[tokio::test]
    async fn a_ledger_that_is_not_a_number_is_not_trusted() {
        let t = tempfile::tempdir().unwrap();
        let (one, unit) = crate::cache::disk::one_kb();
        let d = DiskTier::new(t.path(), 64 * unit);
        d.publish("a", &one).await.unwrap();
        let bad = [
            "",
            "12",
            "-5\n",
            "1e9\n",
            " 7\n",
            "99999999999999999999999\n",
            "\u{661}\n",
        ];
        for (i, bad) in bad.into_iter().enumerate() {
            fs::write(t.path().join(LEDGER), bad).unwrap();
            assert_eq!(read(t.path()), None, "{bad:?}");
            let stale = stale_temp(t.path());
            d.publish(&format!("b{i}"), &one).await.unwrap();
            assert!(!stale.exists(), "{bad:?} was trusted");
            let used = crate::cache::disk::used_bytes(t.path()).unwrap();
            assert_eq!(read(t.path()), Some(used), "{bad:?}");
        }
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_ledger_that_is_a_fifo_or_a_link_is_replaced_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let one = Bytes::from(vec![7u8; 1000]);
        let d = DiskTier::new(t.path(), 1 << 20);
        // A FIFO under the ledger's name: read as it was, the publish
        // waited for a writer for good.
        let ledger = t.path().join(LEDGER);
        crate::cache::mkfifo(&ledger);
        let published =
            tokio::time::timeout(std::time::Duration::from_secs(20), d.publish("a", &one)).await;
        published.expect("a FIFO ledger hangs the publish").unwrap();
        assert!(fs::symlink_metadata(&ledger).unwrap().is_file());
        let used = crate::cache::disk::used_bytes(t.path()).unwrap();
        assert_eq!(read(t.path()), Some(used));
        // A link to a file outside the folder, under the ledger's name and
        // under the next entry's temp name: neither target is written.
        let target = outside.path().join("victim");
        fs::write(&target, b"keep\n").unwrap();
        fs::remove_file(&ledger).unwrap();
        std::os::unix::fs::symlink(&target, &ledger).unwrap();
        let temp = d.path("b", TEMP);
        std::os::unix::fs::symlink(&target, &temp).unwrap();
        d.publish("b", &one).await.unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"keep\n");
        assert!(fs::symlink_metadata(&ledger).unwrap().is_file());
        assert!(matches!(d.read("b").unwrap(), Lookup::Found(b) if b == one));
    }

    #[tokio::test]
    async fn a_ledger_that_counts_too_little_overfills_by_an_eighth_at_most() {
        let t = tempfile::tempdir().unwrap();
        let (one, unit) = crate::cache::disk::one_kb();
        let capacity = 16 * unit;
        let d = DiskTier::new(t.path(), capacity);
        for i in 0..16 {
            d.publish(&format!("a{i}"), &one).await.unwrap();
        }
        assert_eq!(crate::cache::disk::used_bytes(t.path()).unwrap(), capacity);
        // Something wrote 0 over the ledger of a full folder.
        write(t.path(), 0);
        for i in 0..8 {
            d.publish(&format!("b{i}"), &one).await.unwrap();
            let used = crate::cache::disk::used_bytes(t.path()).unwrap();
            assert!(used <= capacity + capacity / RESCAN, "{used} after b{i}");
        }
        assert!(crate::cache::disk::used_bytes(t.path()).unwrap() <= capacity);
    }

    #[tokio::test]
    async fn a_full_folder_evicts_a_slack_past_the_room_asked_for() {
        let t = tempfile::tempdir().unwrap();
        let (one, unit) = crate::cache::disk::one_kb();
        let capacity = 64 * unit;
        let d = DiskTier::new(t.path(), capacity);
        for i in 0..64 {
            assert_eq!(d.publish(&format!("a{i}"), &one).await.unwrap().evicted, 0);
        }
        // Full: the next publish evicts its own room and 1/32 more, the
        // publishes after it take that room without evicting.
        assert_eq!(d.publish("b0", &one).await.unwrap().evicted, 3);
        let used = crate::cache::disk::used_bytes(t.path()).unwrap();
        assert_eq!(used, capacity - 2 * unit);
        for i in 1..3 {
            assert_eq!(d.publish(&format!("b{i}"), &one).await.unwrap().evicted, 0);
        }
        assert_eq!(crate::cache::disk::used_bytes(t.path()).unwrap(), capacity);
        // An entry as large as the folder still fits, alone.
        let whole = Bytes::from(vec![1u8; capacity as usize - HEADER]);
        assert_eq!(d.publish("whole", &whole).await.unwrap().evicted, 64);
        assert_eq!(crate::cache::disk::used_bytes(t.path()).unwrap(), capacity);
    }
}
