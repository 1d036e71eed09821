//! What remote shards on S3 (moto_server on 127.0.0.1) keep out of the
//! process's memory: a compressed shard is streamed into a temporary file
//! and decoded into another, a Megatron shard's `.idx` is kept in a
//! temporary file, both mapped, and the blocks of an uncompressed shard
//! are kept in the memory tier as their disk-tier files, mapped; opening
//! them and reading from them leaves the process's anonymous memory
//! (RssAnon) about where it was, however large they are; and indexing a
//! dataset (`build_index`), locally or on S3, never holds a shard in it.
//! One test in this file, so no other test's allocations move the figure.

mod common;

use common::{Moto, cache_opts};
use std::io::Write;
use zephon_storage::RemoteDataset;
use zephon_storage::backend::{Backend, runtime};
use zephon_storage::scan::build_index;

/// This process's anonymous memory in bytes (Linux), `None` elsewhere.
fn rss_anon() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("RssAnon:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}

/// The highest RssAnon seen (sampled every millisecond) while `f` runs.
fn peak_anon_during<T>(f: impl FnOnce() -> T) -> (T, u64) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut peak = 0;
            while !done.load(Ordering::Relaxed) {
                peak = peak.max(rss_anon().unwrap_or(0));
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            peak.max(rss_anon().unwrap_or(0))
        });
        let out = f();
        done.store(true, Ordering::Relaxed);
        (out, sampler.join().unwrap())
    })
}

/// Writes a Megatron shard of `n` one-token documents (token `i % 50,000`
/// for document `i`) as `name.bin` / `name.idx`, a field at a time: its `.idx`
/// (20 bytes a document) is never built in this process's memory.
fn write_megatron(dir: &std::path::Path, name: &str, n: u64) {
    let mut bin =
        std::io::BufWriter::new(std::fs::File::create(dir.join(format!("{name}.bin"))).unwrap());
    for i in 0..n {
        bin.write_all(&((i % 50_000) as u16).to_le_bytes()).unwrap();
    }
    bin.flush().unwrap();
    let mut idx =
        std::io::BufWriter::new(std::fs::File::create(dir.join(format!("{name}.idx"))).unwrap());
    idx.write_all(b"MMIDIDX\x00\x00").unwrap();
    idx.write_all(&1u64.to_le_bytes()).unwrap();
    idx.write_all(&[8]).unwrap(); // u16
    idx.write_all(&n.to_le_bytes()).unwrap();
    idx.write_all(&(n + 1).to_le_bytes()).unwrap();
    for _ in 0..n {
        idx.write_all(&1i32.to_le_bytes()).unwrap();
    }
    for i in 0..n {
        idx.write_all(&(2 * i as i64).to_le_bytes()).unwrap();
    }
    for d in 0..=n {
        idx.write_all(&(d as i64).to_le_bytes()).unwrap();
    }
    idx.flush().unwrap();
}

