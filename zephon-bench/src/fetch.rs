//! `zephon-bench fetch`: reading one dataset from local disk and from S3
//! (cold cache with and without prefetch, warm cache, byte ranges, and byte
//! ranges with fetch reading windows across shards) and HTTP (cold cache
//! with prefetch, both byte-range passes), reported as ratios to local
//! disk measured in the same run. "Cold" is the client's cache only: the servers run through all rounds. The local files come
//! from the disk where the page cache may be dropped (root, and permitted),
//! else from the page cache; the row says which.

use super::servers::{
    NGINX_HTTP, Server, put_files, s3_opts, start_moto, start_nginx, start_s3s, tree_cpu_time,
    upload,
};
use super::{mem, stats};
use anyhow::{Result, bail};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use zephon_cli::cmd::flags::{AT_LEAST_ONE, GENERATED_RECORDS, GENERATED_SHARDS, ranged};
use zephon_core::settings::{BATCH_SIZE, BUFFER_SIZE, PARALLELISM};
use zephon_core::{Dataset, PipelineExt, Runner, WorkSource};
use zephon_storage::backend::{Backend, runtime};
use zephon_storage::{CacheOptions, DatasetExt, PrefetchExt, RemoteDataset, StorageOptions};

/// Options of `zephon-bench fetch`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Shards in the generated dataset.
    #[arg(long, default_value_t = 16, value_parser = ranged::<usize>(GENERATED_SHARDS))]
    pub shards: usize,
    /// Records per shard.
    #[arg(long, default_value_t = 20_000, value_parser = ranged::<usize>(GENERATED_RECORDS))]
    pub records: usize,
    /// Batch size.
    #[arg(long, default_value_t = 32, value_parser = ranged::<usize>(BATCH_SIZE))]
    pub batch: usize,
    /// Read parallelism of `fetch`.
    #[arg(long, default_value_t = 8, value_parser = ranged::<usize>(PARALLELISM))]
    pub parallelism: usize,
    /// Pointers `prefetch` looks ahead.
    #[arg(long, default_value_t = 65_536, value_parser = ranged::<usize>(BUFFER_SIZE))]
    pub prefetch_buffer: usize,
    /// Concurrent shard downloads of `prefetch`.
    #[arg(long, default_value_t = 4, value_parser = ranged::<usize>(PARALLELISM))]
    pub prefetch_parallelism: usize,
    /// Rounds; each configuration reports its best (a cold pass gets a
    /// fresh cache every round).
    #[arg(long, default_value_t = 3, value_parser = ranged::<usize>(AT_LEAST_ONE))]
    pub repeat: usize,
    /// Print one JSON object (the same figures as the table) instead of
    /// the table.
    #[arg(long)]
    pub json: bool,
    /// S3 endpoint to use; without it the server `--s3-server` names is
    /// started on 127.0.0.1.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// The S3 server started without `--endpoint`: `moto` (moto_server,
    /// which copies the whole object for every ranged GET, so its byte-range
    /// rows measure the server) or `s3s` (s3s-fs, which reads a range from
    /// the object's file: `cargo install s3s-fs --features binary`).
    #[arg(long, value_enum, default_value_t = S3Server::Moto)]
    pub s3_server: S3Server,
}

/// An S3 server `zephon-bench fetch` can start, as `--s3-server` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum S3Server {
    /// moto_server (PyPI `moto[server]`), objects kept in its memory.
    Moto,
    /// s3s-fs, objects kept as files.
    S3s,
}

/// The S3 server of the run, as the JSON output names it and as the table
/// describes it.
fn s3_server(args: &Args) -> (&'static str, &'static str) {
    match (&args.endpoint, args.s3_server) {
        (Some(_), _) => ("endpoint", "the given --endpoint"),
        (None, S3Server::Moto) => (
            "moto",
            "moto_server, objects in its memory, the whole object copied for every ranged GET",
        ),
        (None, S3Server::S3s) => (
            "s3s",
            "s3s-fs, objects in files, a ranged GET reads its range",
        ),
    }
}

struct Run {
    first_batch: Duration,
    total: Duration,
    records: usize,
    /// CPU the server process used during the pass: on loopback it shares
    /// the machine's cores with the pipeline, unlike a real object store.
    server_cpu: Option<Duration>,
    /// Peak RssAnon of this process during the pass (the cache's memory tier
    /// is part of it).
    peak: Option<u64>,
}

