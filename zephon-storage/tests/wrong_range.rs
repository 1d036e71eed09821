//! A ranged answer must be the range asked. The storage services take a
//! `206 Partial Content` as the bytes asked for; a server (or a proxy or
//! cache in front of it) answering with another range of the same length
//! handed the reader another sample's tokens without a word. The server is
//! a few lines on 127.0.0.1 that answer every range one sample further on,
//! saying so in its `Content-Range`.

use crate::common;

use common::cache_opts;
use zephon_storage::RemoteDataset;
use zephon_storage::backend::runtime;

/// Ten samples of four u16 tokens (8 bytes each): sample `i` holds
/// `4i..4i+4`.
fn shard() -> Vec<u8> {
    (0u16..40).flat_map(|t| t.to_le_bytes()).collect()
}

/// Serves `manifest` as `/index.json` and the shard's ranges shifted by one
/// sample (back by one past the middle), with a `Content-Range` that says
/// which bytes they are.
fn shifting_server(manifest: &'static str) -> String {
    let data = shard();
    let addr = common::tiny::serve(move |request, headers, conn| {
        if request.contains("/index.json") {
            return common::tiny::answer(conn, "200 OK", "", manifest.as_bytes());
        }
        let Some((a, Some(b))) = common::tiny::range(headers) else {
            return common::tiny::answer(conn, "200 OK", "", &data);
        };
        let (a, b) = if b + 8 < data.len() {
            (a + 8, b + 8)
        } else {
            (a - 8, b - 8)
        };
        let range = format!("Content-Range: bytes {a}-{b}/{}\r\n", data.len());
        common::tiny::answer(conn, "206 Partial Content", &range, &data[a..=b])
    });
    format!("http://{addr}/")
}

#[test]
fn a_range_answered_with_other_bytes_is_refused_by_name() {
    let t = tempfile::tempdir().unwrap();
    let manifest = r#"{"version":1,"format":{"kind":"tokens","dtype":"u16","seq_len":4},"shards":[{"path":"t.bin","samples":10,"bytes":80}]}"#;
    let uri = shifting_server(manifest);
    let opts = cache_opts(t.path()).byte_range(true);
    let rd = RemoteDataset::open("d", &uri, &opts).unwrap();
    let s = &rd.dataset().shards()[0];
    let got = runtime::block_on(s.read_run(3, 1));
    let err = match got {
        Ok(r) => panic!("sample 3 read as {:?} (its tokens are 12..16)", r[0].fields),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("t.bin") && err.contains("Content-Range") && err.contains("bytes 24-31"),
        "{err}"
    );
}
