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

mod members;

pub use members::MAX_EXTENDED_HEADER;

use super::lines::each_prefetched;
use super::{FormatResult, ShardIndex};
use crate::format::text::text_view;

use bytes::Bytes;
use std::io::{Cursor, Read};
/// The `tar` crate, re-exported so callers write shards with the version
/// Zephon reads them with.
pub use tar;
use zephon_core::record::{FieldName, Fields, Schema};
use zephon_core::{Record, Value};

/// The field holding a sample's key.
pub const KEY_FIELD: &str = "__key__";

/// A member: its data's offset in the shard (the low 48 bits: shards up to
/// 256 TiB) with its field name's place in [`TarIndex::fields`] (the high
/// 16 bits), and its size.
#[derive(Debug)]
struct Member {
    at: u64,
    size: u64,
}

/// Offsets fit in this many bits of [`Member::at`].
const OFFSET_BITS: u32 = 48;

impl Member {
    fn offset(&self) -> u64 {
        self.at & ((1 << OFFSET_BITS) - 1)
    }

    fn field(&self) -> usize {
        (self.at >> OFFSET_BITS) as usize
    }
}

/// The samples of a tar shard, kept flat: one text of all keys and one
/// list of all members, each sample an end in both. An index of a sample
/// per entry (a key `String` and a `Vec` of members, with a name per
/// member) took about 200 bytes a three-member sample in three heap
/// blocks; this takes its key's bytes, 8 bytes of ends and 16 a member.
/// A shard holds up to 2^32 samples, 4 GiB of keys and 65,536 distinct
/// field names (past those, indexing is an error naming the member).
#[derive(Debug)]
pub struct TarIndex {
    /// Every sample's key, one after another.
    keys: String,
    /// `key_ends[i]`: where sample `i`'s key ends in `keys` (it starts
    /// where sample `i - 1`'s ends).
    key_ends: Vec<u32>,
    /// Every sample's members, in order.
    members: Vec<Member>,
    /// `member_ends[i]`: where sample `i`'s members end in `members`.
    member_ends: Vec<u32>,
    /// The distinct field names, shared by every member with the name.
    fields: Vec<FieldName>,
    key_field: FieldName,
}

/// One sample of a [`TarIndex`].
struct Sample<'a> {
    key: &'a str,
    members: &'a [Member],
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
        let mut index = TarIndex {
            keys: String::new(),
            key_ends: Vec::new(),
            members: Vec::new(),
            member_ends: Vec::new(),
            fields: Vec::new(),
            key_field: KEY_FIELD.into(),
        };
        let names = Schema::default();
        let mut field_at: std::collections::HashMap<String, u64> = Default::default();
        let too_many =
            |path: &str, what: &str| format!("member {path:?}: too many {what} in one shard");
        members::members(reader, total, |m| {
            let (path, offset, size) = (m.path, m.offset, m.size);
            if !m.file {
                return Ok(());
            }
            let (key, field) = split_key(&path);
            // WebDataset skips members with no extension or hidden names.
            if field.is_empty() || key.rsplit('/').next().is_some_and(|n| n.starts_with('.')) {
                return Ok(());
            }
            let field = field.to_ascii_lowercase();
            let field = match field_at.get(&field) {
                Some(&f) => f,
                None => {
                    let f = index.fields.len() as u64;
                    if f >= 1 << (64 - OFFSET_BITS) {
                        return Err(too_many(&path, "distinct field names"));
                    }
                    index.fields.push(names.name(&field));
                    field_at.insert(field, f);
                    f
                }
            };
            if offset >= 1 << OFFSET_BITS {
                return Err(format!("member {path:?} starts past 256 TiB"));
            }
            if index.last_key() != Some(key) {
                index.keys.push_str(key);
                let keys =
                    u32::try_from(index.keys.len()).map_err(|_| too_many(&path, "key bytes"))?;
                index.key_ends.push(keys);
                index.member_ends.push(0);
            }
            index.members.push(Member {
                at: offset | field << OFFSET_BITS,
                size,
            });
            let members =
                u32::try_from(index.members.len()).map_err(|_| too_many(&path, "members"))?;
            *index.member_ends.last_mut().expect("pushed with its key") = members;
            Ok(())
        })?;
        index.keys.shrink_to_fit();
        index.key_ends.shrink_to_fit();
        index.members.shrink_to_fit();
        index.member_ends.shrink_to_fit();
        Ok(index)
    }

    /// The key of the last sample indexed so far.
    fn last_key(&self) -> Option<&str> {
        let n = self.key_ends.len();
        let start = if n < 2 {
            0
        } else {
            self.key_ends[n - 2] as usize
        };
        self.key_ends
            .last()
            .map(|&end| &self.keys[start..end as usize])
    }

    /// Sample `i` (below [`len`](ShardIndex::len)).
    fn get(&self, i: usize) -> Option<Sample<'_>> {
        let start = |ends: &[u32]| if i == 0 { 0 } else { ends[i - 1] as usize };
        let (key_end, member_end) = (*self.key_ends.get(i)?, self.member_ends[i]);
        Some(Sample {
            key: &self.keys[start(&self.key_ends)..key_end as usize],
            members: &self.members[start(&self.member_ends)..member_end as usize],
        })
    }
}

