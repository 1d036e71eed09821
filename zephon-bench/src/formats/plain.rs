//! The plain loops of `bench formats`: each format read with its own crate
//! (or the few lines its layout needs), every sample decoded to owned
//! values, on one thread. Two orders, each the baseline of the Zephon
//! column that reads in it: file order, and shuffled (the files in a
//! random order, the samples of each in a random order: what Zephon's
//! work source does by default), so a shuffled read is compared with a
//! shuffled read, random access and all.

use anyhow::Result;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use std::io::Read;
use std::path::{Path, PathBuf};

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

/// The plain loop in file order: every sample decoded to owned values,
/// nothing else.
pub(super) fn in_order(format: &str, dir: &Path, seq_len: usize) -> Result<usize> {
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
                n += tokens_file(&f, seq_len, |n| 0..n)?;
            }
        }
        "megatron" => {
            for f in files(dir, ".idx")? {
                n += megatron_file(&f, |n| 0..n)?;
            }
        }
        "mds" => {
            for f in files(dir, ".mds")? {
                n += mds_file(&f, |n| 0..n)?;
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
        "parquet" => n = parquet_in_order(dir)?,
        other => anyhow::bail!("unknown format `{other}`"),
    }
    Ok(n)
}

fn parquet_in_order(dir: &Path) -> Result<usize> {
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

/// The extension of a format's files (Megatron: its `.idx`).
fn extension(format: &str) -> Result<&'static str> {
    Ok(match format {
        "jsonl" => ".jsonl",
        "tokens" => ".bin",
        "megatron" => ".idx",
        "mds" => ".mds",
        "webdataset" => ".tar",
        "parquet" => ".parquet",
        other => anyhow::bail!("unknown format `{other}`"),
    })
}

/// `0..n` in a random order: the plain loop's own shuffle, as a training
/// script writes it.
fn permutation(n: usize, rng: &mut ChaCha8Rng) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    v.shuffle(rng);
    v
}

/// The plain loop in a random order of `seed`: the files shuffled, then
/// each file's samples, every one decoded to owned values as
/// [`in_order`] does. Where the format has no random access of its own
/// (JSON lines, tar members, Parquet rows), the file is read and its
/// samples located first, as a script that shuffles must.
pub(super) fn shuffled(format: &str, dir: &Path, seq_len: usize, seed: u64) -> Result<usize> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut fs = files(dir, extension(format)?)?;
    fs.shuffle(&mut rng);
    let mut n = 0;
    for f in fs {
        n += match format {
            "jsonl" => jsonl_shuffled(&f, &mut rng)?,
            "tokens" => tokens_file(&f, seq_len, |n| permutation(n, &mut rng))?,
            "megatron" => megatron_file(&f, |n| permutation(n, &mut rng))?,
            "mds" => mds_file(&f, |n| permutation(n, &mut rng))?,
            "webdataset" => webdataset_shuffled(&f, &mut rng)?,
            _ => parquet_shuffled(&f, &mut rng)?,
        };
    }
    Ok(n)
}

fn jsonl_shuffled(f: &Path, rng: &mut ChaCha8Rng) -> Result<usize> {
    let data = std::fs::read(f)?;
    let lines: Vec<&[u8]> = data
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    for s in permutation(lines.len(), rng) {
        let v: serde_json::Value = serde_json::from_slice(lines[s])?;
        std::hint::black_box(v);
    }
    Ok(lines.len())
}

/// A flat token file's windows of `seq_len` ids, in the `order` given
/// their count: `0..n` (file order, nothing allocated) or a [`permutation`].
fn tokens_file<I: IntoIterator<Item = usize>>(
    f: &Path,
    seq_len: usize,
    order: impl FnOnce(usize) -> I,
) -> Result<usize> {
    let data = std::fs::read(f)?;
    let width = seq_len * 2;
    let count = data.len() / width;
    for s in order(count) {
        std::hint::black_box(u16s(&data[s * width..(s + 1) * width]));
    }
    Ok(count)
}

