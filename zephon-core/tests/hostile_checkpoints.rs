//! Checkpoint files are tamper-evident: every damaged, truncated or extended
//! file is refused with an error naming it (never accepted with other
//! content, never a panic), rank files of different steps or layouts do not
//! merge, and fields that contradict each other or the run are refused even
//! under a valid checksum.
//!
//! `cargo test -p zephon-core --test suite -- --nocapture hostile_checkpoints::`
//! prints the table of cases per class of input.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use zephon_core::checkpoint::{
    CHECKPOINT_VERSION, Checkpoint, CheckpointedExt, OpState, Progress, Recipe, ResumeExt,
};
use zephon_core::hash::mix64;
use zephon_core::{Dataset, PipelineExt, Record, Runner, ShuffleMode, WorkSource};

const LANES: u32 = 4;

fn dataset() -> Dataset {
    Dataset::in_memory(
        "toy",
        (0..3)
            .map(|s| {
                (0..40)
                    .map(|i| Record::new().with("i", (s * 100 + i) as i64))
                    .collect()
            })
            .collect(),
    )
    .unwrap()
}

fn work(rank: u32, world: u32) -> WorkSource {
    WorkSource::builder()
        .dataset(dataset(), 1.0)
        .seed(9)
        .canonical_lanes(LANES)
        .rank(rank)
        .world_size(world)
        .build()
        .unwrap()
}

fn recipe(ws: &WorkSource, filtered: bool) -> Recipe {
    Recipe::new(ws)
        .setting("shuffle", (8, ShuffleMode::Reservoir, 9))
        .setting("filter", filtered)
}

/// Rank `rank` of `world` after `steps` steps, its checkpoint with lane cuts
/// (a filter before the shuffle makes the shuffle list its buffer).
fn rank_checkpoint(rank: u32, world: u32, steps: usize, filtered: bool) -> Checkpoint {
    let ws = work(rank, world);
    let progress: Progress = recipe(&ws, filtered).start(&ws);
    let fetched = ws.stream().fetch(2);
    let fetched: futures::stream::BoxStream<'static, zephon_core::Result<Record>> = if filtered {
        Box::pin(fetched.filter_ok(|r: &Record| r.get("i").and_then(|v| v.as_int()) != Some(7)))
    } else {
        Box::pin(fetched)
    };
    let mut it = fetched
        .shuffle(8, ShuffleMode::Reservoir, 9)
        .batch(3)
        .resume_from(&progress)
        .lane_mux_from(&progress)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .checkpointed(progress);
    let lanes = (LANES / world) as usize;
    for _ in 0..steps * lanes {
        it.next().unwrap().unwrap();
    }
    it.checkpoint()
}

fn merged(filtered: bool) -> Checkpoint {
    let c = Checkpoint::merge([
        rank_checkpoint(0, 2, 3, filtered),
        rank_checkpoint(1, 2, 3, filtered),
    ])
    .unwrap();
    assert!(c.is_complete() && c.cuts.len() == LANES as usize);
    c
}

/// Outcomes of one class of input.
#[derive(Default, Debug, Clone, Copy)]
struct Tally {
    tried: u64,
    /// Refused with an error naming the file.
    clean: u64,
    /// Refused without naming it.
    unnamed: u64,
    panics: u64,
    /// Accepted with content other than the original's.
    silent: u64,
    /// Accepted with the original's content.
    same: u64,
}

/// Reads `data` as the file `path` and classifies the outcome against
/// `original`. One case in `THROUGH_FILES` goes through a real file; the
/// others are read from memory under the file's name, which is the same
/// code after the read.
fn classify(path: &Path, data: &[u8], original: &Checkpoint, t: &mut Tally) -> Option<String> {
    const THROUGH_FILES: u64 = 16;
    t.tried += 1;
    let name = path.display().to_string();
    let through_file = t.tried % THROUGH_FILES == 1;
    if through_file {
        std::fs::write(path, data).unwrap();
    }
    let read = || {
        if through_file {
            Checkpoint::load(path)
        } else {
            Checkpoint::from_slice(data, &name)
        }
    };
    match std::panic::catch_unwind(read) {
        Err(_) => {
            t.panics += 1;
            Some("panicked".into())
        }
        Ok(Ok(c)) if c == *original => {
            t.same += 1;
            Some("accepted, same content".into())
        }
        Ok(Ok(_)) => {
            t.silent += 1;
            Some("accepted with other content".into())
        }
        Ok(Err(e)) if e.to_string().contains(&name) => {
            t.clean += 1;
            None
        }
        Ok(Err(e)) => {
            t.unnamed += 1;
            Some(format!("error without the file's name: {e}"))
        }
    }
}

