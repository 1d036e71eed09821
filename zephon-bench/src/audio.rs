//! `zephon-bench audio`: audio clips decoded, resampled, mixed to mono,
//! cropped at random and collated, beside a plain loop of the same decoder
//! and steps on every core.
//!
//! The clips are made here, in memory: `--clips` WAV files of 16-bit PCM
//! stereo at 44.1 kHz, `--seconds` long, each a tone of its own with some
//! noise. The pipeline is `decode_audio` (decode, resample to `--rate`,
//! mono, a random crop of one second) -> `batch` -> `collate_audio`, on
//! `--parallelism` workers; the plain loop runs the same decoder and steps
//! over the same bytes on as many threads, without a pipeline: the ceiling.
//! Prints one JSON line per system, Zephon's last with its ratio to the
//! loop, its peak anonymous memory and a `checksum` of the batch sequence
//! (the same at any parallelism).

use super::mem::PeakRss;
use super::stats::round3;
use super::tokens::{Run, keep};
use anyhow::{Result, ensure};
use std::time::Instant;
use zephon_cli::cmd::flags::{AT_LEAST_ONE, ranged};
use zephon_core::settings::{BATCH_SIZE, WORKERS};
use zephon_core::{Dataset, PipelineExt, Record, Runner, Value, WorkSource};
use zephon_media::{
    AudioCollateConfig, AudioCompose, AudioDecodeConfig, AudioOp, AudioPipelineExt, AudioSample,
    CropAudio, Remix, Resample,
};

/// Options of `zephon-bench audio`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Clips made (1 to 1,000,000).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub clips: u64,
    /// Length of each clip in seconds (1 to 60).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub seconds: u64,
    /// Sample rate the clips are resampled to (8,000 to 48,000 Hz).
    #[arg(long, default_value_t = 16_000, value_parser = clap::value_parser!(u32).range(8000..=48_000))]
    pub rate: u32,
    /// Clips per batch.
    #[arg(long, default_value_t = 32, value_parser = ranged::<usize>(BATCH_SIZE))]
    pub batch: usize,
    /// Seed of the order and the crops.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Worker threads and decodes in flight (default: the machine's cores).
    #[arg(long, value_parser = ranged::<usize>(WORKERS))]
    pub parallelism: Option<usize>,
    /// Rounds of each system, the best kept.
    #[arg(long, default_value_t = 1, value_parser = ranged::<usize>(AT_LEAST_ONE))]
    pub repeat: usize,
}

/// The rate the clips are made at.
const SOURCE_RATE: u32 = 44_100;

fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// Clip `i`: 16-bit stereo PCM WAV, a tone of its own plus a little noise.
fn wav(i: u64, seconds: u64) -> Vec<u8> {
    let frames = SOURCE_RATE as u64 * seconds;
    let data = (frames * 4) as u32;
    let mut out = b"RIFF".to_vec();
    out.extend((36 + data).to_le_bytes());
    out.extend(b"WAVEfmt \x10\0\0\0\x01\0\x02\0");
    out.extend(SOURCE_RATE.to_le_bytes());
    out.extend((SOURCE_RATE * 4).to_le_bytes());
    out.extend(b"\x04\0\x10\0data");
    out.extend(data.to_le_bytes());
    let hz = 110.0 + (i % 64) as f64 * 13.0;
    let mut noise = zephon_core::hash::key(&[i]);
    for f in 0..frames {
        let t = f as f64 / SOURCE_RATE as f64;
        noise = noise
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        let n = ((noise >> 33) as f64 / (1u64 << 31) as f64 - 0.5) * 0.05;
        let left = ((t * hz * std::f64::consts::TAU).sin() * 0.5 + n) * 32_767.0;
        let right = ((t * hz * 1.5 * std::f64::consts::TAU).sin() * 0.3 + n) * 32_767.0;
        out.extend((left as i16).to_le_bytes());
        out.extend((right as i16).to_le_bytes());
    }
    out
}

fn records(a: &Args) -> Vec<Record> {
    (0..a.clips)
        .map(|i| {
            Record::new()
                .with("wav", Value::Bytes(wav(i, a.seconds).into()))
                .with("cls", (i % 10) as i64)
        })
        .collect()
}

