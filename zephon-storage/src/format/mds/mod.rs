//! MosaicML Streaming's MDS shards, so a dataset written by Streaming's
//! `MDSWriter` opens as it is.
//!
//! A dataset root holds Streaming's `index.json` (version 2: per shard its
//! file names, byte sizes, sample count, columns, compression) and the shard
//! files. One shard, all little-endian:
//!
//! ```text
//! samples   u32            N
//! offsets   (N + 1) x u32  absolute byte offset of each sample, then the end
//! sample i  sizes of its variable-size columns (u32 each, in column order),
//!           then every column's bytes in column order
//! ```
//!
//! Compressed shards (`"compression": "zstd"`, file `*.mds.zstd`) are
//! decompressed like any other compressed shard. Column encodings: `str`,
//! `bytes`, `int`, `int8`..`int64`, `uint8`..`uint64`, `float16`/`32`/`64`,
//! `str_int`, `str_float`, `json` decode to typed values; anything else
//! (`pkl`, `jpeg`, `png`, `pil`, `ndarray...`) stays bytes.

mod column;

use super::lines::each_prefetched;
use super::{FormatResult, ShardIndex};
use bytes::Bytes;
use column::{Kind, decode_value};
use serde::{Deserialize, Serialize};
use zephon_core::Record;
use zephon_core::record::{FieldName, Fields, PointerChunks, SortedNames};

/// One column of an MDS dataset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsColumn {
    /// Field name.
    pub name: String,
    /// Streaming's encoding name (`str`, `int`, `bytes`, ...).
    pub encoding: String,
    /// Fixed size in bytes, or `None` for variable-size columns.
    pub size: Option<u32>,
}

impl MdsColumn {
    /// A column named `name`, stored with Streaming's `encoding`, `size`
    /// bytes a value or variable (`None`).
    ///
    /// ```
    /// use zephon_storage::format::mds::MdsColumn;
    /// let id = MdsColumn::new("id", "int", Some(8));
    /// assert_eq!((id.name.as_str(), id.encoding.as_str(), id.size), ("id", "int", Some(8)));
    /// ```
    pub fn new(name: impl Into<String>, encoding: impl Into<String>, size: Option<u32>) -> Self {
        MdsColumn {
            name: name.into(),
            encoding: encoding.into(),
            size,
        }
    }
}

/// The samples of one MDS shard: its offset table.
#[derive(Debug)]
pub struct MdsIndex {
    columns: Vec<Column>,
    /// The column names sorted once: each record's fields are made in
    /// place, no name compared (of two columns of one name the later
    /// wins, as a map's insert would).
    by_name: SortedNames,
    /// How many columns have a size header in each sample.
    variable: usize,
    /// Samples in the shard.
    samples: u32,
    /// Where the offset table is read from.
    table: Table,
}

/// Where an index reads a shard's offset table (its header: the sample
/// count, then N + 1 little-endian `u32`).
#[derive(Debug)]
enum Table {
    /// A copy, kept with the index: a remote shard, read by blocks or by
    /// byte range without its bytes at hand.
    Copied(Bytes),
    /// In the shard's own bytes, each read's `data`: a local shard's map.
    /// The index holds none of them, so the map can be let go between reads
    /// (see [`mapped_files`](crate::local::mapped_files)) and a dataset of
    /// more shards than the kernel maps at once still opens.
    InShard,
}

/// One column as a sample is decoded: its name (made once, shared by
/// every record), size and decoder, the encoding's name looked up once per
/// shard rather than once per value.
#[derive(Debug)]
struct Column {
    name: FieldName,
    size: Option<u32>,
    kind: Kind,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Bytes of the header (count and offset table) of a shard of `samples` samples.
pub fn header_len(samples: u32) -> u64 {
    4 + 4 * (samples as u64 + 1)
}

impl MdsIndex {
    /// Reads the offset table of a shard and checks it covers the shard.
    /// The table is copied (4 bytes a sample); see
    /// [`open_in_place`](Self::open_in_place).
    pub fn open(data: &[u8], columns: &[MdsColumn]) -> FormatResult<Self> {
        Self::from_header(data, data.len() as u64, columns)
    }

