//! WebDataset `.tar` shards.
//!
//! Consecutive members that share a key make one sample; the key is the
//! member path up to the first `.` of its file name, the rest is the field
//! name (`images/0001.jpg`, `images/0001.json` -> key `images/0001`, fields
//! `jpg` and `json`), as WebDataset groups them. The tar is indexed once
//! (member offsets and sizes); reading a sample slices the shard's bytes.
//! A sample's members are consecutive, so a sample is one byte range (its
//! first member's data to its last's, headers between included): a remote
//! tar read by blocks is indexed by one pass over all its blocks (every
//! member header must be read, and headers lie between the members' data,
//! so the pass downloads the whole tar once, into the cache, holding a few
//! blocks in memory), then each read fetches its samples' blocks.
//!
//! Field values by extension: `txt`/`text` -> text, `json` -> JSON,
//! `cls`/`cls2`/`index`/`id` -> integer when they parse as one, anything else
//! (images, audio, `.npy`, ...) -> bytes, shared with the shard (no copy).
//! Every sample also gets `__key__`.

use super::{FormatResult, ShardIndex};

use bytes::Bytes;
use std::io::{Cursor, Read};
/// The `tar` crate, re-exported so callers write shards with the version
/// Zephon reads them with.
pub use tar;
use zephon_core::record::{ByteString, FieldName, Fields, Schema};
use zephon_core::{Record, Value};

/// The field holding a sample's key.
pub const KEY_FIELD: &str = "__key__";

#[derive(Debug)]
struct Member {
    /// Shared by the members of every sample with this extension.
    field: FieldName,
    offset: usize,
    size: usize,
}

#[derive(Debug)]
struct Sample {
    key: String,
    members: Vec<Member>,
}

/// The samples of a tar shard.
#[derive(Debug)]
pub struct TarIndex {
    samples: Vec<Sample>,
    key_field: FieldName,
}

fn split_key(path: &str) -> (&str, &str) {
    let name_at = path.rfind('/').map_or(0, |i| i + 1);
    match path[name_at..].find('.') {
        Some(dot) => (&path[..name_at + dot], &path[name_at + dot + 1..]),
        None => (path, ""),
    }
}

impl TarIndex {
    /// Indexes a tar held in memory. A member whose data runs past the end of
    /// the bytes, or a tar that stops before its end-of-archive block (both
    /// truncations), is an error naming the member.
    pub fn open(data: &[u8]) -> FormatResult<Self> {
        Self::scan(Cursor::new(data), data.len() as u64)
    }

    /// Indexes the tar read from `reader`, a shard of `total` bytes, as
    /// [`open`](TarIndex::open) does; member data is read through, not kept.
    pub fn scan(reader: impl Read, total: u64) -> FormatResult<Self> {
        let mut archive = tar::Archive::new(reader);
        let entries = archive
            .entries()
            .map_err(|e| format!("not a tar archive: {}", e.to_string().escape_debug()))?;
        let mut samples: Vec<Sample> = Vec::new();
        let names = Schema::default();
        // Where the block after the last member starts, and that member.
        let mut end = 0u64;
        let mut last = String::new();
        for entry in entries {
            // The tar crate's messages quote raw header bytes (member
            // names, numeric fields): escaped, so a hostile shard cannot
            // write control sequences to a terminal or log.
            let entry = entry.map_err(|e| {
                format!("corrupt or truncated tar: {}", e.to_string().escape_debug())
            })?;
            let path = entry
                .path()
                .map_err(|e| format!("bad member name: {}", e.to_string().escape_debug()))?
                .to_string_lossy()
                .into_owned();
            let (offset, size) = (entry.raw_file_position(), entry.size());
            if offset.saturating_add(size) > total {
                return Err(format!(
                    "member {path:?} needs bytes {offset}..{} but the tar ends at {total}; truncated?",
                    offset as u128 + size as u128,
                ));
            }
            end = offset + size.div_ceil(512) * 512;
            last.clone_from(&path);
            if !entry.header().entry_type().is_file() {
                continue;
            }
            let (key, field) = split_key(&path);
            // WebDataset skips members with no extension or hidden names.
            if field.is_empty() || key.rsplit('/').next().is_some_and(|n| n.starts_with('.')) {
                continue;
            }
            let member = Member {
                field: names.name(&field.to_ascii_lowercase()),
                offset: offset as usize,
                size: size as usize,
            };
            match samples.last_mut() {
                Some(s) if s.key == key => s.members.push(member),
                _ => samples.push(Sample {
                    key: key.to_owned(),
                    members: vec![member],
                }),
            }
        }
        // The tar reader stops quietly at the end of the bytes, so a shard
        // cut between two members would lose the rest without a word; a
        // whole tar ends with zero blocks (every writer adds two).
        if total < end + 512 {
            return Err(format!(
                "the tar ends at byte {total} without its end-of-archive block{}; truncated?",
                if last.is_empty() {
                    String::new()
                } else {
                    format!(", after member {last:?}")
                }
            ));
        }
        Ok(TarIndex {
            samples,
            key_field: KEY_FIELD.into(),
        })
    }
}

