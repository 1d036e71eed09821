//! A block whose bytes are not the shard's is never kept, nor delivered
//! when the manifest can tell. A server (or a proxy in front of it) that
//! answers a range with another range's bytes under the asked one's
//! `Content-Range` passes every check a block has but its bytes' own:
//! - with the manifest's per-chunk sums ([`ChunkSums`], which
//!   `build-index` and `prepare` write), the block is downloaded again and
//!   the run reads the shard's bytes; a server that lies on every try is
//!   an error naming the shard, the block and the chunk, and nothing of
//!   the lie is cached;
//! - without them, a read that cannot parse the bytes drops the blocks, so
//!   a run after the server is healthy again reads every sample (a token
//!   shard, which parses whatever its bytes, is delivered wrong: what the
//!   sums are for).
//!
//! The server is a few lines on 127.0.0.1 that serve a folder and lie.

use crate::common;

use common::{indexed_dataset, read_all, set_sums, small_cache, sorted_fields};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use zephon_storage::RemoteDataset;
use zephon_storage::backend::{Backend, runtime};
use zephon_storage::scan::{Checksums, build_index_checked};

/// Where the lie is told: requests for the shard's second block (64 KiB
/// blocks) are answered with the bytes one further on.
const LIE_AT: usize = 64 << 10;

/// Serves the files of `dir`, ranges as `206` with their `Content-Range`;
/// a range of `shard` starting at [`LIE_AT`] gets the bytes one further
/// on, under the asked range's `Content-Range`, while `lies` is above 0
/// (each lie takes one off; `usize::MAX` lies for ever). `told` counts the
/// lies told.
fn lying_server(dir: PathBuf, shard: &'static str, lies: Arc<AtomicUsize>) -> (String, Told) {
    let told = Arc::new(AtomicUsize::new(0));
    let count = told.clone();
    let addr = common::tiny::serve(move |request, headers, conn| {
        let path = request.split_whitespace().nth(1).unwrap_or("/");
        let Ok(data) = std::fs::read(dir.join(path.trim_start_matches('/'))) else {
            return common::tiny::answer(conn, "404 Not Found", "", b"");
        };
        let Some((a, b)) = common::tiny::range(headers) else {
            return common::tiny::answer(conn, "200 OK", "", &data);
        };
        let b = b.unwrap_or(data.len() - 1).min(data.len() - 1);
        let range = format!("Content-Range: bytes {a}-{b}/{}\r\n", data.len());
        let lie = path.ends_with(shard)
            && a == LIE_AT
            && b + 1 < data.len()
            && lies
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| match n {
                    0 => None,
                    usize::MAX => Some(n),
                    n => Some(n - 1),
                })
                .is_ok();
        if lie {
            count.fetch_add(1, Ordering::SeqCst);
        }
        let shift = usize::from(lie);
        let body = &data[a + shift..=b + shift];
        common::tiny::answer(conn, "206 Partial Content", &range, body)
    });
    (format!("http://{addr}/"), told)
}

/// How many lies the server told.
type Told = Arc<AtomicUsize>;

#[test]
fn without_sums_a_block_that_does_not_parse_is_downloaded_again_by_the_next_run() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    // Some 250 KB: four blocks of 64 KiB.
    let mut written = indexed_dataset(&data, 1, 4000);
    written.sort();
    set_sums(&data, false);
    let shard_len = std::fs::metadata(data.join("000.jsonl")).unwrap().len();
    assert!(shard_len > 3 * LIE_AT as u64, "{shard_len} bytes");
    let (uri, told) = lying_server(data.clone(), "000.jsonl", Arc::new(AtomicUsize::new(1)));
    let opts = small_cache(t.path(), 4 << 20, 16 << 20);

    let first = RemoteDataset::open("d", &uri, &opts).unwrap();
    let err = match read_all(first.dataset().clone(), false) {
        Ok(_) => panic!("the run read every sample, though block 1 was another range's bytes"),
        Err(e) => e.to_string(),
    };
    assert_eq!(told.load(Ordering::SeqCst), 1, "the server never lied");
    assert!(err.contains("000.jsonl") && err.contains("line"), "{err}");
    drop(first);

    // The same cache folder, a fresh memory tier, a healthy server.
    let second = RemoteDataset::open("d", &uri, &opts).unwrap();
    let records = read_all(second.dataset().clone(), false)
        .unwrap_or_else(|e| panic!("the run after the lie failed: {e}"));
    assert_eq!(sorted_fields(&records), written);
}

