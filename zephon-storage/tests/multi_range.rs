//! Many byte ranges in one HTTP request (`multipart/byteranges`), against
//! nginx and against a small HTTP server on 127.0.0.1 that answers
//! multi-range requests badly on purpose: fewer requests, the same records
//! in the same order; a server that ignores or merges the ranges is still
//! read right; a broken multipart answer is asked again, and is an error
//! naming the dataset, the shard's URI and the range once the retries are
//! spent.

use crate::common;

use common::{Nginx, cache_opts};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use zephon_core::{BlockShuffle, Dataset, PipelineExt, Runner, WorkSource};
use zephon_storage::backend::{Backend, runtime};
use zephon_storage::format::TokenDtype;
use zephon_storage::scan::build_index_with;
use zephon_storage::{DatasetExt, FormatOptions, RemoteDataset, StorageOptions};

/// Tokens per sample (32 bytes).
const SEQ: u64 = 16;

fn format() -> FormatOptions {
    FormatOptions::default().seq_len(SEQ).dtype(TokenDtype::U16)
}

/// `a.bin` of `n` samples, every token distinct, with its `index.json`.
fn token_dataset(dir: &Path, n: u64) {
    std::fs::create_dir_all(dir).unwrap();
    let bytes: Vec<u8> = (0..n * SEQ)
        .flat_map(|t| (((t * 7 + 3) % 65_521) as u16).to_le_bytes())
        .collect();
    std::fs::write(dir.join("a.bin"), bytes).unwrap();
    let b = Backend::open("d", &dir.display().to_string(), &Default::default()).unwrap();
    runtime::block_on(build_index_with(&b, "d", &format())).unwrap();
}

fn opts(dir: &Path, parts: usize) -> StorageOptions {
    let mut o = cache_opts(dir)
        .byte_range(true)
        .range_gap(0)
        .range_part_gap(0)
        .range_parts(parts);
    o.format = format();
    o
}

/// A global shuffle of `ds`, read 256 pointers per group.
fn pass(ds: Dataset) -> Vec<Vec<u32>> {
    WorkSource::builder()
        .dataset(ds, 1.0)
        .seed(11)
        .shuffle_block_size(BlockShuffle::Global)
        .build()
        .unwrap()
        .stream()
        .fetch(2)
        .max_group(256)
        .into_blocking_iter(Runner::Threads { workers: 2 })
        .unwrap()
        .map(|r| r.unwrap().token_ids("tokens").unwrap().to_vec())
        .collect()
}

fn tokens(records: &[zephon_core::Record]) -> Vec<Vec<u32>> {
    records
        .iter()
        .map(|r| r.token_ids("tokens").unwrap().to_vec())
        .collect()
}

/// A shuffled pass over nginx with many spans per request: the records of
/// the local read in its order, in a small fraction of the requests that
/// one span per request takes.
#[test]
fn multi_range_requests_return_the_local_records_in_far_fewer_requests() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    token_dataset(&data, 2000);
    let want = pass(Dataset::from_path_with("d", &data, &format()).unwrap());
    let nginx = Nginx::start(t.path(), &data);
    let mut requests = Vec::new();
    for parts in [1, 256] {
        let rd = RemoteDataset::open("d", &nginx.uri(), &opts(t.path(), parts)).unwrap();
        let before = nginx.range_gets("a.bin HTTP");
        assert_eq!(pass(rd.dataset().clone()), want, "parts {parts}");
        requests.push(nginx.range_gets("a.bin HTTP") - before);
    }
    assert!(
        requests[1] * 16 <= requests[0],
        "2,000 shuffled samples: {} requests one span each, {} with 256",
        requests[0],
        requests[1]
    );
    assert_eq!(nginx.gets("a.bin HTTP"), 0, "no whole-file download");
}

/// Within a multi-range request a span covers gaps of `range_part_gap` at
/// most, not `range_gap`: a further span costs a part header there, not a
/// request, so samples far apart travel as parts of their own and the
/// bytes between them stay on the server. With one range per request
/// (`range_parts` 1) `range_gap` still merges them into one span.
#[test]
fn multi_range_requests_leave_the_gaps_between_far_samples_on_the_server() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    // 640,000 bytes; every 256th sample: 79 samples of 32 bytes, 8 KB apart.
    token_dataset(&data, 20_000);
    let local = Dataset::from_path_with("d", &data, &format()).unwrap();
    let sparse: Vec<u64> = (0..20_000).step_by(256).collect();
    let want = tokens(&runtime::block_on(local.shards()[0].read_indices(&sparse)).unwrap());
    let nginx = Nginx::start(t.path(), &data);
    let mut sent = Vec::new();
    for parts in [256, 1] {
        let mut o = cache_opts(t.path())
            .byte_range(true)
            .range_gap(1 << 20)
            .range_parts(parts);
        o.format = format();
        assert_eq!(o.range_part_gap, 4 << 10, "the default");
        let rd = RemoteDataset::open("d", &nginx.uri(), &o).unwrap();
        let before = nginx.range_bytes("a.bin HTTP");
        let got = runtime::block_on(rd.dataset().shards()[0].read_indices(&sparse)).unwrap();
        assert_eq!(tokens(&got), want, "parts {parts}");
        sent.push(nginx.range_bytes("a.bin HTTP") - before);
    }
    let wanted = sparse.len() as u64 * 2 * SEQ;
    assert!(
        sent[0] < wanted * 8,
        "{} bytes sent for {wanted} wanted in multi-range requests",
        sent[0]
    );
    assert_eq!(
        sent[1],
        (sparse[sparse.len() - 1] + 1 - sparse[0]) * 2 * SEQ,
        "one span from the first sample to the last"
    );
}

