//! `zephon run`'s storage settings: the recipe's `[storage]` table and the
//! flags of the same names are applied to the datasets it opens (a server
//! on 127.0.0.1 that fails the first requests of a shard; the blocks the
//! cache folder holds), and a value out of its range is refused by name.

#[allow(dead_code)]
#[path = "../../zephon-storage/tests/common/tiny.rs"]
mod tiny;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Lines in the test shard: some 300 KB, five blocks of 64 KiB.
const LINES: usize = 5000;

fn zephon() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zephon"))
}

/// A JSONL shard and its `index.json`, in `dir`.
fn dataset(dir: &Path) -> u64 {
    std::fs::create_dir_all(dir).unwrap();
    let text: String = (0..LINES)
        .map(|i| {
            format!(
                "{{\"id\":{i},\"text\":\"line {i} {}\"}}\n",
                "x".repeat(i % 23)
            )
        })
        .collect();
    std::fs::write(dir.join("000.jsonl"), &text).unwrap();
    let manifest = format!(
        r#"{{"version":1,"format":{{"kind":"jsonl"}},"shards":[{{"path":"000.jsonl","samples":{LINES},"bytes":{}}}]}}"#,
        text.len()
    );
    std::fs::write(dir.join("index.json"), manifest).unwrap();
    text.len() as u64
}

/// Serves the files of `dir`, ranges as `206`; the first `fail` requests
/// for the shard are answered `503`.
fn flaky_server(dir: PathBuf, fail: usize) -> String {
    let failed = Arc::new(AtomicUsize::new(0));
    let addr = tiny::serve(move |request, headers, conn| {
        let path = request.split_whitespace().nth(1).unwrap_or("/");
        if path.ends_with(".jsonl") && failed.fetch_add(1, Ordering::SeqCst) < fail {
            return tiny::answer(conn, "503 Service Unavailable", "", b"busy");
        }
        let Ok(data) = std::fs::read(dir.join(path.trim_start_matches('/'))) else {
            return tiny::answer(conn, "404 Not Found", "", b"");
        };
        match tiny::range(headers) {
            None => tiny::answer(conn, "200 OK", "", &data),
            Some((a, b)) => {
                let b = b.unwrap_or(data.len() - 1).min(data.len() - 1);
                let range = format!("Content-Range: bytes {a}-{b}/{}\r\n", data.len());
                tiny::answer(conn, "206 Partial Content", &range, &data[a..=b])
            }
        }
    });
    format!("http://{addr}/")
}

