//! `zephon inspect <uri>`: what a dataset holds, before training on it.

use crate::cmd::flags::{PRINTED_SAMPLES, PRINTED_WIDTH, ranged};
use anyhow::{Context, Result};
use clap::Parser;
use serde::Serialize;
use zephon_core::settings::SEQ_LEN;
use zephon_core::{Dataset, Record, Value};
use zephon_storage::escape_controls;
use zephon_storage::format::{FormatOptions, TokenDtype};
use zephon_storage::local::open_local_detected;
use zephon_storage::open::local_dir;
use zephon_storage::{CacheOptions, RemoteDataset, StorageOptions};

/// Arguments of `zephon inspect`.
#[derive(Debug, Parser)]
pub struct Args {
    /// A local folder, or a `file://`, `s3://`, `gs://`, `azblob://`, `http(s)://` URI.
    pub uri: String,
    /// How many samples to print (0 to 100,000).
    #[arg(long, short = 'n', default_value_t = 3, value_parser = ranged::<usize>(PRINTED_SAMPLES))]
    pub samples: usize,
    /// Longest text (in characters) or token list (a quarter as many ids)
    /// printed per field (4 to 1,048,576).
    #[arg(long, default_value_t = 120, value_parser = ranged::<usize>(PRINTED_WIDTH))]
    pub width: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Tokens per sample of flat token files.
    #[arg(long, default_value_t = 1024, value_parser = ranged::<u64>(SEQ_LEN))]
    pub seq_len: u64,
    /// Token width of flat token files (u8, u16, u32, i32, i64).
    #[arg(long, default_value = "u16")]
    pub dtype: String,
    /// Parquet columns to read (comma-separated; default all).
    #[arg(long, value_delimiter = ',')]
    pub columns: Option<Vec<String>>,
    /// Samples whose image fields (bytes that hold a JPEG, PNG or WebP)
    /// are described: formats and sizes, from the headers (0 to 100,000;
    /// 0: none).
    #[arg(long, default_value_t = 256, value_parser = ranged::<usize>(PRINTED_SAMPLES))]
    pub image_samples: usize,
    /// S3, GCS or Azure Blob endpoint (else `AWS_ENDPOINT_URL`,
    /// `STORAGE_EMULATOR_HOST`, `AZURE_STORAGE_CONNECTION_STRING`).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// S3 region (else `AWS_REGION`).
    #[arg(long)]
    pub region: Option<String>,
}

/// Samples per shard.
#[derive(Debug, Serialize)]
pub struct Counts {
    /// Fewest samples in a shard.
    pub min: u64,
    /// Median samples per shard.
    pub median: u64,
    /// Most samples in a shard.
    pub max: u64,
    /// All samples.
    pub total: u64,
}

/// A field of the first sample.
#[derive(Debug, Serialize)]
pub struct Field {
    /// Field name.
    pub name: String,
    /// Value kind (`text`, `tokens`, `int`, ...).
    #[serde(rename = "type")]
    pub kind: &'static str,
}

/// The images of one bytes field over the samples looked at.
#[derive(Debug, Serialize)]
pub struct ImageField {
    /// Field name.
    pub field: String,
    /// Values that are images, by format (`jpeg`, `png`, `webp`).
    pub formats: std::collections::BTreeMap<&'static str, u64>,
    /// Values whose bytes are no image a decoder reads.
    pub unreadable: u64,
    /// Widths in pixels: min, median, max.
    pub width: [u32; 3],
    /// Heights in pixels: min, median, max.
    pub height: [u32; 3],
}

/// The image fields of `records`: every bytes field one of whose values
/// is an image, described from the headers.
fn image_fields(records: &[Record]) -> Vec<ImageField> {
    let mut by_field: std::collections::BTreeMap<String, (ImageField, Vec<u32>, Vec<u32>)> =
        Default::default();
    for r in records {
        for (k, v) in r.fields.iter() {
            let Value::Bytes(b) = v else { continue };
            let entry = by_field.entry(k.to_string()).or_insert_with(|| {
                let f = ImageField {
                    field: k.to_string(),
                    formats: Default::default(),
                    unreadable: 0,
                    width: [0; 3],
                    height: [0; 3],
                };
                (f, Vec::new(), Vec::new())
            });
            match zephon_media::probe_image(b) {
                Ok(info) => {
                    *entry.0.formats.entry(info.format).or_default() += 1;
                    entry.1.push(info.width);
                    entry.2.push(info.height);
                }
                Err(_) => entry.0.unreadable += 1,
            }
        }
    }
    let spread = |mut v: Vec<u32>| {
        v.sort_unstable();
        [v[0], v[v.len() / 2], v[v.len() - 1]]
    };
    by_field
        .into_values()
        .filter(|(_, w, _)| !w.is_empty())
        .map(|(mut f, w, h)| {
            (f.width, f.height) = (spread(w), spread(h));
            f
        })
        .collect()
}

