//! Telling a dataset's format from its file names.

use super::compression::is_shard_name;
use super::{FormatOptions, FormatResult, FormatSpec};
use std::collections::{BTreeMap, BTreeSet};

/// A shard found by [`detect`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetectedShard {
    /// Path relative to the dataset root.
    pub path: String,
    /// Stored size in bytes.
    pub bytes: u64,
    /// The sidecar (a Megatron `.idx`), with its size.
    pub sidecar: Option<(String, u64)>,
    /// A compressed shard's decoded size, where a followed manifest gives
    /// it (`uncompressed_bytes`): its decode stops past it and must reach
    /// it. `None` for shards found by their names.
    pub decoded_bytes: Option<u64>,
}

/// What [`detect`] found: one format and its shards, in path order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detected {
    /// The format, with `opts` applied.
    pub format: FormatSpec,
    /// The shards.
    pub shards: Vec<DetectedShard>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Jsonl,
    Parquet,
    Tar,
    Megatron,
    Tokens,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Jsonl => "JSONL (*.jsonl[.zst|.gz])",
            Kind::Parquet => "Parquet (*.parquet)",
            Kind::Tar => "WebDataset (*.tar)",
            Kind::Megatron => "Megatron (*.bin + *.idx)",
            Kind::Tokens => "flat token files (*.bin without .idx)",
        }
    }
}

fn extension(path: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or(path);
    match name.find('.') {
        Some(i) => format!("*{}", &name[i..]),
        None => "(no extension)".into(),
    }
}

/// Lists what a folder holds, by extension, for error messages.
fn found(files: &[(String, u64)]) -> String {
    if files.is_empty() {
        return "the folder is empty".into();
    }
    let mut by_ext: BTreeMap<String, usize> = BTreeMap::new();
    for (p, _) in files {
        *by_ext.entry(extension(p)).or_default() += 1;
    }
    let list: Vec<String> = by_ext.iter().map(|(e, n)| format!("{n} {e}")).collect();
    format!("found {}", list.join(", "))
}

/// Picks the format of a dataset from its files (`(path, bytes)`, relative
/// to the root; Zephon's or Streaming's `index.json` are handled before
/// this). Exactly one format must be present; none, or several, is an
/// error that lists what the folder holds.
///
/// ```
/// use zephon_storage::format::{FormatOptions, FormatSpec, detect};
/// let files = vec![("a.bin".to_string(), 8), ("a.idx".to_string(), 50)];
/// let d = detect(&files, &FormatOptions::default()).unwrap();
/// assert_eq!(d.format, FormatSpec::Megatron);
/// assert_eq!(d.shards[0].sidecar, Some(("a.idx".to_string(), 50)));
///
/// let mixed = vec![("a.jsonl".to_string(), 8), ("b.parquet".to_string(), 50)];
/// let err = detect(&mixed, &FormatOptions::default()).unwrap_err();
/// assert!(err.contains("JSONL") && err.contains("Parquet"), "{err}");
/// ```
pub fn detect(files: &[(String, u64)], opts: &FormatOptions) -> FormatResult<Detected> {
    let sizes: BTreeMap<&str, u64> = files.iter().map(|(p, b)| (p.as_str(), *b)).collect();
    let mut kinds: BTreeMap<Kind, Vec<DetectedShard>> = BTreeMap::new();
    let mut bin_stems = BTreeSet::new();
    let mut mds = 0;
    for (path, bytes) in files {
        let shard = |sidecar| DetectedShard {
            path: path.clone(),
            bytes: *bytes,
            sidecar,
            decoded_bytes: None,
        };
        let kind = if is_shard_name(path) {
            Kind::Jsonl
        } else if path.ends_with(".parquet") {
            Kind::Parquet
        } else if path.ends_with(".tar") {
            Kind::Tar
        } else if let Some(stem) = path.strip_suffix(".bin") {
            bin_stems.insert(stem);
            let idx = format!("{stem}.idx");
            match sizes.get(idx.as_str()) {
                Some(&n) => {
                    kinds
                        .entry(Kind::Megatron)
                        .or_default()
                        .push(shard(Some((idx, n))));
                    continue;
                }
                None => Kind::Tokens,
            }
        } else {
            mds += usize::from(path.contains(".mds"));
            continue;
        };
        kinds.entry(kind).or_default().push(shard(None));
    }
    for (path, _) in files {
        if let Some(stem) = path.strip_suffix(".idx")
            && !is_shard_name(stem)
            && !bin_stems.contains(stem)
        {
            return Err(format!(
                "Megatron index `{path}` has no `{stem}.bin` beside it; {}",
                found(files)
            ));
        }
    }
    match kinds.len() {
        0 if mds > 0 => Err(format!(
            "MDS shards need Streaming's index.json at the dataset root; {}",
            found(files)
        )),
        0 => Err(format!(
            "no shards: no *.jsonl[.zst|.gz], *.parquet, *.bin (+ .idx), *.tar, or MDS index.json; {}",
            found(files)
        )),
        1 => {
            let (kind, mut shards) = kinds.into_iter().next().expect("one kind");
            shards.sort_by(|a, b| a.path.cmp(&b.path));
            let format = match kind {
                Kind::Jsonl => FormatSpec::Jsonl,
                Kind::Parquet => FormatSpec::Parquet {
                    columns: opts.columns.clone(),
                },
                Kind::Tar => FormatSpec::WebDataset,
                Kind::Megatron => FormatSpec::Megatron,
                Kind::Tokens => FormatSpec::Tokens {
                    dtype: opts.dtype,
                    seq_len: opts.seq_len,
                },
            };
            Ok(Detected { format, shards })
        }
        _ => {
            let list: Vec<String> = kinds
                .iter()
                .map(|(k, s)| format!("{} {}", s.len(), k.label()))
                .collect();
            Err(format!(
                "mixed formats: {}; keep one format per dataset folder",
                list.join(", ")
            ))
        }
    }
}
