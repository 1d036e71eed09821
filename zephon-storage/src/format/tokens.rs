//! Pre-tokenized token files.
//!
//! - **Flat** (nanoGPT's `train.bin`): token ids back to back, no header,
//!   cut into samples of `seq_len` tokens ([`FlatTokens`]).
//! - **Megatron** indexed datasets: a `.bin` of token ids and an `.idx` that
//!   says where each sequence starts and how long it is ([`MegatronIndex`]).
//!   The `.idx` layout (Megatron-LM `MMapIndexedDataset`, version 1), all
//!   little-endian:
//!
//!   ```text
//!   magic        9 bytes  "MMIDIDX\0\0"
//!   version      u64      1
//!   dtype        u8       1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16
//!   sequences    u64      S
//!   documents    u64      D
//!   lengths      S x i32  tokens of each sequence
//!   pointers     S x i64  byte offset of each sequence in the .bin
//!   doc_idx      D x i64  first sequence of each document (then S)
//!   ```
//!
//! Samples come out as a `tokens` field. `u16`, `u32` and `i32` ids are
//! not copied: the field is a [`Value::TokenView`] over the shard's bytes
//! (the memory map or the cached block), in the stored width, and the
//! copy happens once, when a batch is collated (`i32` ids are checked to be
//! non-negative first). `u8` and `i64` ids are decoded into a
//! [`Value::Tokens`]. Every sample of a shard shares one field name.

use super::{FormatResult, ShardIndex};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use zephon_core::record::{FieldName, TokenView, TokenWidth};
use zephon_core::{Record, Value};

/// The field token samples are stored under.
pub const TOKENS_FIELD: &str = "tokens";

/// Width and signedness of stored token ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenDtype {
    /// `u8`.
    U8,
    /// `u16` (nanoGPT, Megatron for vocabularies under 65,500).
    U16,
    /// `u32`.
    U32,
    /// `i32` (Megatron for large vocabularies).
    I32,
    /// `i64`.
    I64,
}

impl TokenDtype {
    /// Bytes per token.
    pub fn size(self) -> usize {
        match self {
            TokenDtype::U8 => 1,
            TokenDtype::U16 => 2,
            TokenDtype::U32 | TokenDtype::I32 => 4,
            TokenDtype::I64 => 8,
        }
    }

    /// Megatron's dtype code.
    pub fn megatron_code(self) -> u8 {
        match self {
            TokenDtype::U8 => 1,
            TokenDtype::I32 => 4,
            TokenDtype::I64 => 5,
            TokenDtype::U16 => 8,
            // Megatron has no u32; i32 holds every vocabulary it supports.
            TokenDtype::U32 => 4,
        }
    }