/// A member's value; text members share the shard's bytes (checked as
/// UTF-8, not copied).
fn value_of(field: &str, bytes: Bytes) -> FormatResult<Value> {
    let not_utf8 = |e: std::str::Utf8Error| format!("field {field:?} is not UTF-8: {e}");
    let text = |b: &Bytes| std::str::from_utf8(b).map(str::to_owned).map_err(not_utf8);
    Ok(match field {
        "txt" | "text" => Value::TextView(text_view(bytes).map_err(not_utf8)?),
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
        self.key_ends.len() as u64
    }

    /// Each sample's members are asked of the processor's cache a few
    /// samples before it is decoded (as MDS reads do): a shuffled
    /// read's samples lie anywhere in the shard.
    fn decode(&self, data: &Bytes, indices: &[u64]) -> FormatResult<Vec<Record>> {
        let samples = indices
            .iter()
            .map(|&i| {
                usize::try_from(i)
                    .ok()
                    .and_then(|i| self.get(i))
                    .ok_or_else(|| format!("no sample {i}"))
            })
            .collect::<FormatResult<Vec<_>>>()?;
        let spans: Vec<(usize, usize)> = samples
            .iter()
            .map(|s| {
                let at = |m: Option<&Member>, end: bool| {
                    m.map_or(0, |m| m.offset() + if end { m.size } else { 0 }) as usize
                };
                (at(s.members.first(), false), at(s.members.last(), true))
            })
            .collect();
        let mut out = Vec::with_capacity(samples.len());
        each_prefetched(data, &spans, |k, _, _| {
            out.push(self.sample(&samples[k], data, 0)?);
            Ok::<_, String>(())
        })?;
        Ok(out)
    }

    fn byte_range(&self, i: u64) -> Option<(u64, u64)> {
        let s = self.get(usize::try_from(i).ok()?)?;
        let (first, last) = (s.members.first()?, s.members.last()?);
        Some((first.offset(), last.offset() + last.size))
    }

    /// Copies the sample's bytes once, so byte fields own their data.
    fn decode_range(&self, i: u64, bytes: &Bytes) -> FormatResult<Record> {
        let s = usize::try_from(i)
            .ok()
            .and_then(|i| self.get(i))
            .ok_or_else(|| format!("no sample {i}"))?;
        let base = s.members.first().map_or(0, Member::offset);
        self.sample(&s, &Bytes::copy_from_slice(bytes), base)
    }
}

impl TarIndex {
    /// Sample `s` from `data`, the shard's bytes from offset `base` on.
    fn sample(&self, s: &Sample<'_>, data: &Bytes, base: u64) -> FormatResult<Record> {
        let members = s.members.iter().map(|m| {
            let field = &self.fields[m.field()];
            // Offsets were checked against the shard's size when indexed;
            // `data` may be shorter (a range read that came back short).
            let at = m
                .offset()
                .checked_sub(base)
                .and_then(|a| usize::try_from(a).ok());
            let range = at.and_then(|at| Some(at..at.checked_add(usize::try_from(m.size).ok()?)?));
            let Some(range) = range.filter(|r| r.end <= data.len()) else {
                return Err(format!(
                    "member {:?} is truncated",
                    format!("{}.{}", s.key, field)
                ));
            };
            let v = value_of(field, data.slice(range))
                .map_err(|e| format!("sample {:?}: {e}", s.key))?;
            Ok((field.clone(), v))
        });
        // Collected at once (sorted once): a hostile sample of many members
        // costs `n log n`; a member named like the key field wins, as it
        // is written after it.
        let fields = std::iter::once(Ok((self.key_field.clone(), Value::from(s.key))))
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

    fn tar_of(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, data) in members {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, path, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    /// The flat index gives each sample its own key and members, names
    /// shared: samples of one, two and three members, a key met again
    /// after another (a sample of its own, as WebDataset reads it),
    /// extensions in any case.
    #[test]
    fn the_flat_index_keeps_each_samples_key_and_members() {
        let raw = tar_of(&[
            ("a/0001.txt", b"one"),
            ("a/0001.cls", b"1"),
            ("a/0002.TXT", b"two"),
            ("a/0003.txt", b"three"),
            ("a/0003.cls", b"3"),
            ("a/0003.bin", b"\x00\x01"),
            ("a/0001.json", b"{\"again\": true}"),
        ]);
        let index = TarIndex::open(&raw).unwrap();
        assert_eq!(index.len(), 4);
        assert_eq!(index.fields.len(), 4, "txt, cls, bin, json once each");
        let data = Bytes::from(raw);
        let records = index.decode(&data, &[0, 1, 2, 3]).unwrap();
        let keys: Vec<&str> = records.iter().map(|r| r.text(KEY_FIELD).unwrap()).collect();
        assert_eq!(keys, ["a/0001", "a/0002", "a/0003", "a/0001"]);
        let fields: Vec<usize> = records.iter().map(|r| r.fields.len()).collect();
        assert_eq!(fields, [3, 2, 4, 2]);
        assert_eq!(records[1].text("txt"), Some("two"));
        assert_eq!(records[2].get("cls"), Some(&Value::Int(3)));
        assert_eq!(
            records[2].get("bin"),
            Some(&Value::Bytes(Bytes::from_static(b"\x00\x01")))
        );
        assert!(matches!(records[3].get("json"), Some(Value::Json(_))));
        // A sample read alone by its byte range reads the same.
        for i in 0..4u64 {
            let (from, to) = index.byte_range(i).unwrap();
            let alone = index
                .decode_range(i, &data.slice(from as usize..to as usize))
                .unwrap();
            assert_eq!(alone, records[i as usize]);
        }
        assert!(index.decode(&data, &[4]).is_err());
        assert_eq!(index.byte_range(4), None);
    }

    /// A shard with more distinct field names than the index numbers is
    /// an error naming the member, not a name read as another.
    #[test]
    fn too_many_field_names_is_an_error_naming_the_member() {
        let paths: Vec<String> = (0..=(1u32 << 16)).map(|i| format!("s.f{i}")).collect();
        let members: Vec<(&str, &[u8])> = paths.iter().map(|p| (p.as_str(), &b""[..])).collect();
        let e = TarIndex::open(&tar_of(&members)).unwrap_err();
        assert!(
            e.contains("\"s.f65536\"") && e.contains("field names"),
            "{e}"
        );
        // One fewer is indexed: one sample of 65,536 members.
        let raw = tar_of(&members[..1 << 16]);
        let index = TarIndex::open(&raw).unwrap();
        assert_eq!((index.len(), index.fields.len()), (1, 1 << 16));
        let r = index.decode(&Bytes::from(raw), &[0]).unwrap();
        assert_eq!(r[0].get("f65535"), Some(&Value::Bytes(Bytes::new())));
    }

    #[test]
    fn keys_split_at_the_first_dot_of_the_file_name() {
        assert_eq!(split_key("a/b.c/0001.seg.txt"), ("a/b.c/0001", "seg.txt"));
        assert_eq!(split_key("x.jpg"), ("x", "jpg"));
        assert_eq!(split_key("noext"), ("noext", ""));
    }
}
