//! Test support: deterministic JSONL datasets and real servers (moto_server
//! for S3, nginx for HTTP, the emulators of [`cloud`]) on free ports of
//! 127.0.0.1, killed on drop.
#![allow(dead_code)]

pub mod cloud;
pub mod tiny;
pub mod warnings;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use zephon_core::{Dataset, PipelineExt, Record, Runner, Value, WorkSource};
use zephon_storage::DatasetExt;
use zephon_storage::backend::{Backend, runtime};
use zephon_storage::format::mds::{MdsColumn, encode_shard};
use zephon_storage::{CacheOptions, StorageOptions};

/// Bytes that neither compress nor repeat (an LCG), so file sizes are what
/// the test says.
pub fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect()
}

/// `shards` MDS shards of `per_shard` samples (an id, a text and about
/// 300 bytes of noise each) and Streaming's `index.json` naming them.
pub fn write_mds(dir: &Path, shards: usize, per_shard: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let columns = vec![
        MdsColumn::new("id", "int", Some(8)),
        MdsColumn::new("text", "str", None),
        MdsColumn::new("blob", "bytes", None),
    ];
    let mut infos = Vec::new();
    for s in 0..shards {
        let samples: Vec<Vec<Vec<u8>>> = (0..per_shard)
            .map(|i| {
                let id = (s * per_shard + i) as i64;
                vec![
                    id.to_le_bytes().to_vec(),
                    format!("sample {i} of shard {s}").into_bytes(),
                    noise(id as u64, 200 + i % 200),
                ]
            })
            .collect();
        let data = encode_shard(&columns, &samples);
        let name = format!("shard.{s:05}.mds");
        std::fs::write(dir.join(&name), &data).unwrap();
        infos.push(serde_json::json!({
            "format": "mds",
            "column_encodings": ["int", "str", "bytes"],
            "column_names": ["id", "text", "blob"],
            "column_sizes": [8, null, null],
            "compression": null,
            "hashes": [],
            "raw_data": {"basename": name, "bytes": data.len(), "hashes": {}},
            "samples": per_shard,
            "size_limit": 1 << 26,
            "version": 2,
            "zip_data": null,
        }));
    }
    let index = serde_json::json!({"shards": infos, "version": 2});
    std::fs::write(dir.join("index.json"), index.to_string()).unwrap();
}

/// Writes `shards` JSONL shards of `per_shard` records into `dir`; returns
/// the records written, as [`fields`] prints them, sorted: what a read of
/// the whole dataset must deliver, in some order.
pub fn write_dataset(dir: &Path, shards: usize, per_shard: usize) -> Vec<String> {
    std::fs::create_dir_all(dir).unwrap();
    let mut written = Vec::new();
    for s in 0..shards {
        let mut text = String::new();
        for i in 0..per_shard {
            let (id, body) = (
                s * per_shard + i,
                format!("sample {i} of shard {s} {}", "x".repeat(i % 17)),
            );
            text.push_str(&format!(
                "{{\"id\":{id},\"shard\":{s},\"text\":\"{body}\"}}\n"
            ));
            written.push(Record::from_fields(vec![
                ("id", Value::Int(id as i64)),
                ("shard", Value::Int(s as i64)),
                ("text", Value::Text(body)),
            ]));
        }
        std::fs::write(dir.join(format!("{s:03}.jsonl")), text).unwrap();
    }
    sorted_fields(&written)
}

/// Writes and indexes a dataset; returns its records in work-source order,
/// checked against what was written.
pub fn indexed_dataset(dir: &Path, shards: usize, per: usize) -> Vec<String> {
    let written = write_dataset(dir, shards, per);
    let b = Backend::open("d", &dir.display().to_string(), &Default::default()).unwrap();
    runtime::block_on(zephon_storage::scan::build_index(&b, "d")).unwrap();
    local_order(dir, &written)
}

/// The error opening `uri` with `opts` gives, as text; `why` is the
/// failure's message when it opens instead.
pub fn open_error(uri: &str, opts: &StorageOptions, why: &str) -> String {
    match zephon_storage::RemoteDataset::open("d", uri, opts) {
        Ok(_) => panic!("{why}"),
        Err(e) => e.to_string(),
    }
}

/// [`fields`], sorted: compares reads whose order a shuffle decides.
pub fn sorted_fields(records: &[Record]) -> Vec<String> {
    let mut f = fields(records);
    f.sort();
    f
}