/// A recipe reading `uri` whole, with `storage` as its `[storage]` table.
fn recipe(dir: &Path, uri: &str, storage: &str) -> PathBuf {
    let path = dir.join("recipe.toml");
    let text = format!(
        "[run]\nrunner = \"threads\"\nworkers = 2\n\n[[datasets]]\nname = \"web\"\nuri = \"{uri}\"\n\n\
         [work_source]\nseed = 1\ncanonical_lanes = 1\npasses = 1\n\n\
         [[ops]]\nop = \"fetch\"\nparallelism = 2\n\n[[ops]]\nop = \"batch\"\nsize = 100\n\n\
         {storage}\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// `zephon run --json RECIPE ARGS` with its cache under `cache`.
fn run(recipe: &Path, cache: &Path, args: &[&str]) -> Output {
    zephon()
        .args(["run", "--json"])
        .arg(recipe)
        .args(args)
        .env("ZEPHON_CACHE_DIR", cache)
        .output()
        .unwrap()
}

fn summary_samples(out: &Output) -> u64 {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|l| l.get("summary")?.get("samples")?.as_u64())
        .unwrap_or_else(|| {
            panic!(
                "no summary: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

/// The sizes of the entries of the cache's disk tier under `cache`,
/// largest first.
fn cache_entries(cache: &Path) -> Vec<u64> {
    let mut sizes = Vec::new();
    let mut todo = vec![cache.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "shard") {
                sizes.push(e.metadata().unwrap().len());
            }
        }
    }
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    sizes
}

/// Whether the shard of `bytes` is cached in blocks of `block` bytes: its
/// full blocks are the largest entries, each one block and a header page
/// (the folder holds small entries too: the manifest).
fn cached_in_blocks(cache: &Path, bytes: u64, block: u64) -> bool {
    let sizes = cache_entries(cache);
    let full = (bytes / block) as usize;
    sizes.len() > full
        && sizes[..full]
            .iter()
            .all(|&s| s > block && s <= block + 8192)
}

#[test]
fn the_recipe_and_the_flags_set_the_retries() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    dataset(&data);
    // Two failures: the default 3 retries get past them, none do not.
    let uri = flaky_server(data.clone(), 2);
    let path = recipe(
        t.path(),
        &uri,
        "[storage]\nretries = 0\nblock_bytes = 65536\n",
    );
    let out = run(&path, &t.path().join("c1"), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a run without retries got past two 503s"
    );
    assert!(stderr.contains("000.jsonl"), "{stderr}");

    let uri = flaky_server(data.clone(), 2);
    let path = recipe(
        t.path(),
        &uri,
        "[storage]\nretries = 0\nblock_bytes = 65536\n",
    );
    let out = run(&path, &t.path().join("c2"), &["--retries", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(summary_samples(&out), LINES as u64);
}

#[test]
fn the_recipe_and_the_flags_set_the_block_size() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let bytes = dataset(&data);
    let uri = flaky_server(data.clone(), 0);
    let path = recipe(t.path(), &uri, "[storage]\nblock_bytes = 65536\n");
    let cache = t.path().join("c1");
    let out = run(&path, &cache, &[]);
    assert_eq!(summary_samples(&out), LINES as u64);
    assert!(
        cached_in_blocks(&cache, bytes, 64 << 10),
        "{:?}",
        cache_entries(&cache)
    );

    let cache = t.path().join("c2");
    let out = run(&path, &cache, &["--block-bytes", "131072"]);
    assert_eq!(summary_samples(&out), LINES as u64);
    assert!(
        cached_in_blocks(&cache, bytes, 128 << 10),
        "{:?}",
        cache_entries(&cache)
    );
}

#[test]
fn storage_settings_out_of_range_are_named() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    dataset(&data);
    let uri = flaky_server(data, 0);
    let cases: &[(&str, &[&str], &str)] = &[
        ("retries = 101", &[], "storage.retries"),
        ("io_timeout_ms = 0", &[], "storage.io_timeout_ms"),
        ("io_timeout_ms = 86400001", &[], "storage.io_timeout_ms"),
        ("block_deadline_ms = 99", &[], "storage.block_deadline_ms"),
        ("min_rate = 1073741825", &[], "storage.min_rate"),
        ("block_bytes = 65535", &[], "storage.block_bytes"),
        ("block_bytes = 268435457", &[], "storage.block_bytes"),
        ("", &["--retries", "1000"], "--retries"),
        ("", &["--io-timeout-ms", "0"], "--io-timeout-ms"),
        ("", &["--block-deadline-ms", "1"], "--block-deadline-ms"),
        ("", &["--min-rate", "2147483648"], "--min-rate"),
        ("", &["--block-bytes", "1024"], "--block-bytes"),
        // A flag in range puts right what the recipe got wrong.
        ("retries = 101", &["--retries", "101"], "storage.retries"),
    ];
    for (line, args, key) in cases {
        let path = recipe(t.path(), &uri, &format!("[storage]\n{line}\n"));
        let out = run(&path, &t.path().join("cache"), args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{line} {args:?} was accepted");
        assert!(stderr.contains(key), "{line} {args:?}: {stderr}");
    }
    let path = recipe(t.path(), &uri, "[storage]\nretries = 101\n");
    let out = run(&path, &t.path().join("cache"), &["--retries", "1"]);
    assert!(
        out.status.success(),
        "a flag in range over a recipe out of range: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = recipe(t.path(), &uri, "[storage]\nretires = 1\n");
    let out = run(&path, &t.path().join("cache"), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("retires"),
        "{stderr}"
    );
}