/// A member's value; text members share the shard's bytes (checked as
/// UTF-8, not copied).
fn value_of(field: &str, bytes: Bytes) -> FormatResult<Value> {
    let not_utf8 = |e: std::str::Utf8Error| format!("field {field:?} is not UTF-8: {e}");
    let text = |b: &Bytes| std::str::from_utf8(b).map(str::to_owned).map_err(not_utf8);
    Ok(match field {
        "txt" | "text" => Value::TextView(ByteString::try_from(bytes).map_err(not_utf8)?),
        "json" => Value::from_json(
            serde_json::from_slice(&bytes)
                .map_err(|e| format!("field {field:?} is not valid JSON: {e}"))?,
        ),
        "cls" | "cls2" | "index" | "id" => {
            let t = text(&bytes)?;
            match t.trim().parse::<i64>() {
                Ok(i) => Value::Int(i),
                Err(_) => Value::Text(t),
            }
        }
        _ => Value::Bytes(bytes),
    })
}

impl ShardIndex for TarIndex {
    fn len(&self) -> u64 {
        self.samples.len() as u64
    }

    fn decode(&self, data: &Bytes, indices: &[u64]) -> FormatResult<Vec<Record>> {
        indices
            .iter()
            .map(|&i| self.sample(&self.samples[i as usize], data, 0))
            .collect()
    }

    fn byte_range(&self, i: u64) -> Option<(u64, u64)> {
        let s = self.samples.get(usize::try_from(i).ok()?)?;
        let (first, last) = (s.members.first()?, s.members.last()?);
        Some((first.offset as u64, (last.offset + last.size) as u64))
    }

    /// Copies the sample's bytes once, so byte fields own their data.
    fn decode_range(&self, i: u64, bytes: &Bytes) -> FormatResult<Record> {
        let s = self
            .samples
            .get(i as usize)
            .ok_or_else(|| format!("no sample {i}"))?;
        let base = s.members.first().map_or(0, |m| m.offset);
        self.sample(s, &Bytes::copy_from_slice(bytes), base)
    }
}

impl TarIndex {
    /// Sample `s` from `data`, the shard's bytes from offset `base` on.
    fn sample(&self, s: &Sample, data: &Bytes, base: usize) -> FormatResult<Record> {
        let members = s.members.iter().map(|m| {
            let at = m.offset - base;
            if at + m.size > data.len() {
                return Err(format!(
                    "member {:?} is truncated",
                    format!("{}.{}", s.key, m.field)
                ));
            }
            let v = value_of(&m.field, data.slice(at..at + m.size))
                .map_err(|e| format!("sample {:?}: {e}", s.key))?;
            Ok((m.field.clone(), v))
        });
        // Collected at once (sorted once): a hostile sample of many members
        // costs `n log n`; a member named like the key field wins, as it
        // is written after it.
        let fields = std::iter::once(Ok((self.key_field.clone(), Value::Text(s.key.clone()))))
            .chain(members)
            .collect::<FormatResult<Fields>>()?;
        Ok(Record {
            fields,
            ..Record::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_at_the_first_dot_of_the_file_name() {
        assert_eq!(split_key("a/b.c/0001.seg.txt"), ("a/b.c/0001", "seg.txt"));
        assert_eq!(split_key("x.jpg"), ("x", "jpg"));
        assert_eq!(split_key("noext"), ("noext", ""));
    }
}
