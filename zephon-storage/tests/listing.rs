//! A server's listing is input too. A dataset without `index.json` is
//! opened by listing its objects, page after page for as long as the server
//! says there is more: a server whose continuation leads back to a page it
//! already gave (broken, or hostile) made that listing endless, and a name
//! given twice would be a shard read twice; and each page is read whole
//! before it is parsed, so a page of gigabytes was held in memory. The
//! servers here are a few lines on 127.0.0.1 speaking enough of S3's
//! ListObjectsV2: one answers every page with the same object and "there is
//! more", the other a page with a 4 GiB body.

use crate::common;

use common::cache_opts;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;
use zephon_storage::RemoteDataset;

/// An S3 endpoint on 127.0.0.1 answering `index.json` with S3's 404 and
/// every listing with one object, `key`, and, with `again`, a continuation
/// token that asks for the same page again; returns its endpoint and a
/// count of the listing pages it served.
fn one_key_s3(key: &'static str, again: bool) -> (String, Arc<AtomicU64>) {
    let pages = Arc::new(AtomicU64::new(0));
    let counter = pages.clone();
    let more = match again {
        true => {
            "<IsTruncated>true</IsTruncated><NextContinuationToken>again</NextContinuationToken>"
        }
        false => "<IsTruncated>false</IsTruncated>",
    };
    let page = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
         <ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
         <Name>b</Name><Prefix>data/</Prefix><KeyCount>1</KeyCount>\
         <MaxKeys>1000</MaxKeys>{more}\
         <Contents><Key>{key}</Key><Size>8</Size>\
         <LastModified>2026-01-01T00:00:00.000Z</LastModified>\
         <ETag>\"e\"</ETag></Contents></ListBucketResult>"
    );
    let addr = common::tiny::serve(move |request, _, conn| {
        let (status, body) = if request.contains("list-type=2") {
            counter.fetch_add(1, Ordering::Relaxed);
            ("200 OK", page.as_str())
        } else {
            (
                "404 Not Found",
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchKey\
                 </Code><Message>no such key</Message></Error>",
            )
        };
        let xml = "Content-Type: application/xml\r\n";
        common::tiny::answer(conn, status, xml, body.as_bytes())
    });
    (format!("http://{addr}"), pages)
}

#[test]
fn a_listing_that_leads_back_is_an_error_not_an_endless_read() {
    let t = tempfile::tempdir().unwrap();
    let (endpoint, pages) = one_key_s3("data/a.jsonl", true);
    let opts = cache_opts(t.path())
        .endpoint(&endpoint)
        .region("us-east-1")
        .anonymous(true);
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || {
        let r = RemoteDataset::open("d", "s3://b/data", &opts).map(|_| ());
        let _ = done.send(r.map_err(|e| e.to_string()));
    });
    let err = match result.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(())) => panic!("a listing of one object given again and again opened"),
        Ok(Err(e)) => e,
        Err(_) => panic!(
            "still listing after 30 s ({} pages served)",
            pages.load(Ordering::Relaxed)
        ),
    };
    assert!(
        err.contains("a.jsonl") && err.contains("twice") && err.contains("index.json"),
        "{err}"
    );
    assert_eq!(pages.load(Ordering::Relaxed), 2, "{err}");
}

#[test]
fn a_listing_page_of_gigabytes_is_refused_past_its_limit() {
    flooded_listing("s3://b/data", 4 << 30);
}

/// At a bucket's root the listing asks for no `prefix`: the page was not
/// known for one, and read whole.
#[test]
fn a_listing_page_at_a_bucket_root_is_held_to_the_same_limit() {
    flooded_listing("s3://b", 1 << 30);
}

/// Opens `uri` from a server answering its listing with a page of `bytes`.
fn flooded_listing(uri: &str, bytes: u64) {
    let t = tempfile::tempdir().unwrap();
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    let addr = common::tiny::serve(move |request, _, conn| {
        if !request.contains("list-type=2") {
            let body = b"<Error><Code>NoSuchKey</Code></Error>";
            return common::tiny::answer(conn, "404 Not Found", "", body);
        }
        let piece = "<Contents><Key>data/a.jsonl</Key><Size>8</Size></Contents>".repeat(4096);
        common::tiny::flood(conn, "200 OK", bytes, piece.as_bytes(), &counter)
    });
    let opts = cache_opts(t.path())
        .endpoint(&format!("http://{addr}"))
        .region("us-east-1")
        .anonymous(true);
    let err = common::open_error(uri, &opts, "a listing page of gigabytes opened");
    assert!(
        err.contains("page of the listing") && err.contains("index.json"),
        "{err}"
    );
    assert!(sent.load(Ordering::Relaxed) < 256 << 20, "{sent:?}: {err}");
}

/// A listing whose key lies outside the prefix asked for (`a` for the
/// prefix `data/`) made the client's key-to-path code panic, which ended
/// `zephon build-index` with status 101: it is an error naming the listing.
#[test]
fn a_listed_key_outside_the_prefix_is_an_error_not_a_panic() {
    use zephon_storage::backend::{Backend, runtime};
    let t = tempfile::tempdir().unwrap();
    let (endpoint, _) = one_key_s3("a", false);
    let opts = cache_opts(t.path())
        .endpoint(&endpoint)
        .region("us-east-1")
        .anonymous(true);
    let b = Backend::open("d", "s3://b/data", &opts).unwrap();
    let listed = std::thread::spawn(move || {
        runtime::block_on(zephon_storage::scan::build_index(&b, "d")).map_err(|e| e.to_string())
    })
    .join()
    .expect("build_index returns, not panics");
    let err = listed.expect_err("a listing of a key outside the prefix indexed");
    assert!(err.contains("listing s3://b/data"), "{err}");
}
