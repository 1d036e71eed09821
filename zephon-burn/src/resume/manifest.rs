//! The manifest of a training checkpoint folder, and the checked reading
//! and atomic writing of its parts.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Name of the manifest file in a training checkpoint folder.
pub const MANIFEST: &str = "manifest.json";

/// What the manifest's `format` field holds, so another JSON file is refused.
pub(super) const FORMAT: &str = "zephon-training-checkpoint";

/// Version of the manifest layout this build writes and reads.
pub const MANIFEST_VERSION: u32 = 1;

/// Longest manifest read: one is a few hundred bytes, and a file of any
/// size in its place is not read whole to find that out.
const MANIFEST_LIMIT: u64 = 1 << 20;

/// The manifest of a training checkpoint folder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always `zephon-training-checkpoint`.
    pub format: String,
    /// Layout version ([`MANIFEST_VERSION`]).
    pub version: u32,
    /// Training steps completed when the checkpoint was taken: of epoch
    /// [`epoch`](Self::epoch), for a run that walks epochs.
    pub step: u64,
    /// The epoch (from 0) the data checkpoint is of: 0 for a run that does
    /// not walk epochs. Absent from the manifests of earlier saves, read as 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub epoch: u64,
    /// The model's parameters.
    pub model: Part,
    /// The optimizer state.
    pub optimizer: Part,
    /// The data pipeline's checkpoint (binary form).
    pub data: Part,
    /// The learning-rate scheduler's state (Burn's `LrSchedulerRecord`), when
    /// the save had one (a Burn `Learner`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<Part>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One file of a training checkpoint, as the manifest names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Part {
    /// File name inside the folder (no directories).
    pub file: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Content hash (`zephon_core::hash::bytes`), as 16 hex digits.
    pub hash: String,
}

pub(super) fn bad(path: &Path, message: impl Into<String>) -> Error {
    Error::Checkpoint {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn hex(hash: u64) -> String {
    format!("{hash:016x}")
}

/// Writes `data` to `path` through a file beside it and a rename, so a
/// reader sees the old file or the new one, never half of one.
pub(super) fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, data).map_err(|e| Error::output(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::output(path, e))
}

pub(super) fn write_part(dir: &Path, file: String, data: &[u8]) -> Result<Part> {
    write_atomic(&dir.join(&file), data)?;
    Ok(Part {
        file,
        bytes: data.len() as u64,
        hash: hex(zephon_core::hash::bytes(data)),
    })
}

/// Whether `name` is a file name inside the folder, not a path leaving it.
pub(super) fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\'])
        && Path::new(name).file_name().is_some_and(|f| f == name)
}

/// Reads and checks the manifest of the training checkpoint in `dir`.
pub fn read_manifest(dir: impl AsRef<Path>) -> Result<Manifest> {
    let path = dir.as_ref().join(MANIFEST);
    let text = match zephon_core::input::read_file(&path, MANIFEST_LIMIT) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(bad(
                &path,
                "no manifest: not a training checkpoint folder, or its first save did not finish",
            ));
        }
        Err(e) => return Err(bad(&path, format!("cannot read: {e}"))),
    };
    let manifest: Manifest =
        serde_json::from_slice(&text).map_err(|e| bad(&path, format!("corrupt manifest: {e}")))?;
    if manifest.format != FORMAT {
        return Err(bad(
            &path,
            format!(
                "format is `{}`, not `{FORMAT}`: not a training checkpoint manifest",
                manifest.format
            ),
        ));
    }
    if manifest.version != MANIFEST_VERSION {
        return Err(bad(
            &path,
            format!(
                "manifest version {} is not supported (this build reads version {MANIFEST_VERSION})",
                manifest.version
            ),
        ));
    }
    let mut parts = vec![
        ("model", &manifest.model),
        ("optimizer", &manifest.optimizer),
        ("data", &manifest.data),
    ];
    if let Some(s) = &manifest.scheduler {
        parts.push(("scheduler", s));
    }
    for (i, (what, part)) in parts.iter().enumerate() {
        if let Some((other, _)) = parts[..i].iter().find(|(_, p)| p.file == part.file) {
            return Err(bad(
                &path,
                format!(
                    "names `{}` as both the {other} and the {what} part",
                    part.file
                ),
            ));
        }
        if !is_plain_name(&part.file) {
            return Err(bad(
                &path,
                format!(
                    "the {what} part `{}` is not a file name inside the folder",
                    part.file
                ),
            ));
        }
    }
    Ok(manifest)
}

/// Whether `name` is one of the part files [`super::save_training`]
/// writes (`model-`, `optimizer-`, `scheduler-` or `data-`, the step in at
/// least eight digits, after the epoch in as many and a `-` for an epoch
/// past the first, and its extension): the only files a save removes.
pub(super) fn is_part_name(name: &str) -> bool {
    let number = |n: &str| n.len() >= 8 && n.bytes().all(|b| b.is_ascii_digit());
    [
        ("model-", ".bpk"),
        ("optimizer-", ".bpk"),
        ("scheduler-", ".bpk"),
        ("data-", ".zpck"),
    ]
    .iter()
    .any(|(head, tail)| {
        name.strip_prefix(head)
            .and_then(|n| n.strip_suffix(tail))
            .is_some_and(|n| match n.split_once('-') {
                Some((epoch, step)) => number(epoch) && number(step),
                None => number(n),
            })
    })
}

/// Reads a part and checks it is the file the manifest names. Its size is
/// checked before it is read, and no more than that is read: a part of
/// another size (a terabyte of holes included) costs no read.
pub(super) fn read_part(dir: &Path, part: &Part) -> Result<Vec<u8>> {
    let path = dir.join(&part.file);
    let cannot = |e: std::io::Error| {
        bad(
            &path,
            format!("cannot read a part the manifest names ({e})"),
        )
    };
    let size = |n: u64| {
        bad(
            &path,
            format!(
                "{n} bytes, the manifest says {}: truncated, or from another save",
                part.bytes
            ),
        )
    };
    let len = std::fs::metadata(&path).map_err(cannot)?.len();
    if len != part.bytes {
        return Err(size(len));
    }
    let data = zephon_core::input::read_file(&path, part.bytes).map_err(cannot)?;
    if data.len() as u64 != part.bytes {
        return Err(size(data.len() as u64));
    }
    let hash = hex(zephon_core::hash::bytes(&data));
    if hash != part.hash {
        return Err(bad(
            &path,
            format!(
                "content hash {hash}, the manifest says {}: corrupt, or from another save",
                part.hash
            ),
        ));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::is_plain_name;

    #[test]
    fn only_the_names_a_save_writes_are_parts() {
        use super::is_part_name;
        for name in [
            "model-00000003.bpk",
            "optimizer-00000003.bpk",
            "data-123456789.zpck",
            "scheduler-00000001-00000003.bpk",
        ] {
            assert!(is_part_name(name), "{name}");
        }
        for name in [
            "manifest.json",
            "notes.txt",
            "model-3.bpk",
            "model-0000000x.bpk",
            "data-00000003.bpk",
            "model-00000003.bpk.tmp",
            "model-00000001-3.bpk",
            "model-00000001--00000003.bpk",
        ] {
            assert!(!is_part_name(name), "{name}");
        }
    }

    #[test]
    fn part_names_stay_inside_the_folder() {
        assert!(is_plain_name("model-00000003.bpk"));
        for bad in ["", ".", "..", "../x", "a/b", "/etc/passwd", "a\\b"] {
            assert!(!is_plain_name(bad), "{bad}");
        }
    }
}
