//! `zephon bench fetch`: reading one dataset from local disk and from S3
//! (cold cache with and without prefetch, warm cache, byte ranges), reported
//! as ratios to local disk measured in the same run.

use anyhow::{Context, Result, bail};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use zephon_core::{Dataset, PipelineExt, Runner, WorkSource};
use zephon_storage::backend::{Backend, runtime};
use zephon_storage::{CacheOptions, DatasetExt, PrefetchExt, RemoteDataset, StorageOptions};

/// Options of `zephon bench fetch`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Shards in the generated dataset.
    #[arg(long, default_value_t = 16)]
    pub shards: usize,
    /// Records per shard.
    #[arg(long, default_value_t = 20_000)]
    pub records: usize,
    /// Batch size.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Read parallelism of `fetch`.
    #[arg(long, default_value_t = 8)]
    pub parallelism: usize,
    /// Pointers `prefetch` looks ahead.
    #[arg(long, default_value_t = 65_536)]
    pub prefetch_buffer: usize,
    /// Concurrent shard downloads of `prefetch`.
    #[arg(long, default_value_t = 4)]
    pub prefetch_parallelism: usize,
    /// S3 endpoint to use; without it a `moto_server` is started on 127.0.0.1.
    #[arg(long)]
    pub endpoint: Option<String>,
}

struct Run {
    first_batch: Duration,
    total: Duration,
    records: usize,
}

fn time_pass(label: &str, ds: Dataset, args: &Args, prefetch: bool) -> Result<Run> {
    eprintln!("running: {label}");
    let ws = WorkSource::builder().dataset(ds, 1.0).seed(1).build()?;
    let started = Instant::now();
    let it = if prefetch {
        let s = ws
            .stream()
            .prefetch(args.prefetch_buffer, args.prefetch_parallelism);
        s.fetch(args.parallelism)
            .batch(args.batch)
            .into_blocking_iter(Runner::threads())?
    } else {
        ws.stream()
            .fetch(args.parallelism)
            .batch(args.batch)
            .into_blocking_iter(Runner::threads())?
    };
    let (mut first, mut records) = (None, 0);
    for b in it {
        records += b?.len();
        first.get_or_insert_with(|| started.elapsed());
    }
    Ok(Run {
        first_batch: first.unwrap_or_default(),
        total: started.elapsed(),
        records,
    })
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

struct Moto(Child);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_moto() -> Result<(Moto, String)> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let child = Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start moto_server (pip install 'moto[server]'), or pass --endpoint")?;
    let moto = Moto(child);
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if started.elapsed() > Duration::from_secs(20) {
            bail!("moto_server did not listen on port {port}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok((moto, format!("http://127.0.0.1:{port}")))
}

fn upload(endpoint: &str, dir: &Path) -> Result<String> {
    use std::io::{Read, Write};
    let bucket = format!("zephon-bench-{}", std::process::id());
    let hostport = endpoint.trim_start_matches("http://");
    let mut s = TcpStream::connect(hostport)?;
    write!(
        s,
        "PUT /{bucket} HTTP/1.1\r\nHost: {hostport}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let uri = format!("s3://{bucket}/data");
    let b = Backend::open("bench", &uri, &s3_opts(endpoint))?;
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        let name = p
            .file_name()
            .context("file name")?
            .to_string_lossy()
            .to_string();
        runtime::block_on(b.op.write(&name, std::fs::read(&p)?))?;
    }
    Ok(uri)
}

fn s3_opts(endpoint: &str) -> StorageOptions {
    let mut o = StorageOptions::default()
        .endpoint(endpoint)
        .region("us-east-1");
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
        o = o.access_key_id("test").secret_access_key("test");
    }
    o
}

/// Runs the benchmark and prints one line per configuration.
pub fn run(args: Args) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    write_dataset(&data, &args)?;
    let (_moto, endpoint) = match &args.endpoint {
        Some(e) => (None, e.clone()),
        None => {
            let (m, e) = start_moto()?;
            (Some(m), e)
        }
    };
    let uri = upload(&endpoint, &data)?;
    let cache = |name: &str| {
        s3_opts(&endpoint).cache(
            CacheOptions::default()
                .root(tmp.path().join(name))
                .limit_bytes(8 << 30)
                .memory_bytes(2 << 30),
        )
    };
    let mut rows: Vec<(&str, Run)> = Vec::new();
    let mut pass = |label: &'static str, ds: Dataset, prefetch: bool| -> Result<()> {
        rows.push((label, time_pass(label, ds, &args, prefetch)?));
        Ok(())
    };
    pass("local disk", Dataset::from_path("bench", &data)?, false)?;
    let cold = RemoteDataset::open("bench", &uri, &cache("cold"))?;
    pass("s3, cold cache", cold.dataset().clone(), false)?;
    let pre = RemoteDataset::open("bench", &uri, &cache("prefetch"))?;
    pass("s3, cold cache, prefetch", pre.dataset().clone(), true)?;
    pass("s3, warm cache", pre.dataset().clone(), false)?;
    let ranged = RemoteDataset::open("bench", &uri, &cache("range").byte_range(true))?;
    pass("s3, byte ranges", ranged.dataset().clone(), false)?;
    let base = &rows[0].1;
    let (base_rate, base_first) = (
        base.records as f64 / base.total.as_secs_f64(),
        base.first_batch.as_secs_f64(),
    );
    println!(
        "{} shards x {} records, batch {}, fetch parallelism {}",
        args.shards, args.records, args.batch, args.parallelism
    );
    println!(
        "{:<28} {:>14} {:>9} {:>16} {:>9}",
        "configuration", "records/s", "vs local", "first batch (ms)", "vs local"
    );
    for (label, r) in &rows {
        let rate = r.records as f64 / r.total.as_secs_f64();
        let first = r.first_batch.as_secs_f64();
        println!(
            "{label:<28} {rate:>14.0} {:>8.2}x {:>16.1} {:>8.2}x",
            rate / base_rate,
            first * 1e3,
            first / base_first.max(1e-9)
        );
    }
    let s = pre.cache_stats();
    println!(
        "cache (prefetch run): {} misses, {} hits, {} bytes downloaded, retries {}",
        s.misses,
        s.hits,
        s.bytes_downloaded,
        pre.backend_stats().retries
    );
    Ok(())
}
