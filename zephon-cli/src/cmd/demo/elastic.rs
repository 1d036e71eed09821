//! The demo's elastic restart: the run stops on two ranks, which write their
//! checkpoints, and resumes on one; every global batch must be the one the
//! uninterrupted run delivered.

use super::{Args, parse};
use anyhow::{Result, bail};
use std::path::Path;
use std::time::{Duration, Instant};
use zephon_core::checkpoint::{Checkpoint, Recipe, ResumeExt};
use zephon_core::{Dataset, PipelineExt, Runner, ShuffleMode, WorkSource};
use zephon_storage::DatasetExt;

/// A delivered batch: its step (the batch's index in its lane), its lane and
/// its digest.
type Seen = (u64, u32, u64);

/// What one rank delivered, and its checkpoint after the last step.
struct RankRun {
    batches: Vec<Seen>,
    checkpoint: Checkpoint,
    first_batch: Duration,
}

/// Runs `steps` steps of the demo pipeline as rank `rank` of `world`, fresh
/// or from `resume`.
fn rank_steps(
    dir: &Path,
    args: &Args,
    parallelism: usize,
    (rank, world): (u32, u32),
    resume: Option<&Checkpoint>,
    steps: u64,
) -> Result<RankRun> {
    let start = Instant::now();
    let ws = WorkSource::builder()
        .dataset(Dataset::from_path("demo", dir)?, 1.0)
        .seed(args.seed)
        .canonical_lanes(args.lanes)
        .rank(rank)
        .world_size(world)
        .build()?;
    let mode = ShuffleMode::Reservoir;
    // What decides the batches besides the work source: a checkpoint is
    // refused by a pipeline whose settings differ.
    let recipe = Recipe::new(&ws)
        .setting("shuffle", (args.shuffle_buffer, mode, args.seed))
        .setting("batch", args.batch_size);
    let mut progress = match resume {
        Some(c) => recipe.resume(&ws, c)?,
        None => recipe.start(&ws),
    };
    let until = progress.steps() + steps;
    let it = ws
        .stream()
        .fetch(parallelism)
        .map_par(parse, parallelism)
        .shuffle(args.shuffle_buffer, mode, args.seed)
        .batch(args.batch_size)
        .resume(&mut progress)
        .prefetch_batches(8)
        .into_blocking_iter(Runner::Threads {
            workers: parallelism,
        })?;
    let mut run = RankRun {
        batches: Vec::new(),
        checkpoint: progress.checkpoint(),
        first_batch: Duration::ZERO,
    };
    // A rank whose data ran out before `until` says so in its checkpoint.
    let mut ended = true;
    for b in it {
        let b = b?;
        if b.index >= until {
            ended = false;
            break;
        }
        if run.batches.is_empty() {
            run.first_batch = start.elapsed();
        }
        progress.check_delivered(&b)?;
        run.batches.push((b.index, b.lane, b.digest()));
        progress.record_delivered(&b);
    }
    if ended {
        progress.mark_ended();
    }
    run.checkpoint = progress.checkpoint();
    Ok(run)
}

/// Runs the restart and prints what it showed; fails if a batch differs.
pub fn run(dir: &Path, args: &Args, parallelism: usize) -> Result<()> {
    let (before, after) = (2u32, 1u32);
    let total_docs = (args.shards * args.docs_per_shard) as u64;
    let steps_in_data = total_docs / (args.lanes as u64 * args.batch_size as u64).max(1);
    let (first, second) = (steps_in_data / 3, steps_in_data / 6);
    if args.lanes < before || first == 0 || second == 0 {
        println!("\nelastic restart: skipped (needs at least {before} lanes and 6 steps of data)");
        return Ok(());
    }
    let reference = rank_steps(dir, args, parallelism, (0, 1), None, first + second)?;
    let mut parts = Vec::new();
    let mut seen = Vec::new();
    let mut bytes = 0;
    for rank in 0..before {
        let r = rank_steps(dir, args, parallelism, (rank, before), None, first)?;
        bytes += r.checkpoint.to_bytes().len();
        seen.extend(r.batches);
        parts.push(r.checkpoint);
    }
    let merged = Checkpoint::merge(parts)?;
    let resumed = rank_steps(dir, args, parallelism, (0, after), Some(&merged), second)?;
    // The resumed rank owns every lane: its delivery order is the global
    // order, the uninterrupted run's from the restart on.
    let tail = &reference.batches[reference.batches.len() - resumed.batches.len()..];
    let order_kept = resumed.batches == tail;
    seen.extend(&resumed.batches);
    seen.sort_unstable();
    let mut expected = reference.batches.clone();
    expected.sort_unstable();
    let same = seen == expected;
    println!(
        "\nelastic restart: {before} ranks ran {first} steps and wrote checkpoints ({before} files, {:.1} KB); \
         {after} rank resumed from them for {second} steps",
        bytes as f64 / 1e3
    );
    println!(
        "  global batches identical to the uninterrupted run: {} ({} of {}); first batch after the restore {:.1} ms (fresh start {:.1} ms)",
        if same && order_kept { "yes" } else { "NO" },
        seen.iter().zip(&expected).filter(|(a, b)| a == b).count(),
        expected.len(),
        resumed.first_batch.as_secs_f64() * 1e3,
        reference.first_batch.as_secs_f64() * 1e3,
    );
    if !(same && order_kept) {
        bail!("the restarted run delivered other batches than the uninterrupted one");
    }
    Ok(())
}
