//! A shard replaced during a run (same size, other bytes) is an error that
//! names it and both versions, never a mix of the two, delivered or
//! cached; a later run reads the new version whole. Over plain HTTP the
//! server is a few lines on 127.0.0.1 that replace the shard as the cache
//! fills (honouring `If-Match`, or ignoring it as some servers and proxies
//! do); over S3 a real moto_server has the object overwritten in place
//! between two reads.

use crate::common;

use common::{Moto, fields, indexed_dataset, read_all, small_cache};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use zephon_core::Value;
use zephon_storage::RemoteDataset;
use zephon_storage::backend::{Backend, runtime};

/// Lines of one shard at version `v`: the same length at every version
/// (each says its version), about 8 blocks of 64 KiB in all.
fn shard(v: u8) -> Vec<u8> {
    (0..5000)
        .map(|i| format!("{{\"id\":{i},\"v\":{v},\"pad\":\"{}\"}}\n", "p".repeat(70)))
        .collect::<String>()
        .into_bytes()
}

/// The object the server holds: its bytes and ETag.
struct Object {
    bytes: Vec<u8>,
    etag: String,
}

/// Serves `/index.json` and `/a.jsonl` (by range, with an ETag); the shard
/// is replaced by its version 2 while the first shard GET is answered (the
/// bytes of that answer still version 1). With `honour`, a read whose
/// `If-Match` names another ETag is answered `412`; without, it is
/// answered anyway, with the new bytes and ETag.
fn replacing_server(honour: bool) -> (String, Arc<AtomicUsize>) {
    let gets = Arc::new(AtomicUsize::new(0));
    let count = gets.clone();
    let object = Arc::new(Mutex::new(Object {
        bytes: shard(1),
        etag: "\"v1\"".into(),
    }));
    let len = shard(1).len();
    let manifest =
        format!(r#"{{"version":1,"shards":[{{"path":"a.jsonl","samples":5000,"bytes":{len}}}]}}"#);
    let addr = common::tiny::serve_heads(move |request, headers, conn| {
        if request.contains("/index.json") {
            return common::tiny::answer(conn, "200 OK", "", manifest.as_bytes());
        }
        let mut o = object.lock().unwrap();
        if request.starts_with("HEAD ") {
            let head = format!(
                "HTTP/1.1 200 OK\r\nETag: {}\r\nContent-Length: {}\r\n\r\n",
                o.etag,
                o.bytes.len()
            );
            return std::io::Write::write_all(conn, head.as_bytes()).is_ok();
        }
        let (bytes, etag) = (o.bytes.clone(), o.etag.clone());
        if count.fetch_add(1, Ordering::SeqCst) == 0 {
            *o = Object {
                bytes: shard(2),
                etag: "\"v2\"".into(),
            };
        }
        drop(o);
        let if_match = headers.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("if-match")
                .then(|| v.trim().to_owned())
        });
        if honour && if_match.is_some_and(|m| m != etag) {
            return common::tiny::answer(conn, "412 Precondition Failed", "", b"");
        }
        let (a, b) = match common::tiny::range(headers) {
            Some((a, Some(b))) => (a, b.min(bytes.len() - 1)),
            Some((a, None)) => (a, bytes.len() - 1),
            None => (0, bytes.len() - 1),
        };
        let head = format!(
            "ETag: {etag}\r\nContent-Range: bytes {a}-{b}/{}\r\n",
            bytes.len()
        );
        common::tiny::answer(conn, "206 Partial Content", &head, &bytes[a..=b])
    });
    (format!("http://{addr}/"), gets)
}

/// The versions of the records read (the `v` of each).
fn versions(records: &[zephon_core::Record]) -> std::collections::BTreeSet<i64> {
    records
        .iter()
        .map(|r| match r.get("v") {
            Some(Value::Int(v)) => *v,
            other => panic!("no version in {other:?}"),
        })
        .collect()
}

