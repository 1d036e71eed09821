//! A server's answer is input too: a shard whose body is far longer than
//! its manifest says (a broken or hostile server answering with gigabytes)
//! is cut off just past the size the manifest gives, an error naming the
//! shard, where reading it whole took as much of the process's memory as
//! the server sent. The server is a few lines on 127.0.0.1 that answer
//! `index.json` properly (one test: with the 4 GiB body too) and the shard
//! with a 4 GiB body, counting what they sent.

use crate::common;

use common::cache_opts;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use zephon_storage::RemoteDataset;
use zephon_storage::backend::runtime;

/// Serves `manifest` as `/index.json` and anything else (the manifest too
/// when it is `None`) as a body of `cap` bytes of JSON lines with `status`,
/// written until the client goes; returns the base URI and the bytes of
/// body sent so far.
fn long_server(
    manifest: Option<String>,
    status: &'static str,
    cap: u64,
) -> (String, Arc<AtomicU64>) {
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    let addr = common::tiny::serve(move |request, _, conn| {
        if let Some(manifest) = manifest
            .as_ref()
            .filter(|_| request.contains("/index.json"))
        {
            return common::tiny::answer(conn, "200 OK", "", manifest.as_bytes());
        }
        let piece = "{\"a\":1}\n".repeat(8192);
        common::tiny::flood(conn, status, cap, piece.as_bytes(), &counter)
    });
    (format!("http://{addr}/"), sent)
}

#[test]
fn a_shard_answered_with_gigabytes_is_cut_off_by_name() {
    let t = tempfile::tempdir().unwrap();
    // Ten lines of 8 bytes, says the manifest; the server sends up to 4 GiB.
    let manifest = r#"{"version":1,"shards":[{"path":"a.jsonl","samples":10,"bytes":80}]}"#;
    let (uri, sent) = long_server(Some(manifest.to_owned()), "200 OK", 4 << 30);
    let rd = RemoteDataset::open("d", &uri, &cache_opts(t.path())).unwrap();
    let s = &rd.dataset().shards()[0];
    let err = runtime::block_on(s.read_run(0, 1)).unwrap_err().to_string();
    assert!(
        err.contains("a.jsonl") && err.contains("size mismatch") && err.contains("got more"),
        "{err}"
    );
    // Cut off within the first few chunks the socket took, not read whole.
    assert!(sent.load(Ordering::Relaxed) < 64 << 20, "{sent:?}");
}

/// In byte-range mode, a server that ignores the range and answers with
/// the whole (here 4 GiB) object is cut off just past the range, by name:
/// the line-offset sidecar of a JSONL shard, and a token file's samples.
#[test]
fn a_range_answered_with_gigabytes_is_cut_off_by_name() {
    let t = tempfile::tempdir().unwrap();
    let opts = cache_opts(t.path()).byte_range(true);
    let cases = [
        (
            r#"{"version":1,"shards":[{"path":"a.jsonl","samples":10,"bytes":80,"index":"a.jsonl.idx"}]}"#,
            "a.jsonl.idx",
        ),
        (
            r#"{"version":1,"format":{"kind":"tokens","dtype":"u16","seq_len":4},"shards":[{"path":"t.bin","samples":10,"bytes":80}]}"#,
            "t.bin",
        ),
    ];
    for (manifest, named) in cases {
        let (uri, sent) = long_server(Some(manifest.to_owned()), "200 OK", 4 << 30);
        let rd = RemoteDataset::open("d", &uri, &opts).unwrap();
        let s = &rd.dataset().shards()[0];
        let err = runtime::block_on(s.read_run(0, 1)).unwrap_err().to_string();
        assert!(err.contains(named), "{err}");
        assert!(sent.load(Ordering::Relaxed) < 64 << 20, "{named}: {sent:?}");
    }
}

/// A manifest answered with gigabytes (a wrong object, a broken or hostile
/// server) is refused past `manifest_limit`, by name, where it was read
/// whole into memory before it was parsed.
#[test]
fn a_manifest_answered_with_gigabytes_is_cut_off_by_name() {
    let t = tempfile::tempdir().unwrap();
    let (uri, sent) = long_server(None, "200 OK", 4 << 30);
    let opts = cache_opts(t.path()).manifest_limit(1 << 20);
    let err = common::open_error(&uri, &opts, "4 GiB of JSON lines opened as a manifest");
    assert!(
        err.contains("index.json") && err.contains("manifest_limit"),
        "{err}"
    );
    assert!(sent.load(Ordering::Relaxed) < 64 << 20, "{sent:?}");
}

/// An error answered with gigabytes of body (a server's `500`, read by the
/// storage services whole for its message) is read for its first 4 KiB,
/// then dropped: the error still names the manifest.
#[test]
fn an_error_answered_with_gigabytes_is_read_for_its_message_only() {
    let t = tempfile::tempdir().unwrap();
    let (uri, sent) = long_server(None, "500 Internal Server Error", 4 << 30);
    let err = common::open_error(&uri, &cache_opts(t.path()), "a server answering 500 opened");
    assert!(err.contains("index.json") && err.contains("500"), "{err}");
    // Each attempt read to 4 KiB and dropped.
    assert!(sent.load(Ordering::Relaxed) < 64 << 20, "{sent:?}: {err}");
}
