//! The processes of a node share one cache folder: each shard is downloaded
//! once per node, and a process killed mid-download leaves nothing another
//! would serve. The rank processes are this test binary run again as
//! children, told by `ZEPHON_TEST_READER` to act as readers.

use crate::common;

use common::{Moto, cache_opts, fields, indexed_dataset, read_all, signal};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use zephon_storage::RemoteDataset;
use zephon_storage::backend::runtime;

const READER: &str = "ZEPHON_TEST_READER";

/// Options of every reader: the moto endpoint and the cache under `dir`
/// (patient ones for a reader that must still be downloading when killed).
fn reader_opts(dir: &Path, endpoint: &str, patient: bool) -> zephon_storage::StorageOptions {
    let o = cache_opts(dir)
        .endpoint(endpoint)
        .region("us-east-1")
        .access_key_id("test")
        .secret_access_key("test");
    if patient {
        o.timeout(Duration::from_secs(120))
            .io_timeout(Duration::from_secs(120))
    } else {
        o
    }
}

/// The reader a child runs: opens the dataset, says so in `<out>.opened`,
/// waits for `<out>.go` when given, reads everything and writes the fields
/// to `<out>`. Ignored: the parent tests run it in a child process with
/// `--ignored`; run on its own it fails, as it has nothing to read.
#[test]
#[ignore = "the child half of the cache-sharing tests, which run it in a process of its own"]
fn reader_child() {
    let out = std::env::var(READER)
        .expect("run by the cache-sharing tests in a child process, with ZEPHON_TEST_READER set");
    let out = PathBuf::from(out);
    let dir = PathBuf::from(std::env::var("ZEPHON_TEST_DIR").unwrap());
    let endpoint = std::env::var("ZEPHON_TEST_ENDPOINT").unwrap();
    let patient = std::env::var_os("ZEPHON_TEST_WAIT").is_some();
    let mut opts = reader_opts(&dir, &endpoint, patient);
    if let Ok(limit) = std::env::var("ZEPHON_TEST_LIMIT") {
        opts.cache.limit_bytes = limit.parse().unwrap();
        opts.cache.memory_bytes = 64 << 10;
        opts.cache.block_bytes = 64 << 10;
    }
    let rd = RemoteDataset::open("d", "s3://bkt/ds", &opts).unwrap();
    if patient {
        // An empty read loads a shard's line-index sidecar and no block: a
        // reader then stalls in a block's download, under its lock, rather
        // than in a sidecar's.
        for s in rd.dataset().shards() {
            runtime::block_on(s.read_run(0, 0)).unwrap();
        }
    }
    File::create(out.with_extension("opened")).unwrap();
    while patient && !out.with_extension("go").exists() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let got = fields(&read_all(rd.dataset().clone(), false).unwrap());
    std::fs::write(&out, got.join("\n")).unwrap();
}

fn spawn_reader(dir: &Path, endpoint: &str, out: &Path, wait: bool) -> Child {
    spawn_reader_with(dir, endpoint, out, wait, None)
}

fn spawn_reader_with(
    dir: &Path,
    endpoint: &str,
    out: &Path,
    wait: bool,
    limit: Option<u64>,
) -> Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    if let Some(l) = limit {
        c.env("ZEPHON_TEST_LIMIT", l.to_string());
    }
    // The test's name in the suite binary (tests/suite.rs).
    c.args([
        "cache_node::reader_child",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(READER, out)
    .env("ZEPHON_TEST_DIR", dir)
    .env("ZEPHON_TEST_ENDPOINT", endpoint);
    if wait {
        c.env("ZEPHON_TEST_WAIT", "1");
    }
    c.spawn().unwrap()
}

/// Files under the cache root with extension `ext`.
fn cache_files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.join("cache")];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == ext) {
                out.push(p);
            }
        }
    }
    out
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "{what} within 60 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn four_processes_on_one_folder_download_each_shard_once() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let want = indexed_dataset(&data, 24, 30);
    let moto = Moto::start(t.path());
    moto.upload("bkt", "ds", &data);
    let readers: Vec<(PathBuf, Child)> = (0..4)
        .map(|r| {
            let out = t.path().join(format!("reader-{r}"));
            let child = spawn_reader(t.path(), &moto.endpoint(), &out, false);
            (out, child)
        })
        .collect();
    for (out, mut child) in readers {
        assert!(child.wait().unwrap().success(), "reader {}", out.display());
        let got = std::fs::read_to_string(&out).unwrap();
        assert_eq!(got.lines().collect::<Vec<_>>(), want, "{}", out.display());
    }
    let gets: Vec<usize> = (0..24)
        .map(|s| moto.gets(&format!("{s:03}.jsonl HTTP")))
        .collect();
    assert_eq!(gets, vec![1; 24], "one download per shard for the node");
    // The shards, their sidecars and the manifest.
    assert_eq!(cache_files(t.path(), "shard").len(), 24 + 24 + 1);
    assert_eq!(moto.gets("index.json"), 1, "one download of the manifest");
    let sidecars: Vec<usize> = (0..24)
        .map(|s| moto.gets(&format!("{s:03}.jsonl.idx HTTP")))
        .collect();
    assert_eq!(sidecars, vec![1; 24], "one download per sidecar");
    assert!(cache_files(t.path(), "tmp").is_empty());
}