fn a_shard_replaced_as_the_cache_fills_is_an_error_naming_both_versions(honour: bool) {
    let t = tempfile::tempdir().unwrap();
    let (uri, gets) = replacing_server(honour);
    let opts = small_cache(t.path(), 1 << 20, 4 << 20);
    let rd = RemoteDataset::open("d", &uri, &opts).unwrap();
    let s = rd.dataset().shards()[0].clone();
    let err = match runtime::block_on(s.read_run(0, 5000)) {
        Ok(r) => panic!("read {:?} while the shard changed", versions(&r)),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("a.jsonl") && err.contains("\"v1\"") && err.contains("\"v2\""),
        "{err}"
    );
    assert!(gets.load(Ordering::SeqCst) > 1, "the cache was filling");
    // Another run over the same cache folder: the new version, whole, and
    // no block kept from the old one.
    let again = RemoteDataset::open("d", &uri, &opts).unwrap();
    let records = read_all(again.dataset().clone(), false).unwrap();
    assert_eq!(records.len(), 5000);
    assert_eq!(versions(&records), [2].into());
    // A third run is served by the cache, the new version still.
    let before = gets.load(Ordering::SeqCst);
    let third = RemoteDataset::open("d", &uri, &opts).unwrap();
    let records = read_all(third.dataset().clone(), false).unwrap();
    assert_eq!(versions(&records), [2].into());
    assert_eq!(gets.load(Ordering::SeqCst), before, "served by the cache");
}

#[test]
fn over_http_a_shard_replaced_mid_run_is_refused_by_if_match() {
    a_shard_replaced_as_the_cache_fills_is_an_error_naming_both_versions(true);
}

#[test]
fn over_http_a_server_ignoring_if_match_is_caught_by_the_etag_it_answers() {
    a_shard_replaced_as_the_cache_fills_is_an_error_naming_both_versions(false);
}

#[test]
fn over_s3_an_object_overwritten_in_place_is_refused_and_a_new_run_reads_it() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    // One shard of about 7 blocks of 64 KiB, with its line index.
    indexed_dataset(&data, 1, 6000);
    let moto = Moto::start(t.path());
    moto.upload("bkt", "ds", &data);
    let opts = moto.opts(small_cache(t.path(), 1 << 20, 4 << 20));
    let rd = RemoteDataset::open("d", "s3://bkt/ds", &opts).unwrap();
    let s = rd.dataset().shards()[0].clone();
    let first = runtime::block_on(s.read_run(0, 1)).unwrap();
    // The same length, other bytes: every line's text in capitals.
    let old = std::fs::read(data.join("000.jsonl")).unwrap();
    let new = String::from_utf8(old.clone())
        .unwrap()
        .replace("sample", "SAMPLE");
    assert_eq!(new.len(), old.len());
    let b = Backend::open("up", "s3://bkt/ds", &moto.opts(Default::default())).unwrap();
    common::cloud::put(&b, "000.jsonl", new.into_bytes());
    let err = match runtime::block_on(s.read_run(5999, 1)) {
        Ok(r) => panic!("read {:?} of the new version", fields(&r)),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("s3://bkt/ds/000.jsonl")
            && err.contains("changed")
            && err.matches("ETag").count() >= 2,
        "{err}"
    );
    // The block read before the change is not served for the new version.
    let again = RemoteDataset::open("d", "s3://bkt/ds", &opts).unwrap();
    let s = again.dataset().shards()[0].clone();
    let now = runtime::block_on(s.read_run(0, 1)).unwrap();
    assert_ne!(fields(&now), fields(&first));
    assert!(fields(&now)[0].contains("SAMPLE 0"), "{:?}", fields(&now));
    let last = runtime::block_on(s.read_run(5999, 1)).unwrap();
    assert!(
        fields(&last)[0].contains("SAMPLE 5999"),
        "{:?}",
        fields(&last)
    );
}