#[test]
fn remote_shards_keep_their_bulk_out_of_memory() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // 900,000 lines, about 47 MB decoded and a few MB compressed.
    let lines = 900_000;
    let text: String = (0..lines)
        .map(|i| format!("{{\"id\":{i},\"text\":\"line {i:>12} of the shard\"}}\n"))
        .collect();
    let decoded = text.len() as u64;
    assert!(decoded > 40 << 20, "{decoded}");
    let zst = zstd::encode_all(text.as_bytes(), 3).unwrap();
    drop(text);
    std::fs::write(data.join("a.jsonl.zst"), &zst).unwrap();
    let b = Backend::open("d", &data.display().to_string(), &Default::default()).unwrap();
    runtime::block_on(build_index(&b, "d")).unwrap();

    let moto = Moto::start(t.path());
    moto.upload("compressed", "ds", &data);
    let mut opts = moto.opts(cache_opts(t.path()));
    // Room for the decoded shard in both tiers, as a user would give it.
    opts.cache.limit_bytes = 256 << 20;
    opts.cache.memory_bytes = 128 << 20;
    let Some(before) = rss_anon() else {
        return; // not Linux: nothing to measure
    };
    let rd = RemoteDataset::open("d", "s3://compressed/ds", &opts).unwrap();
    let shard = rd.dataset().shards()[0].clone();
    assert_eq!(shard.len(), lines);
    let last = runtime::block_on(shard.read_run(lines - 2, 2)).unwrap();
    let ids: Vec<i64> = last
        .iter()
        .map(|r| r.get("id").and_then(|v| v.as_int()).unwrap())
        .collect();
    assert_eq!(ids, [lines as i64 - 2, lines as i64 - 1]);
    assert!(rd.is_cached(0));
    let grown = rss_anon().unwrap().saturating_sub(before);
    // The line index takes about 4 bytes a line (3.6 MB); the decoded
    // shard held in memory would add its 47 MB.
    assert!(
        grown < 16 << 20,
        "RssAnon grew by {} MiB reading a shard of {} MiB decoded",
        grown >> 20,
        decoded >> 20
    );

    // A Megatron shard of 2,000,000 documents: a 40 MB `.idx`.
    let meg = t.path().join("meg");
    std::fs::create_dir_all(&meg).unwrap();
    let docs = 2_000_000u64;
    write_megatron(&meg, "m", docs);
    let b = Backend::open("m", &meg.display().to_string(), &Default::default()).unwrap();
    runtime::block_on(build_index(&b, "m")).unwrap();
    moto.upload("megatron", "ds", &meg);
    let before = rss_anon().unwrap();
    let rd = RemoteDataset::open("m", "s3://megatron/ds", &opts).unwrap();
    let shard = rd.dataset().shards()[0].clone();
    assert_eq!(shard.len(), docs);
    let last = runtime::block_on(shard.read_run(docs - 1, 1)).unwrap();
    assert_eq!(
        last[0].token_ids("tokens").unwrap(),
        [((docs - 1) % 50_000) as u32]
    );
    let grown = rss_anon().unwrap().saturating_sub(before);
    assert!(
        grown < 16 << 20,
        "RssAnon grew by {} MiB reading a Megatron shard with a {} MiB .idx",
        grown >> 20,
        (20 * docs) >> 20
    );

    // Indexing a 48 MB JSONL shard of long lines, where it lies and on
    // S3: the shard is mapped or streamed into a temporary file, so what
    // the scan holds is its line index and sidecar (12 bytes a line, 2.4
    // MB), not the shard.
    let long = t.path().join("long");
    std::fs::create_dir_all(&long).unwrap();
    let n = 200_000;
    let text: String = (0..n)
        .map(|i| format!("{{\"id\":{i},\"text\":\"{:>230}\"}}\n", i))
        .collect();
    let size = text.len() as u64;
    assert!(size > 48_000_000, "{size}");
    std::fs::write(long.join("a.jsonl"), &text).unwrap();
    drop(text);
    moto.upload("long", "ds", &long);
    for uri in [long.display().to_string(), "s3://long/ds".to_owned()] {
        let b = Backend::open("l", &uri, &opts).unwrap();
        let before = rss_anon().unwrap();
        let (m, peak) = peak_anon_during(|| runtime::block_on(build_index(&b, "l")).unwrap());
        assert_eq!(m.shards[0].samples, n);
        let grown = peak.saturating_sub(before);
        assert!(
            grown < 16 << 20,
            "{uri}: RssAnon grew by {} MiB at its peak indexing a shard of {} MiB",
            grown >> 20,
            size >> 20
        );
    }

    // A flat token file of 48 MiB: twelve 4 MiB blocks, all downloaded
    // once into a memory tier that could hold them all.
    let toks = t.path().join("tokens");
    std::fs::create_dir_all(&toks).unwrap();
    let seq = 2048u64;
    let samples = (48u64 << 20) / (2 * seq);
    let body: Vec<u8> = (0..samples * seq)
        .flat_map(|i| ((i % 50_000) as u16).to_le_bytes())
        .collect();
    std::fs::write(toks.join("train.bin"), &body).unwrap();
    drop(body);
    let b = Backend::open("t", &toks.display().to_string(), &Default::default()).unwrap();
    let format = zephon_storage::FormatOptions::default()
        .seq_len(seq)
        .dtype(zephon_storage::format::TokenDtype::U16);
    runtime::block_on(zephon_storage::scan::build_index_with(&b, "t", &format)).unwrap();
    moto.upload("tokens", "ds", &toks);
    let before = rss_anon().unwrap();
    let rd = RemoteDataset::open("t", "s3://tokens/ds", &opts).unwrap();
    let shard = rd.dataset().shards()[0].clone();
    assert_eq!(shard.len(), samples);
    for at in (0..samples).step_by(64) {
        let n = 64.min(samples - at);
        let got = runtime::block_on(shard.read_run(at, n)).unwrap();
        assert_eq!(
            got[0].token_ids("tokens").unwrap().get(0),
            Some(((at * seq) % 50_000) as u32)
        );
    }
    let grown = rss_anon().unwrap().saturating_sub(before);
    // The downloads are freed once each block is written and mapped; kept,
    // they would add the file's 48 MiB.
    assert!(
        grown < 24 << 20,
        "RssAnon grew by {} MiB reading a 48 MiB token file through the cache",
        grown >> 20
    );
}