/// The local folder `dir` read in work-source order, the order every
/// backend must reproduce, once checked to hold exactly `written`.
pub fn local_order(dir: &Path, written: &[String]) -> Vec<String> {
    let records = read_all(Dataset::from_path("d", dir).unwrap(), false).unwrap();
    assert_eq!(
        sorted_fields(&records),
        written,
        "the local read of `{}`",
        dir.display()
    );
    fields(&records)
}

/// Every record of `ds` in work-source order (seeded shuffles, so orders compare).
pub fn read_all(ds: Dataset, prefetch: bool) -> zephon_core::Result<Vec<Record>> {
    let ws = WorkSource::builder().dataset(ds, 1.0).seed(7).build()?;
    let it = if prefetch {
        use zephon_storage::PrefetchExt;
        ws.stream()
            .prefetch(256, 4)
            .fetch(4)
            .into_blocking_iter(Runner::Threads { workers: 2 })?
    } else {
        ws.stream()
            .fetch(4)
            .into_blocking_iter(Runner::Threads { workers: 2 })?
    };
    it.collect()
}

/// Record fields only (lineage names shard URIs, which differ per backend).
pub fn fields(records: &[Record]) -> Vec<String> {
    records.iter().map(|r| format!("{:?}", r.fields)).collect()
}

/// Gives every shard of the manifest in `dir` per-chunk sums of 64 KiB
/// chunks (one per block of [`small_cache`], so every block is verified),
/// or none.
pub fn set_sums(dir: &Path, sums: bool) {
    use zephon_storage::manifest::{ChunkSums, MANIFEST, Manifest};
    let path = dir.join(MANIFEST);
    let mut m = Manifest::parse(&std::fs::read(&path).unwrap()).unwrap();
    for e in &mut m.shards {
        let data = std::fs::read(dir.join(&e.path)).unwrap();
        e.chunks = sums.then(|| ChunkSums::of(&data, 64 << 10));
    }
    std::fs::write(&path, m.to_json()).unwrap();
}

/// What `read` gives once two reads 50 ms apart agree (at most a second):
/// nginx logs a request after it has sent the answer, so a count taken as
/// soon as the client has the bytes may miss the last requests.
fn settled<T: PartialEq>(read: impl Fn() -> T) -> T {
    let mut last = read();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(50));
        let now = read();
        if now == last {
            return now;
        }
        last = now;
    }
    last
}

/// A fresh cache folder under `dir`, small but big enough for test shards.
pub fn cache_opts(dir: &Path) -> StorageOptions {
    StorageOptions::default()
        .timeout(Duration::from_secs(2))
        .io_timeout(Duration::from_secs(1))
        .retries(2)
        .retry_min_delay(Duration::from_millis(50))
        .retry_max_delay(Duration::from_millis(200))
        .cache(
            CacheOptions::default()
                .root(dir.join("cache"))
                .limit_bytes(64 << 20)
                .memory_bytes(16 << 20),
        )
}

/// A small cache: 64 KiB blocks, `memory` and `limit` bytes in the tiers.
pub fn small_cache(dir: &Path, memory: u64, limit: u64) -> StorageOptions {
    cache_opts(dir).cache(
        CacheOptions::default()
            .root(dir.join("cache"))
            .block_bytes(64 << 10)
            .memory_bytes(memory)
            .limit_bytes(limit),
    )
}

/// Files of the disk tier (under `dir/cache`) and the bytes they hold.
pub fn disk_entries(dir: &Path) -> (usize, u64) {
    let mut out = (0, 0);
    let mut todo = vec![dir.join("cache")];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "shard") {
                out.0 += 1;
                out.1 += e.metadata().unwrap().len();
            }
        }
    }
    out
}

/// GETs of `needle` the moto server answered, whole (200) or by range (206).
pub fn answered_gets(moto: &Moto, needle: &str) -> usize {
    std::fs::read_to_string(&moto.log)
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.contains("\"GET ")
                && l.contains(needle)
                && (l.contains("\" 200 ") || l.contains("\" 206 "))
        })
        .count()
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_for_port(port: u16, what: &str, child: &mut Child) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited before listening on port {port}: {status}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not listen on port {port} within 20 s");
}

