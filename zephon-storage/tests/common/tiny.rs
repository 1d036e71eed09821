//! A few lines of HTTP server on 127.0.0.1, for answers no real server
//! gives on purpose: a body far longer than asked, a drip, a redirect to
//! TLS, a listing that leads back. Self-contained (std only), so other
//! crates' tests include it too (`#[path = ...] mod tiny;`).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Serves every connection on a thread of its own: each request's first
/// line and its header lines (as sent, `\r\n` ends included) go to
/// `answer` with the connection to write the answer to; `answer` returns
/// `false` to close the connection. A `HEAD` is answered `200` with no
/// validator, not handed to `answer` (see [`serve_heads`]). Returns the
/// server's address.
pub fn serve<F>(answer: F) -> SocketAddr
where
    F: Fn(&str, &str, &mut TcpStream) -> bool + Send + Sync + 'static,
{
    serve_with(answer, false)
}

/// As [`serve`], with `HEAD` requests handed to `answer` too.
#[allow(dead_code)]
pub fn serve_heads<F>(answer: F) -> SocketAddr
where
    F: Fn(&str, &str, &mut TcpStream) -> bool + Send + Sync + 'static,
{
    serve_with(answer, true)
}

fn serve_with<F>(answer: F, heads: bool) -> SocketAddr
where
    F: Fn(&str, &str, &mut TcpStream) -> bool + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                loop {
                    let mut request = String::new();
                    if reader.read_line(&mut request).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut headers = String::new();
                    loop {
                        let before = headers.len();
                        if reader.read_line(&mut headers).unwrap_or(0) <= 2 {
                            headers.truncate(before);
                            break;
                        }
                    }
                    // A stat: a reader records the version it reads at by
                    // one. These servers answer it with no validator (so
                    // reads go unconditional, as before) rather than with a
                    // body a HEAD must not have.
                    if request.starts_with("HEAD ") && !heads {
                        let head = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
                        if conn.write_all(head.as_bytes()).is_err() {
                            return;
                        }
                        continue;
                    }
                    if !answer(&request, &headers, &mut conn) {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// The single range a request's header lines ask for (`Range: bytes=A-B`,
/// or `bytes=A-`): its first byte and its last, if given.
pub fn range(headers: &str) -> Option<(usize, Option<usize>)> {
    headers.lines().find_map(|l| {
        let l = l.to_ascii_lowercase();
        let (a, b) = l.strip_prefix("range: bytes=")?.trim().split_once('-')?;
        Some((a.parse().ok()?, b.parse().ok()))
    })
}

/// Writes an answer: `status` (`"200 OK"`), the header lines `headers`
/// (each ending `\r\n`, or none), the body's length and the body. Whether
/// the connection took it.
pub fn answer(conn: &mut TcpStream, status: &str, headers: &str, body: &[u8]) -> bool {
    let head = format!(
        "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).is_ok() && conn.write_all(body).is_ok()
}

/// Writes an answer with `status` that says it is `len` bytes long, then
/// `piece` again and again until `sent` (counted across connections)
/// reaches `len` or the client goes. Always `false`: the connection is
/// done with.
pub fn flood(conn: &mut TcpStream, status: &str, len: u64, piece: &[u8], sent: &AtomicU64) -> bool {
    let head = format!("HTTP/1.1 {status}\r\nContent-Length: {len}\r\n\r\n");
    if conn.write_all(head.as_bytes()).is_err() {
        return false;
    }
    while sent.load(Ordering::Relaxed) < len {
        if conn.write_all(piece).is_err() {
            return false;
        }
        sent.fetch_add(piece.len() as u64, Ordering::Relaxed);
    }
    false
}
