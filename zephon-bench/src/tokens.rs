//! `zephon-bench tokens`: workload W2 of the side-by-side benchmark,
//! pre-tokenized reads.
//!
//! A flat token file (nanoGPT's `train.bin` layout) cut into non-overlapping
//! windows of `--seq-len + 1` tokens (inputs and the shifted label), the
//! remainder dropped; one pass in a seeded global random order (the work
//! source's global block shuffle); batches of `--batch` windows, each handed
//! to the consumer as one row-major array (`u32`, like the peers, or `u16`).
//! The file is memory-mapped, never copied.
//!
//! Prints one JSON line with the keys of `peers_w2.py` and the peak
//! anonymous memory of the process (`RssAnon`, sampled). Each `--peer`
//! command (a peer of `peers_w2.py`, given the same file and options) runs
//! in the same invocation, alternating with Zephon, its JSON line printed
//! with its own peak anonymous memory; Zephon's line then carries its
//! throughput and time to first batch as ratios to each peer.

use super::mem::PeakRss;
use super::stats::round3;
use anyhow::{Context, Result, bail, ensure};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use zephon_cli::cmd::flags::{AT_LEAST_ONE, ranged};
use zephon_core::record::{TokenWidth, Tokens};
use zephon_core::settings::{BATCH_SIZE, BUFFER_SIZE, SEQ_LEN, WORKERS};
use zephon_core::{BlockShuffle, Dataset, PipelineExt, Runner, WorkSource};
use zephon_storage::FormatShard;
use zephon_storage::PrefetchExt;
use zephon_storage::format::tokens::TOKENS_FIELD;
use zephon_storage::format::{FormatSpec, TokenDtype};
use zephon_storage::options::BLOCK_BYTES;
use zephon_storage::options::{RANGE_CONCURRENCY, RANGE_GAP, RANGE_PARTS};