/// How the small server answers a request for more than one range.
#[derive(Clone, Copy, Debug)]
enum Multi {
    /// 200 and the whole file, as a server without multi-range support.
    Whole,
    /// One 206 range from the first asked to the last, as a server that
    /// merges ranges.
    Merged,
    /// A multipart body whose last part is one byte short of its
    /// Content-Range.
    ShortPart,
    /// A multipart body whose last part is a range nobody asked for.
    Foreign,
    /// [`Multi::ShortPart`] for the first multi-range request, a right
    /// multipart body after.
    ShortOnce,
}

/// An HTTP/1.1 server on 127.0.0.1 serving the files of `root`: single
/// ranges right, multi-range requests as `multi` says. Counts the
/// multi-range requests it was sent, and the single-range ones.
fn serve(root: PathBuf, multi: Multi) -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let uri = format!("http://{}/", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let singles = Arc::new(AtomicUsize::new(0));
    let (seen, single) = (count.clone(), singles.clone());
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let (root, seen, single) = (root.clone(), seen.clone(), single.clone());
            std::thread::spawn(move || {
                let _ = answer(conn, &root, multi, &seen, &single);
            });
        }
    });
    (uri, count, singles)
}

fn answer(
    conn: TcpStream,
    root: &Path,
    multi: Multi,
    seen: &AtomicUsize,
    single: &AtomicUsize,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut out = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
        let mut range = None;
        loop {
            let mut h = String::new();
            reader.read_line(&mut h)?;
            if h.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':')
                && k.eq_ignore_ascii_case("range")
            {
                range = Some(v.trim().trim_start_matches("bytes=").to_owned());
            }
        }
        let Ok(file) = std::fs::read(root.join(path.trim_start_matches('/'))) else {
            out.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
            continue;
        };
        let total = file.len() as u64;
        let ranges: Vec<(u64, u64)> = range
            .iter()
            .flat_map(|r| r.split(','))
            .map(|r| {
                let (a, b) = r.split_once('-').unwrap();
                let (a, b): (u64, u64) = (a.parse().unwrap(), b.parse().unwrap());
                (a, (b + 1).min(total))
            })
            .collect();
        let (status, head, body): (&str, String, Vec<u8>) = match (ranges.len(), multi) {
            (0, _) => ("200 OK", String::new(), file.clone()),
            (1, _) => {
                single.fetch_add(1, Ordering::SeqCst);
                let (a, b) = ranges[0];
                let head = format!("Content-Range: bytes {a}-{}/{total}\r\n", b - 1);
                (
                    "206 Partial Content",
                    head,
                    file[a as usize..b as usize].to_vec(),
                )
            }
            (_, Multi::Whole) => {
                seen.fetch_add(1, Ordering::SeqCst);
                ("200 OK", String::new(), file.clone())
            }
            (_, Multi::Merged) => {
                seen.fetch_add(1, Ordering::SeqCst);
                let (a, b) = (ranges[0].0, ranges[ranges.len() - 1].1);
                let head = format!("Content-Range: bytes {a}-{}/{total}\r\n", b - 1);
                (
                    "206 Partial Content",
                    head,
                    file[a as usize..b as usize].to_vec(),
                )
            }
            (n, bad) => {
                let bad = match (bad, seen.fetch_add(1, Ordering::SeqCst)) {
                    (Multi::ShortOnce, 0) => Multi::ShortPart,
                    (bad, _) => bad,
                };
                let mut body = Vec::new();
                for (i, &(a, b)) in ranges.iter().enumerate() {
                    let last = i == n - 1;
                    let (a, b) = match bad {
                        Multi::Foreign if last => (a + 1, b),
                        _ => (a, b),
                    };
                    let data = &file[a as usize..b as usize];
                    let data = match bad {
                        Multi::ShortPart if last => &data[..data.len() - 1],
                        _ => data,
                    };
                    body.extend_from_slice(
                        format!(
                            "\r\n--SEP\r\nContent-Type: application/octet-stream\r\n\
                             Content-Range: bytes {a}-{}/{total}\r\n\r\n",
                            b - 1
                        )
                        .as_bytes(),
                    );
                    body.extend_from_slice(data);
                }
                body.extend_from_slice(b"\r\n--SEP--\r\n");
                let head = "Content-Type: multipart/byteranges; boundary=SEP\r\n".to_owned();
                ("206 Partial Content", head, body)
            }
        };
        write!(
            out,
            "HTTP/1.1 {status}\r\n{head}Content-Length: {}\r\n\r\n",
            body.len()
        )?;
        if method != "HEAD" {
            out.write_all(&body)?;
        }
    }
}