/// How a pass reads: fetch alone, behind shard prefetch, or fetch with
/// windows across shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Plain,
    Prefetch,
    Windows,
}

/// Times one pass from opening the dataset (reading its manifest, for a
/// remote one over the network) to the last batch; returns what `open`
/// made, so a later pass can reuse its cache.
fn time_pass<T>(
    label: &str,
    open: impl FnOnce() -> Result<T>,
    dataset: impl Fn(&T) -> Dataset,
    args: &Args,
    mode: Mode,
    server: Option<u32>,
) -> Result<(Run, T)> {
    eprintln!("running: {label}");
    let cpu_before = server.and_then(tree_cpu_time);
    let sampler = mem::PeakRss::start();
    let started = Instant::now();
    let opened = open()?;
    let ws = WorkSource::builder()
        .dataset(dataset(&opened), 1.0)
        .seed(1)
        .build()?;
    let it = if mode == Mode::Prefetch {
        let s = ws
            .stream()
            .prefetch(args.prefetch_buffer, args.prefetch_parallelism);
        s.fetch(args.parallelism)
            .batch(args.batch)
            .into_blocking_iter(Runner::threads())?
    } else {
        ws.stream()
            .fetch(args.parallelism)
            .across_shards(mode == Mode::Windows)
            .batch(args.batch)
            .into_blocking_iter(Runner::threads())?
    };
    let (mut first, mut records) = (None, 0);
    for b in it {
        records += b?.len();
        first.get_or_insert_with(|| started.elapsed());
    }
    let total = started.elapsed();
    let expected = args.shards * args.records;
    if records != expected {
        bail!("{label}: {records} records delivered of {expected}");
    }
    let run = Run {
        first_batch: first.unwrap_or_default(),
        total,
        records,
        server_cpu: cpu_before
            .zip(server.and_then(tree_cpu_time))
            .map(|(a, b)| b.saturating_sub(a)),
        peak: sampler.stop(),
    };
    Ok((run, opened))
}

/// Asks the kernel to drop clean page-cache pages, so the next read of the
/// dataset's files comes from the disk; `false` where this process may not
/// (not root, or a container that forbids it), and the files stay cached.
fn drop_page_cache() -> bool {
    // Written pages become clean only once on disk: flush them first.
    Command::new("sync").status().is_ok_and(|s| s.success())
        && std::fs::write("/proc/sys/vm/drop_caches", "1").is_ok()
}

fn write_dataset(dir: &Path, args: &Args) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    for s in 0..args.shards {
        let mut text = String::new();
        for i in 0..args.records {
            text.push_str(&format!(
                "{{\"id\":{},\"text\":\"{} {}\"}}\n",
                s * args.records + i,
                "lorem ipsum dolor sit amet ".repeat(6),
                i
            ));
        }
        std::fs::write(dir.join(format!("{s:04}.jsonl")), text)?;
    }
    let b = Backend::open(
        "bench",
        &dir.display().to_string(),
        &StorageOptions::default(),
    )?;
    runtime::block_on(zephon_storage::scan::build_index(&b, "bench"))?;
    Ok(())
}

