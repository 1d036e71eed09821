//! A machine without a CA bundle (a slim container image without
//! `ca-certificates`) reads plain-HTTP datasets, and an `https://` one is
//! an error that says why, not a panic. Building a client that verifies
//! certificates fails there; before plain-HTTP requests went through a
//! client of their own, opening any HTTP or S3 dataset ended in "task
//! panicked". The CA bundle is hidden from this process by pointing
//! `SSL_CERT_FILE` and `SSL_CERT_DIR` at paths that do not exist: one test
//! in its own binary, so nothing else runs in the process it changes.

mod common;

use common::{Nginx, cache_opts, fields, indexed_dataset, read_all};
use zephon_storage::RemoteDataset;

#[test]
fn without_ca_roots_http_reads_and_https_is_a_clear_error() {
    let t = tempfile::tempdir().unwrap();
    let missing = t.path().join("no-such-ca-bundle");
    // SAFETY: this binary's only test sets them before any other thread
    // of its own exists (the harness's threads read no environment).
    unsafe {
        std::env::set_var("SSL_CERT_FILE", &missing);
        std::env::set_var("SSL_CERT_DIR", &missing);
    }
    let data = t.path().join("data");
    let want = indexed_dataset(&data, 2, 30);
    let nginx = Nginx::start(t.path(), &data);
    let rd = RemoteDataset::open("d", &nginx.uri(), &cache_opts(t.path())).unwrap();
    assert_eq!(
        fields(&read_all(rd.dataset().clone(), false).unwrap()),
        want
    );

    let port = common::free_port();
    let uri = format!("https://127.0.0.1:{port}/data/");
    let opts = cache_opts(t.path()).retries(0);
    let e = common::open_error(
        &uri,
        &opts,
        &format!("{uri} has no server: the open cannot succeed"),
    );
    // The reason, from the client's source error, not only its "builder
    // error".
    assert!(
        e.contains("cannot build an HTTP client")
            && e.to_lowercase().contains("certificate")
            && e.contains("127.0.0.1"),
        "{e}"
    );
    assert!(!e.contains("panicked"), "{e}");
}