/// Samples 3, 50 and 99 of `a.bin` (100 samples), one request of three
/// spans: bytes 96..128, 1600..1632 and 3168..3200.
const WANTED: [u64; 3] = [3, 50, 99];

/// A server that answers multi-range requests with the whole object, or
/// with one range over all of them: the same records, read again one
/// span at a time where needed; a server that ignores multi-range is
/// asked once, not on every read.
#[test]
fn a_server_that_ignores_or_merges_the_ranges_is_still_read_right() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    token_dataset(&data, 100);
    let local = Dataset::from_path_with("d", &data, &format()).unwrap();
    let want = tokens(&runtime::block_on(local.shards()[0].read_indices(&WANTED)).unwrap());
    for (multi, asked) in [(Multi::Whole, 1), (Multi::Merged, 2)] {
        let (uri, seen, _) = serve(data.clone(), multi);
        let rd = RemoteDataset::open("d", &uri, &opts(t.path(), 256)).unwrap();
        let shard = rd.dataset().shards()[0].clone();
        for _ in 0..2 {
            let got = runtime::block_on(shard.read_indices(&WANTED)).unwrap();
            assert_eq!(tokens(&got), want, "{multi:?}");
        }
        assert_eq!(
            seen.load(Ordering::SeqCst),
            asked,
            "{multi:?}: multi-range requests"
        );
    }
}

/// Spans of a multi-range request are planned with `range_part_gap`; when
/// the server answers it with the whole object, they are read again with
/// one range a request, and then merge within `range_gap` as any such
/// request's spans do: one request for three samples 1.5 KB apart under a
/// 4 KiB `range_gap`, not one per sample.
#[test]
fn ranges_read_again_one_by_one_merge_within_range_gap() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    token_dataset(&data, 100);
    let local = Dataset::from_path_with("d", &data, &format()).unwrap();
    let want = tokens(&runtime::block_on(local.shards()[0].read_indices(&WANTED)).unwrap());
    for (gap, requests) in [(4 << 10, 1), (0, WANTED.len())] {
        let (uri, seen, singles) = serve(data.clone(), Multi::Whole);
        let rd = RemoteDataset::open("d", &uri, &opts(t.path(), 256).range_gap(gap)).unwrap();
        let shard = rd.dataset().shards()[0].clone();
        let before = singles.load(Ordering::SeqCst);
        let got = runtime::block_on(shard.read_indices(&WANTED)).unwrap();
        assert_eq!(tokens(&got), want, "range_gap {gap}");
        assert_eq!(seen.load(Ordering::SeqCst), 1, "one multi-range request");
        assert_eq!(
            singles.load(Ordering::SeqCst) - before,
            requests,
            "range_gap {gap}: single-range requests"
        );
    }
}

/// A multipart answer with a part cut short, or a part of bytes nobody
/// asked for, on every try: an error naming the dataset, the shard's URI
/// and the range once the retries are spent (2, so 3 requests), never a
/// short or shifted sample.
#[test]
fn a_broken_multipart_answer_is_an_error_naming_the_uri_and_the_range() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    token_dataset(&data, 100);
    for (multi, says) in [
        (Multi::ShortPart, "bytes 3168..3200"),
        (Multi::Foreign, "bytes 3169..3200"),
    ] {
        let (uri, seen, _) = serve(data.clone(), multi);
        let rd = RemoteDataset::open("d", &uri, &opts(t.path(), 256)).unwrap();
        let shard = rd.dataset().shards()[0].clone();
        let err = runtime::block_on(shard.read_indices(&WANTED))
            .unwrap_err()
            .to_string();
        let file = format!("{uri}a.bin");
        assert!(
            err.contains(&file) && err.contains(says) && err.contains("`d`"),
            "{multi:?}: {err}"
        );
        assert_eq!(seen.load(Ordering::SeqCst), 3, "{multi:?}");
    }
}

/// A multipart answer broken once is asked again, and the ranges read right.
#[test]
fn a_multipart_answer_broken_once_is_asked_again() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    token_dataset(&data, 100);
    let local = Dataset::from_path_with("d", &data, &format()).unwrap();
    let want = tokens(&runtime::block_on(local.shards()[0].read_indices(&WANTED)).unwrap());
    let (uri, seen, singles) = serve(data.clone(), Multi::ShortOnce);
    let rd = RemoteDataset::open("d", &uri, &opts(t.path(), 256)).unwrap();
    let shard = rd.dataset().shards()[0].clone();
    let got = runtime::block_on(shard.read_indices(&WANTED))
        .unwrap_or_else(|e| panic!("a broken answer a retry mends failed the read: {e}"));
    assert_eq!(tokens(&got), want);
    assert_eq!(seen.load(Ordering::SeqCst), 2, "asked once again");
    assert_eq!(singles.load(Ordering::SeqCst), 0, "no range read alone");
    assert!(rd.backend_stats().retries >= 1, "{:?}", rd.backend_stats());
}
