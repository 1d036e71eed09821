//! Where a local folder's shards are and in which format: its
//! `index.json` when it has one this reader follows, read as untrusted
//! input (a regular file, to a limit, no file named twice), or else the
//! file names its listing finds.

use crate::dataset::scan::list_local;
use crate::error::shard_error;
use crate::format::detect::DetectedShard;
use crate::format::{FormatOptions, FormatSpec, detect};
use crate::manifest::{MANIFEST, Manifest, ManifestError, RAISE_LIMIT};
use crate::options::MANIFEST_LIMIT;
use std::path::Path;
use std::sync::Arc;
use zephon_core::{Error, Result, Shard};

/// The format and shards of a local folder: from its `index.json` when that
/// is Zephon's manifest of a non-JSONL format or Streaming's MDS index, else
/// from the file names. The manifest is read up to the default
/// [`StorageOptions::manifest_limit`](crate::StorageOptions::manifest_limit).
pub fn detect_local(
    name: &str,
    dir: &Path,
    opts: &FormatOptions,
) -> Result<(FormatSpec, Vec<DetectedShard>)> {
    let layout = layout(name, dir, opts, MANIFEST_LIMIT)?;
    Ok((layout.format, layout.shards))
}

/// What [`layout`] found in a local folder.
pub(super) struct Layout {
    pub(super) format: FormatSpec,
    pub(super) shards: Vec<DetectedShard>,
    /// The manifest followed, if any, for its counts.
    pub(super) followed: Option<Manifest>,
}

/// The local folder's `index.json`, parsed: `None` where there is none
/// (the folder is then read by its file names). One that cannot be read
/// (not a regular file: a FIFO would hang the open, a link to a device
/// read without end), that is longer than `limit`, that is not a manifest
/// this reader knows, or that is a manifest naming paths it may not, is an
/// error naming it.
fn read_local_manifest(name: &str, dir: &Path, limit: u64) -> Result<Option<Manifest>> {
    let path = dir.join(MANIFEST);
    let at = || path.display().to_string();
    let json = match zephon_core::input::read_file(&path, limit) {
        Ok(json) => json,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            return Err(shard_error(
                name,
                &at(),
                format!("the manifest is {e}; {RAISE_LIMIT}"),
            ));
        }
        Err(e) => {
            return Err(shard_error(
                name,
                &at(),
                format!("cannot read the manifest: {e}"),
            ));
        }
    };
    // One that cannot be read as a manifest is refused, as a remote one
    // is: ignored, a flat token file's misspelled `seq_len` (or a manifest
    // cut short) fell back to the defaults, and the samples came out cut
    // wrong with nothing said.
    match Manifest::parse(&json) {
        Ok(m) => Ok(Some(m)),
        Err(e @ ManifestError::Invalid(_)) => Err(shard_error(name, &at(), e.to_string())),
        Err(e @ ManifestError::Unrecognized(_)) => Err(shard_error(
            name,
            &at(),
            format!(
                "{e}; correct it, or move it out of the folder to have the shards found by their names"
            ),
        )),
    }
}

/// [`detect_local`] with the manifest read up to `limit` bytes, and the
/// manifest followed kept for [`check_counts`].
pub(super) fn layout(name: &str, dir: &Path, opts: &FormatOptions, limit: u64) -> Result<Layout> {
    let err = |message: String| Error::Dataset {
        dataset: name.to_owned(),
        location: dir.display().to_string(),
        message,
    };
    // A manifest that names anything outside the folder, or a shard twice,
    // is refused here, whatever its format, before any shard is opened.
    let manifest = read_local_manifest(name, dir, limit)?;
    // A manifest is followed, as it is where the dataset is remote: the
    // same folder on disk or in a bucket gives the same shards in the same
    // order, so the same samples. It also carries what names cannot tell
    // (a flat token file's seq_len and dtype); Streaming's MDS index too.
    if let Some(m) = manifest {
        let mut format = m.format.clone();
        if let (FormatSpec::Parquet { columns }, Some(c)) = (&mut format, &opts.columns) {
            *columns = Some(c.clone());
        }
        let shards = m
            .shards
            .iter()
            .map(|e| DetectedShard {
                sidecar: e.index.clone().map(|i| {
                    let n = std::fs::metadata(dir.join(&i)).map_or(0, |m| m.len());
                    (i, n)
                }),
                // Only a compressed shard is decoded: for any other the
                // entry's decoded size is its stored size.
                decoded_bytes: e.uncompressed_bytes,
                path: e.path.clone(),
                bytes: e.bytes,
            })
            .collect::<Vec<_>>();
        check_files(name, dir, &shards)?;
        return Ok(Layout {
            format,
            shards,
            followed: Some(m),
        });
    }
    if !dir.exists() {
        return Err(err("the folder does not exist".into()));
    }
    let files: Vec<(String, u64)> = list_local(name, dir)?
        .into_iter()
        .filter(|(p, _)| p != MANIFEST)
        .collect();
    let d = detect(&files, opts).map_err(err)?;
    Ok(Layout {
        format: d.format,
        shards: d.shards,
        followed: None,
    })
}

/// Refuses a manifest naming one file twice under two names (a symbolic
/// or hard link beside its target): its samples would be read twice. The
/// manifest's own check refuses a name written twice; a listing, a file met
/// twice ([`list_local`]). Refuses as well a shard whose size is not the
/// manifest's `bytes`: the file changed after the manifest was written
/// (a JSONL shard edited to as many lines, a token file grown by less than
/// a window), so reading it here would not give what the same folder in a
/// bucket gives, where a shorter or longer object is an error.
fn check_files(name: &str, dir: &Path, shards: &[DetectedShard]) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashMap::with_capacity(shards.len());
    for s in shards {
        // A shard that cannot be read is reported when it is opened.
        let Ok(m) = std::fs::metadata(dir.join(&s.path)) else {
            continue;
        };
        if m.is_file() && m.len() != s.bytes {
            return Err(shard_error(
                name,
                &dir.join(&s.path).display().to_string(),
                format!(
                    "is {} bytes but the manifest ({}) says {}: the file changed after \
                     the manifest was written (`zephon build-index` writes it again)",
                    m.len(),
                    dir.join(MANIFEST).display(),
                    s.bytes
                ),
            ));
        }
        if let Some(first) = seen.insert((m.dev(), m.ino()), &s.path) {
            return Err(shard_error(
                name,
                &dir.join(MANIFEST).display().to_string(),
                format!(
                    "the manifest names the same file as {first:?} and {:?} (a link): its \
                     samples would be read twice",
                    s.path
                ),
            ));
        }
    }
    Ok(())
}

/// The counts of a followed manifest (see [`detect_local`]) against what
/// the shards, just indexed, hold: a manifest that is wrong about one is
/// wrong, whichever count reads would use.
pub(super) fn check_counts(
    name: &str,
    dir: &Path,
    m: &Manifest,
    shards: &[Arc<dyn Shard>],
) -> Result<()> {
    for (e, s) in m.shards.iter().zip(shards) {
        if e.samples != s.len() {
            return Err(shard_error(
                name,
                s.name(),
                format!(
                    "has {} samples but the manifest ({}) says {}",
                    s.len(),
                    dir.join(MANIFEST).display(),
                    e.samples
                ),
            ));
        }
    }
    Ok(())
}
