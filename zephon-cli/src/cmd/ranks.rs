//! `zephon rank-run`: one data-parallel rank of a run over a local JSONL
//! dataset, for a number of steps, from a checkpoint or fresh; writes the
//! sample ids of every batch it delivers and, optionally, its checkpoint.
//!
//! Start `W` of them (ranks `0..W`) for a few steps, then restart any other
//! number from their checkpoint files: the global batches continue exactly.

use crate::cmd::flags::{AT_LEAST_ONE, ranged};
use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use zephon_core::checkpoint::{Checkpoint, Recipe, ResumeExt};
use zephon_core::output::{PendingFile, check_destination};
use zephon_core::settings::{BATCH_SIZE, BUFFER_SIZE, CANONICAL_LANES, PARALLELISM, WORLD_SIZE};
use zephon_core::work::Launcher;
use zephon_core::{Dataset, PipelineExt, Runner, ShuffleMode, Value, WorkSource};
use zephon_storage::DatasetExt;

/// Options of `zephon rank-run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Folder of `*.jsonl` shards; each line must carry an integer `id` (a
    /// sample without one is an error naming it).
    #[arg(long)]
    pub data: PathBuf,
    /// This process's rank, `0..world-size`. Without `--rank` and
    /// `--world-size`, taken from the launcher's environment (torchrun's
    /// `RANK`/`WORLD_SIZE`, Slurm's `SLURM_PROCID`/`SLURM_NTASKS`), else 0.
    #[arg(long)]
    pub rank: Option<u32>,
    /// Number of ranks (see `--rank`; 1 without a launcher).
    #[arg(long, value_parser = ranged::<u32>(WORLD_SIZE))]
    pub world_size: Option<u32>,
    /// Canonical lanes (fixed for the run).
    #[arg(long, default_value_t = 8, value_parser = ranged::<u32>(CANONICAL_LANES))]
    pub lanes: u32,
    /// Steps to run (each step is one batch of every owned lane); fewer
    /// when the data ends first.
    #[arg(long, value_parser = ranged::<u64>(AT_LEAST_ONE))]
    pub steps: u64,
    /// Elements per lane-batch.
    #[arg(long, default_value_t = 4, value_parser = ranged::<usize>(BATCH_SIZE))]
    pub batch_size: usize,
    /// Per-lane shuffle buffer.
    #[arg(long, default_value_t = 16, value_parser = ranged::<usize>(BUFFER_SIZE))]
    pub shuffle_buffer: usize,
    /// Seed of every shuffle.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Passes over the data.
    #[arg(long, default_value_t = 1, value_parser = ranged::<u64>(AT_LEAST_ONE))]
    pub passes: u64,
    /// Parallel reads and worker threads (a performance knob only).
    #[arg(long, default_value_t = 2, value_parser = ranged::<usize>(PARALLELISM))]
    pub parallelism: usize,
    /// Write this rank's checkpoint here after the steps (`.json` for JSON).
    #[arg(long)]
    pub checkpoint_out: Option<PathBuf>,
    /// Resume from these checkpoint files (those of every rank of the
    /// previous run, merged).
    #[arg(long, num_args = 1..)]
    pub resume: Vec<PathBuf>,
    /// Write one JSON line per delivered batch: lane, index, sample ids.
    #[arg(long)]
    pub out: PathBuf,
    /// Leave out the global batches of steps `FROM..TO` (steps to come
    /// only; recorded in the checkpoint, kept by later resumes). May be
    /// given more than once.
    #[arg(long, value_name = "FROM..TO", value_parser = step_range)]
    pub skip_steps: Vec<std::ops::Range<u64>>,
    /// Record (or, resuming, check) a checksum of every shard's whole
    /// content, not only the fingerprint of its sampled bytes: a full read
    /// of the data at start. The checkpointed run must have used it too.
    #[arg(long)]
    pub verify_data: bool,
}

/// `FROM..TO`, two step numbers with `FROM < TO`.
fn step_range(s: &str) -> Result<std::ops::Range<u64>, String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("`{s}`: give FROM..TO, e.g. 100..110"))?;
    let (a, b): (u64, u64) = (
        a.parse().map_err(|e| format!("`{a}`: {e}"))?,
        b.parse().map_err(|e| format!("`{b}`: {e}"))?,
    );
    if a >= b {
        return Err(format!("`{s}`: FROM must be below TO"));
    }
    Ok(a..b)
}

