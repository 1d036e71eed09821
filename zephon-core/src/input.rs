//! Opening local input files (shards, manifests, checkpoints, recipes,
//! tokenizers) as untrusted: only a regular file is read, and a read can
//! be held to a length.
//!
//! A path can name something that is not a file: a FIFO, where opening
//! waits for a writer that never comes (a hang); a device such as
//! `/dev/zero` or `/dev/urandom`, which reads without end (all the memory
//! there is); a socket or a folder. A symbolic link is what it points at,
//! so any name in a dataset can be one of these. [`open_file`] opens
//! without waiting and refuses all but regular files; [`read_file`] also
//! stops at a length, for inputs read whole before they are parsed.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// Opens `path` for reading if it is a regular file (a symbolic link is
/// followed). Anything else is an [`io::ErrorKind::InvalidInput`] error
/// saying what it is, returned at once: a FIFO is opened without waiting
/// for a writer.
///
/// ```
/// use zephon_core::input::open_file;
/// let dir = std::env::temp_dir();
/// let err = open_file(&dir).unwrap_err();
/// assert_eq!(err.to_string(), "not a regular file but a folder");
/// # #[cfg(unix)] {
/// let err = open_file(std::path::Path::new("/dev/zero")).unwrap_err();
/// assert_eq!(err.to_string(), "not a regular file but a character device");
/// # }
/// ```
pub fn open_file(path: &Path) -> io::Result<File> {
    open_regular(path, std::fs::OpenOptions::new().read(true), false)
}

/// Opens `path` with `options` (which may create it, or open it for
/// writing) if it is, or becomes, a regular file; anything else is the
/// [`io::ErrorKind::InvalidInput`] error of [`open_file`], returned at
/// once: a FIFO is opened without waiting for a reader or a writer. With
/// `no_follow`, a symbolic link is refused too ("a link"), not followed:
/// for files a program makes in a folder others can write to, where
/// following a planted link would create or lock a file outside it.
///
/// ```
/// use zephon_core::input::open_regular;
/// let dir = std::env::temp_dir().join(format!("zephon-regular-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let mut create = std::fs::OpenOptions::new();
/// create.create(true).write(true);
/// assert!(open_regular(&dir.join("made"), &mut create, true).is_ok());
/// let err = open_regular(&dir, &mut create, true).unwrap_err();
/// assert!(err.to_string().starts_with("not a regular file"), "{err}");
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn open_regular(
    path: &Path,
    options: &mut std::fs::OpenOptions,
    no_follow: bool,
) -> io::Result<File> {
    // Without O_NONBLOCK, opening a FIFO blocks until the other end opens
    // it; on a regular file the flag changes nothing.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(
        options,
        libc::O_NONBLOCK | if no_follow { libc::O_NOFOLLOW } else { 0 },
    );
    let file = options.open(path).map_err(|e| {
        // A FIFO opened for writing with no reader, a link not followed or
        // a folder opened for writing fail to open: said as what they are.
        match std::fs::symlink_metadata(path) {
            Ok(m) if !m.is_file() && (no_follow || !m.file_type().is_symlink()) => {
                not_regular(m.file_type())
            }
            _ => e,
        }
    })?;
    let kind = file.metadata()?.file_type();
    if kind.is_file() {
        return Ok(file);
    }
    Err(not_regular(kind))
}

pub(crate) fn not_regular(kind: std::fs::FileType) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("not a regular file but {}", kind_name(kind)),
    )
}

/// What a file that is not a regular one is, for errors.
fn kind_name(kind: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO";
        } else if kind.is_char_device() {
            return "a character device";
        } else if kind.is_block_device() {
            return "a block device";
        } else if kind.is_socket() {
            return "a socket";
        }
    }
    if kind.is_dir() {
        "a folder"
    } else if kind.is_symlink() {
        "a link"
    } else {
        "not a file"
    }
}

/// Reads the regular file at `path` whole, if it holds at most `limit`
/// bytes: a longer one is an [`io::ErrorKind::InvalidData`] error naming
/// the limit, after reading no more than `limit + 1` bytes (a file that
/// grows while read included). Not a regular file: as [`open_file`].
///
/// ```
/// use zephon_core::input::read_file;
/// let path = std::env::temp_dir().join(format!("zephon-input-doc-{}", std::process::id()));
/// std::fs::write(&path, b"0123456789").unwrap();
/// assert_eq!(read_file(&path, 10).unwrap(), b"0123456789");
/// let err = read_file(&path, 4).unwrap_err();
/// assert_eq!(err.to_string(), "longer than the limit of 4 bytes");
/// # std::fs::remove_file(&path).unwrap();
/// ```
pub fn read_file(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = open_file(path)?;
    let len = file.metadata()?.len();
    if len > limit {
        return Err(too_long(limit));
    }
    // Reserved as the size says up to a bound, grown past it as bytes
    // come: a file that says a terabyte (holes, or a device) would have
    // its whole size asked of the allocator, which aborts the process.
    let mut out = Vec::with_capacity(len.min(RESERVE_AT_MOST) as usize);
    file.take(limit.saturating_add(1)).read_to_end(&mut out)?;
    if out.len() as u64 > limit {
        return Err(too_long(limit));
    }
    Ok(out)
}

/// Most of a file's size [`read_file`] reserves before reading.
const RESERVE_AT_MOST: u64 = 64 << 20;

fn too_long(limit: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("longer than the limit of {limit} bytes"),
    )
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("index.json");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let t = Instant::now();
        let err = read_file(&fifo, 1 << 20).unwrap_err();
        assert_eq!(err.to_string(), "not a regular file but a FIFO");
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_link_to_an_endless_device_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("shard.bin");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let err = read_file(&link, u64::MAX).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(err.to_string(), "not a regular file but a character device");
    }

    #[test]
    fn a_file_at_its_limit_is_read_and_one_past_it_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 100]).unwrap();
        assert_eq!(read_file(&path, 100).unwrap().len(), 100);
        assert_eq!(
            read_file(&path, 99).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        assert!(
            read_file(&dir.path().join("missing"), 1)
                .unwrap_err()
                .kind()
                == io::ErrorKind::NotFound
        );
    }
}
