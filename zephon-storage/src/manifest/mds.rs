//! Streaming's `index.json` read as a manifest: an MDS dataset written by
//! Streaming's `MDSWriter` needs no manifest of ours.

use super::{Manifest, ShardEntry};
use crate::format::mds::MdsColumn;
use crate::format::{FormatResult, FormatSpec};
use serde::Deserialize;

#[derive(Deserialize)]
struct IndexFile {
    shards: Vec<ShardInfo>,
}

#[derive(Deserialize)]
struct ShardInfo {
    format: String,
    column_encodings: Vec<String>,
    column_names: Vec<String>,
    column_sizes: Vec<Option<u32>>,
    #[serde(default)]
    compression: Option<String>,
    raw_data: FileInfo,
    #[serde(default)]
    zip_data: Option<FileInfo>,
    samples: u64,
}

#[derive(Deserialize)]
struct FileInfo {
    basename: String,
    bytes: u64,
}

/// Reads Streaming's `index.json`, as a manifest of [`FormatSpec::Mds`],
/// checked like any manifest ([`Manifest::check`]: basenames stay under the
/// root, no shard twice, counts that add up). Returns `Ok(None)` when `json`
/// is not a Streaming index at all.
pub fn manifest_from_index(json: &[u8]) -> FormatResult<Option<Manifest>> {
    let Ok(index) = serde_json::from_slice::<IndexFile>(json) else {
        return Ok(None);
    };
    let mut columns: Option<Vec<MdsColumn>> = None;
    let mut shards = Vec::new();
    for s in index.shards {
        if s.format != "mds" {
            return Err(format!(
                "Streaming shard {:?} is in the {:?} format; only `mds` is supported",
                s.raw_data.basename, s.format
            ));
        }
        if s.column_names.len() != s.column_encodings.len()
            || s.column_names.len() != s.column_sizes.len()
        {
            return Err(format!(
                "shard {:?}: column names, encodings and sizes differ in number",
                s.raw_data.basename
            ));
        }
        let cols: Vec<MdsColumn> = s
            .column_names
            .iter()
            .zip(&s.column_encodings)
            .zip(&s.column_sizes)
            .map(|((n, e), z)| MdsColumn {
                name: n.clone(),
                encoding: e.clone(),
                size: *z,
            })
            .collect();
        match &columns {
            Some(c) if *c != cols => {
                return Err(format!(
                    "shard {:?} has different columns from the first shard",
                    s.raw_data.basename
                ));
            }
            Some(_) => {}
            None => columns = Some(cols),
        }
        let entry = match (&s.compression, s.zip_data) {
            (Some(c), Some(zip)) => {
                let mut e = ShardEntry::new(zip.basename, s.samples, zip.bytes);
                e.uncompressed_bytes = Some(s.raw_data.bytes);
                if !c.starts_with("zstd") && !c.starts_with("gz") {
                    return Err(format!(
                        "shard {:?}: compression {c:?} is not supported (zstd and gz are)",
                        e.path
                    ));
                }
                e
            }
            _ => ShardEntry::new(s.raw_data.basename, s.samples, s.raw_data.bytes),
        };
        shards.push(entry);
    }
    let Some(columns) = columns else {
        return Err("the Streaming index lists no shards".into());
    };
    let mut m = Manifest::new(shards);
    m.format = FormatSpec::Mds { columns };
    m.check()?;
    Ok(Some(m))
}
