//! `zephon bench formats`: samples/s reading each shard format from local
//! disk through `fetch -> batch`, beside a plain loop over the same bytes
//! with the format's own crate (or, where the format has no Rust crate, the
//! few lines its layout needs), in the same run.

use crate::cmd::flags::{AT_LEAST_ONE, GENERATED_RECORDS, GENERATED_SHARDS, ranged};
use anyhow::Result;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;
use zephon_core::settings::{BATCH_SIZE, PARALLELISM, SEQ_LEN};
use zephon_core::{Dataset, PipelineExt, Runner, WorkSource};
use zephon_storage::DatasetExt;
use zephon_storage::format::FormatOptions;
use zephon_storage::format::mds::{MdsColumn, encode_shard};
use zephon_storage::format::tokens::{TokenDtype, encode_megatron};

/// Options of `zephon bench formats`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Samples per format.
    #[arg(long, default_value_t = 100_000, value_parser = ranged::<usize>(GENERATED_RECORDS))]
    pub samples: usize,
    /// Shards per format.
    #[arg(long, default_value_t = 4, value_parser = ranged::<usize>(GENERATED_SHARDS))]
    pub shards: usize,
    /// Tokens per sample of the token formats.
    #[arg(long, default_value_t = 256, value_parser = ranged::<usize>(SEQ_LEN))]
    pub seq_len: usize,
    /// Batch size.
    #[arg(long, default_value_t = 256, value_parser = ranged::<usize>(BATCH_SIZE))]
    pub batch: usize,
    /// Fetch parallelism and worker threads.
    #[arg(long, default_value_t = 2, value_parser = ranged::<usize>(PARALLELISM))]
    pub parallelism: usize,
    /// Rounds; the best time of each side is reported.
    #[arg(long, default_value_t = 3, value_parser = ranged::<usize>(AT_LEAST_ONE))]
    pub repeat: usize,
    /// Only these formats (comma-separated: jsonl, tokens, megatron, parquet, mds, webdataset).
    #[arg(long, value_delimiter = ',')]
    pub only: Option<Vec<String>>,
}

fn text_of(i: usize) -> String {
    format!(
        "document {i}: {}",
        "the quick brown fox jumps over the lazy dog ".repeat(1 + i % 5)
    )
}

fn tokens_of(i: usize, n: usize) -> Vec<u32> {
    (0..n).map(|t| ((i * 31 + t * 7) % 50_000) as u32).collect()
}

fn per_shard(a: &Args) -> impl Iterator<Item = (usize, std::ops::Range<usize>)> + '_ {
    let per = a.samples.div_ceil(a.shards);
    (0..a.shards).map(move |s| (s, s * per..((s + 1) * per).min(a.samples)))
}

/// Writes the dataset of one format; returns the options that read it.
fn write(format: &str, dir: &Path, a: &Args) -> Result<FormatOptions> {
    std::fs::create_dir_all(dir)?;
    let opts = FormatOptions::default();
    for (s, range) in per_shard(a) {
        match format {
            "jsonl" => {
                let mut out = String::new();
                for i in range {
                    out.push_str(&serde_json::json!({"id": i, "text": text_of(i)}).to_string());
                    out.push('\n');
                }
                std::fs::write(dir.join(format!("{s:03}.jsonl")), out)?;
            }
            "tokens" => {
                let mut out = Vec::new();
                for i in range {
                    TokenDtype::U16
                        .encode(&tokens_of(i, a.seq_len), &mut out)
                        .map_err(anyhow::Error::msg)?;
                }
                std::fs::write(dir.join(format!("{s:03}.bin")), out)?;
            }
            "megatron" => {
                let docs: Vec<Vec<u32>> = range
                    .map(|i| tokens_of(i, a.seq_len / 2 + i % a.seq_len))
                    .collect();
                let (bin, idx) =
                    encode_megatron(&docs, TokenDtype::U16).map_err(anyhow::Error::msg)?;
                std::fs::write(dir.join(format!("{s:03}.bin")), bin)?;
                std::fs::write(dir.join(format!("{s:03}.idx")), idx)?;
            }
            "mds" => write_mds(dir, s, range)?,
            "webdataset" => {
                use zephon_storage::format::webdataset::tar;
                let mut b = tar::Builder::new(Vec::new());
                for i in range {
                    let members = [
                        ("cls", (i % 10).to_string().into_bytes()),
                        ("txt", text_of(i).into_bytes()),
                        ("bin", vec![(i % 251) as u8; 512]),
                    ];
                    for (ext, data) in members {
                        let mut h = tar::Header::new_gnu();
                        h.set_size(data.len() as u64);
                        h.set_mode(0o644);
                        h.set_cksum();
                        b.append_data(&mut h, format!("{i:08}.{ext}"), &data[..])?;
                    }
                }
                std::fs::write(dir.join(format!("{s:03}.tar")), b.into_inner()?)?;
            }
            "parquet" => write_parquet(dir, s, range)?,
            other => anyhow::bail!("unknown format `{other}`"),
        }
    }
    Ok(if format == "tokens" {
        opts.seq_len(a.seq_len as u64).dtype(TokenDtype::U16)
    } else {
        opts
    })
}

