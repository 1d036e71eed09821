//! Writing output files (checkpoints, batch logs) so that no failure loses
//! data: a file is written whole under a temporary name beside it and then
//! renamed over its destination, or not at all.
//!
//! The temporary file is created exclusively under a unique name
//! (`O_EXCL`: never through a link planted at a guessable name such as
//! `X.tmp`), and removed on every error, and when the writer is dropped
//! unfinished. A destination that exists and is not a regular file (a
//! folder, a FIFO, a device, a socket) is refused by [`check_destination`]
//! before any work is done, rather than replaced or waited on.
//!
//! ```
//! use std::io::Write;
//! use zephon_core::output::PendingFile;
//! let dir = std::env::temp_dir().join(format!("zephon-output-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let path = dir.join("log.jsonl");
//! let mut out = PendingFile::beside(&path)?;
//! writeln!(out.file(), "{{\"step\": 1}}")?;
//! assert!(!path.exists(), "nothing at the destination before commit");
//! out.commit()?;
//! assert_eq!(std::fs::read_to_string(&path)?, "{\"step\": 1}\n");
//! // A folder is no destination.
//! assert!(zephon_core::output::check_destination(&dir).is_err());
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), std::io::Error>(())
//! ```

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Refuses a destination that exists and is not a regular file (a symbolic
/// link is judged by what it points at), or whose folder does not exist.
pub fn check_destination(path: &Path) -> io::Result<()> {
    let folder = folder_of(path);
    if !folder.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("the folder {} does not exist", folder.display()),
        ));
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(m) => Err(crate::input::not_regular(m.file_type())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A file being written under a unique temporary name beside its
/// destination; [`commit`](Self::commit) renames it there, dropping it
/// removes it.
#[derive(Debug)]
pub struct PendingFile {
    temp: tempfile::NamedTempFile,
    path: PathBuf,
}

impl PendingFile {
    /// Creates the temporary file for `path` (checked with
    /// [`check_destination`] first).
    pub fn beside(path: &Path) -> io::Result<Self> {
        check_destination(path)?;
        let name = path
            .file_name()
            .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
        let temp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .tempfile_in(folder_of(path))?;
        Ok(PendingFile {
            temp,
            path: path.to_owned(),
        })
    }

    /// The file to write to.
    pub fn file(&mut self) -> &mut File {
        self.temp.as_file_mut()
    }

    /// Flushes the file to disk and renames it to its destination.
    pub fn commit(mut self) -> io::Result<()> {
        self.temp.as_file_mut().flush()?;
        self.temp.as_file().sync_all()?;
        // Checked again: the destination may have become a folder or a
        // FIFO while the file was written.
        check_destination(&self.path)?;
        self.temp.persist(&self.path).map_err(|e| e.error)?;
        Ok(())
    }
}

/// Writes `data` to `path` whole, through a [`PendingFile`].
pub fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut f = PendingFile::beside(path)?;
    f.file().write_all(data)?;
    f.commit()
}