struct Bench {
    dir: tempfile::TempDir,
    table: BTreeMap<String, Tally>,
    failures: Vec<String>,
}

impl Bench {
    fn new() -> Self {
        Bench {
            dir: tempfile::tempdir().unwrap(),
            table: BTreeMap::new(),
            failures: Vec::new(),
        }
    }

    fn case(&mut self, class: &str, file: &str, data: &[u8], original: &Checkpoint, what: String) {
        let path: PathBuf = self.dir.path().join(file);
        let t = self.table.entry(class.to_owned()).or_default();
        if let Some(why) = classify(&path, data, original, t)
            && self.failures.len() < 20
        {
            self.failures.push(format!("{class}, {what}: {why}"));
        }
    }

    fn report(&self) {
        println!(
            "{:<34} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
            "class of input", "cases", "clean", "unnamed", "panics", "silent", "same"
        );
        for (class, t) in &self.table {
            println!(
                "{:<34} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
                class, t.tried, t.clean, t.unnamed, t.panics, t.silent, t.same
            );
        }
    }
}

/// Deterministic draws: case `i` of stream `k`.
fn draw(k: u64, i: u64) -> u64 {
    mix64(mix64(k) ^ i)
}

fn is_json_space(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t')
}

#[test]
fn every_damaged_checkpoint_file_is_refused_with_its_name() {
    let mut bench = Bench::new();
    // Flips sampled per form: every bit of the binary form, a bounded random
    // sample of the JSON form (several thousand bytes), so the test takes
    // seconds.
    const SAMPLE: u64 = 1500;
    for filtered in [false, true] {
        let original = merged(filtered);
        let tag = if filtered { "listed" } else { "plain" };
        for (form, file, bytes) in [
            ("binary", "ckpt.bin", original.to_bytes()),
            ("json", "ckpt.json", original.to_json().into_bytes()),
        ] {
            let n = bytes.len();
            let class = |c: &str| format!("{form} ({tag}), {c}");
            // Single-bit flips.
            let flips: Vec<(usize, u8)> = if form == "binary" {
                (0..n).flat_map(|i| (0..8).map(move |b| (i, b))).collect()
            } else {
                (0..SAMPLE)
                    .map(|i| {
                        let d = draw(1, i);
                        ((d % n as u64) as usize, ((d >> 32) % 8) as u8)
                    })
                    .collect()
            };
            for (i, bit) in flips {
                let mut d = bytes.clone();
                d[i] ^= 1 << bit;
                bench.case(
                    &class("bit flip"),
                    file,
                    &d,
                    &original,
                    format!("byte {i} bit {bit}"),
                );
            }
            // Any other value in one byte. JSON white space replaced by other
            // white space leaves the content as it was: counted apart, and
            // refused too (the layout is part of the form).
            for k in 0..SAMPLE {
                let d0 = draw(2, k);
                let i = (d0 % n as u64) as usize;
                let v = ((d0 >> 32) % 255) as u8;
                let v = if v >= bytes[i] { v + 1 } else { v };
                let mut d = bytes.clone();
                d[i] = v;
                let c = if form == "json" && is_json_space(bytes[i]) && is_json_space(v) {
                    class("white space for white space")
                } else {
                    class("byte replaced")
                };
                bench.case(&c, file, &d, &original, format!("byte {i} = {v:#04x}"));
            }
            // Truncations at every length (every 7th of the long JSON).
            let every = if n > 4096 { 7 } else { 1 };
            for len in (0..n).filter(|l| l % every == 0 || n - l < 64) {
                bench.case(
                    &class("truncated"),
                    file,
                    &bytes[..len],
                    &original,
                    format!("{len} of {n} bytes"),
                );
            }
            // Trailing garbage: random bytes, a newline, a zero byte, and
            // the whole file again.
            for k in 0..200u64 {
                let len = 1 + (draw(3, k) % 64) as usize;
                let mut d = bytes.clone();
                d.extend((0..len as u64).map(|j| draw(4, k * 64 + j) as u8));
                bench.case(
                    &class("trailing bytes"),
                    file,
                    &d,
                    &original,
                    format!("{len} bytes"),
                );
            }
            for extra in [vec![b'\n'], vec![0u8], bytes.clone()] {
                let d = [bytes.clone(), extra].concat();
                bench.case(
                    &class("trailing bytes"),
                    file,
                    &d,
                    &original,
                    "a newline, a zero byte or the file again".into(),
                );
            }
        }
    }
    bench.report();
    assert!(bench.failures.is_empty(), "{:#?}", bench.failures);
    for (class, t) in &bench.table {
        assert_eq!(t.clean, t.tried, "{class}");
    }
}