fn mds_columns() -> Vec<MdsColumn> {
    vec![
        MdsColumn {
            name: "id".into(),
            encoding: "int".into(),
            size: Some(8),
        },
        MdsColumn {
            name: "text".into(),
            encoding: "str".into(),
            size: None,
        },
    ]
}

fn write_mds(dir: &Path, s: usize, range: std::ops::Range<usize>) -> Result<()> {
    let cols = mds_columns();
    let n = range.len();
    let samples: Vec<Vec<Vec<u8>>> = range
        .map(|i| vec![(i as i64).to_le_bytes().to_vec(), text_of(i).into_bytes()])
        .collect();
    let raw = encode_shard(&cols, &samples);
    let name = format!("shard.{s:05}.mds");
    std::fs::write(dir.join(&name), &raw)?;
    // Streaming's index.json, grown shard by shard.
    let index_path = dir.join("index.json");
    let mut index: serde_json::Value = match std::fs::read(&index_path) {
        Ok(b) => serde_json::from_slice(&b)?,
        Err(_) => serde_json::json!({"version": 2, "shards": []}),
    };
    index["shards"]
        .as_array_mut()
        .expect("array")
        .push(serde_json::json!({
            "column_encodings": ["int", "str"], "column_names": ["id", "text"],
            "column_sizes": [8, null], "compression": null, "format": "mds", "hashes": [],
            "raw_data": {"basename": name, "bytes": raw.len(), "hashes": {}},
            "samples": n, "size_limit": 1 << 26, "version": 2, "zip_data": null,
        }));
    std::fs::write(index_path, index.to_string())?;
    Ok(())
}

fn write_parquet(dir: &Path, s: usize, range: std::ops::Range<usize>) -> Result<()> {
    use std::sync::Arc;
    use zephon_storage::format::parquet::arrow_array::{
        ArrayRef, Int64Array, RecordBatch, StringArray,
    };
    use zephon_storage::format::parquet::parquet::arrow::ArrowWriter;
    use zephon_storage::format::parquet::parquet::file::properties::WriterProperties;
    let ids: Vec<i64> = range.clone().map(|i| i as i64).collect();
    let texts: Vec<String> = range.map(text_of).collect();
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(ids)) as ArrayRef),
        ("text", Arc::new(StringArray::from(texts)) as ArrayRef),
    ])?;
    let props = WriterProperties::builder()
        .set_max_row_group_size(8192)
        .build();
    let file = std::fs::File::create(dir.join(format!("{s:03}.parquet")))?;
    let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props))?;
    w.write(&batch)?;
    w.close()?;
    Ok(())
}

fn files(dir: &Path, ext: &str) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(ext))
        .collect();
    v.sort();
    Ok(v)
}

fn u16s(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]) as u32)
        .collect()
}

