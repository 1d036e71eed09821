//! `zephon-bench formats`: samples/s reading each shard format from local
//! disk through `fetch -> batch`, beside a plain loop over the same bytes
//! with the format's own crate (or, where the format has no Rust crate, the
//! few lines its layout needs), in the same run. The plain loop runs on one
//! thread, in file order and shuffled ([`plain`]); Zephon is measured on one
//! thread (the inline runner) in either order for the like-for-like ratios,
//! and with `--parallelism` threads beside it.

use super::{mem, stats};
use anyhow::Result;
use std::path::Path;
use std::time::Instant;
use zephon_cli::cmd::flags::{AT_LEAST_ONE, GENERATED_RECORDS, GENERATED_SHARDS, ranged};
use zephon_core::settings::{BATCH_SIZE, PARALLELISM, SEQ_LEN};
use zephon_core::{Dataset, PipelineExt, Runner, WorkSource};
use zephon_storage::DatasetExt;
use zephon_storage::format::FormatOptions;
use zephon_storage::format::mds::{MdsColumn, encode_shard};
use zephon_storage::format::tokens::{TokenDtype, encode_megatron};

mod plain;

/// The seed of both shuffled sides, the plain loop's and Zephon's.
const SEED: u64 = 1;

/// Options of `zephon-bench formats`.
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
    /// Fetch parallelism and worker threads of the second Zephon column
    /// (the first runs on one thread, as the plain loop does).
    #[arg(long, default_value_t = 2, value_parser = ranged::<usize>(PARALLELISM))]
    pub parallelism: usize,
    /// Rounds; each side's best rate is reported, and the median over
    /// rounds of the ratio within a round.
    #[arg(long, default_value_t = 3, value_parser = ranged::<usize>(AT_LEAST_ONE))]
    pub repeat: usize,
    /// Print one JSON object (the same figures as the table) instead of
    /// the table.
    #[arg(long)]
    pub json: bool,
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
        MdsColumn::new("id", "int", Some(8)),
        MdsColumn::new("text", "str", None),
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
        .set_max_row_group_row_count(Some(8192))
        .build();
    let file = std::fs::File::create(dir.join(format!("{s:03}.parquet")))?;
    let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props))?;
    w.write(&batch)?;
    w.close()?;
    Ok(())
}

/// Zephon's `fetch -> batch` over the dataset with `threads` fetch
/// parallelism: one thread is the inline runner (the caller's thread, as the
/// plain loop), more the threads runner with that many workers. The
/// dataset is opened (its shards indexed) on as many threads. Shuffled
/// (shards, and samples within each shard: the work source's defaults), or
/// in file order, the plain loop's order.
fn zephon(
    dir: &Path,
    opts: &FormatOptions,
    a: &Args,
    threads: usize,
    shuffled: bool,
) -> Result<usize> {
    let ds = Dataset::from_path_with("bench", dir, &opts.clone().open_threads(threads))?;
    let ws = WorkSource::builder().dataset(ds, 1.0).seed(SEED);
    let ws = if shuffled {
        ws
    } else {
        ws.shuffle_shards(false).shuffle_within_shard(false)
    }
    .build()?;
    let runner = if threads <= 1 {
        Runner::Inline
    } else {
        Runner::Threads { workers: threads }
    };
    let mut n = 0;
    for b in ws
        .stream()
        .fetch(threads.max(1))
        .batch(a.batch)
        .into_blocking_iter(runner)?
    {
        n += b?.len();
    }
    Ok(n)
}

/// One side of a format's comparison: samples, seconds and peak RssAnon of
/// each round.
#[derive(Default)]
struct Side {
    samples: Vec<usize>,
    secs: Vec<f64>,
    peaks: Vec<Option<u64>>,
}

impl Side {
    fn measure(&mut self, f: impl FnOnce() -> Result<usize>) -> Result<()> {
        let sampler = mem::PeakRss::start();
        let t = Instant::now();
        let n = f()?;
        self.secs.push(t.elapsed().as_secs_f64());
        self.peaks.push(sampler.stop());
        self.samples.push(n);
        Ok(())
    }

    fn best_rate(&self) -> f64 {
        let best = self.secs.iter().copied().fold(f64::INFINITY, f64::min);
        self.samples.first().copied().unwrap_or(0) as f64 / best
    }

    /// The smallest peak over rounds: the allocator keeps pages a run freed
    /// for the next, so the round where this side ran first comes closest to
    /// its own need.
    fn peak(&self) -> Option<u64> {
        self.peaks.iter().flatten().min().copied()
    }

    /// Median over rounds of this side's time over `other`'s in the same
    /// round: `other`'s throughput as a multiple of this side's.
    fn ratio_of(&self, other: &Side) -> f64 {
        stats::median(
            self.secs
                .iter()
                .zip(&other.secs)
                .map(|(mine, theirs)| mine / theirs)
                .collect(),
        )
    }
}