/// Runs the benchmark and prints one line per configuration.
pub fn run(args: Args) -> Result<()> {
    for (name, v) in [
        ("--shards", args.shards),
        ("--records", args.records),
        ("--batch", args.batch),
        ("--parallelism", args.parallelism),
    ] {
        if v == 0 {
            bail!("{name} must be at least 1");
        }
    }
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    write_dataset(&data, &args)?;
    let (s3, endpoint, uri) = match (&args.endpoint, args.s3_server) {
        (Some(e), _) => (None, e.clone(), upload(e, &data)?),
        (None, S3Server::Moto) => {
            let (server, e) = start_moto()?;
            let uri = upload(&e, &data)?;
            (Some(server), e, uri)
        }
        (None, S3Server::S3s) => {
            let (server, e, bucket) = start_s3s(&tmp.path().join("s3s"))?;
            let uri = put_files(&e, &bucket, &data)?;
            (Some(server), e, uri)
        }
    };
    // The disk tier holds one file per block of its capacity, opened at
    // start: sized to the dataset (with room to spare), not to a training
    // run, so that a fresh cache per round does not run out of descriptors.
    let data_bytes: u64 = std::fs::read_dir(&data)?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    let disk_bytes = (4 * data_bytes).max(256 << 20);
    let cache_in = |base: StorageOptions, name: &str| {
        base.cache(
            CacheOptions::default()
                .root(tmp.path().join(name))
                .limit_bytes(disk_bytes)
                .memory_bytes(2 << 30),
        )
    };
    let cache = |name: &str| cache_in(s3_opts(&endpoint), name);
    let s3_pid = s3.as_ref().map(Server::pid);
    let mut prefetch_stats = None;
    let nginx = start_nginx(&tmp.path().join("nginx"), &data, NGINX_HTTP)?;
    let mut rows: Vec<(String, Run)> = Vec::new();
    // Keeps, per configuration, the round with the best total: all its
    // figures (first batch, server CPU, memory) come from that same pass.
    let mut keep = |label: String, run: Run| match rows.iter_mut().find(|(l, _)| *l == label) {
        Some((_, best)) => {
            if run.total < best.total {
                *best = run;
            }
        }
        None => rows.push((label, run)),
    };
    let remote = |opts: StorageOptions, at: &str| {
        let at = at.to_owned();
        move || Ok(RemoteDataset::open("bench", &at, &opts)?)
    };
    let ds_of = |r: &RemoteDataset| r.dataset().clone();
    // Whether every local pass read from the disk; one refusal labels the
    // row as read from the page cache.
    let mut dropped_for_local = true;
    let mut dropped_for_http = true;
    for round in 0..args.repeat.max(1) {
        let fresh = |name: &str| format!("{name}-{round}");
        dropped_for_local &= drop_page_cache();
        let (run, _) = time_pass(
            "local disk",
            || Ok(Dataset::from_path("bench", &data)?),
            Dataset::clone,
            &args,
            Mode::Plain,
            None,
        )?;
        keep("local disk".into(), run);
        let label = "s3, cold cache";
        let (run, _) = time_pass(
            label,
            remote(cache(&fresh("cold")), &uri),
            ds_of,
            &args,
            Mode::Plain,
            s3_pid,
        )?;
        keep(label.into(), run);
        let label = "s3, cold cache, prefetch";
        let (run, pre) = time_pass(
            label,
            remote(cache(&fresh("prefetch")), &uri),
            ds_of,
            &args,
            Mode::Prefetch,
            s3_pid,
        )?;
        keep(label.into(), run);
        let label = "s3, warm cache";
        let (run, _) = time_pass(
            label,
            || Ok(pre.dataset().clone()),
            Dataset::clone,
            &args,
            Mode::Plain,
            s3_pid,
        )?;
        keep(label.into(), run);
        if round == 0 {
            prefetch_stats = Some((pre.cache_stats(), pre.backend_stats().retries));
        }
        drop(pre);
        // The same cold pass from a server in C: how fast the client side
        // goes when the server is not the limit.
        if let Some((server, http)) = &nginx {
            dropped_for_http &= drop_page_cache();
            let opts = cache_in(StorageOptions::default(), &fresh("http"));
            let label = "http, cold cache, prefetch";
            let (run, _) = time_pass(
                label,
                remote(opts, http),
                ds_of,
                &args,
                Mode::Prefetch,
                Some(server.pid()),
            )?;
            keep(label.into(), run);
        }
    }
    // Byte ranges once: one request per cluster of samples makes this pass
    // long, and it has no target.
    let label = "s3, byte ranges";
    let (run, _) = time_pass(
        label,
        remote(cache("range").byte_range(true), &uri),
        ds_of,
        &args,
        Mode::Plain,
        s3_pid,
    )?;
    keep(label.into(), run);
    // The same, fetch reading windows of upcoming samples across shards:
    // each read sees more of its shard, so more neighbours share requests.
    let label = "s3, byte ranges, windows across shards";
    let (run, _) = time_pass(
        label,
        remote(cache("range-windows").byte_range(true), &uri),
        ds_of,
        &args,
        Mode::Windows,
        s3_pid,
    )?;
    keep(label.into(), run);
    // Both again from nginx, which serves a range from the file at little
    // cost: the S3 servers here spend more on a ranged GET than the reader
    // does, so these rows are the reader's own pace.
    if let Some((server, http)) = &nginx {
        for (label, mode, cache_dir) in [
            ("http, byte ranges", Mode::Plain, "http-range"),
            (
                "http, byte ranges, windows across shards",
                Mode::Windows,
                "http-range-windows",
            ),
        ] {
            let opts = cache_in(StorageOptions::default(), cache_dir).byte_range(true);
            let (run, _) = time_pass(
                label,
                remote(opts, http),
                ds_of,
                &args,
                mode,
                Some(server.pid()),
            )?;
            keep(label.into(), run);
        }
    }
    // Say what was cold: the labels name where the bytes came from.
    let page_cache = |dropped: bool| {
        if dropped {
            " (page cache dropped)"
        } else {
            " (files in page cache)"
        }
    };
    for (label, _) in rows.iter_mut() {
        if label == "local disk" {
            label.push_str(page_cache(dropped_for_local));
        } else if label.starts_with("http, cold") {
            label.push_str(page_cache(dropped_for_http));
        }
    }
    let base = &rows[0].1;
    let (base_rate, base_first) = (
        base.records as f64 / base.total.as_secs_f64(),
        base.first_batch.as_secs_f64(),
    );
    if args.json {
        let rows: Vec<serde_json::Value> = rows
            .iter()
            .map(|(label, r)| {
                let rate = r.records as f64 / r.total.as_secs_f64();
                let first = r.first_batch.as_secs_f64();
                serde_json::json!({
                    "configuration": label,
                    "records_per_s": rate.round(),
                    "ratio_to_local": stats::round3(rate / base_rate),
                    "first_batch_ms": stats::round3(first * 1e3),
                    "first_batch_ratio_to_local": stats::round3(first / base_first.max(1e-9)),
                    "peak_rss_anon_mib": mem::mib_json(r.peak),
                    "server_cpu_per_wall": r.server_cpu
                        .map(|c| stats::round3(c.as_secs_f64() / r.total.as_secs_f64())),
                })
            })
            .collect();
        let out = serde_json::json!({
            "bench": "fetch",
            "shards": args.shards,
            "records_per_shard": args.records,
            "rounds": args.repeat.max(1),
            "s3_server": s3_server(&args).0,
            "rows": rows,
        });
        println!("{out}");
        return Ok(());
    }
    println!(
        "{} shards x {} records, batch {}, fetch parallelism {}, prefetch {} pointers / {} downloads; \
         each row is its best round of {} (all its figures from that round); times include opening the dataset",
        args.shards,
        args.records,
        args.batch,
        args.parallelism,
        args.prefetch_buffer,
        args.prefetch_parallelism,
        args.repeat.max(1)
    );
    println!(
        "cold: a fresh client cache each round; the servers start once and serve every round; s3: {}",
        s3_server(&args).1
    );
    println!(
        "{:<48} {:>12} {:>9} {:>16} {:>9} {:>10} {:>18}",
        "configuration",
        "records/s",
        "vs local",
        "first batch (ms)",
        "vs local",
        "peak MiB",
        "server CPU / wall"
    );
    for (label, r) in &rows {
        let rate = r.records as f64 / r.total.as_secs_f64();
        let first = r.first_batch.as_secs_f64();
        let server = r.server_cpu.map_or(String::from("-"), |c| {
            format!("{:.2}", c.as_secs_f64() / r.total.as_secs_f64())
        });
        println!(
            "{label:<48} {rate:>12.0} {:>8.2}x {:>16.1} {:>8.2}x {:>10} {server:>18}",
            rate / base_rate,
            first * 1e3,
            first / base_first.max(1e-9),
            mem::mib(r.peak),
        );
    }
    if let Some((s, retries)) = prefetch_stats {
        println!(
            "cache (first s3 prefetch run): {} misses, {} hits, {} bytes downloaded in {:.2} s of downloads, retries {retries}",
            s.misses,
            s.hits,
            s.bytes_downloaded,
            s.download_time.as_secs_f64(),
        );
    }
    println!(
        "server CPU / wall: CPU seconds the local server process used per second of the pass \
         (on loopback it competes with the pipeline for the same cores); \
         peak MiB: this process's RssAnon during the pass (the cache's memory tier included)"
    );
    Ok(())
}