/// Options of `zephon-bench tokens`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The flat token file.
    #[arg(long)]
    pub file: PathBuf,
    /// Tokens per input row; windows are one longer (the shifted label).
    #[arg(long, default_value_t = 2048, value_parser = ranged::<u64>(INPUT_LEN))]
    pub seq_len: u64,
    /// Windows per batch.
    #[arg(long, default_value_t = 8, value_parser = ranged::<usize>(BATCH_SIZE))]
    pub batch: usize,
    /// Seed of the global shuffle.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Token width stored in the file (u8, u16, u32, i32, i64).
    #[arg(long, default_value = "u16")]
    pub dtype: String,
    /// Element type of the arrays handed to the consumer (u32 or u16).
    #[arg(long, default_value = "u32")]
    pub collate: String,
    /// Parallel reads (0: one per core).
    #[arg(long, default_value_t = 0, value_parser = ranged::<usize>(WORKERS))]
    pub parallelism: usize,
    /// Most windows one read request carries (fetch's group size). Smaller
    /// than fetch's default (256): 8 KB windows make a 256-window group
    /// 2 MB of records per request in flight; at 64, measured beside 256 on
    /// 1 GB and 10 GB files, throughput was no lower, peak anonymous memory
    /// about 4 MB lower, and the first batch sooner when the file is not in
    /// the page cache.
    #[arg(long, default_value_t = 64, value_parser = ranged::<usize>(BATCH_SIZE))]
    pub max_group: usize,
    /// Rounds; the fastest run of each system is reported, memory is the
    /// largest peak of any round.
    #[arg(long, default_value_t = 1, value_parser = ranged::<usize>(AT_LEAST_ONE))]
    pub repeat: usize,
    /// Order of the pass: `global` (a global shuffle, the default) or
    /// `block` (the work source's block shuffle: blocks of `--block-size`
    /// neighbouring windows, each permuted, shard order kept).
    #[arg(long, default_value = "global")]
    pub shuffle: String,
    /// Windows per block of `--shuffle block`.
    #[arg(long, default_value_t = 1024, value_parser = ranged::<u64>(BUFFER_SIZE))]
    pub block_size: u64,
    /// Also read the same token file from this remote dataset (`s3://`,
    /// `http(s)://`; a folder holding the file, with an `index.json` for
    /// HTTP), reported as ratios to the local run of the same round:
    /// `--shuffle global` by byte ranges, `--shuffle block` through the
    /// block cache, cold (a fresh cache) and warm (the same cache again).
    #[arg(long, conflicts_with = "serve")]
    pub uri: Option<String>,
    /// Serve the file from a server started on 127.0.0.1 and read it
    /// remotely as `--uri` does: `http` (nginx), `s3` (moto_server) or
    /// `s3s` (s3s-fs, an S3 server that reads ranges from its files).
    #[arg(long)]
    pub serve: Option<String>,
    /// Directives of the `http` block of the nginx that `--serve http`
    /// starts. nginx writes each part of a multi-range answer with a
    /// system call of its own; `sendfile off; output_buffers 32 8k;
    /// postpone_output 65536;` has it write them 64 KB at a time; with
    /// Debian's `sendfile on; tcp_nopush on;` the parts of a multi-range
    /// answer wait on the socket (the guide's byte-range section says why).
    #[arg(long, default_value = super::servers::NGINX_HTTP, value_parser = super::servers::nginx_directives)]
    pub nginx_http: String,
    /// S3 endpoint of `--uri s3://...` (default: the environment's).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Byte-range requests one read keeps in flight (storage's
    /// `range_concurrency`).
    #[arg(long, default_value_t = 32, value_parser = ranged::<usize>(RANGE_CONCURRENCY))]
    pub range_concurrency: usize,
    /// Largest gap in bytes one byte-range request spans where a request
    /// carries one range (storage's `range_gap`: S3, `--range-parts 1`).
    #[arg(long, default_value_t = 256 << 10, value_parser = ranged::<u64>(RANGE_GAP))]
    pub range_gap: u64,
    /// Largest gap in bytes one span of a multi-range HTTP request covers
    /// (storage's `range_part_gap`).
    #[arg(long, default_value_t = 4 << 10, value_parser = ranged::<u64>(RANGE_GAP))]
    pub range_part_gap: u64,
    /// Most spans one HTTP byte-range request asks for (storage's
    /// `range_parts`; 1: a request per span).
    #[arg(long, default_value_t = 256, value_parser = ranged::<usize>(RANGE_PARTS))]
    pub range_parts: usize,
    /// A peer command run on the same data in the same invocation, as a
    /// shell command line (e.g. `python3 peers_w2.py plain FILE`); it must
    /// print one JSON line with `system`, `tokens_per_s` and `first_batch_s`.
    #[arg(long)]
    pub peer: Vec<String>,
    /// Pointers looked ahead to warm the block cache (storage's `prefetch`,
    /// 4 warm-ups at once) in the remote passes of `--shuffle block` (with
    /// `--uri` or `--serve`; the local file has nothing to warm); 0: none.
    #[arg(long, default_value_t = 2048, value_parser = ranged::<usize>(PREFETCH))]
    pub prefetch: usize,
    /// Bytes per block of the block cache in the remote passes of
    /// `--shuffle block` (storage's `cache.block_bytes`: 64 KiB to 256 MiB).
    /// A server that copies the whole object for each ranged GET (moto)
    /// costs a full copy per block: larger blocks, fewer copies.
    #[arg(long, default_value_t = 4 << 20, value_parser = ranged::<u64>(BLOCK_BYTES))]
    pub cache_block_bytes: u64,
    /// Internal: run one pass in this process and print its figures
    /// (`local`; with `--uri`, `ranges` or `cache`), so that each pass's
    /// peak memory is its own.
    #[arg(long, hide = true)]
    pub child: Option<String>,
    /// Internal: the cache folder of a `--child cache` pass.
    #[arg(long, hide = true)]
    pub cache_dir: Option<PathBuf>,
}

/// One run of one system, as the peers print it.
#[derive(Clone, Debug)]
pub(super) struct Run {
    pub(super) line: serde_json::Value,
    pub(super) seconds: f64,
    pub(super) peak_anon: u64,
}