    /// The dtype of Megatron's code `c`, if it is an integer type.
    pub fn from_megatron_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(TokenDtype::U8),
            4 => Some(TokenDtype::I32),
            5 => Some(TokenDtype::I64),
            8 => Some(TokenDtype::U16),
            _ => None,
        }
    }

    /// Parses a name as written in options and manifests (`u16`, `uint16`, ...).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "u8" | "uint8" => Some(TokenDtype::U8),
            "u16" | "uint16" => Some(TokenDtype::U16),
            "u32" | "uint32" => Some(TokenDtype::U32),
            "i32" | "int32" => Some(TokenDtype::I32),
            "i64" | "int64" => Some(TokenDtype::I64),
            _ => None,
        }
    }

    /// Decodes little-endian token ids. Negative or oversized ids (possible
    /// only for the signed types) are an error, not a wrapped id.
    pub fn decode(self, bytes: &[u8]) -> FormatResult<Vec<u32>> {
        let n = bytes.len() / self.size();
        let mut out = Vec::with_capacity(n);
        match self {
            TokenDtype::U8 => out.extend(bytes.iter().map(|&b| b as u32)),
            TokenDtype::U16 => out.extend(
                bytes
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]) as u32),
            ),
            TokenDtype::U32 => out.extend(
                bytes
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            ),
            TokenDtype::I32 => {
                for c in bytes.chunks_exact(4) {
                    let v = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    out.push(u32::try_from(v).map_err(|_| format!("negative token id {v}"))?);
                }
            }
            TokenDtype::I64 => {
                for c in bytes.chunks_exact(8) {
                    let v = i64::from_le_bytes(c.try_into().expect("8 bytes"));
                    out.push(u32::try_from(v).map_err(|_| format!("token id {v} out of range"))?);
                }
            }
        }
        Ok(out)
    }

    /// The ids in `bytes` as a field value: a view of the bytes for `u16`,
    /// `u32` and (non-negative) `i32` ids, decoded ids for the others. A
    /// length that is not a whole number of ids is an error.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use zephon_core::Value;
    /// use zephon_storage::format::TokenDtype;
    /// let v = TokenDtype::U16.value(Bytes::from_static(&[1, 0, 2, 1])).unwrap();
    /// assert!(matches!(v, Value::TokenView(_)));
    /// assert_eq!(v.token_ids().unwrap(), [1, 258]);
    /// assert!(TokenDtype::I32.value(Bytes::from_static(&[0, 0, 0, 0x80])).is_err());
    /// ```
    pub fn value(self, bytes: Bytes) -> FormatResult<Value> {
        let view = |w| TokenView::new(bytes.clone(), w).map(Value::TokenView);
        match self {
            TokenDtype::U16 => view(TokenWidth::U16),
            TokenDtype::U32 => view(TokenWidth::U32),
            TokenDtype::I32 => {
                let v = view(TokenWidth::U32)?;
                // A non-negative i32 has the bits of the same u32.
                if let Some(c) = bytes.chunks_exact(4).find(|c| c[3] & 0x80 != 0) {
                    let id = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    return Err(format!("negative token id {id}"));
                }
                Ok(v)
            }
            TokenDtype::U8 | TokenDtype::I64 => {
                if !bytes.len().is_multiple_of(self.size()) {
                    return Err(format!(
                        "{} bytes is not a whole number of {self:?} token ids",
                        bytes.len()
                    ));
                }
                self.decode(&bytes).map(Value::Tokens)
            }
        }
    }

    /// Encodes token ids little-endian (ids too wide for the type are an error).
    pub fn encode(self, tokens: &[u32], out: &mut Vec<u8>) -> FormatResult<()> {
        for &t in tokens {
            let too_wide = || format!("token id {t} does not fit {self:?}");
            match self {
                TokenDtype::U8 => out.push(u8::try_from(t).map_err(|_| too_wide())?),
                TokenDtype::U16 => {
                    out.extend(u16::try_from(t).map_err(|_| too_wide())?.to_le_bytes())
                }
                TokenDtype::U32 => out.extend(t.to_le_bytes()),
                TokenDtype::I32 => {
                    out.extend(i32::try_from(t).map_err(|_| too_wide())?.to_le_bytes())
                }
                TokenDtype::I64 => out.extend((t as i64).to_le_bytes()),
            }
        }
        Ok(())
    }
}

fn tokens_record(name: &FieldName, tokens: Value) -> Record {
    Record::from_fields([(name.clone(), tokens)])
}

/// A flat token file cut into samples of `seq_len` tokens.
#[derive(Debug)]
pub struct FlatTokens {
    dtype: TokenDtype,
    seq_len: u64,
    samples: u64,
    name: FieldName,
}

impl FlatTokens {
    /// The samples of a flat file of `data.len()` bytes.
    pub fn open(data: &[u8], dtype: TokenDtype, seq_len: u64) -> FormatResult<Self> {
        Self::from_size(data.len() as u64, dtype, seq_len)
    }

    /// The samples of a flat file of `bytes` bytes (no need to read it).
    /// `seq_len` lies in [`SEQ_LEN`](zephon_core::settings::SEQ_LEN) (1 to
    /// 16 Mi tokens), whether it comes from the options or a manifest: a
    /// sample is collated whole, and one of 2^40 tokens was a sample of
    /// terabytes.
    pub fn from_size(bytes: u64, dtype: TokenDtype, seq_len: u64) -> FormatResult<Self> {
        let range = zephon_core::settings::SEQ_LEN;
        if !range.contains(seq_len) {
            return Err(format!("seq_len {}", range.message(seq_len)));
        }
        let size = dtype.size() as u64;
        if !bytes.is_multiple_of(size) {
            return Err(format!(
                "{bytes} bytes is not a whole number of {dtype:?} tokens; wrong dtype?"
            ));
        }
        Ok(FlatTokens {
            dtype,
            seq_len,
            samples: bytes / size / seq_len,
            name: TOKENS_FIELD.into(),
        })
    }
}

impl ShardIndex for FlatTokens {
    fn len(&self) -> u64 {
        self.samples
    }

    fn cheap_decode(&self) -> bool {
        true
    }

    fn byte_range(&self, i: u64) -> Option<(u64, u64)> {
        let width = self.seq_len * self.dtype.size() as u64;
        Some((i * width, (i + 1) * width))
    }

    fn decode_range(&self, i: u64, bytes: &Bytes) -> FormatResult<Record> {
        let v = self
            .dtype
            .value(bytes.clone())
            .map_err(|e| format!("sample {i}: {e}"))?;
        Ok(tokens_record(&self.name, v))
    }