/// Runs the benchmark and prints one line per format.
pub fn run(a: Args) -> Result<()> {
    for (name, v) in [
        ("--samples", a.samples),
        ("--shards", a.shards),
        ("--seq-len", a.seq_len),
        ("--batch", a.batch),
    ] {
        anyhow::ensure!(v > 0, "{name} must be at least 1");
    }
    let all = [
        "jsonl",
        "tokens",
        "megatron",
        "parquet",
        "mds",
        "webdataset",
    ];
    let root = tempfile::tempdir()?;
    let p = a.parallelism.max(1);
    let wide = format!("zephon {p}t /s");
    let mut lines = vec![
        format!(
            "samples/s, best of {} rounds; ratios: median over rounds of zephon over a plain \
             loop in the same round: `:1t` over the plain loop in file order, `:sh` over the \
             plain loop shuffled (files and the samples of each in a random order, as zephon's \
             defaults read); zephon shuffles shards and samples within them except in the `in \
             order` column, which reads in file order; peak RssAnon in MiB",
            a.repeat.max(1)
        ),
        format!(
            "{:<11} {:>9} {:>12} {:>12} {:>12} {:>6} {:>6} {:>14} {:>6} {:>12} {:>6} {:>6} {:>7} {:>7} {:>7} {:>7}",
            "format",
            "samples",
            "plain 1t /s",
            "plain sh /s",
            "zephon 1t /s",
            "1t:1t",
            "1t:sh",
            "in order 1t /s",
            "ord:1t",
            wide,
            format!("{p}t:1t"),
            format!("{p}t:sh"),
            "MiB pl",
            "MiB ps",
            "MiB z1",
            format!("MiB z{p}"),
        ),
    ];
    let mut rows = Vec::new();
    for format in all {
        if a.only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|x| x == format))
        {
            continue;
        }
        let dir = root.path().join(format);
        let opts = write(format, &dir, &a)?;
        let (mut plain_side, mut plain_sh, mut one, mut ordered, mut many) = Default::default();
        for round in 0..a.repeat.max(1) {
            // Each round starts with another side, so none always runs on
            // the machine (and the heap) another left.
            let mut order = [0, 1, 2, 3, 4];
            order.rotate_left(round % 5);
            for side in order {
                match side {
                    0 => {
                        Side::measure(&mut plain_side, || plain::in_order(format, &dir, a.seq_len))?
                    }
                    1 => Side::measure(&mut plain_sh, || {
                        plain::shuffled(format, &dir, a.seq_len, SEED)
                    })?,
                    2 => Side::measure(&mut one, || zephon(&dir, &opts, &a, 1, true))?,
                    3 => Side::measure(&mut ordered, || zephon(&dir, &opts, &a, 1, false))?,
                    _ => Side::measure(&mut many, || zephon(&dir, &opts, &a, p, true))?,
                }
            }
        }
        for (name, side) in [
            ("the plain loop shuffled", &plain_sh),
            ("zephon, 1 thread", &one),
            ("zephon, 1 thread in order", &ordered),
            ("zephon, more threads", &many),
        ] {
            let counts = plain_side.samples.iter().chain(&side.samples);
            if let Some(n) = counts.clone().find(|&&n| n != plain_side.samples[0]) {
                anyhow::bail!(
                    "{format}: the plain loop read {} samples, {name} {n}",
                    plain_side.samples[0]
                );
            }
        }
        lines.push(format!(
            "{format:<11} {:>9} {:>12.0} {:>12.0} {:>12.0} {:>6.2} {:>6.2} {:>14.0} {:>6.2} {:>12.0} {:>6.2} {:>6.2} {:>7} {:>7} {:>7} {:>7}",
            plain_side.samples[0],
            plain_side.best_rate(),
            plain_sh.best_rate(),
            one.best_rate(),
            plain_side.ratio_of(&one),
            plain_sh.ratio_of(&one),
            ordered.best_rate(),
            plain_side.ratio_of(&ordered),
            many.best_rate(),
            plain_side.ratio_of(&many),
            plain_sh.ratio_of(&many),
            mem::mib(plain_side.peak()),
            mem::mib(plain_sh.peak()),
            mem::mib(one.peak()),
            mem::mib(many.peak()),
        ));
        rows.push(serde_json::json!({
            "format": format,
            "samples": plain_side.samples[0],
            "plain_1t_per_s": plain_side.best_rate().round(),
            "plain_1t_shuffled_per_s": plain_sh.best_rate().round(),
            "zephon_1t_per_s": one.best_rate().round(),
            "ratio_1t_median": stats::round3(plain_side.ratio_of(&one)),
            "ratio_1t_to_plain_shuffled_median": stats::round3(plain_sh.ratio_of(&one)),
            "zephon_1t_in_order_per_s": ordered.best_rate().round(),
            "ratio_1t_in_order_median": stats::round3(plain_side.ratio_of(&ordered)),
            "zephon_threads": p,
            "zephon_nt_per_s": many.best_rate().round(),
            "ratio_nt_to_plain_1t_median": stats::round3(plain_side.ratio_of(&many)),
            "ratio_nt_to_plain_shuffled_median": stats::round3(plain_sh.ratio_of(&many)),
            "plain_peak_rss_anon_mib": mem::mib_json(plain_side.peak()),
            "plain_shuffled_peak_rss_anon_mib": mem::mib_json(plain_sh.peak()),
            "zephon_1t_peak_rss_anon_mib": mem::mib_json(one.peak()),
            "zephon_nt_peak_rss_anon_mib": mem::mib_json(many.peak()),
        }));
    }
    let json = || serde_json::json!({"bench": "formats", "rounds": a.repeat.max(1), "rows": rows});
    super::print_report(a.json, json, &lines);
    Ok(())
}