/// Runs the benchmark and prints one JSON line per system.
pub fn run(a: Args) -> Result<()> {
    let dtype = TokenDtype::parse(&a.dtype)
        .ok_or_else(|| anyhow::anyhow!("--dtype: unknown token type `{}`", a.dtype))?;
    let wide = match a.collate.as_str() {
        "u32" => true,
        "u16" => false,
        other => bail!("--collate: `{other}` is neither u32 nor u16"),
    };
    if let Some(kind) = &a.child {
        return super::tokens_remote::child(&a, dtype, wide, kind);
    }
    if a.uri.is_some() || a.serve.is_some() {
        return super::tokens_remote::run(&a, dtype);
    }
    let mut best: Option<Run> = None;
    let mut peers: Vec<Option<Run>> = vec![None; a.peer.len()];
    for round in 0..a.repeat.max(1) {
        // Alternate who goes first, so neither always meets a warmer cache.
        let zephon_first = round % 2 == 0;
        if zephon_first {
            keep(&mut best, measure_self(&a, dtype, wide)?);
        }
        for (p, slot) in a.peer.iter().zip(peers.iter_mut()) {
            keep(slot, measure_peer(p)?);
        }
        if !zephon_first {
            keep(&mut best, measure_self(&a, dtype, wide)?);
        }
    }
    let mut line = best.expect("at least one round").line;
    for peer in peers.into_iter().flatten() {
        println!("{}", peer.line);
        let name = peer.line["system"].as_str().unwrap_or("peer").to_owned();
        for (key, label) in [
            ("tokens_per_s", "tokens_per_s"),
            ("first_batch_s", "first_batch"),
            ("peak_rss_anon_mb", "peak_rss_anon"),
        ] {
            let ratio = match (line[key].as_f64(), peer.line[key].as_f64()) {
                (Some(z), Some(p)) if p > 0.0 => round3(z / p).into(),
                _ => serde_json::Value::Null,
            };
            line[format!("{label}_ratio_to_{name}")] = ratio;
        }
    }
    println!("{line}");
    Ok(())
}

/// Keeps the faster run, and the larger memory peak of the two.
pub(super) fn keep(slot: &mut Option<Run>, run: Run) {
    let peak = slot.as_ref().map_or(0, |s| s.peak_anon).max(run.peak_anon);
    let mut kept = match slot.take() {
        Some(s) if s.seconds <= run.seconds => s,
        _ => run,
    };
    kept.peak_anon = peak;
    kept.line["peak_rss_anon_mb"] = mb(peak).into();
    *slot = Some(kept);
}

/// Where a pass reads the token file from.
#[derive(Clone, Debug)]
pub(super) enum Source {
    /// The file, memory-mapped.
    Local,
    /// A remote dataset holding it, opened with these options.
    Remote {
        uri: String,
        opts: Box<zephon_storage::StorageOptions>,
    },
}

/// One pass of the workload through a Zephon pipeline, in this process.
fn measure_self(a: &Args, dtype: TokenDtype, wide: bool) -> Result<Run> {
    measure_from(a, dtype, wide, &Source::Local, 0)
}

/// Allowed values of `--seq-len`: its windows, one token longer, lie in
/// [`SEQ_LEN`].
const INPUT_LEN: zephon_core::settings::Range =
    zephon_core::settings::Range::new(1, SEQ_LEN.max - 1, "a window is one token longer");

/// Allowed values of `--prefetch`: storage's `prefetch` buffer, or 0.
const PREFETCH: zephon_core::settings::Range =
    zephon_core::settings::Range::new(0, 1 << 24, "pointers held ahead; 0: no prefetch stage");

/// Warm-ups one `prefetch` keeps in flight.
const PREFETCH_PARALLELISM: usize = 4;