#[test]
fn a_reader_killed_mid_download_leaves_nothing_served() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let want = indexed_dataset(&data, 2, 40);
    let moto = Moto::start(t.path());
    moto.upload("bkt", "ds", &data);
    let out = t.path().join("victim");
    let mut victim = spawn_reader(t.path(), &moto.endpoint(), &out, true);
    wait_until("the reader opened the dataset", || {
        out.with_extension("opened").exists()
    });
    // Opening published the manifest.
    let shard_entries = || {
        let mut e = cache_files(t.path(), "shard");
        e.sort();
        e
    };
    let opened = shard_entries();
    // A stopped server holds every shard download open.
    signal(moto.pid(), "STOP");
    File::create(out.with_extension("go")).unwrap();
    let held = |p: &PathBuf| {
        File::open(p)
            .map(|f| f.try_lock().is_err())
            .unwrap_or(false)
    };
    wait_until("the reader held a shard's lock", || {
        cache_files(t.path(), "lock").iter().any(held)
    });
    victim.kill().unwrap();
    victim.wait().unwrap();
    signal(moto.pid(), "CONT");
    assert!(!out.exists(), "the reader was killed before it finished");
    assert_eq!(
        shard_entries(),
        opened,
        "a killed download publishes nothing"
    );
    assert!(
        !cache_files(t.path(), "lock").iter().any(held),
        "the killed reader's locks are released"
    );
    let rd = RemoteDataset::open(
        "d",
        "s3://bkt/ds",
        &reader_opts(t.path(), &moto.endpoint(), false),
    )
    .unwrap();
    assert_eq!(
        fields(&read_all(rd.dataset().clone(), false).unwrap()),
        want
    );
    assert_eq!(rd.cache_stats().misses, 2, "the next reader downloads both");
    // The shards, their sidecars and the manifest.
    assert_eq!(cache_files(t.path(), "shard").len(), 2 + 2 + 1);
}

#[test]
fn the_size_limit_holds_for_the_folder_that_processes_share() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    // Twelve shards of about 100 KB, two blocks of 64 KiB each; the limit
    // holds about four of them.
    let want = indexed_dataset(&data, 12, 1700);
    let largest = (0..12)
        .map(|s| {
            std::fs::metadata(data.join(format!("{s:03}.jsonl")))
                .unwrap()
                .len()
        })
        .max()
        .unwrap();
    // Entries count in whole 4 KiB pages, with a header each.
    let limit = 4 * (largest + 2 * 4096);
    let moto = Moto::start(t.path());
    moto.upload("bkt", "ds", &data);
    let readers: Vec<(PathBuf, Child)> = (0..3)
        .map(|r| {
            let out = t.path().join(format!("reader-{r}"));
            let child = spawn_reader_with(t.path(), &moto.endpoint(), &out, false, Some(limit));
            (out, child)
        })
        .collect();
    for (out, mut child) in readers {
        assert!(child.wait().unwrap().success(), "reader {}", out.display());
        let got = std::fs::read_to_string(&out).unwrap();
        assert_eq!(got.lines().collect::<Vec<_>>(), want, "{}", out.display());
    }
    let files = cache_files(t.path(), "shard");
    let used: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    assert!(
        used <= limit && !files.is_empty() && files.len() < 12,
        "{} entries, {used} bytes in a folder limited to {limit}",
        files.len()
    );
}

#[test]
fn a_stalled_holder_of_a_shard_lock_does_not_hang_other_readers() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let want = indexed_dataset(&data, 2, 40);
    let moto = Moto::start(t.path());
    moto.upload("bkt", "ds", &data);
    let opts = reader_opts(t.path(), &moto.endpoint(), false);
    let rd = RemoteDataset::open("d", "s3://bkt/ds", &opts).unwrap();
    assert_eq!(
        fields(&read_all(rd.dataset().clone(), false).unwrap()),
        want
    );
    drop(rd);
    // A process that stopped while holding the shards' locks, entries gone.
    for f in cache_files(t.path(), "shard") {
        std::fs::remove_file(f).unwrap();
    }
    let held: Vec<File> = cache_files(t.path(), "lock")
        .iter()
        .filter(|p| !p.ends_with("folder.lock"))
        .map(|p| {
            let f = File::open(p).unwrap();
            f.lock().unwrap();
            f
        })
        .collect();
    // The shards', their sidecars' and the manifest's.
    assert_eq!(held.len(), 2 + 2 + 1);
    let mut opts = opts;
    opts.cache.lock_wait = Duration::from_millis(200);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rd = RemoteDataset::open("d", "s3://bkt/ds", &opts).unwrap();
        let _ = tx.send(fields(&read_all(rd.dataset().clone(), false).unwrap()));
    });
    let got = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("a reader waiting on a stalled lock finishes within 30 s");
    assert_eq!(got, want);
    let gets: Vec<usize> = (0..2)
        .map(|s| moto.gets(&format!("{s:03}.jsonl HTTP")))
        .collect();
    assert_eq!(gets, vec![2, 2], "the waiter downloaded the shards itself");
    assert!(
        cache_files(t.path(), "shard").is_empty(),
        "without the lock nothing is published"
    );
    drop(held);
}
