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
//! - `scheduler-<step>.bpk` (saves of a Burn `Learner` only): the
//!   learning-rate scheduler's state;
//! - `manifest.json`: the step (and, for a loader that walks epochs, the
//!   epoch, whose number then joins the part names), and per part its file
//!   name, size and content hash.
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

mod manifest;

pub use manifest::{MANIFEST, MANIFEST_VERSION, Manifest, Part, read_manifest};

use crate::error::{Error, Result};
use burn::module::Module;
use burn::optim::lr_scheduler::LrSchedulerRecord;
use burn::optim::{ModuleOptimizer, OptimizerRecord};
use burn::store::ModuleRecord;
use burn::tensor::Bytes;
use manifest::{FORMAT, bad, is_part_name, is_plain_name, read_part, write_atomic, write_part};
use std::path::Path;
use zephon_core::checkpoint::{Checkpoint, Recipe};

/// What [`restore_training`] gives back.
pub struct Restored<M> {
    /// Training steps completed at the checkpoint: the next step to train is
    /// this one (counting from 0), of epoch [`epoch`](Self::epoch) for a run
    /// that walks epochs.
    pub step: u64,
    /// The epoch (from 0) of the data checkpoint: 0 unless the save was a
    /// [`ZephonDataLoader`](crate::ZephonDataLoader)'s past its first epoch.
    pub epoch: u64,
    /// The model, with the checkpoint's parameters.
    pub model: M,
    /// The optimizer, with the checkpoint's state.
    pub optimizer: ModuleOptimizer,
    /// The data pipeline's checkpoint, already checked against the run's
    /// [`Recipe`]; pass it to [`Recipe::resume`] with each rank's work source
    /// (of epoch [`epoch`](Self::epoch)), or to
    /// [`ZephonDataLoader::resume_from`](crate::ZephonDataLoader::resume_from).
    pub data: Checkpoint,
    /// The learning-rate scheduler's state, where the save holds one (a
    /// Burn `Learner`'s; `Learner::load_scheduler` takes it back).
    pub scheduler: Option<LrSchedulerRecord>,
}

impl<M: std::fmt::Debug> std::fmt::Debug for Restored<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Burn's optimizer has no Debug of its own.
        f.debug_struct("Restored")
            .field("step", &self.step)
            .field("epoch", &self.epoch)
            .field("model", &self.model)
            .field("optimizer", &"ModuleOptimizer")
            .field("data", &self.data)
            .field(
                "scheduler",
                &self.scheduler.as_ref().map(|_| "LrSchedulerRecord"),
            )
            .finish()
    }
}

/// Steps a data checkpoint has delivered: the lane-batches of its furthest
/// lane (lanes that ran dry at the end of the data hold fewer).
fn data_step(ckpt: &Checkpoint) -> u64 {
    ckpt.lanes.values().map(|p| p.batches).max().unwrap_or(0)
}

/// Saves a training checkpoint of step `step` into `dir` (created if
/// missing): `model`'s parameters, `optimizer`'s state and the data
/// pipeline's checkpoint `data`, then the manifest naming them.
///
/// A *step* is one global batch: one lane-batch of every canonical lane,
/// whatever the rank count (a rank of world size `W` trains on the
/// lane-batches of its `L / W` lanes in that step). After `step` steps
/// every lane with data left has delivered `step` lane-batches; lanes that
/// ran dry at the end of a finite run hold fewer. `data` must be the
/// merged checkpoint of every rank ([`Checkpoint::merge`]) taken between
/// two steps, after `step` steps: a checkpoint that misses lanes, or whose
/// step (the lane-batches of its furthest lane) differs, is refused before
/// anything is written.
pub fn save_training<M: Module>(
    dir: impl AsRef<Path>,
    step: u64,
    model: &M,
    optimizer: &ModuleOptimizer,
    data: &Checkpoint,
) -> Result<()> {
    let dir = dir.as_ref();
    let record = |e: burn::store::RecordError| bad(dir, format!("cannot encode a record: {e}"));
    let model_bytes = model.clone().into_record().into_bytes().map_err(record)?;
    let optim_bytes = optimizer.to_record().into_bytes().map_err(record)?;
    save_parts(
        dir,
        Parts {
            epoch: 0,
            step,
            model: &model_bytes,
            optimizer: &optim_bytes,
            scheduler: None,
            data,
        },
    )
}