/// What `zephon inspect` reports.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The dataset's location.
    pub uri: String,
    /// The shards' format.
    pub format: String,
    /// Number of shards.
    pub shards: usize,
    /// Samples per shard.
    pub samples: Counts,
    /// Stored bytes of the shards (and sidecars).
    pub bytes: u64,
    /// Fields of the first sample.
    pub fields: Vec<Field>,
    /// The first samples, each field shown truncated.
    pub first: Vec<serde_json::Map<String, serde_json::Value>>,
    /// Row groups of a local Parquet dataset, from the shards' footers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub row_groups: Option<RowGroups>,
    /// The image fields of the first `--image-samples` samples.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageField>,
    /// The samples the image fields were described from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_samples: Option<usize>,
    /// The process's own memory around opening the dataset (Linux only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
}

/// The process's own memory (`RssAnon`: heap, not the page cache a mapped
/// shard brings in) before and after opening the dataset: the difference
/// is what the open dataset keeps while it lives (its shards' indexes), to
/// within what the allocator had spare.
#[derive(Debug, Serialize)]
pub struct Memory {
    /// Bytes before the dataset was opened.
    pub rss_anon_before_open: u64,
    /// Bytes once it was opened, before any sample was read.
    pub rss_anon_after_open: u64,
}

/// A local Parquet dataset's row groups: a row is decoded with its group,
/// so they say what a shuffle within a shard will cost.
#[derive(Debug, Serialize)]
pub struct RowGroups {
    /// Row groups in all shards.
    pub groups: u64,
    /// Rows of the largest group.
    pub max_rows: u64,
    /// The largest shard's uncompressed size of the columns read, as its
    /// footer gives it: about what it takes decoded (more for a
    /// dictionary-encoded column, whose values are stored once but decoded
    /// for every row).
    pub max_shard_decoded_bytes: u64,
    /// Bytes of decoded groups the process keeps, all shards together.
    pub budget: u64,
    /// Shards past that budget: a shuffle within one of them decodes its
    /// groups again for a few rows each.
    pub shards_over_budget: usize,
}

/// The row groups of a Parquet dataset's shards, from the footers its
/// open has already parsed (each shard's index keeps them).
fn row_groups(ds: &Dataset) -> RowGroups {
    use zephon_storage::FormatShard;
    use zephon_storage::format::parquet::decoded_budget;
    let mut r = RowGroups {
        groups: 0,
        max_rows: 0,
        max_shard_decoded_bytes: 0,
        budget: decoded_budget(),
        shards_over_budget: 0,
    };
    let sizes = ds
        .shards()
        .iter()
        .filter_map(|s| s.as_any()?.downcast_ref::<FormatShard>()?.group_sizes());
    for g in sizes {
        r.groups = r.groups.saturating_add(g.groups);
        r.max_rows = r.max_rows.max(g.max_rows);
        r.max_shard_decoded_bytes = r.max_shard_decoded_bytes.max(g.decoded_bytes);
        if g.decoded_bytes > r.budget {
            r.shards_over_budget += 1;
        }
    }
    r
}

fn truncate(s: &str, width: usize) -> String {
    match s.char_indices().nth(width) {
        Some((at, _)) => format!("{}… ({} chars)", &s[..at], s.chars().count()),
        None => s.to_owned(),
    }
}