    /// [`open`](Self::open) for a shard whose every read is given its whole
    /// bytes (a memory-mapped local shard): the offset table is read where
    /// it lies in the `data` of each read, neither copied into the
    /// process's memory (4 bytes a sample) nor held by the index, so the
    /// shard's map need not live as long as the index. Without the table
    /// at hand, such an index reads no sample alone by byte range
    /// ([`byte_range`](ShardIndex::byte_range) is `None`).
    ///
    /// ```
    /// use bytes::Bytes;
    /// use zephon_storage::format::ShardIndex;
    /// use zephon_storage::format::mds::{MdsColumn, MdsIndex, encode_shard};
    /// let cols = vec![MdsColumn::new("text", "str", None)];
    /// let shard = Bytes::from(encode_shard(&cols, &[vec![b"a".to_vec()], vec![b"bc".to_vec()]]));
    /// let index = MdsIndex::open_in_place(&shard, &cols).unwrap();
    /// assert_eq!((index.len(), index.byte_range(1)), (2, None));
    /// assert_eq!(index.decode(&shard, &[1]).unwrap()[0].text("text"), Some("bc"));
    /// // The index kept nothing of the shard's bytes.
    /// let shard = shard.try_into_mut().expect("no other holder");
    /// assert_eq!(shard.len(), 27);
    /// ```
    pub fn open_in_place(data: &Bytes, columns: &[MdsColumn]) -> FormatResult<Self> {
        Self::checked(data, data.len() as u64, columns, |_| Table::InShard)
    }

    /// Reads the offset table from `head`, the first bytes of a shard of
    /// `total` bytes (at least its [`header_len`], or the whole shard when
    /// shorter), and checks it covers the shard: the samples can then be
    /// read alone by [`byte_range`](ShardIndex::byte_range).
    pub fn from_header(head: &[u8], total: u64, columns: &[MdsColumn]) -> FormatResult<Self> {
        Self::checked(head, total, columns, |table| {
            Table::Copied(Bytes::copy_from_slice(&head[..table]))
        })
    }

    /// The index of the shard of `total` bytes whose header starts `head`,
    /// checked; `keep` says where the header's first `table` bytes are
    /// read from afterwards.
    fn checked(
        head: &[u8],
        total: u64,
        columns: &[MdsColumn],
        keep: impl FnOnce(usize) -> Table,
    ) -> FormatResult<Self> {
        if total < 8 || head.len() < 4 {
            return Err(format!("{total} bytes is too short for an MDS shard"));
        }
        let n = u32_at(head, 0);
        let table = header_len(n);
        if table > total {
            return Err(format!("claims {n} samples but is only {total} bytes"));
        }
        if (head.len() as u64) < table {
            return Err(format!(
                "the header of {table} bytes was cut to {}",
                head.len()
            ));
        }
        let offset = |i: usize| u32_at(head, 4 + 4 * i) as u64;
        if offset(0) != table
            || (0..n as usize).any(|i| offset(i) > offset(i + 1))
            || offset(n as usize) != total
        {
            return Err(format!(
                "the offset table does not cover the shard ({total} bytes); corrupt or truncated"
            ));
        }
        Ok(MdsIndex {
            columns: columns
                .iter()
                .map(|c| Column {
                    name: FieldName::from(&c.name),
                    size: c.size,
                    kind: Kind::of(&c.encoding),
                })
                .collect(),
            by_name: SortedNames::new(columns.iter().map(|c| c.name.as_str())),
            variable: columns.iter().filter(|c| c.size.is_none()).count(),
            samples: n,
            table: keep(table as usize),
        })
    }

    /// The shard's header as this read sees it: the copy, or the first
    /// bytes of `data`. A shard shorter than its header now (cut since it
    /// was checked) is an error, not a panic.
    fn header<'a>(&'a self, data: &'a [u8]) -> FormatResult<&'a [u8]> {
        match &self.table {
            Table::Copied(b) => Ok(b),
            Table::InShard => {
                let len = header_len(self.samples) as usize;
                data.get(..len).ok_or_else(|| {
                    format!(
                        "the shard's {} bytes no longer hold its header of {len} bytes \
                         (was it rewritten while read?)",
                        data.len()
                    )
                })
            }
        }
    }

    /// Where sample `i` lies, from `header` (see [`header`](Self::header)).
    fn range_in(&self, header: &[u8], i: u64) -> Option<(u64, u64)> {
        let i = usize::try_from(i)
            .ok()
            .filter(|&i| (i as u64) < self.len())?;
        Some((
            u32_at(header, 4 + 4 * i) as u64,
            u32_at(header, 8 + 4 * i) as u64,
        ))
    }

