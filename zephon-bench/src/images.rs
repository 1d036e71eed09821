//! `zephon-bench images`: workload W3, images. A folder of WebDataset
//! shards (`KEY.jpg`, `KEY.cls`), one pass in a seeded shuffled order, each
//! JPEG decoded to RGB, a random resized crop (area 8-100%, aspect 3/4 to
//! 4/3) scaled to `--size` bilinear, mirrored with probability 1/2, batches
//! of `--batch` collated as one `(N, H, W, 3)` u8 array with i64 labels.
//!
//! Prints one JSON line with the keys of the peers (`peers_w3.py`):
//! `images_per_s`, `first_batch_s`, `seconds`, `peak_rss_anon_mb`, and a
//! `checksum` of the batch sequence (the same at any parallelism). With
//! `--raw`, the same decoder and crop on the same bytes already in memory,
//! on every core, in this process: the ceiling of the pipeline; each
//! `--peer` command runs on the same data in the same invocation and the
//! line gains ratios to it.

use super::mem::PeakRss;
use super::stats::round3;
use super::tokens::{Run, keep, measure_peer};
use anyhow::{Context, Result, ensure};
use std::path::PathBuf;
use std::time::Instant;
use zephon_cli::cmd::flags::{AT_LEAST_ONE, ranged};
use zephon_core::settings::{BATCH_SIZE, WORKERS};
use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
use zephon_media::{
    CollateConfig, DecodeConfig, Flip, ImageOp, ImageSample, Layout, MediaPipelineExt,
    RandomResizedCrop,
};
use zephon_storage::DatasetExt;

/// Options of `zephon-bench images`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Folder of WebDataset `.tar` shards (`gen_images.py` makes them).
    #[arg(long)]
    pub dir: PathBuf,
    /// Side of the square crops, in pixels (1 to 8192).
    #[arg(long, default_value_t = 224, value_parser = clap::value_parser!(u32).range(1..=8192))]
    pub size: u32,
    /// Images per batch.
    #[arg(long, default_value_t = 64, value_parser = ranged::<usize>(BATCH_SIZE))]
    pub batch: usize,
    /// Seed of the order, the crops and the flips.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Worker threads and decodes in flight (default: the machine's cores).
    #[arg(long, value_parser = ranged::<usize>(WORKERS))]
    pub parallelism: Option<usize>,
    /// Also the ceiling: decoder and crop on the bytes in memory, all cores.
    #[arg(long)]
    pub raw: bool,
    /// A peer command on the same data (e.g. `python3 peers_w3.py pil DIR`),
    /// printing one JSON line with `system`, `seconds`, `images_per_s` and
    /// `first_batch_s`.
    #[arg(long)]
    pub peer: Vec<String>,
    /// Rounds of every system, the best kept.
    #[arg(long, default_value_t = 1, value_parser = ranged::<usize>(AT_LEAST_ONE))]
    pub repeat: usize,
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

fn work(a: &Args) -> Result<WorkSource> {
    let ds = Dataset::from_path("images", &a.dir)
        .with_context(|| format!("--dir {}", a.dir.display()))?;
    Ok(WorkSource::builder()
        .dataset(ds, 1.0)
        .seed(a.seed)
        .shuffle_shards(true)
        .shuffle_within_shard(true)
        .build()?)
}

fn decode(a: &Args) -> DecodeConfig {
    DecodeConfig::new("jpg")
        .then(RandomResizedCrop::new(a.size, a.size).seed(a.seed))
        .then(Flip::new(0.5, a.seed))
}