    fn decode(&self, data: &Bytes, indices: &[u64]) -> FormatResult<Vec<Record>> {
        let width = self.seq_len as usize * self.dtype.size();
        indices
            .iter()
            .map(|&i| {
                let from = i as usize * width;
                if from + width > data.len() {
                    return Err(format!("sample {i} lies past the end of the file"));
                }
                self.decode_range(i, &data.slice(from..from + width))
            })
            .collect()
    }
}

const MAGIC: &[u8; 9] = b"MMIDIDX\x00\x00";
const HEADER: usize = 9 + 8 + 1 + 8 + 8;

/// A parsed Megatron `.idx`: where each sequence of the `.bin` is.
///
/// The lengths and offsets are read where the `.idx` lies (for a local
/// shard, its memory map: the page cache, not the process's own memory),
/// not copied out: a corpus of hundreds of millions of documents would
/// otherwise hold 12 bytes a sequence of anonymous memory per process.
#[derive(Debug)]
pub struct MegatronIndex {
    dtype: TokenDtype,
    idx: Idx,
    sequences: usize,
    name: FieldName,
}

/// Where a [`MegatronIndex`] reads its `.idx`.
#[derive(Debug)]
enum Idx {
    /// Bytes held with the index (a remote shard's `.idx`, kept in a
    /// mapped temporary file, or one handed over in memory).
    Held(Bytes),
    /// A local `.idx`, mapped while it is read like the shards (see
    /// [`mapped_files`](crate::local::mapped_files)): held for the index's
    /// life, one map a shard would keep a folder of more shards than the
    /// kernel maps at once from opening.
    File(super::maps::LocalFile),
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl MegatronIndex {
    /// Parses `idx` and checks it against a `.bin` of `bin_bytes` bytes:
    /// every sequence must lie inside it and they must cover it exactly.
    pub fn open(idx: impl Into<Bytes>, bin_bytes: u64) -> FormatResult<Self> {
        let idx: Bytes = idx.into();
        if idx.len() < HEADER || &idx[..9] != MAGIC {
            return Err("the .idx is not a Megatron index (bad magic or too short)".into());
        }
        let version = u64_at(&idx, 9);
        if version != 1 {
            return Err(format!("unsupported .idx version {version}"));
        }
        let dtype = TokenDtype::from_megatron_code(idx[17])
            .ok_or_else(|| format!("unsupported .idx dtype code {}", idx[17]))?;
        let (seqs, docs) = (u64_at(&idx, 18), u64_at(&idx, 26));
        let want = (HEADER as u64)
            .checked_add(seqs.checked_mul(12).ok_or("sequence count overflows")?)
            .and_then(|n| n.checked_add(docs.checked_mul(8)?))
            .ok_or("document count overflows")?;
        if want != idx.len() as u64 {
            return Err(format!(
                "the .idx claims {seqs} sequences and {docs} documents ({want} bytes) but has {} bytes",
                idx.len()
            ));
        }
        let index = MegatronIndex {
            dtype,
            sequences: seqs as usize,
            idx: Idx::Held(idx.clone()),
            name: TOKENS_FIELD.into(),
        };
        let mut end = 0u64;
        for s in 0..index.sequences {
            let Some((p, stop)) = index.span(&idx, s) else {
                return Err(format!("sequence {s} has a negative length or offset"));
            };
            if stop > bin_bytes {
                return Err(format!(
                    "the .idx places sequence {s} at bytes {p}..{stop} but the .bin has {bin_bytes} bytes"
                ));
            }
            // Megatron writes the sequences one after the other: a gap
            // would hide bytes no sample reads, an overlap would deliver
            // tokens twice.
            if p > end {
                return Err(format!(
                    "field `pointers`: sequence {s} starts at byte {p}, leaving bytes {end}..{p} of the .bin in no sequence (a gap)"
                ));
            }
            if p < end {
                return Err(format!(
                    "field `pointers`: sequence {s} starts at byte {p}, inside the sequence before it (which ends at byte {end}): overlapping sequences"
                ));
            }
            end = stop;
        }
        if end != bin_bytes {
            return Err(format!(
                "the .idx covers {end} bytes of the .bin but it has {bin_bytes}; the two files do not belong together"
            ));
        }
        Ok(index)
    }

    /// The same index, reading its `.idx` from `file` (the local file it
    /// was opened from) while it is mapped, instead of holding its bytes.
    pub(crate) fn reading_from(mut self, file: super::maps::LocalFile) -> Self {
        self.idx = Idx::File(file);
        self
    }

    /// `f` of the `.idx`'s bytes (a local one mapped again if it was let
    /// go; an error names it).
    fn with_idx<R>(&self, f: impl FnOnce(&[u8]) -> R) -> FormatResult<R> {
        match &self.idx {
            Idx::Held(b) => Ok(f(b)),
            Idx::File(file) => {
                let b = file.bytes().map_err(|e| e.to_string())?;
                Ok(f(&b))
            }
        }
    }

    /// Tokens in sequence `s` (`< sequences`) of `idx`; `None` if stored
    /// negative, or past `idx`'s end.
    fn length(&self, idx: &[u8], s: usize) -> Option<u32> {
        let at = HEADER + 4 * s;
        u32::try_from(i32::from_le_bytes(idx.get(at..at + 4)?.try_into().ok()?)).ok()
    }

    /// Where sequence `s` (`< sequences`) of `idx` starts in the `.bin`;
    /// `None` if stored negative, or past `idx`'s end.
    fn pointer(&self, idx: &[u8], s: usize) -> Option<u64> {
        let at = HEADER + 4 * self.sequences + 8 * s;
        u64::try_from(i64::from_le_bytes(idx.get(at..at + 8)?.try_into().ok()?)).ok()
    }

    /// Byte range of sequence `s` (`< sequences`) in the `.bin`: checked
    /// at open, and read again from the `.idx` each time, so an `.idx`
    /// rewritten in place since is `None` here, not a panic.
    fn span(&self, idx: &[u8], s: usize) -> Option<(u64, u64)> {
        let (l, p) = (self.length(idx, s)?, self.pointer(idx, s)?);
        Some((p, p + l as u64 * self.dtype.size() as u64))
    }

    /// The stored token type.
    pub fn dtype(&self) -> TokenDtype {
        self.dtype
    }
}

impl ShardIndex for MegatronIndex {
    fn len(&self) -> u64 {
        self.sequences as u64
    }