#[test]
fn binary_trailing_bytes_are_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("padded.ckpt");
    let mut bytes = merged(false).to_bytes();
    bytes.extend(b"junk");
    std::fs::write(&path, &bytes).unwrap();
    let e = Checkpoint::load(&path).unwrap_err().to_string();
    assert!(
        e.contains("padded.ckpt") && e.contains("4 bytes of trailing data"),
        "{e}"
    );
    let path = dir.path().join("padded.json");
    std::fs::write(&path, merged(false).to_json() + "}").unwrap();
    let e = Checkpoint::load(&path).unwrap_err().to_string();
    assert!(
        e.contains("padded.json") && e.contains("trailing characters"),
        "{e}"
    );
}

#[test]
fn older_versions_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut old = merged(false);
    let v = CHECKPOINT_VERSION - 1;
    old.version = v;
    let refused = |file: &str, data: &[u8]| {
        let path = dir.path().join(file);
        std::fs::write(&path, data).unwrap();
        let e = Checkpoint::load(&path).unwrap_err().to_string();
        assert!(
            e.contains(file)
                && e.contains(&format!(
                    "format version {v} is not supported (this build reads version {CHECKPOINT_VERSION})"
                ))
                && e.contains("earlier Zephon"),
            "{e}"
        );
    };
    refused("v4.ckpt", &old.to_bytes());
    refused("v4.json", old.to_json().as_bytes());
    // A file as version 4 wrote it, with its closed set of operator
    // variants: refused for its version, not for its layout.
    let v4 = r#"{
  "version": 4,
  "step": 1,
  "positions": 120,
  "recipe_fingerprint": 1,
  "work_fingerprint": 2,
  "seed": 9,
  "canonical_lanes": 1,
  "settings": {},
  "lanes": {"0": {"batches": 1, "items": 3, "ended": false}},
  "cuts": {"0": {"ops": [
    {"op": "batch", "consumed": 3, "emitted": null, "last_identity": null, "cut": "Batch"},
    {"op": "pack_sequences", "consumed": 4, "emitted": 3, "last_identity": 77,
     "cut": {"Pieces": {"docs": [], "ready": [], "open": []}}}
  ]}},
  "checksum": "crc32c:00000000"
}"#;
    assert_eq!(v, 4, "the literal is of the version before this one");
    refused("genuine_v4.json", v4.as_bytes());
    // The binary form: the magic, then the version, then a layout this
    // build cannot decode.
    let mut bin = b"ZPCK".to_vec();
    bin.push(4);
    bin.extend([0xFF; 24]);
    refused("genuine_v4.ckpt", &bin);
}

/// Saves each part as `NAME.ckpt` and loads them all together.
fn load_all(dir: &Path, parts: &[(&str, &Checkpoint)]) -> zephon_core::Result<Checkpoint> {
    let paths: Vec<PathBuf> = parts
        .iter()
        .map(|(name, c)| {
            let p = dir.join(format!("{name}.ckpt"));
            c.save(&p).unwrap();
            p
        })
        .collect();
    Checkpoint::load_all(&paths)
}