/// The plain loop: every sample decoded to owned values, nothing else.
fn plain(format: &str, dir: &Path, a: &Args) -> Result<usize> {
    let mut n = 0;
    match format {
        "jsonl" => {
            for f in files(dir, ".jsonl")? {
                let data = std::fs::read(f)?;
                for line in data.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                    let v: serde_json::Value = serde_json::from_slice(line)?;
                    std::hint::black_box(v);
                    n += 1;
                }
            }
        }
        "tokens" => {
            for f in files(dir, ".bin")? {
                let data = std::fs::read(f)?;
                for c in data.chunks_exact(a.seq_len * 2) {
                    std::hint::black_box(u16s(c));
                    n += 1;
                }
            }
        }
        "megatron" => {
            for f in files(dir, ".idx")? {
                let idx = std::fs::read(&f)?;
                let bin = std::fs::read(f.with_extension("bin"))?;
                let seqs = u64::from_le_bytes(idx[18..26].try_into()?) as usize;
                let (lens, ptrs) = (34, 34 + 4 * seqs);
                for s in 0..seqs {
                    let l = i32::from_le_bytes(idx[lens + 4 * s..][..4].try_into()?) as usize;
                    let p = i64::from_le_bytes(idx[ptrs + 8 * s..][..8].try_into()?) as usize;
                    std::hint::black_box(u16s(&bin[p..p + 2 * l]));
                    n += 1;
                }
            }
        }
        "mds" => {
            for f in files(dir, ".mds")? {
                let d = std::fs::read(f)?;
                let u32_at = |at: usize| u32::from_le_bytes(d[at..at + 4].try_into().unwrap());
                let count = u32_at(0) as usize;
                for s in 0..count {
                    let at = u32_at(4 + 4 * s) as usize;
                    let len = u32_at(at) as usize;
                    let id = i64::from_le_bytes(d[at + 4..at + 12].try_into()?);
                    let text = std::str::from_utf8(&d[at + 12..at + 12 + len])?.to_owned();
                    std::hint::black_box((id, text));
                    n += 1;
                }
            }
        }
        "webdataset" => {
            use zephon_storage::format::webdataset::tar;
            for f in files(dir, ".tar")? {
                let mut ar = tar::Archive::new(std::io::BufReader::new(std::fs::File::open(f)?));
                let mut key = String::new();
                for e in ar.entries()? {
                    let mut e = e?;
                    let path = e.path()?.to_string_lossy().into_owned();
                    let k = path.split('.').next().unwrap_or("").to_owned();
                    let mut buf = Vec::with_capacity(e.size() as usize);
                    e.read_to_end(&mut buf)?;
                    std::hint::black_box(buf);
                    if k != key {
                        n += 1;
                        key = k;
                    }
                }
            }
        }
        "parquet" => n = plain_parquet(dir)?,
        other => anyhow::bail!("unknown format `{other}`"),
    }
    Ok(n)
}

fn plain_parquet(dir: &Path) -> Result<usize> {
    use zephon_storage::format::parquet::arrow_array::cast::AsArray;
    use zephon_storage::format::parquet::arrow_array::types::Int64Type;
    use zephon_storage::format::parquet::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let mut n = 0;
    for f in files(dir, ".parquet")? {
        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(f)?)?.build()?;
        for batch in reader {
            let batch = batch?;
            let ids = batch.column(0).as_primitive::<Int64Type>();
            let texts = batch.column(1).as_string::<i32>();
            for r in 0..batch.num_rows() {
                std::hint::black_box((ids.value(r), texts.value(r).to_owned()));
                n += 1;
            }
        }
    }
    Ok(n)
}

fn zephon(dir: &Path, opts: &FormatOptions, a: &Args) -> Result<usize> {
    let ds = Dataset::from_path_with("bench", dir, opts)?;
    let ws = WorkSource::builder().dataset(ds, 1.0).seed(1).build()?;
    let mut n = 0;
    for b in ws
        .stream()
        .fetch(a.parallelism)
        .batch(a.batch)
        .into_blocking_iter(Runner::Threads {
            workers: a.parallelism,
        })?
    {
        n += b?.len();
    }
    Ok(n)
}

/// Runs the benchmark and prints one line per format.
pub fn run(a: Args) -> Result<()> {
    let all = [
        "jsonl",
        "tokens",
        "megatron",
        "parquet",
        "mds",
        "webdataset",
    ];
    let root = tempfile::tempdir()?;
    println!(
        "{:<11} {:>9} {:>16} {:>16} {:>7}",
        "format", "samples", "plain loop /s", "zephon /s", "ratio"
    );
    for format in all {
        if a.only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|x| x == format))
        {
            continue;
        }
        let dir = root.path().join(format);
        let opts = write(format, &dir, &a)?;
        let (mut best_plain, mut best_zephon) = (f64::INFINITY, f64::INFINITY);
        let mut counts = (0, 0);
        for _ in 0..a.repeat.max(1) {
            let t = Instant::now();
            counts.0 = plain(format, &dir, &a)?;
            best_plain = best_plain.min(t.elapsed().as_secs_f64());
            let t = Instant::now();
            counts.1 = zephon(&dir, &opts, &a)?;
            best_zephon = best_zephon.min(t.elapsed().as_secs_f64());
        }
        anyhow::ensure!(
            counts.0 == counts.1,
            "{format}: the plain loop read {} samples, zephon {}",
            counts.0,
            counts.1
        );
        let (p, z) = (counts.0 as f64 / best_plain, counts.1 as f64 / best_zephon);
        println!(
            "{format:<11} {:>9} {p:>16.0} {z:>16.0} {:>7.2}",
            counts.0,
            z / p
        );
    }
    Ok(())
}
