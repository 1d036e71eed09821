//! `zephon prepare SRC DEST`: reads any dataset the project reads, through
//! an optional exact deduplication and tokenizer, and writes it as flat
//! token files, Megatron `.bin`/`.idx`, JSON lines, MDS or WebDataset with
//! `index.json`
//! (see [`zephon_storage::write`]). Deterministic for any parallelism;
//! killed and started again with the same command, it keeps the finished
//! shards (checked) and writes the same bytes.

use super::flags::ranged;
use anyhow::{Context, Result};
use std::collections::HashSet;
use std::time::Instant;
use zephon_core::settings::{SEQ_LEN, WORKERS};
use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
use zephon_ops::{SpecialTokens, TextPipelineExt, TokenizeConfig};
use zephon_storage::format::TokenDtype;
use zephon_storage::write::{DatasetWriter, WriteFormat, WriteOptions};
use zephon_storage::{StorageOptions, UriDatasetExt};

/// The output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Flat token files (nanoGPT's `train.bin`), cut into `--seq-len` samples.
    Tokens,
    /// Megatron-LM `.bin` + `.idx`, one sequence per document.
    Megatron,
    /// JSON lines.
    Jsonl,
    /// MosaicML Streaming's MDS shards, with Streaming's `index.json`.
    Mds,
    /// WebDataset tars: a record's fields as members `KEY.FIELD`.
    Webdataset,
}

/// Options of `zephon prepare`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The dataset to read: a folder, `file://`, `s3://`, `gs://`,
    /// `azblob://` or `http(s)://` URI (any format the project reads).
    pub src: String,
    /// Where to write: a folder (made if missing) or an `s3://`, `gs://`,
    /// `azblob://` URI. Empty, or holding an earlier run of this command.
    pub dest: String,
    /// The output's format.
    #[arg(long, value_enum, default_value = "tokens")]
    pub format: Format,
    /// A Hugging Face `tokenizer.json` to tokenize `--field` with; without
    /// one, token outputs read the ids already in `--tokens-field`.
    #[arg(long)]
    pub tokenizer: Option<std::path::PathBuf>,
    /// The text field tokenized (and deduplicated).
    #[arg(long, default_value = "text")]
    pub field: String,
    /// The field of token ids read when there is no `--tokenizer`.
    #[arg(long, default_value = "tokens")]
    pub tokens_field: String,
    /// Append the tokenizer's end-of-text token to every document.
    #[arg(long)]
    pub eos: bool,
    /// Ids per sample of flat token files.
    #[arg(long, default_value_t = 2048, value_parser = ranged::<u64>(SEQ_LEN))]
    pub seq_len: u64,
    /// Id width (`u16`, `u32`, `i32`, ...); by default the narrowest that
    /// holds the tokenizer's vocabulary.
    #[arg(long, value_parser = parse_dtype)]
    pub dtype: Option<TokenDtype>,
    /// JSON lines, MDS, WebDataset: the fields written, comma-separated
    /// (all by default).
    #[arg(long, value_delimiter = ',')]
    pub fields: Option<Vec<String>>,
    /// Target bytes per shard (1 to 4 GiB); one shard of this size is
    /// held in memory while it fills.
    #[arg(long, default_value_t = zephon_storage::write::DEFAULT_SHARD_BYTES)]
    pub shard_bytes: u64,
    /// Also close a shard after this many samples (Megatron, JSON lines).
    #[arg(long)]
    pub shard_samples: Option<u64>,
    /// Compress JSON lines and MDS shards with Zstandard at this level (1 to 19).
    #[arg(long, value_name = "LEVEL")]
    pub zstd: Option<i32>,
    /// Drop documents whose text, with runs of whitespace made one space
    /// and the ends trimmed, equals an earlier one's (counted in the summary).
    #[arg(long)]
    pub dedup: bool,
    /// Threads reading and tokenizing (0: one per core). The output does
    /// not depend on it.
    #[arg(long, default_value_t = 0, value_parser = ranged::<usize>(WORKERS))]
    pub parallelism: usize,
    /// S3 endpoint of the source and destination (else `AWS_ENDPOINT_URL`).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// S3 region (else `AWS_REGION`).
    #[arg(long)]
    pub region: Option<String>,
    /// Print the summary as one JSON line.
    #[arg(long)]
    pub json: bool,
}

fn parse_dtype(s: &str) -> Result<TokenDtype, String> {
    TokenDtype::parse(s).ok_or_else(|| format!("`{s}` is not one of u8, u16, u32, i32, i64"))
}