fn work(a: &Args, recs: &[Record]) -> Result<WorkSource> {
    let ds = Dataset::in_memory("audio", vec![recs.to_vec()])?;
    Ok(WorkSource::builder()
        .dataset(ds, 1.0)
        .seed(a.seed)
        .shuffle_within_shard(true)
        .build()?)
}

/// The steps after decoding, the same in the pipeline and the loop.
fn steps(a: &Args) -> AudioCompose {
    AudioCompose::new()
        .then(Resample::new(a.rate))
        .then(Remix::mono())
        .then(CropAudio::random(a.rate as usize, a.seed))
}

fn measure_self(a: &Args, recs: &[Record]) -> Result<Run> {
    let p = a.parallelism.unwrap_or_else(cores);
    let ws = work(a, recs)?;
    let peak = PeakRss::start();
    let start = Instant::now();
    let batches = ws
        .stream()
        .fetch(p)
        .decode_audio(AudioDecodeConfig::new("wav").then(steps(a)), p)
        .batch(a.batch)
        .collate_audio(AudioCollateConfig::new().label("cls"))
        .prefetch_batches(2)
        .into_blocking_iter(Runner::Threads { workers: p })?;
    let (mut clips, mut first, mut checksum) = (0usize, None, 0u64);
    for b in batches {
        let b = b?;
        first.get_or_insert_with(|| start.elapsed().as_secs_f64());
        clips += b.labels.len();
        checksum = zephon_core::hash::combine(checksum, b.digest());
    }
    let seconds = start.elapsed().as_secs_f64();
    let peak_anon = peak.stop().unwrap_or(0);
    ensure!(clips > 0, "no clips");
    Ok(Run {
        line: serde_json::json!({
            "system": "zephon",
            "clips": clips,
            "seconds": round3(seconds),
            "clips_per_s": round3(clips as f64 / seconds),
            "first_batch_s": round3(first.unwrap_or(seconds)),
            "parallelism": p,
            "checksum": format!("{checksum:016x}"),
        }),
        seconds,
        peak_anon,
    })
}

/// The ceiling: decode and the same steps over the records' bytes on
/// every core, no pipeline.
fn measure_raw(a: &Args, recs: &[Record]) -> Result<Run> {
    let ws = work(a, recs)?;
    let records: Vec<Record> = ws
        .stream()
        .fetch(cores())
        .into_blocking_iter(Runner::threads())?
        .collect::<zephon_core::Result<_>>()?;
    let (config, steps) = (AudioDecodeConfig::new("wav"), steps(a));
    let threads = a.parallelism.unwrap_or_else(cores);
    let peak = PeakRss::start();
    let start = Instant::now();
    let done = super::on_threads(&records, threads, |r| {
        let Some(Value::Bytes(bytes)) = r.get("wav") else {
            anyhow::bail!("a clip without `wav` bytes");
        };
        let audio = config.decode(bytes).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        std::hint::black_box(steps.apply(AudioSample::new(audio, r.clone()))?);
        Ok(())
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let peak_anon = peak.stop().unwrap_or(0);
    Ok(Run {
        line: serde_json::json!({
            "system": "raw",
            "clips": done,
            "seconds": round3(seconds),
            "clips_per_s": round3(done as f64 / seconds),
        }),
        seconds,
        peak_anon,
    })
}

/// Runs the benchmark and prints the loop's line, then Zephon's.
pub fn run(a: Args) -> Result<()> {
    let recs = records(&a);
    let (mut best, mut raw) = (None, None);
    for _ in 0..a.repeat {
        keep(&mut best, measure_self(&a, &recs)?);
        keep(&mut raw, measure_raw(&a, &recs)?);
    }
    let raw = raw.expect("at least one round");
    let mut line = best.expect("at least one round").line;
    println!("{}", raw.line);
    let ratio = match (
        line["clips_per_s"].as_f64(),
        raw.line["clips_per_s"].as_f64(),
    ) {
        (Some(z), Some(r)) if r > 0.0 => round3(z / r).into(),
        _ => serde_json::Value::Null,
    };
    line["clips_per_s_ratio_to_raw"] = ratio;
    println!("{line}");
    Ok(())
}
