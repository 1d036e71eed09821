//! Exact training resume: the model, the optimizer state and the data
//! pipeline's [`Checkpoint`] saved together, in one folder, and restored
//! together.
//!
//! A training checkpoint folder holds three parts and a manifest:
//!
//! - `model-<step>.bpk`: the model's parameters (Burn's burnpack record,
//!   [`Module::into_record`]), with their parameter ids, which the optimizer
//!   state is keyed by;
//! - `optimizer-<step>.bpk`: the optimizer state
//!   ([`ModuleOptimizer::to_record`]: Adam's moments and step counts, ...);
//! - `data-<step>.zpck`: the data pipeline's [`Checkpoint`] in its binary
//!   form, merged over every rank, so any world size can restore it;
//! - `manifest.json`: the step, and per part its file name, size and
//!   content hash.
//!
//! The parts are written first and the manifest last, each replaced
//! atomically, and the part names carry the step: a crash during a save
//! leaves the previous manifest and the files it names intact. Once the new
//! manifest is in place the previous step's parts are removed.
//!
//! [`restore_training`] refuses, with an error naming the file and what is
//! wrong, a folder without a manifest or with a corrupt one, a part whose
//! size or hash differs from the manifest, a data checkpoint whose step (the
//! lane-batches every lane delivered) differs from the manifest's, one that
//! does not cover every lane, one from another run (seed, lane count,
//! datasets or settings differ from the [`Recipe`] given), a model record
//! that does not fit the model, and an optimizer record whose state the
//! optimizer cannot take back in full.
//!
//! ```
//! use burn::module::Module;
//! use burn::nn::{Linear, LinearConfig};
//! use burn::optim::{AdamConfig, ModuleOptimizer};
//! use burn::tensor::Device;
//! use zephon_burn::resume::{restore_training, save_training};
//! use zephon_core::checkpoint::Recipe;
//! use zephon_core::{Dataset, Record, WorkSource};
//!
//! let device = Device::flex();
//! let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 8]])?;
//! let ws = WorkSource::builder().dataset(ds, 1.0).canonical_lanes(2).build()?;
//! let recipe = Recipe::new(&ws);
//! let mut progress = recipe.start(&ws);
//! progress.record(0, 2);
//! progress.record(1, 2); // one step: a batch of each lane
//!
//! let model: Linear = LinearConfig::new(3, 2).init(&device);
//! let optimizer: ModuleOptimizer = AdamConfig::new().init();
//! let dir = tempfile::tempdir().unwrap();
//! save_training(dir.path(), 1, &model, &optimizer, &progress.checkpoint())?;
//!
//! let fresh: Linear = LinearConfig::new(3, 2).init(&device);
//! let restored = restore_training(dir.path(), fresh, AdamConfig::new().init(), &recipe)?;
//! assert_eq!(restored.step, 1);
//! assert_eq!(restored.data, progress.checkpoint());
//! assert_eq!(
//!     restored.model.weight.val().into_data().try_to_vec::<f32>().unwrap(),
//!     model.weight.val().into_data().try_to_vec::<f32>().unwrap(),
//! );
//! # Ok::<(), zephon_burn::Error>(())
//! ```

use crate::error::{Error, Result};
use burn::module::Module;
use burn::optim::{ModuleOptimizer, OptimizerRecord};
use burn::store::ModuleRecord;
use burn::tensor::Bytes;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use zephon_core::checkpoint::{Checkpoint, Recipe};

/// Name of the manifest file in a training checkpoint folder.
pub const MANIFEST: &str = "manifest.json";

/// What the manifest's `format` field holds, so another JSON file is refused.
const FORMAT: &str = "zephon-training-checkpoint";

/// Version of the manifest layout this build writes and reads.
pub const MANIFEST_VERSION: u32 = 1;

/// The manifest of a training checkpoint folder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always `zephon-training-checkpoint`.
    pub format: String,
    /// Layout version ([`MANIFEST_VERSION`]).
    pub version: u32,
    /// Training steps completed when the checkpoint was taken.
    pub step: u64,
    /// The model's parameters.
    pub model: Part,
    /// The optimizer state.
    pub optimizer: Part,
    /// The data pipeline's checkpoint (binary form).
    pub data: Part,
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

