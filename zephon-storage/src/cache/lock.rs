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

/// Waits for the exclusive lock on `path`, creating the file if needed.
pub(crate) async fn lock(path: &Path) -> io::Result<FileLock> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
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
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(FileLock { _file: file })),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(e),
    }
}
