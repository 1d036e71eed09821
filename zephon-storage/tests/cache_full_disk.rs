//! A shard cache whose filesystem is small, full or failing: every record
//! still arrives, nothing panics, no damaged entry is left, and one warning
//! names the cache folder. The small filesystem is a tmpfs, which needs
//! root: those tests print why and pass without checking anything where
//! mount fails; the failing folder needs no privilege.

mod common;

use common::warnings::Capture;
use common::{
    Moto, Tmpfs, alike_zst_shard, cache_opts, fields, indexed_dataset, read_all, shard_ids,
};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use tracing_subscriber::layer::SubscriberExt;
use zephon_storage::{CacheOptions, RemoteDataset};

/// Warnings logged in this process, and panics in any of its threads.
struct Watch {
    warnings: Arc<Mutex<Vec<String>>>,
    panics: Arc<AtomicUsize>,
}

/// The watch, for one test at a time: panics are counted from zero.
fn watch() -> (std::sync::MutexGuard<'static, ()>, &'static Watch) {
    static ONE: Mutex<()> = Mutex::new(());
    let guard = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let w = watcher();
    w.panics.store(0, Ordering::SeqCst);
    (guard, w)
}

fn watcher() -> &'static Watch {
    static W: OnceLock<Watch> = OnceLock::new();
    W.get_or_init(|| {
        let warnings = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(Capture(warnings.clone()));
        tracing::subscriber::set_global_default(subscriber).unwrap();
        let panics = Arc::new(AtomicUsize::new(0));
        let (count, default) = (panics.clone(), std::panic::take_hook());
        std::panic::set_hook(Box::new(move |info| {
            count.fetch_add(1, Ordering::SeqCst);
            default(info);
        }));
        Watch { warnings, panics }
    })
}

/// Warnings that the disk tier of `dir` degraded.
fn warnings_naming(dir: &Path) -> Vec<String> {
    let needle = format!("shard cache folder `{}`", dir.display());
    let w = watcher().warnings.lock().unwrap();
    w.iter().filter(|m| m.contains(&needle)).cloned().collect()
}

/// Bytes of the files under `dir`, by extension.
fn bytes_of(dir: &Path, ext: &str) -> (usize, u64) {
    let mut n = (0, 0);
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == ext) {
                n = (n.0 + 1, n.1 + e.metadata().unwrap().len());
            }
        }
    }
    n
}

#[test]
fn a_cache_on_a_filesystem_smaller_than_its_limit_keeps_to_the_room_there_is() {
    let (_one, w) = watch();
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("cache");
    let Some(_fs) = Tmpfs::mount(&root, "1m") else {
        return;
    };
    let data = t.path().join("data");
    // Eight shards of about 190 KB: the dataset does not fit in 1 MiB.
    let want = indexed_dataset(&data, 8, 3000);
    let moto = Moto::start(t.path());
    moto.upload("bkt", "ds", &data);
    let opts = moto.opts(cache_opts(t.path())).cache(
        CacheOptions::default()
            .root(&root)
            .limit_bytes(64 << 20)
            .memory_bytes(64 << 10)
            .block_bytes(64 << 10),
    );
    let rd = RemoteDataset::open("d", "s3://bkt/ds", &opts).unwrap();
    for pass in 0..2 {
        let got = fields(&read_all(rd.dataset().clone(), false).unwrap());
        assert_eq!(got, want, "pass {pass}");
    }
    let cache = rd.cache().unwrap();
    let (entries, used) = bytes_of(&root, "shard");
    assert!(
        entries > 0 && used <= 1 << 20 && cache.disk_capacity() <= 1 << 20,
        "{entries} entries, {used} bytes, capacity {}",
        cache.disk_capacity()
    );
    let s = rd.cache_stats();
    assert!(s.disk_degraded && s.disk_evictions > 0, "{s:?}");
    let warned = warnings_naming(cache.dir());
    assert_eq!(warned.len(), 1, "one warning names the folder: {warned:?}");
    assert_eq!(w.panics.load(Ordering::SeqCst), 0, "no thread panicked");
}

