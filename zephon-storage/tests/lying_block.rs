//! A block whose bytes are not the shard's is not kept. A server (or a
//! proxy in front of it) that answers a range with another range's bytes
//! under the asked one's `Content-Range` passes every check a block of a
//! shard without per-block checksums has; cached, those bytes failed every
//! later run on the cache folder at the same line. A read that cannot parse
//! them drops the blocks, so a run after the server is healthy again reads
//! every sample. The server is a few lines on 127.0.0.1 that serve a folder
//! and lie once.

use crate::common;

use common::{indexed_dataset, read_all, small_cache, sorted_fields};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use zephon_storage::RemoteDataset;

/// Where the lie is told: the first request for the shard's second block
/// (64 KiB blocks) is answered with the bytes one further on.
const LIE_AT: usize = 64 << 10;

/// Serves the files of `dir`, ranges as `206` with their `Content-Range`;
/// the first range starting at [`LIE_AT`] of `000.jsonl` gets the bytes
/// one further on, under the asked range's `Content-Range`. `lied` is set
/// once it has.
fn lying_server(dir: PathBuf, lied: Arc<AtomicBool>) -> String {
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
        let shift = usize::from(
            path.ends_with("000.jsonl")
                && a == LIE_AT
                && b + 1 < data.len()
                && !lied.swap(true, Ordering::SeqCst),
        );
        let body = &data[a + shift..=b + shift];
        common::tiny::answer(conn, "206 Partial Content", &range, body)
    });
    format!("http://{addr}/")
}

#[test]
fn a_block_that_does_not_parse_is_downloaded_again_by_the_next_run() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    // Some 250 KB: four blocks of 64 KiB.
    let mut written = indexed_dataset(&data, 1, 4000);
    written.sort();
    let shard_len = std::fs::metadata(data.join("000.jsonl")).unwrap().len();
    assert!(shard_len > 3 * LIE_AT as u64, "{shard_len} bytes");
    let lied = Arc::new(AtomicBool::new(false));
    let uri = lying_server(data.clone(), lied.clone());
    let opts = small_cache(t.path(), 4 << 20, 16 << 20);

    let first = RemoteDataset::open("d", &uri, &opts).unwrap();
    let err = match read_all(first.dataset().clone(), false) {
        Ok(_) => panic!("the run read every sample, though block 1 was another range's bytes"),
        Err(e) => e.to_string(),
    };
    assert!(lied.load(Ordering::SeqCst), "the server never lied");
    assert!(err.contains("000.jsonl") && err.contains("line"), "{err}");
    drop(first);

    // The same cache folder, a fresh memory tier, a healthy server.
    let second = RemoteDataset::open("d", &uri, &opts).unwrap();
    let records = read_all(second.dataset().clone(), false)
        .unwrap_or_else(|e| panic!("the run after the lie failed: {e}"));
    assert_eq!(sorted_fields(&records), written);
}