/// One pass through the pipeline.
fn measure_self(a: &Args) -> Result<Run> {
    let p = a.parallelism.unwrap_or_else(cores);
    let peak = PeakRss::start();
    let start = Instant::now();
    let ws = work(a)?;
    let batches = ws
        .stream()
        .fetch(p)
        .decode_image(decode(a), p)
        .batch(a.batch)
        .collate_images(CollateConfig::new(Layout::Hwc).label("cls"))
        .prefetch_batches(2)
        .into_blocking_iter(Runner::Threads { workers: p })?;
    let (mut images, mut first, mut checksum) = (0usize, None, 0u64);
    for b in batches {
        let b = b?;
        first.get_or_insert_with(|| start.elapsed().as_secs_f64());
        images += b.batch_size;
        checksum = zephon_core::hash::combine(checksum, b.digest());
    }
    let seconds = start.elapsed().as_secs_f64();
    let peak_anon = peak.stop().unwrap_or(0);
    ensure!(images > 0, "--dir {}: no images", a.dir.display());
    Ok(Run {
        line: serde_json::json!({
            "system": "zephon",
            "images": images,
            "seconds": round3(seconds),
            "images_per_s": round3(images as f64 / seconds),
            "first_batch_s": round3(first.unwrap_or(seconds)),
            "parallelism": p,
            "checksum": format!("{checksum:016x}"),
        }),
        seconds,
        peak_anon,
    })
}

/// The ceiling: every record read first, then decode, crop and flip on
/// every core over the bytes in memory, no pipeline.
fn measure_raw(a: &Args) -> Result<Run> {
    let ws = work(a)?;
    let records: Vec<Record> = ws
        .stream()
        .fetch(cores())
        .into_blocking_iter(Runner::threads())?
        .collect::<zephon_core::Result<_>>()?;
    let config = DecodeConfig::new("jpg");
    let (crop, flip) = (
        RandomResizedCrop::new(a.size, a.size).seed(a.seed),
        Flip::new(0.5, a.seed),
    );
    let threads = a.parallelism.unwrap_or_else(cores);
    let peak = PeakRss::start();
    let start = Instant::now();
    let done = super::on_threads(&records, threads, |r| {
        let Some(zephon_core::Value::Bytes(bytes)) = r.get("jpg") else {
            anyhow::bail!("a sample without `jpg` bytes");
        };
        let image = config.decode(bytes).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let s = ImageSample {
            image,
            record: r.clone(),
        };
        std::hint::black_box(flip.apply(crop.apply(s)?)?);
        Ok(())
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let peak_anon = peak.stop().unwrap_or(0);
    Ok(Run {
        line: serde_json::json!({
            "system": "raw",
            "images": done,
            "seconds": round3(seconds),
            "images_per_s": round3(done as f64 / seconds),
            "first_batch_s": serde_json::Value::Null,
        }),
        seconds,
        peak_anon,
    })
}

/// Runs the benchmark and prints one JSON line per system, Zephon's last.
pub fn run(a: Args) -> Result<()> {
    let mut best: Option<Run> = None;
    let mut raw: Option<Run> = None;
    let mut peers: Vec<Option<Run>> = vec![None; a.peer.len()];
    for _ in 0..a.repeat {
        keep(&mut best, measure_self(&a)?);
        if a.raw {
            keep(&mut raw, measure_raw(&a)?);
        }
        for (p, slot) in a.peer.iter().zip(peers.iter_mut()) {
            keep(slot, measure_peer(p)?);
        }
    }
    let mut line = best.expect("at least one round").line;
    for other in raw.into_iter().chain(peers.into_iter().flatten()) {
        println!("{}", other.line);
        let name = other.line["system"].as_str().unwrap_or("peer").to_owned();
        for (key, label) in [
            ("images_per_s", "images_per_s"),
            ("first_batch_s", "first_batch"),
            ("peak_rss_anon_mb", "peak_rss_anon"),
        ] {
            let ratio = match (line[key].as_f64(), other.line[key].as_f64()) {
                (Some(z), Some(p)) if p > 0.0 => round3(z / p).into(),
                _ => serde_json::Value::Null,
            };
            line[format!("{label}_ratio_to_{name}")] = ratio;
        }
    }
    println!("{line}");
    Ok(())
}
