//! Redirects from a plain-HTTP endpoint. Requests to `http://` URLs go
//! through a client that loads no TLS roots (building one that verifies
//! certificates reads the system's whole root store), so a redirect must
//! still be followed as one client would: within plain HTTP by that
//! client, and to `https://` by a client that speaks TLS. The redirecting
//! server is a few lines on 127.0.0.1 in front of a real nginx; the HTTPS
//! end is a listener that records whether what arrives is a TLS handshake.

use crate::common;

use common::{Nginx, cache_opts, fields, indexed_dataset, read_all};
use std::io::Read;
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;
use zephon_storage::RemoteDataset;

/// Answers every request with `301` to `target` followed by the request's
/// path; returns its base URI.
fn redirecting_server(target: String) -> String {
    let addr = common::tiny::serve(move |request, _, conn| {
        let path = request.split_whitespace().nth(1).unwrap_or("/");
        let location = format!("Location: {target}{}\r\n", path.trim_start_matches('/'));
        common::tiny::answer(conn, "301 Moved Permanently", &location, b"")
    });
    format!("http://{addr}/")
}

#[test]
fn a_redirect_within_plain_http_is_followed() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let want = indexed_dataset(&data, 2, 40);
    let nginx = Nginx::start(t.path(), &data);
    let front = redirecting_server(nginx.uri());
    let rd = RemoteDataset::open("d", &front, &cache_opts(t.path())).unwrap();
    assert_eq!(
        fields(&read_all(rd.dataset().clone(), false).unwrap()),
        want
    );
    assert!(
        nginx.gets("index.json HTTP") >= 1,
        "the manifest came from nginx"
    );
}

#[test]
fn a_redirect_to_https_is_sent_over_tls() {
    let tls = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = format!("https://{}/", tls.local_addr().unwrap());
    let (seen, first_bytes) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in tls.incoming() {
            let Ok(mut conn) = conn else { return };
            conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut head = [0u8; 3];
            let got = conn.read_exact(&mut head).map(|()| head.to_vec());
            // Closing without an answer fails the handshake, which the
            // client may retry: each attempt is reported.
            if seen.send(got.unwrap_or_default()).is_err() {
                return;
            }
        }
    });
    let t = tempfile::tempdir().unwrap();
    let front = redirecting_server(target.clone());
    let opts = cache_opts(t.path()).retries(0);
    let e = common::open_error(
        &front,
        &opts,
        &format!("no server speaks TLS at {target}: the open cannot succeed"),
    );
    assert!(e.contains("index.json"), "{e}");
    let head = first_bytes
        .recv_timeout(Duration::from_secs(10))
        .expect("the redirect to https:// was not followed");
    // A TLS record of type handshake (22), version 3.x: a ClientHello.
    assert_eq!(
        (head.first(), head.get(1)),
        (Some(&22), Some(&3)),
        "not a TLS handshake: {head:?} ({e})"
    );
}