#[test]
fn rank_files_of_different_steps_or_layouts_do_not_merge() {
    let dir = tempfile::tempdir().unwrap();
    let r0s2 = rank_checkpoint(0, 2, 2, false);
    let r1s2 = rank_checkpoint(1, 2, 2, false);
    let r1s3 = rank_checkpoint(1, 2, 3, false);
    // The same step merges, in either order, and covers every lane.
    let ok = load_all(dir.path(), &[("r1s2", &r1s2), ("r0s2", &r0s2)]).unwrap();
    assert!(ok.is_complete());
    assert_eq!(ok.step, 2);

    // Rank 0 after step 2, rank 1 after step 3.
    let e = load_all(dir.path(), &[("r0s2", &r0s2), ("r1s3", &r1s3)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("r1s3.ckpt") && e.contains("r0s2.ckpt") && e.contains("different steps"),
        "{e}"
    );
    // The same rank twice.
    let e = load_all(dir.path(), &[("a", &r0s2), ("b", &r0s2)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("b.ckpt") && e.contains("lane 0 is also in"),
        "{e}"
    );
    // A rank missing.
    let e = load_all(dir.path(), &[("r0s2", &r0s2)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("r0s2.ckpt") && e.contains("lanes 2-3 are in none") && e.contains("all ranks"),
        "{e}"
    );
    // A rank of another seed.
    let mut other = r1s2.clone();
    other.seed += 1;
    let e = load_all(dir.path(), &[("r0s2", &r0s2), ("seed", &other)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("seed.ckpt") && e.contains("seed"), "{e}");
    // A rank of a run with another lane count.
    let mut other = r1s2.clone();
    other.canonical_lanes = 8;
    let e = load_all(dir.path(), &[("r0s2", &r0s2), ("lanes", &other)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("lanes.ckpt") && e.contains("canonical_lanes"),
        "{e}"
    );
}

/// Checkpoints whose checksum is right but whose fields contradict each
/// other (as a tool writing checkpoints could produce): refused on load,
/// naming the file, and on restore.
#[test]
fn contradicting_fields_are_refused_under_a_valid_checksum() {
    let dir = tempfile::tempdir().unwrap();
    let base = merged(false);
    let mut cases: Vec<(&str, Checkpoint, &str)> = Vec::new();
    let mut c = base.clone();
    c.lanes.insert(LANES, c.lanes[&0]);
    cases.push(("lane_out_of_range", c, "outside the 4 canonical lanes"));
    let mut c = base.clone();
    c.lanes.get_mut(&1).unwrap().items = 1;
    cases.push(("items", c, "lane 1: 1 elements in 3 batches"));
    let mut c = base.clone();
    c.step = 7;
    cases.push(("step", c, "step 7 but its lanes delivered at most 3"));
    let mut c = base.clone();
    c.canonical_lanes = 0;
    cases.push(("no_lanes", c, "canonical_lanes 0 is out of range 1..=65536"));
    // Before the range check, naming the lanes it lacks listed four
    // billion lane ids.
    let mut c = base.clone();
    c.canonical_lanes = u32::MAX;
    cases.push((
        "lanes_past_the_range",
        c,
        "canonical_lanes 4294967295 is out of range 1..=65536",
    ));
    let mut c = base.clone();
    c.lanes.remove(&2);
    cases.push(("cut_of_uncovered_lane", c, "a cut of lane 2"));
    let mut c = base.clone();
    c.settings.insert("pack".into(), 1);
    cases.push(("settings", c, "recipe fingerprint does not match"));
    // A state only the shuffle understands, checked on load all the same.
    let mut c = base.clone();
    let shuffle = c.cuts.get_mut(&3).unwrap().ops.last_mut().unwrap();
    assert_eq!(shuffle.op, "shuffle");
    let mut value = shuffle.state.value().clone();
    value["held"] = 9.into();
    shuffle.state = OpState::from_value(shuffle.state.version(), value).unwrap();
    cases.push(("shuffle_held", c, "holds 9 elements in a buffer of 8"));
    let mut c = base.clone();
    let shuffle = c.cuts.get_mut(&1).unwrap().ops.last_mut().unwrap();
    shuffle.state = OpState::from_value(7, shuffle.state.value().clone()).unwrap();
    cases.push((
        "shuffle_state_version",
        c,
        "state is of layout version 7, this build reads version 1",
    ));
    let mut c = base.clone();
    let shuffle = c.cuts.get_mut(&2).unwrap().ops.last_mut().unwrap();
    shuffle.preamble.computed += 1;
    cases.push(("shuffle_preamble", c, "computed for"));
    // The layout every operator's cut shares.
    let mut c = base.clone();
    let batch = &mut c.cuts.get_mut(&0).unwrap().ops[0];
    batch.preamble.in_flight = 1;
    cases.push(("in_flight", c, "1 elements in flight but 0 listed"));
    let mut c = base.clone();
    c.cuts.get_mut(&0).unwrap().ops.clear();
    cases.push(("empty_cut", c, "lane 0's cut: no operator"));

    let ws = work(0, 1);
    for (name, c, want) in cases {
        for ext in ["ckpt", "json"] {
            let path = dir.path().join(format!("{name}.{ext}"));
            c.save(&path).unwrap();
            let e = Checkpoint::load(&path).unwrap_err().to_string();
            assert!(
                e.contains(&path.display().to_string()) && e.contains(want),
                "{name}: {e}"
            );
        }
        let e = recipe(&ws, false).resume(&ws, &c).unwrap_err().to_string();
        assert!(e.contains("restore") && e.contains(want), "{name}: {e}");
    }
    // Consistent in itself, but not this run's length.
    let mut c = base.clone();
    c.positions = c.positions.map(|n| n * 2);
    let e = recipe(&ws, false).resume(&ws, &c).unwrap_err().to_string();
    assert!(e.contains("run length differs"), "{e}");
    // The untouched checkpoint restores.
    recipe(&ws, false).resume(&ws, &base).unwrap();
}

/// A checkpoint path naming a FIFO (opening one waits for a writer) or a
/// link to a device that reads without end is refused at once, naming it.
#[cfg(unix)]
#[test]
fn a_checkpoint_path_that_is_not_a_regular_file_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.ckpt");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let zero = dir.path().join("zero.ckpt");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    for (path, what) in [(fifo, "a FIFO"), (zero, "a character device")] {
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        std::thread::spawn(move || {
            let _ = tx.send(Checkpoint::load(&p).map(|_| ()));
        });
        let err = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("the load returns within 20 s")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&path.display().to_string()) && err.contains(what),
            "{err}"
        );
    }
}

/// Every batch of a run resumed from `c` on one rank, to its end or its
/// first error.
fn resumed_run(c: &Checkpoint) -> zephon_core::Result<Vec<Vec<i64>>> {
    let ws = work(0, 1);
    let progress = recipe(&ws, false).resume(&ws, c)?;
    let mut out = Vec::new();
    for b in ws
        .stream()
        .fetch(2)
        .shuffle(8, ShuffleMode::Reservoir, 9)
        .batch(3)
        .resume_from(&progress)
        .lane_mux_from(&progress)
        .into_blocking_iter(Runner::Inline)?
    {
        let b = b?;
        out.push(
            b.items
                .iter()
                .map(|r| r.get("i").and_then(|v| v.as_int()).unwrap())
                .collect(),
        );
    }
    Ok(out)
}

/// Lane counts past what the run delivers: a replay that ran out of input
/// before the count was dropped ended the lane with nothing said (its
/// samples were lost to the resumed run), and counts near `u64::MAX`
/// overflowed the sums taken when rank files merge.
#[test]
fn lane_counts_past_what_the_run_delivers_are_errors_not_an_early_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut base = merged(false);
    // No cuts: every lane is replayed, its delivered elements dropped.
    base.cuts.clear();
    assert_eq!(resumed_run(&base).unwrap().len(), 120 / 3 - 4 * 3);

    let mut c = base.clone();
    c.lanes.get_mut(&2).unwrap().items = 1_000_000;
    let e = resumed_run(&c).unwrap_err().to_string();
    assert!(
        e.contains(
            "lane 2: the checkpoint counts 1000000 delivered elements but the lane ended after"
        ),
        "{e}"
    );

    let mut c = base.clone();
    for p in c.lanes.values_mut() {
        (p.batches, p.items) = (1 << 63, 1 << 63);
    }
    c.step = 1 << 63;
    let path = dir.path().join("huge.ckpt");
    c.save(&path).unwrap();
    let loaded = Checkpoint::load_all([&path]).unwrap();
    assert_eq!(loaded.step, 1 << 63);
    let e = resumed_run(&loaded).unwrap_err().to_string();
    assert!(
        e.contains("delivered elements but the lane ended after"),
        "{e}"
    );
}