fn spawn(cmd: &mut Command, what: &str, install: &str) -> Child {
    cmd.spawn().unwrap_or_else(|e| {
        panic!("cannot start {what} ({e}); these tests need it installed: {install} (.ci/run installs it)")
    })
}

/// A moto_server (S3) process.
pub struct Moto {
    pub port: u16,
    pub log: PathBuf,
    child: Child,
}

impl Moto {
    pub fn start(dir: &Path) -> Self {
        Self::start_on(dir, free_port())
    }

    pub fn start_on(dir: &Path, port: u16) -> Self {
        let log = dir.join(format!("moto-{port}.log"));
        let f = std::fs::File::create(&log).unwrap();
        let mut child = spawn(
            Command::new("moto_server")
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdout(Stdio::null())
                .stderr(f),
            "moto_server",
            "pip install 'moto[server]'",
        );
        wait_for_port(port, "moto_server", &mut child);
        Moto { port, log, child }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn opts(&self, base: StorageOptions) -> StorageOptions {
        base.endpoint(&self.endpoint())
            .region("us-east-1")
            .access_key_id("test")
            .secret_access_key("test")
    }

    /// Creates `bucket` and uploads every file of `dir` under `prefix`.
    pub fn upload(&self, bucket: &str, prefix: &str, dir: &Path) {
        self.create_bucket(bucket);
        let opts = self.opts(StorageOptions::default());
        let b = Backend::open("upload", &format!("s3://{bucket}/{prefix}"), &opts).unwrap();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() {
                let name = p.file_name().unwrap().to_string_lossy().to_string();
                let data = std::fs::read(&p).unwrap();
                runtime::block_on(b.op.write(&name, data)).unwrap();
            }
        }
    }

    /// Creates `bucket`. A server just started, or busy with the other
    /// tests' servers on a small machine, has reset the connection of this
    /// first request: it is tried again (creating a bucket one owns
    /// already succeeds).
    pub fn create_bucket(&self, bucket: &str) {
        let put = || -> std::io::Result<String> {
            let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
            write!(
                s,
                "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                self.port
            )?;
            let mut resp = String::new();
            s.read_to_string(&mut resp)?;
            Ok(resp)
        };
        let mut tries = 0;
        let resp = loop {
            match put() {
                Ok(resp) => break resp,
                Err(e) if tries < 20 => {
                    eprintln!("creating bucket {bucket}: {e}; trying again");
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("creating bucket {bucket}: {e}"),
            }
        };
        assert!(
            resp.starts_with("HTTP/1.1 200"),
            "bucket creation failed: {resp}"
        );
    }

    /// Whole-object GETs the server logged for paths containing `needle`.
    pub fn gets(&self, needle: &str) -> usize {
        count_gets(&self.log, needle)
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        // A test may leave it stopped (SIGSTOP): wake it so it can die.
        signal(self.child.id(), "CONT");
        self.stop();
    }
}

/// An nginx serving a folder.
pub struct Nginx {
    pub port: u16,
    pub log: PathBuf,
    dir: PathBuf,
    root: PathBuf,
    child: Child,
}

impl Nginx {
    pub fn start(dir: &Path, root: &Path) -> Self {
        Self::start_on(dir, root, free_port())
    }

    pub fn start_on(dir: &Path, root: &Path, port: u16) -> Self {
        let run = dir.join(format!("nginx-{port}"));
        std::fs::create_dir_all(run.join("tmp")).unwrap();
        let log = run.join("access.log");
        let conf = run.join("nginx.conf");
        let t = run.join("tmp").display().to_string();
        // More connections than any test opens at once (the byte-range
        // tests go up to 79 requests in flight per shard): with 64, nginx
        // dropped the connections past its limit and a read failed.
        std::fs::write(
            &conf,
            format!(
                "worker_processes 1;\nerror_log {run}/error.log;\npid {run}/nginx.pid;\n\
                 events {{ worker_connections 1024; }}\n\
                 http {{\n  access_log {log};\n  client_body_temp_path {t};\n  proxy_temp_path {t};\n\
                   fastcgi_temp_path {t};\n  uwsgi_temp_path {t};\n  scgi_temp_path {t};\n\
                   server {{\n    listen 127.0.0.1:{port};\n    root {root};\n  }}\n}}\n",
                run = run.display(),
                log = log.display(),
                root = root.display(),
            ),
        )
        .unwrap();
        let mut child = spawn(
            Command::new("nginx")
                .arg("-c")
                .arg(&conf)
                .arg("-p")
                .arg(&run)
                .args(["-g", "daemon off;"])
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            "nginx",
            "apt-get install nginx-light",
        );
        wait_for_port(port, "nginx", &mut child);
        Nginx {
            port,
            log,
            dir: dir.to_owned(),
            root: root.to_owned(),
            child,
        }
    }