    /// Where samples `indices` lie in `data`.
    ///
    /// A local shard's offset table is read in its map each time: a sample
    /// whose offsets do not lie in `data` (the table rewritten in place
    /// since it was checked) is an error, not a panic.
    fn spans(
        &self,
        data: &Bytes,
        indices: impl ExactSizeIterator<Item = u64>,
    ) -> FormatResult<Vec<(usize, usize)>> {
        let header = self.header(data)?;
        let mut spans = Vec::with_capacity(indices.len());
        for i in indices {
            match self.range_in(header, i) {
                Some((from, to)) if from <= to && to <= data.len() as u64 => {
                    spans.push((from as usize, to as usize))
                }
                Some((from, to)) => {
                    return Err(format!(
                        "sample {i}: its offsets {from}..{to} lie outside the shard's {} bytes \
                         (was it rewritten while read?)",
                        data.len()
                    ));
                }
                None => return Err(format!("sample {i} is past the last, {}", self.len())),
            }
        }
        Ok(spans)
    }

    /// Decodes the sample at `data[from..to]` into `fields` (empty);
    /// `spans` is scratch space for where each column lies, kept by the
    /// caller across samples. Values are read from the borrowed bytes;
    /// `bytes` columns take a slice of `data` (a reference count).
    fn sample(
        &self,
        data: &Bytes,
        from: usize,
        to: usize,
        spans: &mut Vec<(usize, usize)>,
        fields: &mut Fields,
    ) -> FormatResult<()> {
        let b = &data[from..to];
        let head = 4 * self.variable;
        if b.len() < head {
            return Err("sample shorter than its size header".into());
        }
        // Where each column lies follows from the sizes in stored order;
        // the fields are then made in name order, each placed after the
        // last without moving the others.
        spans.clear();
        let mut sizes = b[..head].chunks_exact(4);
        let mut at = head;
        for c in &self.columns {
            let size = match c.size {
                Some(s) => s as usize,
                None => sizes.next().map_or(0, |s| {
                    u32::from_le_bytes(s.try_into().expect("4 bytes")) as usize
                }),
            };
            let end = at
                .checked_add(size)
                .filter(|&e| e <= b.len())
                .ok_or_else(|| format!("column {:?} runs past the sample's end", c.name))?;
            spans.push((at, end));
            at = end;
        }
        fields.try_fill_sorted(&self.by_name, |k| {
            let (c, (start, end)) = (&self.columns[k], spans[k]);
            decode_value(c.kind, &b[start..end], || {
                data.slice(from + start..from + end)
            })
            .map_err(|e| format!("column {:?}: {e}", c.name))
        })?;
        Ok(())
    }
}

impl ShardIndex for MdsIndex {
    fn len(&self) -> u64 {
        self.samples as u64
    }

    fn decode(&self, data: &Bytes, indices: &[u64]) -> FormatResult<Vec<Record>> {
        let spans = self.spans(data, indices.iter().copied())?;
        // Each record is made where it stays, in the vector handed back:
        // built elsewhere and moved in, its bytes would be copied again.
        let mut scratch = Vec::with_capacity(self.columns.len());
        let mut out: Vec<Record> = Vec::with_capacity(indices.len());
        each_prefetched(data, &spans, |k, from, to| {
            out.push(Record::default());
            let r = out.last_mut().expect("just pushed");
            self.sample(data, from, to, &mut scratch, &mut r.fields)
                .map_err(|e| format!("sample {}: {e}", indices[k]))
        })?;
        Ok(out)
    }

    /// As `decode`, each record made in its place in `out`'s chunks.
    fn decode_chunks(&self, data: &Bytes, out: &mut PointerChunks<'_>) -> FormatResult<()> {
        let spans = self.spans(data, out.pointers().iter().map(|p| p.sample))?;
        let mut scratch = Vec::with_capacity(self.columns.len());
        each_prefetched(data, &spans, |_, from, to| {
            let (p, r) = out.next_record().expect("a record per pointer");
            self.sample(data, from, to, &mut scratch, &mut r.fields)
                .map_err(|e| format!("sample {}: {e}", p.sample))
        })
    }

    /// `None` for an index reading its table in the shard's bytes
    /// ([`open_in_place`](MdsIndex::open_in_place)): it has none at hand.
    fn byte_range(&self, i: u64) -> Option<(u64, u64)> {
        match &self.table {
            Table::Copied(header) => self.range_in(header, i),
            Table::InShard => None,
        }
    }