/// The key `--dedup` compares: whitespace runs made one space, ends trimmed.
fn dedup_key(text: &str) -> (u64, u32) {
    let normalized = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let b = normalized.as_bytes();
    // 96 bits: two independent hashes, so a collision between two
    // different texts is out of reach for any corpus.
    (zephon_core::hash::bytes(b), zephon_core::hash::crc32c(b))
}

/// `r`'s fields `names`, in that order; a missing one is an error naming it.
fn project(r: &Record, names: &[String], document: u64) -> Result<Record> {
    let mut out = Record::new();
    for n in names {
        let v = r
            .get(n)
            .with_context(|| format!("document {document} has no field `{n}` (--fields)"))?;
        out.set(n.as_str(), v.clone());
    }
    Ok(out)
}

/// Runs the command.
pub fn run(a: Args) -> Result<()> {
    execute(a, true).map(|_| ())
}

/// Runs the command and returns its summary line; prints the progress and
/// the summary only if `print`.
pub fn execute(a: Args, print: bool) -> Result<serde_json::Value> {
    let start = Instant::now();
    let storage = StorageOptions {
        endpoint: a.endpoint.clone(),
        region: a.region.clone(),
        ..StorageOptions::default()
    };
    let ds = Dataset::from_uri_with("source", &a.src, &storage)?;
    let shards: Vec<u64> = ds
        .shards()
        .iter()
        .map(|s| s.fingerprint().unwrap_or(0))
        .collect();
    let config = match &a.tokenizer {
        Some(path) => {
            let mut c = TokenizeConfig::from_file(path)
                .with_context(|| format!("--tokenizer {}", path.display()))?
                .field(a.field.as_str());
            if a.eos {
                c = c.special_tokens(SpecialTokens::Eos);
            }
            Some(c)
        }
        None => {
            anyhow::ensure!(!a.eos, "--eos needs --tokenizer (its end-of-text token)");
            None
        }
    };
    let vocab = config
        .as_ref()
        .map(|c| c.tokenizer().get_vocab_size(true) as u64);
    let dtype = a.dtype.unwrap_or_else(|| {
        WriteFormat::dtype_for_vocab(
            vocab.unwrap_or(u64::from(u32::MAX)),
            a.format == Format::Megatron,
        )
    });
    let format = match a.format {
        Format::Tokens => WriteFormat::Tokens {
            dtype,
            seq_len: a.seq_len,
        },
        Format::Megatron => WriteFormat::Megatron { dtype },
        Format::Jsonl => WriteFormat::Jsonl {
            fields: a.fields.clone(),
        },
        Format::Mds => WriteFormat::Mds { columns: None },
        Format::Webdataset => WriteFormat::WebDataset,
    };
    let tokenizer_hash = match &a.tokenizer {
        Some(p) => zephon_core::hash::bytes(&std::fs::read(p)?),
        None => 0,
    };
    let settings = format!(
        "source={} shards={} content={:016x} tokenizer={tokenizer_hash:016x} field={} \
         tokens_field={} eos={} dedup={}",
        a.src,
        shards.len(),
        zephon_core::hash::key(&shards),
        a.field,
        a.tokens_field,
        a.eos,
        a.dedup
    );
    let mut opts = WriteOptions::new(format.clone())
        .shard_bytes(a.shard_bytes)
        .settings(settings);
    opts.shard_samples = a.shard_samples;
    opts.zstd = a.zstd;
    opts.storage = storage;
    let (mut writer, resume) = DatasetWriter::create("prepare", &a.dest, opts)?;
    if let Some(shard) = resume.redone.as_ref().filter(|_| print) {
        eprintln!(
            "{shard} is missing or changed since it was written: redoing it and those after it"
        );
    }
    if print && resume.shards > 0 && !resume.complete {
        eprintln!(
            "resuming: {} shards kept (checked), from document {}",
            resume.shards, resume.documents
        );
    }

    let cores = zephon_core::runner::num_cpus();
    let k = if a.parallelism == 0 {
        cores
    } else {
        a.parallelism
    };
    let ws = WorkSource::builder()
        .dataset(ds, 1.0)
        .canonical_lanes(1)
        .shuffle_shards(false)
        .shuffle_within_shard(false)
        .build()?;
    let mut seen: HashSet<(u64, u32)> = HashSet::new();
    let mut passed = 0u64;
    let (dedup, field, skip) = (a.dedup, a.field.clone(), resume.documents);
    let dropped_at = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let dropped_count = dropped_at.clone();
    let kept = ws
        .stream()
        .fetch(k)
        .filter_ok(move |r: &Record| {
            if !dedup {
                return true;
            }
            let fresh = seen.insert(dedup_key(r.text(&field).unwrap_or("")));
            if !fresh {
                dropped_count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            fresh
        })
        // Documents the kept shards hold: not tokenized again.
        .filter_ok(move |_: &Record| {
            passed += 1;
            passed > skip
        });
    let mut it = match (&config, resume.complete) {
        (_, true) => None,
        (Some(c), false) => Some(
            kept.tokenize(c.clone(), k)
                .into_blocking_iter(Runner::threads())?,
        ),
        (None, false) => Some(kept.into_blocking_iter(Runner::threads())?),
    };
    let bar = if print {
        indicatif::ProgressBar::new_spinner()
    } else {
        indicatif::ProgressBar::hidden()
    };
    let (mut docs, mut tokens, mut bytes) = (0u64, 0u64, 0u64);
    let ids_field = if config.is_some() {
        "input_ids"
    } else {
        a.tokens_field.as_str()
    };
    if let Some(records) = it.as_mut() {
        for r in records {
            let r = r?;
            match a.format {
                Format::Jsonl => writer.push_record(&r)?,
                Format::Mds | Format::Webdataset => match &a.fields {
                    Some(names) => {
                        writer.push_record(&project(&r, names, resume.documents + docs)?)?
                    }
                    None => writer.push_record(&r)?,
                },
                Format::Tokens | Format::Megatron => {
                    let ids = r.token_ids(ids_field).with_context(|| {
                        format!(
                            "document {} has no token ids in `{ids_field}`{}",
                            resume.documents + docs,
                            if config.is_none() {
                                "; give --tokenizer to tokenize a text field"
                            } else {
                                ""
                            }
                        )
                    })?;
                    let ids: Vec<u32> = ids.iter().collect();
                    tokens += ids.len() as u64;
                    writer.push_tokens(&ids)?;
                }
            }
            docs += 1;
            bytes += r.byte_len() as u64;
            if docs % 4096 == 0 {
                let s = start.elapsed().as_secs_f64().max(1e-9);
                bar.set_message(format!(
                    "{docs} documents, {tokens} tokens, {:.0} documents/s, {:.0} tokens/s, {:.1} MB/s",
                    docs as f64 / s,
                    tokens as f64 / s,
                    bytes as f64 / s / 1e6
                ));
                bar.tick();
            }
        }
    }
    bar.finish_and_clear();
    let dropped = dropped_at.load(std::sync::atomic::Ordering::Relaxed);
    let uri = writer.uri().to_owned();
    let manifest = writer.finish()?;
    let secs = start.elapsed().as_secs_f64();
    let samples: u64 = manifest.shards.iter().map(|s| s.samples).sum();
    let written: u64 = manifest.shards.iter().map(|s| s.bytes).sum();
    let line = serde_json::json!({
        "dest": uri,
        "format": manifest.format.name(),
        "shards": manifest.shards.len(),
        "samples": samples,
        "bytes": written,
        "documents": docs,
        "tokens": tokens,
        "duplicates_dropped": dropped,
        "resumed_from_document": resume.documents,
        "already_complete": resume.complete,
        "seconds": (secs * 1000.0).round() / 1000.0,
        "documents_per_s": (docs as f64 / secs).round(),
        "tokens_per_s": (tokens as f64 / secs).round(),
    });
    if !print {
        // The caller reports.
    } else if a.json {
        println!("{line}");
    } else if resume.complete {
        println!(
            "{uri}: already whole ({} shards, checked); nothing written",
            manifest.shards.len()
        );
    } else {
        println!(
            "wrote {uri}/index.json: {} {} shards, {samples} samples, {written} bytes",
            manifest.shards.len(),
            manifest.format.name()
        );
        let token_part = if matches!(a.format, Format::Tokens | Format::Megatron) {
            format!(", {tokens} tokens")
        } else {
            String::new()
        };
        println!(
            "{docs} documents{}{token_part} in {secs:.2} s ({:.0} documents/s{})",
            if dedup {
                format!(" ({dropped} duplicates dropped)")
            } else {
                String::new()
            },
            docs as f64 / secs,
            if token_part.is_empty() {
                String::new()
            } else {
                format!(", {:.0} tokens/s", tokens as f64 / secs)
            }
        );
    }
    Ok(line)
}