/// Runs the rank.
pub fn run(args: Args) -> Result<()> {
    // Every output is checked before anything runs or is opened for
    // writing: an output that is an input, or the other output, would
    // destroy it.
    check_outputs(&args)?;
    let ds = Dataset::from_path("data", &args.data)?;
    let mut builder = WorkSource::builder()
        .dataset(ds, 1.0)
        .seed(args.seed)
        .passes(args.passes)
        .canonical_lanes(args.lanes);
    // Both flags given: the launcher's variables, if any, are not consulted.
    // Otherwise they supply what is missing, and a flag that contradicts
    // them is refused by the builder.
    if (args.rank.is_none() || args.world_size.is_none())
        && let Some(l) = Launcher::from_env()?
    {
        eprintln!("rank-run: {l} from the launcher's environment");
        builder = builder.launcher(l);
    }
    if let Some(r) = args.rank {
        builder = builder.rank(r);
    }
    if let Some(w) = args.world_size {
        builder = builder.world_size(w);
    }
    let ws = builder.build()?;
    let mode = ShuffleMode::Reservoir;
    let mut recipe = Recipe::new(&ws).setting("shuffle", (args.shuffle_buffer, mode, args.seed));
    if args.verify_data {
        recipe = recipe.verify_content(&ws)?;
    }
    let mut progress = if args.resume.is_empty() {
        recipe.start(&ws)
    } else {
        let ckpt = Checkpoint::load_all(&args.resume)?;
        recipe.resume(&ws, &ckpt)?
    };
    for r in &args.skip_steps {
        progress.skip_steps(r.start, r.end - r.start)?;
    }
    // Lanes may run dry at different steps near the end, so the stop is a
    // step index, not a batch count.
    // Skipped steps are not run: the window grows by those inside it.
    let start = progress.steps();
    let mut until = start.saturating_add(args.steps);
    let mut skips = progress.skips().to_vec();
    skips.sort_by_key(|r| r.start);
    for r in skips.iter().filter(|r| r.end > start) {
        if r.start >= until {
            break;
        }
        until = until.saturating_add(r.end - r.start.max(start));
    }
    let batches = ws
        .stream()
        .fetch(args.parallelism)
        .shuffle(args.shuffle_buffer, mode, args.seed)
        .batch(args.batch_size)
        .resume(&mut progress)
        .prefetch_batches(2)
        .into_blocking_iter(Runner::Threads {
            workers: args.parallelism,
        })?;
    // Written beside its destination and renamed there at the end: a
    // failed run leaves no half-written log in its place.
    let mut pending =
        PendingFile::beside(&args.out).with_context(|| format!("--out {}", args.out.display()))?;
    let mut out = std::io::BufWriter::new(pending.file());
    // The data ran out before the steps did: said in the checkpoint, so
    // that it merges with the files of ranks whose lanes had more.
    let mut ended = true;
    for b in batches {
        let b = b?;
        if b.index >= until {
            ended = false;
            break;
        }
        // A sample without an integer `id` is an error naming it: a
        // placeholder id would make two samples compare equal.
        let ids = b
            .items
            .iter()
            .map(|r| {
                r.get("id").and_then(Value::as_int).ok_or_else(|| {
                    zephon_core::Error::Sample {
                        op: "rank-run",
                        sample: zephon_core::error::SampleSource::new(r.source().copied()),
                        message: "no integer field `id`".into(),
                    }
                    .name_sources(ws.catalog())
                })
            })
            .collect::<Result<Vec<i64>, _>>()?;
        progress.check_delivered(&b)?;
        progress.record_delivered(&b);
        if progress.is_skipped(&b) {
            continue;
        }
        let line = serde_json::json!({ "lane": b.lane, "index": b.index, "ids": ids });
        writeln!(out, "{line}").with_context(|| format!("writing {}", args.out.display()))?;
    }
    out.flush()
        .with_context(|| format!("writing {}", args.out.display()))?;
    drop(out);
    pending
        .commit()
        .with_context(|| format!("writing {}", args.out.display()))?;
    if ended {
        progress.mark_ended();
    }
    if let Some(path) = &args.checkpoint_out {
        progress.checkpoint().save(path)?;
    }
    Ok(())
}

/// `path` made absolute with its folder's links resolved (the file itself
/// need not exist yet), to compare outputs with inputs.
fn resolved(path: &Path) -> Result<PathBuf> {
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let folder = folder.canonicalize().with_context(|| {
        format!(
            "{}: the folder {} does not exist",
            path.display(),
            folder.display()
        )
    })?;
    Ok(match path.file_name() {
        Some(name) => folder.join(name),
        None => folder,
    })
}

/// Refuses outputs that are special files or folders, that lie in the
/// dataset's folder, a batch log that is one of the checkpoints resumed
/// from, or two outputs that are the same file: all before the run.
fn check_outputs(args: &Args) -> Result<()> {
    let data = args
        .data
        .canonicalize()
        .with_context(|| format!("--data {}", args.data.display()))?;
    let mut outputs = vec![("--out", &args.out)];
    if let Some(c) = &args.checkpoint_out {
        outputs.push(("--checkpoint-out", c));
    }
    let mut seen: Vec<(&str, PathBuf)> = Vec::new();
    for (flag, path) in outputs {
        check_destination(path).with_context(|| format!("{flag} {}", path.display()))?;
        let at = resolved(path).with_context(|| flag.to_string())?;
        // A link to an existing file is judged by the file it points at.
        let at = at.canonicalize().unwrap_or(at);
        anyhow::ensure!(
            !at.starts_with(&data),
            "{flag} {}: inside the dataset folder {} (--data): an output may not be written among the shards",
            path.display(),
            data.display()
        );
        // The new checkpoint may replace the one resumed from (it was read
        // first, and is replaced whole); the batch log may not.
        for r in args.resume.iter().filter(|_| flag == "--out") {
            if let Ok(r) = resolved(r).map(|p| p.canonicalize().unwrap_or(p)) {
                anyhow::ensure!(
                    r != at,
                    "{flag} {}: it is the checkpoint resumed from (--resume); write the new one elsewhere",
                    path.display()
                );
            }
        }
        if let Some((other, _)) = seen.iter().find(|(_, p)| *p == at) {
            anyhow::bail!("{flag} {}: the same file as {other}", path.display());
        }
        seen.push((flag, at));
    }
    Ok(())
}