#[test]
fn with_sums_a_lie_is_downloaded_again_and_never_cached() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let mut written = indexed_dataset(&data, 1, 4000);
    written.sort();
    set_sums(&data, true);
    let opts = small_cache(t.path(), 4 << 20, 16 << 20);

    // One lie: the block is downloaded again and the run reads the shard.
    let lies = Arc::new(AtomicUsize::new(1));
    let (uri, told) = lying_server(data.clone(), "000.jsonl", lies.clone());
    let once = RemoteDataset::open("d", &uri, &opts).unwrap();
    let records = read_all(once.dataset().clone(), false)
        .unwrap_or_else(|e| panic!("a lie the retry could mend failed the run: {e}"));
    assert_eq!(told.load(Ordering::SeqCst), 1, "the server never lied");
    assert_eq!(sorted_fields(&records), written);
    assert!(
        once.backend_stats().retries >= 1,
        "{:?}",
        once.backend_stats()
    );
    drop(once);

    // Lies on every try, in a fresh cache folder: an error naming the
    // shard, the block and the chunk.
    let t2 = tempfile::tempdir().unwrap();
    let opts = small_cache(t2.path(), 4 << 20, 16 << 20);
    lies.store(usize::MAX, Ordering::SeqCst);
    let always = RemoteDataset::open("d", &uri, &opts).unwrap();
    let err = match read_all(always.dataset().clone(), false) {
        Ok(_) => panic!("the run read every sample, though block 1 was another range's bytes"),
        Err(e) => e.to_string(),
    };
    for want in ["000.jsonl", "block 1", "chunk 1", "CRC32C"] {
        assert!(err.contains(want), "{want:?} not in: {err}");
    }
    drop(always);

    // Nothing of the lie was kept: a healthy server, the same folder.
    lies.store(0, Ordering::SeqCst);
    let after = RemoteDataset::open("d", &uri, &opts).unwrap();
    let records = read_all(after.dataset().clone(), false)
        .unwrap_or_else(|e| panic!("the run after the lies failed: {e}"));
    assert_eq!(sorted_fields(&records), written);
}

#[test]
fn a_token_shard_is_delivered_right_only_with_sums() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // 100,000 u16 tokens: some 200 KB, four blocks of 64 KiB.
    let tokens: Vec<u8> = (0..100_000u32)
        .flat_map(|i| ((i * 7919 % 50_000) as u16).to_le_bytes())
        .collect();
    std::fs::write(data.join("000.bin"), &tokens).unwrap();
    let b = Backend::open("d", &data.display().to_string(), &Default::default()).unwrap();
    let opts = zephon_storage::FormatOptions::default();
    runtime::block_on(build_index_checked(&b, "d", &opts, Checksums::Always)).unwrap();

    let read = |sums: bool, lies: usize| {
        set_sums(&data, sums);
        let dir = tempfile::tempdir().unwrap();
        let opts = small_cache(dir.path(), 4 << 20, 16 << 20);
        let (uri, told) = lying_server(data.clone(), "000.bin", Arc::new(AtomicUsize::new(lies)));
        let ds = RemoteDataset::open("d", &uri, &opts).unwrap();
        let records = read_all(ds.dataset().clone(), false).unwrap();
        (sorted_fields(&records), told.load(Ordering::SeqCst))
    };
    let (healthy, _) = read(true, 0);
    assert!(!healthy.is_empty());
    // Without sums the lie is delivered, with exit 0.
    let (unchecked, told) = read(false, 1);
    assert_eq!(told, 1, "the server never lied");
    assert_ne!(unchecked, healthy, "the lie changed no sample");
    // With them, the block is downloaded again.
    let (checked, told) = read(true, 1);
    assert_eq!(told, 1, "the server never lied");
    assert_eq!(checked, healthy);
}