#[test]
fn a_full_cache_disk_degrades_to_memory_with_one_warning() {
    let (_one, w) = watch();
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("cache");
    let Some(_fs) = Tmpfs::mount(&root, "4m") else {
        return;
    };
    let data = t.path().join("data");
    let want = indexed_dataset(&data, 8, 2000);
    let moto = Moto::start(t.path());
    moto.upload("bkt", "ds", &data);
    let opts = moto.opts(cache_opts(t.path())).cache(
        CacheOptions::default()
            .root(&root)
            .limit_bytes(2 << 20)
            .memory_bytes(64 << 10)
            .block_bytes(64 << 10),
    );
    let rd = RemoteDataset::open("d", "s3://bkt/ds", &opts).unwrap();
    let dir = rd.cache().unwrap().dir().to_owned();
    assert!(
        warnings_naming(&dir).is_empty(),
        "the folder had room at open"
    );
    // The manifest, published at open.
    let at_open = bytes_of(&root, "shard").0;
    // Something else takes all the room left.
    let mut filler = std::fs::File::create(root.join("filler")).unwrap();
    while filler.write_all(&[0u8; 64 << 10]).is_ok() {}
    for pass in 0..2 {
        let got = fields(&read_all(rd.dataset().clone(), false).unwrap());
        assert_eq!(got, want, "pass {pass}");
    }
    assert_eq!(
        bytes_of(&root, "shard").0,
        at_open,
        "nothing was published once the disk was full"
    );
    assert_eq!(bytes_of(&root, "tmp").0, 0, "no temp file is left");
    let s = rd.cache_stats();
    assert!(s.disk_degraded, "{s:?}");
    assert_eq!(
        rd.cache().unwrap().disk_capacity(),
        0,
        "the disk tier is off"
    );
    let warned = warnings_naming(&dir);
    assert_eq!(warned.len(), 1, "one warning names the folder: {warned:?}");
    assert!(
        warned[0].contains("No space") || warned[0].contains("free"),
        "{warned:?}"
    );
    assert_eq!(w.panics.load(Ordering::SeqCst), 0, "no thread panicked");
}

#[test]
fn a_cache_folder_that_cannot_be_written_degrades_to_memory() {
    let (_one, w) = watch();
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let want = indexed_dataset(&data, 4, 500);
    let moto = Moto::start(t.path());
    moto.upload("bkt", "ds", &data);
    let with_root = |root: &Path| {
        moto.opts(cache_opts(t.path())).cache(
            CacheOptions::default()
                .root(root)
                .limit_bytes(4 << 20)
                .memory_bytes(64 << 10)
                .block_bytes(64 << 10),
        )
    };

    // A cache root that is a file: no folder can be made there.
    let blocked = t.path().join("not-a-folder");
    std::fs::write(&blocked, b"x").unwrap();
    let rd = RemoteDataset::open("d", "s3://bkt/ds", &with_root(&blocked)).unwrap();
    assert_eq!(
        fields(&read_all(rd.dataset().clone(), false).unwrap()),
        want
    );
    assert!(rd.cache_stats().disk_degraded);
    let warned = warnings_naming(rd.cache().unwrap().dir());
    assert_eq!(warned.len(), 1, "one warning names the folder: {warned:?}");
    drop(rd);

    // A folder that breaks after open: replaced by a file.
    let root = t.path().join("cache-b");
    let rd = RemoteDataset::open("d", "s3://bkt/ds", &with_root(&root)).unwrap();
    assert_eq!(
        fields(&read_all(rd.dataset().clone(), false).unwrap()),
        want
    );
    assert!(!rd.cache_stats().disk_degraded);
    let dir = rd.cache().unwrap().dir().to_owned();
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, b"x").unwrap();
    for pass in 0..2 {
        let got = fields(&read_all(rd.dataset().clone(), false).unwrap());
        assert_eq!(got, want, "pass {pass} after the folder broke");
    }
    let s = rd.cache_stats();
    assert!(s.disk_degraded && s.misses > 4, "{s:?}");
    let warned = warnings_naming(&dir);
    assert_eq!(warned.len(), 1, "one warning names the folder: {warned:?}");
    assert_eq!(w.panics.load(Ordering::SeqCst), 0, "no thread panicked");
}

/// A compressed shard is downloaded and decoded straight into the cache's
/// folder; where that folder is full, the download goes to the temporary
/// folder, the half-written entry goes, the cache turns to memory with one
/// warning, and the shard is decoded into the temporary folder instead:
/// every record still arrives.
#[test]
fn a_compressed_shard_decoded_into_a_full_cache_disk_still_reads() {
    let (_one, w) = watch();
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("cache");
    let Some(_fs) = Tmpfs::mount(&root, "16m") else {
        return;
    };
    // About 9 MB decoded, a few hundred KB compressed.
    let lines = 200_000;
    let data = t.path().join("data");
    alike_zst_shard(&data, lines);
    let opts =
        cache_opts(t.path()).cache(CacheOptions::default().root(&root).limit_bytes(64 << 20));
    let rd = RemoteDataset::open("d", &data.display().to_string(), &opts).unwrap();
    let dir = rd.cache().unwrap().dir().to_owned();
    // Something else takes all the room left: the download goes to the
    // temporary folder instead, and so does the decode.
    let mut filler = std::fs::File::create(root.join("filler")).unwrap();
    while filler.write_all(&[0u8; 64 << 10]).is_ok() {}
    let got = shard_ids(rd.dataset(), 0);
    assert_eq!(got, (0..lines).collect::<Vec<i64>>());
    assert_eq!(bytes_of(&root, "shard").0, 0, "nothing was published");
    assert_eq!(bytes_of(&root, "tmp").0, 0, "no temp file is left");
    assert!(rd.cache_stats().disk_degraded);
    let warned = warnings_naming(&dir);
    assert_eq!(warned.len(), 1, "one warning names the folder: {warned:?}");
    assert_eq!(w.panics.load(Ordering::SeqCst), 0, "no thread panicked");
}
