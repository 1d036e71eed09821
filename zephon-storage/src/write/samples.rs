//! Records as MDS samples and WebDataset members, the inverse of what the
//! readers in [`format::mds`](crate::format::mds) and
//! [`format::webdataset`](crate::format::webdataset) decode.

use crate::format::mds::MdsColumn;
use crate::format::webdataset::KEY_FIELD;
use crate::write::journal::Finished;
use zephon_core::{Record, Value};

/// The MDS columns a record's fields make, sorted by name (as Streaming's
/// `MDSWriter` orders them): text `str`, integers `int64`, floats
/// `float64`, bytes `bytes`, booleans and JSON `json`.
pub(crate) fn mds_columns(record: &Record) -> Result<Vec<MdsColumn>, String> {
    let mut cols = Vec::new();
    for (name, v) in record.fields.iter() {
        let (encoding, size) = match v {
            Value::Text(_) | Value::TextView(_) => ("str", None),
            Value::Int(_) => ("int64", Some(8)),
            Value::Float(_) => ("float64", Some(8)),
            Value::Bytes(_) => ("bytes", None),
            Value::Bool(_) | Value::Json(_) | Value::Null => ("json", None),
            Value::Tokens(_) | Value::TokenView(_) => {
                return Err(format!(
                    "field `{}` holds token ids: write them as token files or Megatron",
                    name.as_str()
                ));
            }
        };
        cols.push(MdsColumn::new(name.as_str(), encoding, size));
    }
    cols.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(cols)
}

/// `record`'s values in `columns`' encodings; a field missing, added or of
/// another type than the first record's is an error naming it.
pub(crate) fn mds_sample(columns: &[MdsColumn], record: &Record) -> Result<Vec<Vec<u8>>, String> {
    if record.fields.len() != columns.len() {
        let names: Vec<&str> = record.fields.keys().map(|k| k.as_str()).collect();
        return Err(format!(
            "has fields {names:?}, but the output's columns are {:?} (from the first record)",
            columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>()
        ));
    }
    columns
        .iter()
        .map(|c| {
            let v = record
                .get(&c.name)
                .ok_or_else(|| format!("has no field `{}` (a column of the output)", c.name))?;
            let wrong = || {
                format!(
                    "field `{}` holds {}, but its column is `{}` (from the first record)",
                    c.name,
                    v.kind(),
                    c.encoding
                )
            };
            Ok(match (c.encoding.as_str(), v) {
                ("str", _) => v.as_text().ok_or_else(wrong)?.as_bytes().to_vec(),
                ("int64", Value::Int(i)) => i.to_le_bytes().to_vec(),
                ("float64", Value::Float(f)) => f.to_le_bytes().to_vec(),
                ("bytes", Value::Bytes(b)) => b.to_vec(),
                ("json", Value::Bool(b)) => b.to_string().into_bytes(),
                ("json", Value::Null) => b"null".to_vec(),
                ("json", Value::Json(j)) => j.to_string().into_bytes(),
                _ => return Err(wrong()),
            })
        })
        .collect()
}

/// Streaming's `index.json` (version 2) for the finished shards.
pub(crate) fn streaming_index(columns: &[MdsColumn], shards: &[Finished]) -> Vec<u8> {
    let infos: Vec<serde_json::Value> = shards
        .iter()
        .map(|f| {
            let zipped = f.entry.uncompressed_bytes.is_some();
            serde_json::json!({
                "format": "mds",
                "column_encodings": columns.iter().map(|c| &c.encoding).collect::<Vec<_>>(),
                "column_names": columns.iter().map(|c| &c.name).collect::<Vec<_>>(),
                "column_sizes": columns.iter().map(|c| c.size).collect::<Vec<_>>(),
                "compression": zipped.then_some("zstd"),
                "hashes": [],
                "raw_data": {
                    "basename": f.entry.path.strip_suffix(".zstd").unwrap_or(&f.entry.path),
                    "bytes": f.entry.uncompressed_bytes.unwrap_or(f.entry.bytes),
                    "hashes": {},
                },
                "samples": f.entry.samples,
                "size_limit": f.entry.uncompressed_bytes.unwrap_or(f.entry.bytes),
                "version": 2,
                "zip_data": zipped.then(|| serde_json::json!({
                    "basename": f.entry.path,
                    "bytes": f.entry.bytes,
                    "hashes": {},
                })),
            })
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({ "shards": infos, "version": 2 }))
        .expect("an index serializes")
}

/// Appends `record` to a WebDataset tar as members `KEY.FIELD`: text as
/// UTF-8, numbers and booleans in decimal, JSON serialized, bytes as they
/// are; a null field has no member. The key is the record's `__key__`, or
/// the document's number.
pub(crate) fn tar_sample(
    tar: &mut tar::Builder<Vec<u8>>,
    record: &Record,
    document: u64,
) -> Result<(), String> {
    let key = match record.get(KEY_FIELD) {
        Some(k) => k
            .as_text()
            .ok_or_else(|| format!("field `{KEY_FIELD}` holds {}, not text", k.kind()))?
            .to_owned(),
        None => format!("{document:010}"),
    };
    let file = key.rsplit('/').next().unwrap_or("");
    if file.is_empty() || file.contains('.') || key.starts_with('/') || key.contains("..") {
        return Err(format!(
            "key {key:?} cannot name WebDataset members (a file name without `.`, under the shard)"
        ));
    }
    for (name, v) in record.fields.iter() {
        let name = name.as_str();
        if name == KEY_FIELD {
            continue;
        }
        let data: Vec<u8> = match v {
            Value::Null => continue,
            Value::Text(_) | Value::TextView(_) => v.as_text().unwrap_or("").as_bytes().to_vec(),
            Value::Int(i) => i.to_string().into_bytes(),
            Value::Float(f) => f.to_string().into_bytes(),
            Value::Bool(b) => b.to_string().into_bytes(),
            Value::Json(j) => j.to_string().into_bytes(),
            Value::Bytes(b) => b.to_vec(),
            Value::Tokens(_) | Value::TokenView(_) => {
                return Err(format!(
                    "field `{name}` holds token ids: write them as token files or Megatron"
                ));
            }
        };
        if name.is_empty() || name.contains('/') {
            return Err(format!("field `{name}` cannot be a member's extension"));
        }
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        // Fixed metadata: the same records give the same bytes.
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        tar.append_data(&mut header, format!("{key}.{name}"), data.as_slice())
            .map_err(|e| format!("member {key}.{name}: {e}"))?;
    }
    Ok(())
}