/// What [`restore_training`] gives back.
pub struct Restored<M> {
    /// Training steps completed at the checkpoint: the next step to train is
    /// this one (counting from 0).
    pub step: u64,
    /// The model, with the checkpoint's parameters.
    pub model: M,
    /// The optimizer, with the checkpoint's state.
    pub optimizer: ModuleOptimizer,
    /// The data pipeline's checkpoint, already checked against the run's
    /// [`Recipe`]; pass it to [`Recipe::resume`] with each rank's work source.
    pub data: Checkpoint,
}

impl<M: std::fmt::Debug> std::fmt::Debug for Restored<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Burn's optimizer has no Debug of its own.
        f.debug_struct("Restored")
            .field("step", &self.step)
            .field("model", &self.model)
            .field("optimizer", &"ModuleOptimizer")
            .field("data", &self.data)
            .finish()
    }
}

fn bad(path: &Path, message: impl Into<String>) -> Error {
    Error::Checkpoint {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn hex(hash: u64) -> String {
    format!("{hash:016x}")
}

/// Steps a data checkpoint has delivered: the lane-batches of its furthest
/// lane (lanes that ran dry at the end of the data hold fewer).
fn data_step(ckpt: &Checkpoint) -> u64 {
    ckpt.lanes.values().map(|p| p.batches).max().unwrap_or(0)
}

/// Writes `data` to `path` through a file beside it and a rename, so a
/// reader sees the old file or the new one, never half of one.
fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, data).map_err(|e| Error::output(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::output(path, e))
}

fn write_part(dir: &Path, file: String, data: &[u8]) -> Result<Part> {
    write_atomic(&dir.join(&file), data)?;
    Ok(Part {
        file,
        bytes: data.len() as u64,
        hash: hex(zephon_core::hash::bytes(data)),
    })
}

/// Saves a training checkpoint of step `step` into `dir` (created if
/// missing): `model`'s parameters, `optimizer`'s state and the data
/// pipeline's checkpoint `data`, then the manifest naming them.
///
/// `data` must be the merged checkpoint of every rank
/// ([`Checkpoint::merge`]) taken between two steps, after `step` steps:
/// a checkpoint that misses lanes or whose step differs is refused before
/// anything is written.
pub fn save_training<M: Module>(
    dir: impl AsRef<Path>,
    step: u64,
    model: &M,
    optimizer: &ModuleOptimizer,
    data: &Checkpoint,
) -> Result<()> {
    let dir = dir.as_ref();
    if !data.is_complete() {
        return Err(bad(
            dir,
            format!(
                "the data checkpoint misses lanes {:?}: merge the checkpoints of every rank before saving",
                data.missing_lanes()
            ),
        ));
    }
    if data_step(data) != step {
        return Err(bad(
            dir,
            format!(
                "the data checkpoint is at step {}, the model at step {step}: take both between the same two steps",
                data_step(data)
            ),
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::output(dir, e))?;
    // The parts of the checkpoint this one replaces, removed once it is in place.
    let previous = read_manifest(dir).ok();

    let record = |e: burn::store::RecordError| bad(dir, format!("cannot encode a record: {e}"));
    let model_bytes = model.clone().into_record().into_bytes().map_err(record)?;
    let optim_bytes = optimizer.to_record().into_bytes().map_err(record)?;
    let manifest = Manifest {
        format: FORMAT.into(),
        version: MANIFEST_VERSION,
        step,
        model: write_part(dir, format!("model-{step:08}.bpk"), &model_bytes)?,
        optimizer: write_part(dir, format!("optimizer-{step:08}.bpk"), &optim_bytes)?,
        data: write_part(dir, format!("data-{step:08}.zpck"), &data.to_bytes())?,
    };
    // Plain data with string keys: serialization cannot fail.
    let json = serde_json::to_string_pretty(&manifest).unwrap_or_default();
    write_atomic(&dir.join(MANIFEST), json.as_bytes())?;

    if let Some(old) = previous {
        let kept = [&manifest.model, &manifest.optimizer, &manifest.data].map(|p| &p.file);
        for part in [old.model, old.optimizer, old.data] {
            if !kept.contains(&&part.file) && is_plain_name(&part.file) {
                // A leftover file costs disk space, not correctness.
                let _ = std::fs::remove_file(dir.join(&part.file));
            }
        }
    }
    Ok(())
}

/// Whether `name` is a file name inside the folder, not a path leaving it.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\'])
        && Path::new(name).file_name().is_some_and(|f| f == name)
}

/// Reads and checks the manifest of the training checkpoint in `dir`.
pub fn read_manifest(dir: impl AsRef<Path>) -> Result<Manifest> {
    let path = dir.as_ref().join(MANIFEST);
    let text = match std::fs::read(&path) {
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
    let parts = [
        ("model", &manifest.model),
        ("optimizer", &manifest.optimizer),
        ("data", &manifest.data),
    ];
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

/// Reads a part and checks it is the file the manifest names.
fn read_part(dir: &Path, part: &Part) -> Result<Vec<u8>> {
    let path = dir.join(&part.file);
    let data = std::fs::read(&path).map_err(|e| {
        bad(
            &path,
            format!("cannot read a part the manifest names ({e})"),
        )
    })?;
    if data.len() as u64 != part.bytes {
        return Err(bad(
            &path,
            format!(
                "{} bytes, the manifest says {}: truncated, or from another save",
                data.len(),
                part.bytes
            ),
        ));
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

/// Restores the training checkpoint in `dir`: `model` (freshly built with
/// the run's configuration) gets its parameters, `optimizer` (freshly built)
/// its state, and the data checkpoint is read and checked against `recipe`,
/// the recipe of the run being restored (any rank's: the seed, lane count,
/// datasets and settings are those of the whole run).
///
/// Every part is checked against the manifest before any is decoded; the
/// errors name the file and what is wrong (see the [module](self) doc).
pub fn restore_training<M: Module>(
    dir: impl AsRef<Path>,
    model: M,
    optimizer: ModuleOptimizer,
    recipe: &Recipe,
) -> Result<Restored<M>> {
    let dir = dir.as_ref();
    let manifest = read_manifest(dir)?;
    let model_bytes = read_part(dir, &manifest.model)?;
    let optim_bytes = read_part(dir, &manifest.optimizer)?;
    let data_bytes = read_part(dir, &manifest.data)?;

    let data_path = dir.join(&manifest.data.file);
    let data = Checkpoint::from_bytes(&data_bytes)
        .map_err(|e| bad(&data_path, format!("not a data checkpoint: {e}")))?;
    if !data.is_complete() {
        return Err(bad(
            &data_path,
            format!(
                "misses lanes {:?}: not the merged checkpoint of every rank",
                data.missing_lanes()
            ),
        ));
    }
    if data_step(&data) != manifest.step {
        return Err(bad(
            &data_path,
            format!(
                "the data checkpoint is at step {}, the manifest at step {}: the parts are of different steps",
                data_step(&data),
                manifest.step
            ),
        ));
    }
    data.check_recipe(recipe)
        .map_err(|e| bad(&data_path, format!("not this run's data: {e}")))?;

    let model_path = dir.join(&manifest.model.file);
    let record = ModuleRecord::from_bytes(Bytes::from_bytes_vec(model_bytes))
        .map_err(|e| bad(&model_path, format!("not a model record: {e}")))?;
    let model = model
        .try_load_record(record)
        .map_err(|e| bad(&model_path, format!("does not fit the model: {e}")))?;

    let optim_path = dir.join(&manifest.optimizer.file);
    let record = OptimizerRecord::from_bytes(Bytes::from_bytes_vec(optim_bytes))
        .map_err(|e| bad(&optim_path, format!("not an optimizer record: {e}")))?;
    let held = record.len();
    // Burn's loader panics on a record whose tensors carry no parameter id
    // (a foreign burnpack file); that is bad input, reported as an error.
    let optimizer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        optimizer.load_record(record)
    }))
    .map_err(|_| {
        bad(
            &optim_path,
            "not an optimizer record: a state tensor carries no parameter id",
        )
    })?;
    // Burn's loader skips state it cannot rebuild (a record of another
    // optimizer, or a model record) and the run would go on from fresh
    // moments; every tensor the file holds must come back.
    let taken = optimizer.to_record().len();
    if taken != held {
        return Err(bad(
            &optim_path,
            format!(
                "the optimizer took {taken} of the record's {held} state tensors: not this optimizer's record"
            ),
        ));
    }

    Ok(Restored {
        step: manifest.step,
        model,
        optimizer,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::is_plain_name;

    #[test]
    fn part_names_stay_inside_the_folder() {
        assert!(is_plain_name("model-00000003.bpk"));
        for bad in ["", ".", "..", "../x", "a/b", "/etc/passwd", "a\\b"] {
            assert!(!is_plain_name(bad), "{bad}");
        }
    }
}