/// The encoded parts of one save.
pub(crate) struct Parts<'a> {
    /// The epoch `data` is of (0 for a run without epochs).
    pub epoch: u64,
    /// Steps of that epoch completed.
    pub step: u64,
    pub model: &'a [u8],
    pub optimizer: &'a [u8],
    pub scheduler: Option<&'a [u8]>,
    pub data: &'a Checkpoint,
}

/// Writes the parts of a save, then the manifest, then removes the parts of
/// the save it replaces (see the [module](self) doc).
pub(crate) fn save_parts(dir: &Path, parts: Parts<'_>) -> Result<()> {
    let Parts {
        epoch, step, data, ..
    } = parts;
    if !data.is_complete() {
        return Err(bad(
            dir,
            format!(
                "the data checkpoint misses lanes {}: merge the checkpoints of every rank before saving",
                zephon_core::checkpoint::lane_runs(data.missing_lanes())
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

    // Epoch 0 keeps the names of saves without epochs; later epochs carry
    // theirs, so no save overwrites a part the manifest in place names.
    let at = if epoch == 0 {
        format!("{step:08}")
    } else {
        format!("{epoch:08}-{step:08}")
    };
    let manifest = Manifest {
        format: FORMAT.into(),
        version: MANIFEST_VERSION,
        step,
        epoch,
        model: write_part(dir, format!("model-{at}.bpk"), parts.model)?,
        optimizer: write_part(dir, format!("optimizer-{at}.bpk"), parts.optimizer)?,
        data: write_part(dir, format!("data-{at}.zpck"), &data.to_bytes())?,
        scheduler: match parts.scheduler {
            Some(bytes) => Some(write_part(dir, format!("scheduler-{at}.bpk"), bytes)?),
            None => None,
        },
    };
    // Plain data with string keys: serialization cannot fail.
    let json = serde_json::to_string_pretty(&manifest).unwrap_or_default();
    write_atomic(&dir.join(MANIFEST), json.as_bytes())?;

    if let Some(old) = previous {
        let kept: Vec<&String> = [&manifest.model, &manifest.optimizer, &manifest.data]
            .into_iter()
            .chain(&manifest.scheduler)
            .map(|p| &p.file)
            .collect();
        for part in [old.model, old.optimizer, old.data]
            .into_iter()
            .chain(old.scheduler)
        {
            // Only a file a save wrote: the old manifest is anyone's, and
            // may name this manifest or a file of the user's.
            if !kept.contains(&&part.file) && is_plain_name(&part.file) && is_part_name(&part.file)
            {
                // A leftover file costs disk space, not correctness.
                let _ = std::fs::remove_file(dir.join(&part.file));
            }
        }
    }
    Ok(())
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
    let scheduler_bytes = match &manifest.scheduler {
        Some(part) => Some((part, read_part(dir, part)?)),
        None => None,
    };

    let data_path = dir.join(&manifest.data.file);
    let data = Checkpoint::from_bytes(&data_bytes)
        .map_err(|e| bad(&data_path, format!("not a data checkpoint: {e}")))?;
    if !data.is_complete() {
        return Err(bad(
            &data_path,
            format!(
                "misses lanes {}: not the merged checkpoint of every rank",
                zephon_core::checkpoint::lane_runs(data.missing_lanes())
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

    let scheduler = match scheduler_bytes {
        None => None,
        Some((part, bytes)) => {
            let path = dir.join(&part.file);
            Some(
                LrSchedulerRecord::from_bytes(Bytes::from_bytes_vec(bytes))
                    .map_err(|e| bad(&path, format!("not a scheduler record: {e}")))?,
            )
        }
    };

    Ok(Restored {
        step: manifest.step,
        epoch: manifest.epoch,
        model,
        optimizer,
        data,
        scheduler,
    })
}
