//! A server that sends a little and then stalls, again and again, fails
//! the read once `block_deadline` is spent, by name, whatever progress it
//! makes: `io_timeout` bounds each wait, `min_rate` each window, and a
//! retry starts both afresh, so without a deadline that progress does not
//! reset, such a server held a block for as long as it liked. The server
//! is a few lines on 127.0.0.1 that answer `index.json` at once and every
//! read of the shard 4 KiB at a time, each piece within `io_timeout` (or,
//! stalling, past it, so that every try ends in a retry).

use crate::common;

use common::small_cache;
use std::io::Write;
use std::time::{Duration, Instant};
use zephon_storage::RemoteDataset;
use zephon_storage::backend::runtime;

/// Bytes of the shard: 256 KiB of u16 tokens, one block of the cache.
const LEN: usize = 256 << 10;

/// Serves the manifest and the shard `t.bin` by range, 4 KiB at a time
/// with `pause` between pieces; with `cut`, the connection is closed after
/// the first piece's pause (the next try asks for the rest).
fn trickling_server(pause: Duration, cut: bool) -> String {
    let manifest = format!(
        r#"{{"version":1,"format":{{"kind":"tokens","dtype":"u16","seq_len":4}},"shards":[{{"path":"t.bin","samples":{},"bytes":{LEN}}}]}}"#,
        LEN / 8
    );
    let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    let addr = common::tiny::serve(move |request, headers, conn| {
        if request.contains("/index.json") {
            return common::tiny::answer(conn, "200 OK", "", manifest.as_bytes());
        }
        let (a, b) = match common::tiny::range(headers) {
            Some((a, Some(b))) => (a, b.min(LEN - 1)),
            Some((a, None)) => (a, LEN - 1),
            None => (0, LEN - 1),
        };
        let head = format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {a}-{b}/{LEN}\r\nContent-Length: {}\r\n\r\n",
            b + 1 - a
        );
        if conn.write_all(head.as_bytes()).is_err() {
            return false;
        }
        for piece in data[a..=b].chunks(4096) {
            if conn.write_all(piece).and_then(|()| conn.flush()).is_err() {
                return false;
            }
            std::thread::sleep(pause);
            if cut {
                return false;
            }
        }
        true
    });
    format!("http://{addr}/")
}

#[test]
fn a_trickling_server_fails_the_read_within_block_deadline_by_name() {
    // Each piece within io_timeout (1 s) and above min_rate: only the
    // deadline stops it. Stalling past io_timeout: every try fails and is
    // retried from where it stopped.
    for (pause, cut) in [
        (Duration::from_millis(300), false),
        (Duration::from_millis(1300), true),
    ] {
        for byte_range in [false, true] {
            let t = tempfile::tempdir().unwrap();
            let uri = trickling_server(pause, cut);
            let opts = small_cache(t.path(), 1 << 20, 4 << 20)
                .cache(
                    zephon_storage::CacheOptions::default()
                        .root(t.path().join("cache"))
                        .block_bytes(LEN as u64)
                        .memory_bytes(1 << 20)
                        .limit_bytes(4 << 20),
                )
                .byte_range(byte_range)
                .retries(100)
                .block_deadline(Duration::from_secs(2));
            let rd = RemoteDataset::open("d", &uri, &opts).unwrap();
            let s = rd.dataset().shards()[0].clone();
            let started = Instant::now();
            let got = runtime::block_on(s.read_run(0, (LEN / 8) as u64));
            let took = started.elapsed();
            let case = format!("pause {pause:?}, cut {cut}, byte_range {byte_range}");
            let err = match got {
                Ok(_) => panic!("{case}: read whole in {took:?}"),
                Err(e) => e.to_string(),
            };
            assert!(
                err.contains("t.bin") && err.contains("block_deadline"),
                "{case}: {err}"
            );
            // The deadline and a little, not the server's pace.
            assert!(took < Duration::from_secs(6), "{case}: {took:?}: {err}");
        }
    }
}