    pub fn uri(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    pub fn gets(&self, needle: &str) -> usize {
        settled(|| count_gets(&self.log, needle))
    }

    /// Range GETs (status 206) the server logged for paths containing `needle`.
    pub fn range_gets(&self, needle: &str) -> usize {
        settled(|| {
            std::fs::read_to_string(&self.log)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("\"GET ") && l.contains(needle) && l.contains("\" 206 "))
                .count()
        })
    }

    /// Body bytes of the range GETs (status 206) the server logged for
    /// paths containing `needle`, multipart boundaries and part headers
    /// included.
    pub fn range_bytes(&self, needle: &str) -> u64 {
        settled(|| self.logged_range_bytes(needle))
    }

    fn logged_range_bytes(&self, needle: &str) -> u64 {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"GET ") && l.contains(needle))
            .filter_map(|l| l.split_once("\" 206 "))
            .map(|(_, rest)| {
                let sent = rest.split_whitespace().next().unwrap_or_default();
                sent.parse::<u64>().expect("body_bytes_sent in the log")
            })
            .sum()
    }

    /// Stops master and worker (SIGQUIT would wait for open connections).
    pub fn stop(&mut self) {
        signal(self.child.id(), "TERM");
        let _ = self.child.wait();
    }

    /// Starts a new nginx on the same port and folder.
    pub fn restart(&mut self) {
        self.stop();
        let fresh = Nginx::start_on(&self.dir, &self.root, self.port);
        let old = std::mem::replace(self, fresh);
        std::mem::forget(old);
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
    }
}

pub fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

/// Whole-object GETs (status 200; range reads answer 206) of paths containing `needle`.
fn count_gets(log: &Path, needle: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("\"GET ") && l.contains(needle) && l.contains("\" 200 "))
        .count()
}

/// A tmpfs of `size` mounted at `dir`, unmounted on drop; `None` (with
/// the reason printed) where mount fails: it needs root. Under `CI=true`
/// (CI runs as root) a failed mount fails the test instead, so a test that
/// needs the small filesystem cannot pass there without checking.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    pub fn mount(dir: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output();
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs(dir.to_owned())),
            Ok(o) if ci => panic!(
                "CI=true: cannot mount a tmpfs at `{}` ({}); this test must check there",
                dir.display(),
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) if ci => panic!("CI=true: cannot run mount ({e}); this test must check there"),
            Ok(o) => {
                eprintln!(
                    "skipped: cannot mount a tmpfs at `{}` ({}); this test needs root",
                    dir.display(),
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("skipped: cannot run mount ({e}); this test needs root");
                None
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// One JSONL shard of `lines` short, alike lines (`{"id":i,"text":...}`),
/// zstd-compressed as `dir/000.jsonl.zst` (some 47 bytes a line decoded,
/// about one compressed) and indexed; returns the decoded and compressed
/// sizes.
pub fn alike_zst_shard(dir: &Path, lines: i64) -> (usize, usize) {
    let text: String = (0..lines)
        .map(|i| format!("{{\"id\":{i},\"text\":\"the same few words again\"}}\n"))
        .collect();
    std::fs::create_dir_all(dir).unwrap();
    let z = zstd::encode_all(text.as_bytes(), 3).unwrap();
    std::fs::write(dir.join("000.jsonl.zst"), &z).unwrap();
    let b = Backend::open("d", &dir.display().to_string(), &Default::default()).unwrap();
    runtime::block_on(zephon_storage::scan::build_index(&b, "d")).unwrap();
    (text.len(), z.len())
}

/// The `id` field of every record of shard `shard` of `ds`, read in order.
pub fn shard_ids(ds: &Dataset, shard: usize) -> Vec<i64> {
    let s = &ds.shards()[shard];
    runtime::block_on(s.read_run(0, s.len()))
        .unwrap()
        .iter()
        .map(|r| r.get("id").and_then(|v| v.as_int()).unwrap())
        .collect()
}