    fn cheap_decode(&self) -> bool {
        true
    }

    fn byte_range(&self, i: u64) -> Option<(u64, u64)> {
        let s = usize::try_from(i).ok().filter(|&s| s < self.sequences)?;
        self.with_idx(|idx| self.span(idx, s)).ok().flatten()
    }

    fn decode_range(&self, i: u64, bytes: &Bytes) -> FormatResult<Record> {
        let v = self
            .dtype
            .value(bytes.clone())
            .map_err(|e| format!("sequence {i}: {e}"))?;
        Ok(tokens_record(&self.name, v))
    }

    fn decode(&self, data: &Bytes, indices: &[u64]) -> FormatResult<Vec<Record>> {
        // The `.idx` is looked up once a read, not once a sample.
        self.with_idx(|idx| {
            indices
                .iter()
                .map(|&i| {
                    let span = usize::try_from(i)
                        .ok()
                        .filter(|&s| s < self.sequences)
                        .and_then(|s| self.span(idx, s));
                    let (from, to) = span.ok_or_else(|| {
                        format!(
                            "sequence {i} is past the last, {}, or its .idx entry is negative",
                            self.sequences
                        )
                    })?;
                    if to > data.len() as u64 {
                        return Err(format!("sequence {i} lies past the end of the .bin"));
                    }
                    self.decode_range(i, &data.slice(from as usize..to as usize))
                })
                .collect()
        })?
    }
}

/// Writes a Megatron indexed dataset (one document per sequence), returning
/// the `.bin` and `.idx` bytes; the layout is the one in the module docs.
///
/// ```
/// use bytes::Bytes;
/// use zephon_storage::format::ShardIndex;
/// use zephon_storage::format::tokens::{MegatronIndex, TokenDtype, encode_megatron};
/// let (bin, idx) = encode_megatron(&[vec![1, 2, 3], vec![4]], TokenDtype::U16).unwrap();
/// let index = MegatronIndex::open(idx, bin.len() as u64).unwrap();
/// let recs = index.decode(&Bytes::from(bin), &[1, 0]).unwrap();
/// assert_eq!(recs[0].token_ids("tokens").unwrap(), [4]);
/// assert_eq!(recs[1].token_ids("tokens").unwrap(), [1, 2, 3]);
/// ```
pub fn encode_megatron(docs: &[Vec<u32>], dtype: TokenDtype) -> FormatResult<(Vec<u8>, Vec<u8>)> {
    let mut bin = Vec::new();
    let mut lengths = Vec::new();
    let mut pointers = Vec::new();
    for d in docs {
        pointers.push(bin.len() as i64);
        lengths.push(i32::try_from(d.len()).map_err(|_| "document too long")?);
        dtype.encode(d, &mut bin)?;
    }
    let mut idx = Vec::new();
    idx.extend_from_slice(MAGIC);
    idx.extend(1u64.to_le_bytes());
    idx.push(dtype.megatron_code());
    idx.extend((docs.len() as u64).to_le_bytes());
    idx.extend((docs.len() as u64 + 1).to_le_bytes());
    lengths.iter().for_each(|l| idx.extend(l.to_le_bytes()));
    pointers.iter().for_each(|p| idx.extend(p.to_le_bytes()));
    (0..=docs.len() as i64).for_each(|d| idx.extend(d.to_le_bytes()));
    Ok((bin, idx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_tokens_drop_the_partial_tail() {
        let mut data = Vec::new();
        TokenDtype::U16
            .encode(&(0..10).collect::<Vec<_>>(), &mut data)
            .unwrap();
        let f = FlatTokens::open(&data, TokenDtype::U16, 4).unwrap();
        assert_eq!(f.len(), 2);
        let r = f.decode(&Bytes::from(data), &[1]).unwrap();
        assert_eq!(r[0].token_ids("tokens").unwrap(), [4, 5, 6, 7]);
        assert!(FlatTokens::open(&[0u8; 3], TokenDtype::U16, 1).is_err());
    }

    #[test]
    fn megatron_idx_must_match_the_bin() {
        let (bin, idx) = encode_megatron(&[vec![1, 2], vec![3]], TokenDtype::I32).unwrap();
        let idx = Bytes::from(idx);
        assert!(MegatronIndex::open(idx.clone(), bin.len() as u64).is_ok());
        let err = MegatronIndex::open(idx.clone(), bin.len() as u64 - 4).unwrap_err();
        assert!(err.contains("sequence 1"), "{err}");
        let err = MegatronIndex::open(idx.clone(), bin.len() as u64 + 4).unwrap_err();
        assert!(err.contains("do not belong together"), "{err}");
        assert!(MegatronIndex::open(idx.slice(..idx.len() - 1), bin.len() as u64).is_err());
    }

    /// Sequences that leave a gap in the `.bin` or overlap are refused,
    /// naming the field and the sequence: both read to the end before.
    #[test]
    fn megatron_gaps_and_overlaps_are_refused() {
        let (bin, idx) =
            encode_megatron(&[vec![1, 2], vec![3], vec![4, 5, 6]], TokenDtype::U16).unwrap();
        // Sequence 1's pointer, at the header, 3 lengths of 4 bytes, one
        // pointer of 8.
        let at = HEADER + 4 * 3 + 8;
        let with_pointer = |p: i64| {
            let mut i = idx.clone();
            i[at..at + 8].copy_from_slice(&p.to_le_bytes());
            MegatronIndex::open(i, bin.len() as u64).unwrap_err()
        };
        let gap = with_pointer(6);
        assert!(
            gap.contains("sequence 1") && gap.contains("gap") && gap.contains("pointers"),
            "{gap}"
        );
        let overlap = with_pointer(2);
        assert!(
            overlap.contains("sequence 1") && overlap.contains("overlapping"),
            "{overlap}"
        );
    }

    /// Lengths and offsets read where the `.idx` lies: a negative one is
    /// refused at open, a sequence past the last is `None` or an error
    /// naming it, never a panic.
    #[test]
    fn megatron_sequences_are_read_in_place_and_checked() {
        let (bin, idx) =
            encode_megatron(&[vec![1, 2], vec![3], vec![4, 5, 6]], TokenDtype::U16).unwrap();
        let index = MegatronIndex::open(idx.clone(), bin.len() as u64).unwrap();
        assert_eq!(index.len(), 3);
        assert_eq!(
            (0..4).map(|i| index.byte_range(i)).collect::<Vec<_>>(),
            [Some((0, 4)), Some((4, 6)), Some((6, 12)), None]
        );
        let recs = index.decode(&Bytes::from(bin.clone()), &[2, 0]).unwrap();
        assert_eq!(recs[0].token_ids("tokens").unwrap(), [4, 5, 6]);
        let err = index.decode(&Bytes::from(bin.clone()), &[3]).unwrap_err();
        assert!(err.contains("sequence 3 is past the last"), "{err}");
        // Sequence 1's length, then sequence 2's offset, made negative.
        for at in [HEADER + 4, HEADER + 4 * 3 + 8 * 2] {
            let mut bad = idx.clone();
            bad[at + 3] = 0x80;
            if at > HEADER + 12 {
                bad[at + 7] = 0x80;
            }
            let err = MegatronIndex::open(bad, bin.len() as u64).unwrap_err();
            assert!(err.contains("negative length or offset"), "{err}");
        }
    }
}