/// One pass of the workload, reading from `source`, with `prefetch`
/// pointers looked ahead (0: no prefetch stage).
pub(super) fn measure_from(
    a: &Args,
    dtype: TokenDtype,
    wide: bool,
    source: &Source,
    prefetch: usize,
) -> Result<Run> {
    let sampler = PeakRss::start();
    let cores = zephon_core::runner::num_cpus();
    let k = if a.parallelism == 0 {
        cores
    } else {
        a.parallelism
    };
    let width = a.seq_len + 1;
    let start = Instant::now();
    let spec = FormatSpec::Tokens {
        dtype,
        seq_len: width,
    };
    let ds = match source {
        Source::Local => {
            let shard = FormatShard::open_local("w2", spec, &a.file, None)?;
            Dataset::new("w2", a.file.display().to_string(), vec![Arc::new(shard)])?
        }
        Source::Remote { uri, opts } => {
            let mut opts = (**opts).clone();
            opts.format = opts.format.seq_len(width).dtype(dtype);
            zephon_storage::RemoteDataset::open("w2", uri, &opts)?
                .dataset()
                .clone()
        }
    };
    let ws = WorkSource::builder().dataset(ds, 1.0).seed(a.seed);
    let ws = match a.shuffle.as_str() {
        "global" => ws.shuffle_block_size(BlockShuffle::Global),
        "block" => ws
            .shuffle_within_shard(false)
            .shuffle_block_size(BlockShuffle::Size(a.block_size)),
        other => bail!("--shuffle: `{other}` is neither global nor block"),
    };
    let ws = ws.canonical_lanes(1).build()?;
    let runner = Runner::Threads { workers: k };
    let batches = if prefetch > 0 {
        ws.stream()
            .prefetch(prefetch, PREFETCH_PARALLELISM)
            .fetch(k)
            .max_group(a.max_group)
            .batch_with(a.batch, true)
            .prefetch_batches(4)
            .into_blocking_iter(runner)?
    } else {
        ws.stream()
            .fetch(k)
            .max_group(a.max_group)
            .batch_with(a.batch, true)
            .prefetch_batches(4)
            .into_blocking_iter(runner)?
    };
    let rows = a.batch * width as usize;
    let (mut first, mut n_batches, mut samples) = (None, 0u64, 0u64);
    for b in batches {
        let b = b?;
        // The consumer's array, as `np.stack` makes it for the peers.
        // Samples are views of the file in its stored width: this is the
        // one copy, straight into the array's element type.
        if wide {
            let mut array: Vec<u32> = vec![0; rows];
            for (r, out) in b.items.iter().zip(array.chunks_exact_mut(width as usize)) {
                window(r, width)?.copy_into(out, |t| t);
            }
            std::hint::black_box(&array);
        } else {
            let mut array: Vec<u16> = vec![0; rows];
            for (r, out) in b.items.iter().zip(array.chunks_exact_mut(width as usize)) {
                let t = window(r, width)?;
                if t.width() == TokenWidth::U16 {
                    t.copy_into(out, |t| t as u16);
                    continue;
                }
                for (o, t) in out.iter_mut().zip(t) {
                    *o = u16::try_from(t).with_context(|| {
                        format!("token id {t} does not fit the u16 array (--collate u32)")
                    })?;
                }
            }
            std::hint::black_box(&array);
        }
        first.get_or_insert_with(|| start.elapsed().as_secs_f64());
        n_batches += 1;
        samples += b.items.len() as u64;
    }
    let seconds = start.elapsed().as_secs_f64();
    let peak_anon = sampler.stop().unwrap_or(0);
    ensure!(
        n_batches > 0,
        "{}: fewer than {} windows of {width} tokens, not one batch",
        a.file.display(),
        a.batch
    );
    let tokens = samples * width;
    let line = serde_json::json!({
        "system": "zephon",
        "batches": n_batches,
        "samples": samples,
        "tokens": tokens,
        "seconds": round3(seconds),
        "tokens_per_s": (tokens as f64 / seconds).round(),
        "samples_per_s": (samples as f64 / seconds).round(),
        "first_batch_s": round3(first.unwrap_or(0.0)),
        "peak_rss_anon_mb": mb(peak_anon),
        "parallelism": k,
        "max_group": a.max_group,
        "collate": if wide { "u32" } else { "u16" },
        "shuffle": a.shuffle,
        "prefetch": prefetch,
    });
    Ok(Run {
        line,
        seconds,
        peak_anon,
    })
}

fn window(r: &zephon_core::Record, width: u64) -> Result<Tokens<'_>> {
    let t = r
        .token_ids(TOKENS_FIELD)
        .context("a token sample without its tokens")?;
    ensure!(
        t.len() as u64 == width,
        "a window of {} tokens, not {width}",
        t.len()
    );
    Ok(t)
}

/// Runs one peer command through `sh -c`, sampling its anonymous memory.
pub(super) fn measure_peer(cmd: &str) -> Result<Run> {
    let child = std::process::Command::new("sh")
        .args(["-c", &format!("exec {cmd}")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting peer `{cmd}`"))?;
    let sampler = PeakRss::of_tree(child.id());
    let out = child
        .wait_with_output()
        .with_context(|| format!("running peer `{cmd}`"))?;
    let peak_anon = sampler.stop().unwrap_or(0);
    ensure!(out.status.success(), "peer `{cmd}` failed: {}", out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .with_context(|| format!("peer `{cmd}` printed no JSON line: {stdout}"))?;
    let mut line: serde_json::Value =
        serde_json::from_str(last).with_context(|| format!("peer `{cmd}` printed {last}"))?;
    let seconds = line["seconds"]
        .as_f64()
        .with_context(|| format!("peer `{cmd}`: no `seconds` in {last}"))?;
    line["peak_rss_anon_mb"] = mb(peak_anon).into();
    Ok(Run {
        line,
        seconds,
        peak_anon,
    })
}

/// Bytes as decimal megabytes, rounded for JSON output.
pub(super) fn mb(bytes: u64) -> f64 {
    round3(bytes as f64 / 1e6)
}
