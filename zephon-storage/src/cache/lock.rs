//! Advisory file locks shared by the processes of a node.
//!
//! A lock is an open file holding `flock`; the operating system drops it when
//! the process exits however it exits (`kill -9` included), so a crashed
//! holder never blocks the others. Waiting polls `try_lock` from the async
//! runtime instead of parking one of its threads in a blocking call.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::Path;
use std::time::Duration;

/// How often a waiter retries a lock another process holds.
const POLL: Duration = Duration::from_millis(5);

/// An exclusive lock on a file, released on drop.
#[derive(Debug)]
pub(crate) struct FileLock {
    _file: File,
}

/// Opens (creating it if needed) the lock file `path`, which must be a
/// regular file of the folder: the folder is shared with whatever else can
/// write there, and a FIFO planted under a lock's name hung every open of
/// it (waiting for a reader), a link made the open create or lock a file
/// outside the folder. Either is an error naming the path.
fn open(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true).truncate(false).write(true);
    zephon_core::input::open_regular(path, &mut options, true).map_err(|e| {
        if e.kind() == io::ErrorKind::InvalidInput {
            io::Error::new(e.kind(), format!("the lock file `{}`: {e}", path.display()))
        } else {
            e
        }
    })
}

/// Waits for the exclusive lock on `path`, creating the file if needed.
pub(crate) async fn lock(path: &Path) -> io::Result<FileLock> {
    let file = open(path)?;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(FileLock { _file: file }),
            Err(TryLockError::WouldBlock) => tokio::time::sleep(POLL).await,
            Err(TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// Takes the exclusive lock on `path` now, or `None` when another holder
/// has it.
pub(crate) fn try_lock(path: &Path) -> io::Result<Option<FileLock>> {
    let file = open(path)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(FileLock { _file: file })),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lock_file_that_is_a_fifo_or_a_link_is_an_error_at_once() {
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let fifo = t.path().join("f.lock");
        crate::cache::mkfifo(&fifo);
        // Opened for writing as it was, a FIFO waited for a reader for good
        // (in a blocking call, which no timeout of the runtime ends): tried
        // on a thread of its own.
        let (tx, rx) = std::sync::mpsc::channel();
        let at = fifo.clone();
        std::thread::spawn(move || {
            let _ = tx.send(futures::executor::block_on(lock(&at)).map(|_| ()));
        });
        let locked = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("a FIFO lock file hangs the lock");
        let e = locked.unwrap_err().to_string();
        assert!(
            e.contains("f.lock") && e.contains("not a regular file"),
            "{e}"
        );
        assert!(try_lock(&fifo).is_err());
        // A link to a file not there yet: following it created the file
        // outside the folder.
        let target = outside.path().join("made");
        let link = t.path().join("l.lock");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = lock(&link).await.unwrap_err().to_string();
        assert!(
            e.contains("l.lock") && e.contains("not a regular file"),
            "{e}"
        );
        assert!(try_lock(&link).is_err());
        assert!(!target.exists());
        // A regular lock file still locks, once at a time.
        let plain = t.path().join("p.lock");
        let held = lock(&plain).await.unwrap();
        assert!(try_lock(&plain).unwrap().is_none());
        drop(held);
        assert!(try_lock(&plain).unwrap().is_some());
    }
}