/// A Megatron `.idx` (`f`) and its `.bin`'s sequences, in the `order`
/// given their count (see [`tokens_file`]).
fn megatron_file<I: IntoIterator<Item = usize>>(
    f: &Path,
    order: impl FnOnce(usize) -> I,
) -> Result<usize> {
    let idx = std::fs::read(f)?;
    let bin = std::fs::read(f.with_extension("bin"))?;
    let seqs = u64::from_le_bytes(idx[18..26].try_into()?) as usize;
    let (lens, ptrs) = (34, 34 + 4 * seqs);
    for s in order(seqs) {
        let l = i32::from_le_bytes(idx[lens + 4 * s..][..4].try_into()?) as usize;
        let p = i64::from_le_bytes(idx[ptrs + 8 * s..][..8].try_into()?) as usize;
        std::hint::black_box(u16s(&bin[p..p + 2 * l]));
    }
    Ok(seqs)
}

/// An MDS shard's samples (an `int` id and a `str` text), in the `order`
/// given their count (see [`tokens_file`]).
fn mds_file<I: IntoIterator<Item = usize>>(
    f: &Path,
    order: impl FnOnce(usize) -> I,
) -> Result<usize> {
    let d = std::fs::read(f)?;
    let u32_at = |at: usize| u32::from_le_bytes(d[at..at + 4].try_into().unwrap());
    let count = u32_at(0) as usize;
    for s in order(count) {
        let at = u32_at(4 + 4 * s) as usize;
        let len = u32_at(at) as usize;
        let id = i64::from_le_bytes(d[at + 4..at + 12].try_into()?);
        let text = std::str::from_utf8(&d[at + 12..at + 12 + len])?.to_owned();
        std::hint::black_box((id, text));
    }
    Ok(count)
}

/// Members are located in one pass over the archive (grouped by key, as
/// in order), then each sample's members copied out in a random order.
fn webdataset_shuffled(f: &Path, rng: &mut ChaCha8Rng) -> Result<usize> {
    use zephon_storage::format::webdataset::tar;
    let data = std::fs::read(f)?;
    let mut samples: Vec<Vec<(usize, usize)>> = Vec::new();
    let mut key = String::new();
    for e in tar::Archive::new(&data[..]).entries()? {
        let e = e?;
        let path = e.path()?.to_string_lossy().into_owned();
        let k = path.split('.').next().unwrap_or("").to_owned();
        let member = (e.raw_file_position() as usize, e.size() as usize);
        if k != key || samples.is_empty() {
            samples.push(Vec::new());
            key = k;
        }
        samples.last_mut().expect("pushed").push(member);
    }
    for s in permutation(samples.len(), rng) {
        for &(at, len) in &samples[s] {
            std::hint::black_box(data[at..at + len].to_vec());
        }
    }
    Ok(samples.len())
}

/// The file's batches are decoded (as in order), then rows read in a
/// random order across them.
fn parquet_shuffled(f: &Path, rng: &mut ChaCha8Rng) -> Result<usize> {
    use zephon_storage::format::parquet::arrow_array::cast::AsArray;
    use zephon_storage::format::parquet::arrow_array::types::Int64Type;
    use zephon_storage::format::parquet::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(f)?)?.build()?;
    let batches = reader.collect::<Result<Vec<_>, _>>()?;
    let per = batches.first().map_or(1, |b| b.num_rows().max(1));
    anyhow::ensure!(
        batches.iter().rev().skip(1).all(|b| b.num_rows() == per),
        "{}: the reader's batches are not of one size",
        f.display()
    );
    let columns: Vec<_> = batches
        .iter()
        .map(|b| {
            (
                b.column(0).as_primitive::<Int64Type>(),
                b.column(1).as_string::<i32>(),
            )
        })
        .collect();
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    for s in permutation(rows, rng) {
        let (ids, texts) = columns[s / per];
        let r = s % per;
        std::hint::black_box((ids.value(r), texts.value(r).to_owned()));
    }
    Ok(rows)
}
