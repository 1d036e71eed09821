//! A server that drips its answer (a few bytes at a time, each well within
//! `io_timeout`) fails the read once a window of waiting brings less than
//! `min_rate`, by name and in seconds, instead of holding it for as long as
//! the server likes: `io_timeout` alone bounds each wait for the next
//! chunk, not the body. The server is a few lines on 127.0.0.1 that answer
//! `index.json` at once and the shard 4 bytes every 100 ms.

use crate::common;

use common::cache_opts;
use std::io::Write;
use std::time::{Duration, Instant};
use zephon_storage::RemoteDataset;
use zephon_storage::backend::runtime;

/// Serves `manifest` as `/index.json` and `body` (anything else) a few
/// bytes every 100 ms; returns the base URI.
fn dripping_server(manifest: &'static str, body: Vec<u8>) -> String {
    let addr = common::tiny::serve(move |request, _, conn| {
        let drip = !request.contains("/index.json");
        let bytes: &[u8] = if drip { &body } else { manifest.as_bytes() };
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", bytes.len());
        if conn.write_all(head.as_bytes()).is_err() {
            return false;
        }
        for piece in bytes.chunks(if drip { 4 } else { bytes.len().max(1) }) {
            if conn.write_all(piece).and_then(|()| conn.flush()).is_err() {
                return false;
            }
            if drip {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        true
    });
    format!("http://{addr}/")
}

#[test]
fn a_dripping_server_fails_the_read_by_name_in_seconds() {
    let t = tempfile::tempdir().unwrap();
    // 400 bytes at 40 bytes a second: 10 s to send, each chunk within 0.1 s.
    let lines: String = (0..50).map(|i| format!("{{\"a\":{i:02}}}\n")).collect();
    assert_eq!(lines.len(), 450);
    let manifest: &'static str = Box::leak(
        format!(
            r#"{{"version":1,"shards":[{{"path":"a.jsonl","samples":50,"bytes":{}}}]}}"#,
            lines.len()
        )
        .into_boxed_str(),
    );
    let uri = dripping_server(manifest, lines.into_bytes());
    let opts = cache_opts(t.path())
        .io_timeout(Duration::from_secs(1))
        .min_rate(1024)
        .retries(1);
    let started = Instant::now();
    let rd = RemoteDataset::open("d", &uri, &opts).unwrap();
    let s = &rd.dataset().shards()[0];
    let err = runtime::block_on(s.read_run(0, 1)).unwrap_err().to_string();
    let took = started.elapsed();
    assert!(err.contains("a.jsonl") && err.contains("min_rate"), "{err}");
    // One window of waiting, about a second (a read too slow is not
    // retried: each retry of a read that made progress starts a fresh
    // count), not the eleven seconds the server would take.
    assert!(took < Duration::from_secs(6), "{took:?}: {err}");
}