    /// Copies the sample's bytes once, so `bytes` columns own their data.
    fn decode_range(&self, i: u64, bytes: &Bytes) -> FormatResult<Record> {
        let own = Bytes::copy_from_slice(bytes);
        let mut r = Record::default();
        self.sample(&own, 0, own.len(), &mut Vec::new(), &mut r.fields)
            .map_err(|e| format!("sample {i}: {e}"))?;
        Ok(r)
    }
}

/// Writes one MDS shard the way Streaming's `MDSWriter` does; each sample
/// is its columns' encoded bytes, in column order (see the module docs).
///
/// ```
/// use bytes::Bytes;
/// use zephon_storage::format::ShardIndex;
/// use zephon_storage::format::mds::{MdsColumn, MdsIndex, encode_shard};
/// let cols = vec![
///     MdsColumn::new("id", "int", Some(8)),
///     MdsColumn::new("text", "str", None),
/// ];
/// let shard = encode_shard(&cols, &[vec![7i64.to_le_bytes().to_vec(), b"hi".to_vec()]]);
/// let index = MdsIndex::open(&shard, &cols).unwrap();
/// let r = &index.decode(&Bytes::from(shard), &[0]).unwrap()[0];
/// assert_eq!((r.get("id").and_then(|v| v.as_int()), r.text("text")), (Some(7), Some("hi")));
/// ```
pub fn encode_shard(columns: &[MdsColumn], samples: &[Vec<Vec<u8>>]) -> Vec<u8> {
    let encoded: Vec<Vec<u8>> = samples
        .iter()
        .map(|cols| {
            let mut head = Vec::new();
            let mut body = Vec::new();
            for (c, v) in columns.iter().zip(cols) {
                if c.size.is_none() {
                    head.extend((v.len() as u32).to_le_bytes());
                }
                body.extend_from_slice(v);
            }
            head.extend(body);
            head
        })
        .collect();
    let n = encoded.len();
    let mut out = Vec::new();
    out.extend((n as u32).to_le_bytes());
    let mut at = 4 + 4 * (n as u32 + 1);
    out.extend(at.to_le_bytes());
    for s in &encoded {
        at += s.len() as u32;
        out.extend(at.to_le_bytes());
    }
    encoded.iter().for_each(|s| out.extend_from_slice(s));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use zephon_core::Value;

    /// One sample with a column of each encoding, decoded from the whole
    /// shard and from its bytes alone, and a fixed-size column of the wrong
    /// size named in the error.
    #[test]
    fn every_encoding_decodes_to_its_value() {
        let cols: Vec<(&str, Option<u32>, Vec<u8>, Value)> = vec![
            ("a_str", None, b"hi".to_vec(), Value::from("hi")),
            (
                "b_bytes",
                None,
                vec![0, 255],
                Value::Bytes(Bytes::from_static(&[0, 255])),
            ),
            (
                "c_int",
                Some(8),
                (-5i64).to_le_bytes().to_vec(),
                Value::Int(-5),
            ),
            (
                "d_int32",
                Some(4),
                (-6i32).to_le_bytes().to_vec(),
                Value::Int(-6),
            ),
            (
                "e_int16",
                Some(2),
                (-7i16).to_le_bytes().to_vec(),
                Value::Int(-7),
            ),
            ("f_int8", Some(1), vec![0xf8], Value::Int(-8)),
            (
                "g_uint64",
                Some(8),
                9u64.to_le_bytes().to_vec(),
                Value::Int(9),
            ),
            (
                "h_uint32",
                Some(4),
                10u32.to_le_bytes().to_vec(),
                Value::Int(10),
            ),
            (
                "i_uint16",
                Some(2),
                11u16.to_le_bytes().to_vec(),
                Value::Int(11),
            ),
            ("j_uint8", Some(1), vec![12], Value::Int(12)),
            (
                "k_float64",
                Some(8),
                1.5f64.to_le_bytes().to_vec(),
                Value::Float(1.5),
            ),
            (
                "l_float32",
                Some(4),
                2.5f32.to_le_bytes().to_vec(),
                Value::Float(2.5),
            ),
            ("m_float16", Some(2), vec![0x00, 0x3c], Value::Float(1.0)),
            ("n_str_int", None, b" 13 ".to_vec(), Value::Int(13)),
            ("o_str_float", None, b"3.5".to_vec(), Value::Float(3.5)),
            ("p_str_decimal", None, b"1.25".to_vec(), Value::from("1.25")),
            (
                "q_json",
                None,
                br#"{"k":1}"#.to_vec(),
                Value::Json(serde_json::json!({"k": 1})),
            ),
            (
                "r_pkl",
                None,
                vec![1, 2],
                Value::Bytes(Bytes::from_static(&[1, 2])),
            ),
        ];
        let columns: Vec<MdsColumn> = cols
            .iter()
            .map(|(n, size, _, _)| MdsColumn {
                name: n.to_string(),
                encoding: n.split_once('_').unwrap().1.into(),
                size: *size,
            })
            .collect();
        let sample: Vec<Vec<u8>> = cols.iter().map(|c| c.2.clone()).collect();
        let shard = Bytes::from(encode_shard(&columns, &[sample]));
        let index = MdsIndex::open(&shard, &columns).unwrap();
        let (from, to) = index.byte_range(0).unwrap();
        let alone = index
            .decode_range(0, &shard.slice(from as usize..to as usize))
            .unwrap();
        let whole = &index.decode(&shard, &[0]).unwrap()[0];
        for r in [whole, &alone] {
            assert_eq!(r.fields.len(), cols.len());
            for (name, _, _, want) in &cols {
                assert_eq!(r.get(name), Some(want), "{name}");
            }
        }
        // Text is read in place: a view of the shard, not a copy.
        let text = whole.text("a_str").unwrap();
        assert!(matches!(whole.get("a_str"), Some(Value::TextView(_))));
        assert!(shard.as_ptr_range().contains(&text.as_ptr()));
        let mut wrong = columns.clone();
        wrong[2].size = Some(4);
        let short: Vec<Vec<u8>> = cols
            .iter()
            .enumerate()
            .map(|(k, c)| if k == 2 { vec![0; 4] } else { c.2.clone() })
            .collect();
        let shard = Bytes::from(encode_shard(&wrong, &[short]));
        let err = MdsIndex::open(&shard, &wrong)
            .unwrap()
            .decode(&shard, &[0])
            .unwrap_err();
        assert!(
            err.contains("sample 0") && err.contains("c_int") && err.contains("needs 8 bytes"),
            "{err}"
        );
    }

    fn col(name: &str, encoding: &str, size: Option<u32>) -> MdsColumn {
        MdsColumn::new(name, encoding, size)
    }

    /// Columns stored out of name order, one name twice: the record's
    /// fields come out in name order, each with its own column's value,
    /// and of a repeated name the later column wins (as a map's insert).
    #[test]
    fn columns_in_any_order_land_in_their_fields() {
        // With a name given twice (the later column wins) and without.
        for twice in [true, false] {
            let mut columns = vec![
                col("text", "str", None),
                col("id", "int", Some(8)),
                col("blob", "bytes", None),
                col("id", "int32", Some(4)),
            ];
            if !twice {
                columns[1] = col("a", "int", Some(8));
            }
            let samples: Vec<Vec<Vec<u8>>> = (0..3i64)
                .map(|i| {
                    vec![
                        format!("doc {i}").into_bytes(),
                        i.to_le_bytes().to_vec(),
                        vec![i as u8; 3],
                        (100 + i as i32).to_le_bytes().to_vec(),
                    ]
                })
                .collect();
            let shard = Bytes::from(encode_shard(&columns, &samples));
            let index = MdsIndex::open(&shard, &columns).unwrap();
            let records = index.decode(&shard, &[2, 0, 1]).unwrap();
            for (r, i) in records.iter().zip([2i64, 0, 1]) {
                let names: Vec<&str> = r.fields.keys().map(|k| k.as_str()).collect();
                if twice {
                    assert_eq!(names, ["blob", "id", "text"]);
                } else {
                    assert_eq!(names, ["a", "blob", "id", "text"]);
                    assert_eq!(r.get("a"), Some(&Value::Int(i)));
                }
                assert_eq!(r.text("text"), Some(format!("doc {i}").as_str()));
                assert_eq!(r.get("id"), Some(&Value::Int(100 + i)));
                assert_eq!(
                    r.get("blob"),
                    Some(&Value::Bytes(Bytes::from(vec![i as u8; 3])))
                );
            }
        }
    }

    /// A local shard's offset table is read in its bytes; the index reads
    /// what the copied one reads, sample for sample, and a broken table is
    /// refused with the same error.
    #[test]
    fn the_offset_table_read_in_place_is_the_copied_one() {
        let columns = vec![col("id", "int", Some(8)), col("text", "str", None)];
        let samples: Vec<Vec<Vec<u8>>> = (0..50i64)
            .map(|i| vec![i.to_le_bytes().to_vec(), vec![b'x'; i as usize % 7]])
            .collect();
        let raw = encode_shard(&columns, &samples);
        let shard = Bytes::from(raw.clone());
        let (copied, in_place) = (
            MdsIndex::open(&shard, &columns).unwrap(),
            MdsIndex::open_in_place(&shard, &columns).unwrap(),
        );
        assert_eq!((copied.len(), in_place.len()), (50, 50));
        assert_eq!(copied.byte_range(50), None);
        for i in 0..50 {
            // Read alone by range only with the table at hand.
            assert!(copied.byte_range(i).is_some(), "sample {i}");
            assert_eq!(in_place.byte_range(i), None, "sample {i}");
        }
        let all: Vec<u64> = (0..50).rev().collect();
        assert_eq!(
            copied.decode(&shard, &all).unwrap(),
            in_place.decode(&shard, &all).unwrap()
        );
        // Bytes cut short of the header since it was checked (a file
        // truncated in place) are an error, not a read past their end.
        let cut = in_place.decode(&shard.slice(..100), &[0]).unwrap_err();
        assert!(cut.contains("no longer hold its header"), "{cut}");
        let past = in_place.decode(&shard, &[50]).unwrap_err();
        assert!(past.contains("sample 50 is past the last"), "{past}");
        let edits: [fn(&mut Vec<u8>); 3] = [
            |r| r[0..4].copy_from_slice(&1000u32.to_le_bytes()),
            |r| r[8..12].copy_from_slice(&1u32.to_le_bytes()),
            |r| {
                let n = r.len();
                r.truncate(n - 1)
            },
        ];
        for edit in edits {
            let mut bad = raw.clone();
            edit(&mut bad);
            let bad = Bytes::from(bad);
            let (a, b) = (
                MdsIndex::open(&bad, &columns).unwrap_err(),
                MdsIndex::open_in_place(&bad, &columns).unwrap_err(),
            );
            assert_eq!(a, b);
        }
    }

    /// A shard whose sample 1 is broken in `how`: reading samples 0..3
    /// must fail with an error naming sample 1 (and `what`), and sample 0
    /// alone must still read.
    fn broken(how: impl Fn(&mut Vec<u8>, usize), what: &[&str]) {
        let columns = vec![col("id", "int", Some(8)), col("text", "str", None)];
        let samples: Vec<Vec<Vec<u8>>> = (0..3i64)
            .map(|i| vec![i.to_le_bytes().to_vec(), b"abcdef".to_vec()])
            .collect();
        let mut raw = encode_shard(&columns, &samples);
        let at = u32_at(&raw, 8) as usize;
        how(&mut raw, at);
        let shard = Bytes::from(raw);
        let index = MdsIndex::open(&shard, &columns).unwrap();
        let err = index.decode(&shard, &[0, 1, 2]).unwrap_err();
        assert!(err.contains("sample 1"), "{err}");
        for w in what {
            assert!(err.contains(w), "{err} lacks {w:?}");
        }
        assert_eq!(
            index.decode(&shard, &[0]).unwrap()[0].get("id"),
            Some(&Value::Int(0))
        );
    }

    #[test]
    fn text_that_is_not_utf8_is_an_error() {
        // Sample 1: size header (4), id (8), then the text.
        broken(
            |raw, at| raw[at + 12 + 2] = 0xff,
            &["\"text\"", "not UTF-8"],
        );
    }

    #[test]
    fn a_size_past_the_sample_is_an_error() {
        broken(
            |raw, at| raw[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes()),
            &["\"text\"", "runs past the sample's end"],
        );
    }

    #[test]
    fn a_sample_shorter_than_its_header_is_an_error() {
        let columns = vec![col("a", "str", None), col("b", "str", None)];
        // One sample of 4 bytes, where the header of two sizes needs 8.
        let mut raw = Vec::new();
        raw.extend(1u32.to_le_bytes());
        raw.extend(12u32.to_le_bytes());
        raw.extend(16u32.to_le_bytes());
        raw.extend(0u32.to_le_bytes());
        let shard = Bytes::from(raw);
        let index = MdsIndex::open(&shard, &columns).unwrap();
        let err = index.decode(&shard, &[0]).unwrap_err();
        assert!(
            err.contains("sample 0") && err.contains("shorter than its size header"),
            "{err}"
        );
    }
}