fn show(v: &Value, width: usize) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        Value::Null => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Int(i) => J::from(*i),
        // JSON has no NaN or infinity: serde_json writes them as null,
        // which says the field is missing. Their text says what they are.
        Value::Float(f) if !f.is_finite() => J::String(f.to_string()),
        Value::Float(f) => J::from(*f),
        Value::Text(_) | Value::TextView(_) => {
            J::String(truncate(v.as_text().expect("a text value"), width))
        }
        Value::Tokens(_) | Value::TokenView(_) => {
            let t = v.token_ids().expect("a token value");
            if t.len() <= width / 4 {
                return J::from(t.to_vec());
            }
            let head: Vec<String> = t.iter().take(width / 4).map(|x| x.to_string()).collect();
            J::String(format!("[{}, …] ({} tokens)", head.join(", "), t.len()))
        }
        Value::Bytes(b) => J::String(format!("<{} bytes>", b.len())),
        Value::Json(j) => J::String(truncate(&j.to_string(), width)),
    }
}

fn open(args: &Args) -> Result<(Dataset, String, u64, Option<RowGroups>)> {
    let dtype = TokenDtype::parse(&args.dtype)
        .ok_or_else(|| anyhow::anyhow!("unknown token dtype `{}`", args.dtype))?;
    let mut fopts = FormatOptions::default().seq_len(args.seq_len).dtype(dtype);
    fopts.columns = args.columns.clone();
    // Local folders are read in place, found by the rule every command uses.
    if let Some(dir) = local_dir(&args.uri) {
        let (ds, format, shards) = open_local_detected("inspect", &dir, &fopts)?;
        // Sizes come from the manifest when there is one: untrusted, so a
        // hostile total saturates instead of wrapping.
        let bytes = shards
            .iter()
            .map(|s| {
                s.bytes
                    .saturating_add(s.sidecar.as_ref().map_or(0, |(_, b)| *b))
            })
            .fold(0u64, u64::saturating_add);
        let groups = matches!(format, zephon_storage::format::FormatSpec::Parquet { .. })
            .then(|| row_groups(&ds));
        return Ok((ds, format.name().to_owned(), bytes, groups));
    }
    // The first samples by byte range where the format allows (token
    // files, Megatron, JSONL with its line index): a shard is not
    // downloaded whole to print a few of its samples.
    let mut opts = StorageOptions::default()
        .cache(CacheOptions::default().enabled(false))
        .byte_range(true)
        .format(fopts);
    opts.endpoint = args.endpoint.clone();
    opts.region = args.region.clone();
    let rd = RemoteDataset::open("inspect", &args.uri, &opts)?;
    let bytes = rd
        .manifest()
        .shards
        .iter()
        .map(|s| s.bytes)
        .fold(0u64, u64::saturating_add);
    Ok((
        rd.dataset().clone(),
        rd.manifest().format.name().to_owned(),
        bytes,
        None,
    ))
}

/// Builds the report: reads only the first samples (from the first shards).
pub fn inspect(args: &Args) -> Result<Report> {
    let before = zephon_metrics::memory::rss_anon();
    let (ds, format, bytes, row_groups) = open(args)?;
    let memory = before
        .zip(zephon_metrics::memory::rss_anon())
        .map(|(before, after)| Memory {
            rss_anon_before_open: before,
            rss_anon_after_open: after,
        });
    // What `run` refuses (a dataset without samples: every shard empty, a
    // `.zst` of skippable frames only), `inspect` refuses alike, by the
    // same check.
    zephon_core::WorkSource::builder()
        .dataset(ds.clone(), 1.0)
        .build()
        .with_context(|| args.uri.clone())?;
    let mut counts: Vec<u64> = ds.shards().iter().map(|s| s.len()).collect();
    counts.sort_unstable();
    let samples = Counts {
        min: counts.first().copied().unwrap_or(0),
        median: counts.get(counts.len() / 2).copied().unwrap_or(0),
        max: counts.last().copied().unwrap_or(0),
        total: counts.iter().sum(),
    };
    let mut first: Vec<Record> = Vec::new();
    // Reads run in place on a current-thread runtime, as under the inline
    // runner.
    let rt = zephon_core::Runner::Inline.runtime()?;
    // At least one sample, so the fields are known even with `-n 0`; more
    // for the image fields only where the first sample has bytes (a token
    // file's samples are not read further to find none).
    let read_up_to = |want: usize, first: &mut Vec<Record>| -> Result<()> {
        let mut skip = first.len() as u64;
        for s in ds.shards() {
            let left = want.saturating_sub(first.len()) as u64;
            if left == 0 {
                break;
            }
            let from = skip.min(s.len());
            skip -= from;
            let n = left.min(s.len() - from);
            if n > 0 {
                first.extend(rt.block_on(s.read_run(from, n))?);
            }
        }
        Ok(())
    };
    read_up_to(args.samples.max(1), &mut first)?;
    let has_bytes = first
        .first()
        .is_some_and(|r| r.fields.iter().any(|(_, v)| matches!(v, Value::Bytes(_))));
    if has_bytes {
        read_up_to(args.image_samples, &mut first)?;
    }
    let fields = first.first().map_or_else(Vec::new, |r| {
        r.fields
            .iter()
            .map(|(k, v)| Field {
                name: k.to_string(),
                kind: v.kind(),
            })
            .collect()
    });
    let looked = first.len().min(args.image_samples);
    let images = image_fields(&first[..looked]);
    let first = first
        .iter()
        .take(args.samples)
        .map(|r| {
            r.fields
                .iter()
                .map(|(k, v)| (k.to_string(), show(v, args.width)))
                .collect()
        })
        .collect();
    Ok(Report {
        uri: args.uri.clone(),
        format,
        shards: ds.shards().len(),
        samples,
        bytes,
        fields,
        first,
        row_groups,
        image_samples: (!images.is_empty()).then_some(looked),
        images,
        memory,
    })
}

