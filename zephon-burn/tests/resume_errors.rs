//! Training checkpoint folders that are missing a file, corrupt, forged,
//! or from another run or step: refused with an error naming the file and
//! what is wrong, never a panic.

use crate::common;

use burn::optim::{AdamConfig, ModuleOptimizer};
use common::{LANES, data, device, model_config, run};
use std::path::Path;
use zephon_burn::Error;
use zephon_burn::models::lm::{LmConfig, TextData, TransformerLm};
use zephon_burn::resume::{MANIFEST, read_manifest, restore_training, save_training};

/// Restores `dir` into fresh objects for the run `d` (model of `m`) and
/// returns the error's file name and message.
fn restore_error(dir: &Path, d: &TextData, m: &LmConfig) -> (String, String) {
    let device = device();
    let ws = d.work_source(LANES, 0, 1).unwrap();
    let model = TransformerLm::new(m, &device);
    match restore_training(dir, model, AdamConfig::new().init(), &d.recipe(&ws)) {
        Ok(_) => panic!("{} restored", dir.display()),
        Err(Error::Checkpoint { path, message }) => (
            path.file_name().unwrap().to_string_lossy().into_owned(),
            message,
        ),
        Err(e) => panic!("not a checkpoint error: {e}"),
    }
}

fn manifest_part(m: &zephon_burn::resume::Manifest, part: &str) -> String {
    match part {
        "model" => m.model.file.clone(),
        "optimizer" => m.optimizer.file.clone(),
        _ => m.data.file.clone(),
    }
}

fn edit_manifest(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join(MANIFEST);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
}

#[test]
fn bad_checkpoint_folders_are_refused_with_the_file_and_the_reason() {
    let (d, m) = (data(), model_config());
    let saved = tempfile::tempdir().unwrap();
    run(1, None, 1, Some(saved.path()));
    let manifest = read_manifest(saved.path()).unwrap();
    let data_file = manifest.data.file.clone();
    // A fresh copy of the good folder per case.
    let copy = || {
        let dir = tempfile::tempdir().unwrap();
        for e in std::fs::read_dir(saved.path()).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
        }
        dir
    };
    let expect = |dir: &Path, d: &TextData, m: &LmConfig, file: &str, says: &str| {
        let (f, msg) = restore_error(dir, d, m);
        assert_eq!(f, file, "{msg}");
        assert!(msg.contains(says), "{file}: `{msg}` does not say `{says}`");
    };

    let empty = tempfile::tempdir().unwrap();
    expect(empty.path(), &d, &m, MANIFEST, "no manifest");

    let dir = copy();
    std::fs::write(dir.path().join(MANIFEST), "{\"format\": ").unwrap();
    expect(dir.path(), &d, &m, MANIFEST, "corrupt manifest");

    let dir = copy();
    edit_manifest(dir.path(), |v| v["format"] = "something else".into());
    expect(dir.path(), &d, &m, MANIFEST, "not a training checkpoint");

    let dir = copy();
    edit_manifest(dir.path(), |v| v["data"]["file"] = "../escape.zpck".into());
    expect(
        dir.path(),
        &d,
        &m,
        MANIFEST,
        "not a file name inside the folder",
    );

    let dir = copy();
    edit_manifest(dir.path(), |v| v["step"] = 2.into());
    expect(dir.path(), &d, &m, &data_file, "different steps");

    let dir = copy();
    std::fs::remove_file(dir.path().join(&manifest.optimizer.file)).unwrap();
    expect(dir.path(), &d, &m, &manifest.optimizer.file, "cannot read");

    let dir = copy();
    let path = dir.path().join(&data_file);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.pop();
    std::fs::write(&path, &bytes).unwrap();
    expect(dir.path(), &d, &m, &data_file, "truncated");

    let dir = copy();
    let path = dir.path().join(&manifest.model.file);
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    expect(dir.path(), &d, &m, &manifest.model.file, "content hash");

    // A forged manifest that vouches for garbage: each part is still
    // decoded with an error, not a panic.
    for (part, says) in [
        ("model", "not a model record"),
        ("optimizer", "not an optimizer record"),
        ("data", "not a data checkpoint"),
    ] {
        for garbage in [
            &b"not a record"[..],
            &[0u8; 64][..],
            &b"BPK\0\xff\xff\xff\xff"[..],
        ] {
            let dir = copy();
            let file = manifest_part(&manifest, part);
            std::fs::write(dir.path().join(&file), garbage).unwrap();
            edit_manifest(dir.path(), |v| {
                v[part]["bytes"] = garbage.len().into();
                v[part]["hash"] = format!("{:016x}", zephon_core::hash::bytes(garbage)).into();
            });
            expect(dir.path(), &d, &m, &file, says);
        }
    }

    // The model's record named as the optimizer's and the other way round.
    let dir = copy();
    edit_manifest(dir.path(), |v| {
        let model = v["model"].clone();
        v["model"] = v["optimizer"].clone();
        v["optimizer"] = model;
    });
    expect(
        dir.path(),
        &d,
        &m,
        &manifest.optimizer.file,
        "does not fit the model",
    );

    let dir = copy();
    edit_manifest(dir.path(), |v| v["optimizer"] = v["model"].clone());
    expect(
        dir.path(),
        &d,
        &m,
        MANIFEST,
        "as both the model and the optimizer part",
    );
    // The model's record under the optimizer's name.
    let dir = copy();
    std::fs::copy(
        dir.path().join(&manifest.model.file),
        dir.path().join(&manifest.optimizer.file),
    )
    .unwrap();
    edit_manifest(dir.path(), |v| {
        v["optimizer"]["bytes"] = v["model"]["bytes"].clone();
        v["optimizer"]["hash"] = v["model"]["hash"].clone();
    });
    expect(
        dir.path(),
        &d,
        &m,
        &manifest.optimizer.file,
        "not this optimizer's record",
    );

    // Another run: other seed, or other rows per batch.
    let other_seed = TextData { seed: 4, ..data() };
    expect(saved.path(), &other_seed, &m, &data_file, "seed differs");
    let other_batch = TextData {
        batch_size: 3,
        ..data()
    };
    expect(saved.path(), &other_batch, &m, &data_file, "batch_size");

    // A model of other sizes does not take the record.
    let wider = LmConfig {
        d_model: 8,
        ..model_config()
    };
    expect(
        saved.path(),
        &d,
        &wider,
        &manifest.model.file,
        "does not fit",
    );

    // Nothing was consumed from the good folder.
    assert!(
        restore_training(
            saved.path(),
            TransformerLm::new(&m, &device()),
            AdamConfig::new().init(),
            &d.recipe(&d.work_source(LANES, 0, 1).unwrap())
        )
        .is_ok()
    );
}

#[test]
fn a_save_refuses_a_partial_or_out_of_step_data_checkpoint() {
    let (device, d) = (device(), data());
    let model = TransformerLm::new(&model_config(), &device);
    let optimizer: ModuleOptimizer = AdamConfig::new().init();
    let ws = d.work_source(LANES, 0, 2).unwrap();
    let mut progress = d.recipe(&ws).start(&ws);
    progress.record(0, 2);
    let dir = tempfile::tempdir().unwrap();
    let err = save_training(dir.path(), 1, &model, &optimizer, &progress.checkpoint())
        .unwrap_err()
        .to_string();
    assert!(err.contains("misses lanes 1:"), "{err}");

    let ws = d.work_source(LANES, 0, 1).unwrap();
    let mut progress = d.recipe(&ws).start(&ws);
    progress.record(0, 2);
    progress.record(1, 2);
    let err = save_training(dir.path(), 2, &model, &optimizer, &progress.checkpoint())
        .unwrap_err()
        .to_string();
    assert!(err.contains("at step 1, the model at step 2"), "{err}");
    // Nothing was written.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_new_save_replaces_the_previous_parts() {
    let dir = tempfile::tempdir().unwrap();
    run(1, None, 1, Some(dir.path()));
    run(1, None, 2, Some(dir.path()));
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "data-00000002.zpck",
            MANIFEST,
            "model-00000002.bpk",
            "optimizer-00000002.bpk"
        ]
    );
}

/// A save removes only the part files a save writes: an old manifest that
/// names the manifest itself, or a file of the user's, as a part had the
/// save delete the manifest it had just written (and return `Ok`) or the
/// user's file.
#[test]
fn a_save_removes_only_files_a_save_wrote() {
    for named in [MANIFEST, "notes.txt"] {
        let dir = tempfile::tempdir().unwrap();
        run(1, None, 1, Some(dir.path()));
        std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
        edit_manifest(dir.path(), |v| v["data"]["file"] = named.into());
        run(1, None, 2, Some(dir.path()));
        let m = read_manifest(dir.path()).unwrap_or_else(|e| panic!("{named}: {e}"));
        assert_eq!(m.step, 2);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("notes.txt")).unwrap(),
            "mine"
        );
    }
}

/// A part far longer than its manifest says (a terabyte of holes) is
/// refused by its size, before any of it is read or reserved.
#[test]
fn a_part_far_longer_than_its_manifest_is_refused_unread() {
    let (d, m) = (data(), model_config());
    let dir = tempfile::tempdir().unwrap();
    run(1, None, 1, Some(dir.path()));
    let manifest = read_manifest(dir.path()).unwrap();
    let path = dir.path().join(&manifest.model.file);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(1 << 40)
        .unwrap();
    let (file, message) = restore_error(dir.path(), &d, &m);
    assert_eq!(file, manifest.model.file);
    assert!(
        message.contains(&format!(
            "{} bytes, the manifest says {}",
            1u64 << 40,
            manifest.model.bytes
        )),
        "{message}"
    );
}