/// Prints the report, as text or JSON.
pub fn run(args: Args) -> Result<()> {
    let r = inspect(&args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!("dataset  {}", r.uri);
    println!("format   {}", r.format);
    println!("shards   {}", r.shards);
    println!(
        "samples  {} total; per shard min {}, median {}, max {}",
        r.samples.total, r.samples.min, r.samples.median, r.samples.max
    );
    println!("bytes    {}", r.bytes);
    if let Some(g) = &r.row_groups {
        println!(
            "groups   {} row groups, up to {} rows each; largest shard about {} MiB decoded",
            g.groups,
            g.max_rows,
            g.max_shard_decoded_bytes >> 20
        );
        if g.shards_over_budget > 0 {
            println!(
                "         {} shard(s) past the {} MiB kept decoded: a shuffle within such a shard \
                 decodes its groups again for a few rows each; read with shuffle_within_shard off \
                 and shuffle_block_size, or raise parquet_decoded_bytes",
                g.shards_over_budget,
                g.budget >> 20
            );
        }
    }
    if let Some(m) = &r.memory {
        println!(
            "memory   {:.1} MiB of the process's own memory (RssAnon) once opened, {:.1} MiB \
             before: the difference is what the open dataset keeps (its shards' indexes); \
             mapped shards are page cache, not counted",
            m.rss_anon_after_open as f64 / 1048576.0,
            m.rss_anon_before_open as f64 / 1048576.0
        );
    }
    for f in &r.images {
        let formats: Vec<String> = f.formats.iter().map(|(k, n)| format!("{n} {k}")).collect();
        println!(
            "images   `{}` in the first {} samples: {}{}; width {}..{} (median {}), height {}..{} (median {})",
            escape_controls(&f.field),
            r.image_samples.unwrap_or(0),
            formats.join(", "),
            if f.unreadable > 0 {
                format!(", {} unreadable", f.unreadable)
            } else {
                String::new()
            },
            f.width[0],
            f.width[2],
            f.width[1],
            f.height[0],
            f.height[2],
            f.height[1]
        );
    }
    println!("fields   (first sample)");
    for f in &r.fields {
        println!("  {:<24} {}", escape_controls(&f.name), f.kind);
    }
    for (i, s) in r.first.iter().enumerate() {
        println!("sample {i}");
        for (k, v) in s {
            let v = match v {
                serde_json::Value::String(s) => escape_controls(s).into_owned(),
                other => other.to_string(),
            };
            println!("  {:<24} {v}", escape_controls(k));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_that_json_cannot_hold_are_shown_as_their_text() {
        for (f, text) in [
            (f64::NAN, "NaN"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(show(&Value::Float(f), 80), serde_json::json!(text));
        }
        assert_eq!(show(&Value::Float(1.5), 80), serde_json::json!(1.5));
    }
}
