//! What a Parquet file's headers claim, checked before the Parquet reader
//! acts on it: that reader sizes its buffers by the headers, so a page of a
//! few hundred bytes claiming 2^31 values, a Snappy page claiming 2 GiB, a
//! footer of 700 MiB of key-value metadata or a schema nested 10,000 deep
//! (the reader builds the schema tree by recursion) became gigabytes of
//! memory or a stack overflow. The footer and each page header are read
//! here with a small Thrift compact-protocol reader of our own, without
//! recursion, and checked against the file and against these limits; a
//! breach is an error naming the field.

use bytes::Bytes;

/// The largest footer read, in bytes (64 MiB; a footer holds the schema,
/// the row groups' metadata and key-value metadata).
pub const MAX_FOOTER_BYTES: u64 = 64 << 20;

/// The deepest schema nesting accepted.
pub const MAX_SCHEMA_DEPTH: usize = 64;

/// The largest page, decompressed, in bytes (256 MiB; writers make pages
/// of about 1 MiB).
pub const MAX_PAGE_BYTES: u64 = 256 << 20;

/// Thrift nesting this reader follows while skipping fields.
const MAX_THRIFT_DEPTH: usize = 64;

/// A Thrift compact-protocol reader over a byte slice.
struct Compact<'a> {
    data: &'a [u8],
    at: usize,
}

type R<T> = Result<T, String>;

impl<'a> Compact<'a> {
    fn new(data: &'a [u8]) -> Self {
        Compact { data, at: 0 }
    }

    fn byte(&mut self) -> R<u8> {
        let b = *self.data.get(self.at).ok_or("ends inside a Thrift value")?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> R<u64> {
        let mut v: u64 = 0;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            if shift == 63 && b > 1 {
                return Err("a Thrift varint past 64 bits".into());
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("a Thrift varint past 64 bits".into())
    }

    fn zigzag(&mut self) -> R<i64> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    fn skip_bytes(&mut self, n: u64) -> R<()> {
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| self.at.checked_add(n))
            .filter(|&e| e <= self.data.len())
            .ok_or("a Thrift value past the end of its bytes")?;
        self.at = end;
        Ok(())
    }

    /// The next field of a struct: `(id, type)`, `None` at its end.
    fn field(&mut self, last: &mut i16) -> R<Option<(i16, u8)>> {
        let b = self.byte()?;
        if b == 0 {
            return Ok(None);
        }
        let (delta, kind) = (b >> 4, b & 0x0f);
        *last = match delta {
            0 => i16::try_from(self.zigzag()?).map_err(|_| "a Thrift field id past 16 bits")?,
            d => last.saturating_add(i16::from(d)),
        };
        Ok(Some((*last, kind)))
    }

    /// An `i32` or `i64` field's value.
    fn int(&mut self, kind: u8) -> R<i64> {
        match kind {
            3 => Ok(i64::from(self.byte()? as i8)),
            4..=6 => self.zigzag(),
            _ => Err(format!(
                "a Thrift field of type {kind} where an integer belongs"
            )),
        }
    }

    /// A list header: `(length, element type)`.
    fn list(&mut self) -> R<(u64, u8)> {
        let b = self.byte()?;
        let n = match b >> 4 {
            15 => self.varint()?,
            n => u64::from(n),
        };
        Ok((n, b & 0x0f))
    }

    /// Skips a value of type `kind`, nested values with a stack of our own.
    fn skip(&mut self, kind: u8) -> R<()> {
        // What is still to skip: a value, `n` more list elements of a type,
        // or the rest of a struct (its last field id).
        enum Todo {
            Value(u8),
            Elements(u64, u8),
            Struct(i16),
        }
        let mut todo = vec![Todo::Value(kind)];
        while let Some(t) = todo.pop() {
            if todo.len() > MAX_THRIFT_DEPTH {
                return Err(format!(
                    "Thrift values nested more than {MAX_THRIFT_DEPTH} deep"
                ));
            }
            match t {
                Todo::Value(k) => match k {
                    1 | 2 => {}
                    3 => self.skip_bytes(1)?,
                    4..=6 => {
                        self.varint()?;
                    }
                    7 => self.skip_bytes(8)?,
                    8 => {
                        let n = self.varint()?;
                        self.skip_bytes(n)?;
                    }
                    9 | 10 => {
                        let (n, k) = self.list()?;
                        todo.push(Todo::Elements(n, k));
                    }
                    11 => {
                        let n = self.varint()?;
                        if n > 0 {
                            let kv = self.byte()?;
                            let pairs = n.checked_mul(2).ok_or("a Thrift map too long")?;
                            // Keys and values alternate; both are skipped
                            // alike when of one type, as maps in Parquet
                            // footers are (strings to strings).
                            if kv >> 4 != kv & 0x0f {
                                return Err("a Thrift map of mixed types".into());
                            }
                            todo.push(Todo::Elements(pairs, kv >> 4));
                        }
                    }
                    12 => todo.push(Todo::Struct(0)),
                    13 => self.skip_bytes(16)?,
                    other => return Err(format!("a Thrift value of unknown type {other}")),
                },
                Todo::Elements(0, _) => {}
                Todo::Elements(n, k) => {
                    if self.at >= self.data.len() {
                        return Err("a Thrift list longer than its bytes".into());
                    }
                    todo.push(Todo::Elements(n - 1, k));
                    // A boolean in a list is a byte of its own.
                    match k {
                        1 | 2 => self.skip_bytes(1)?,
                        k => todo.push(Todo::Value(k)),
                    }
                }
                Todo::Struct(mut last) => {
                    if let Some((_, k)) = self.field(&mut last)? {
                        todo.push(Todo::Struct(last));
                        todo.push(Todo::Value(k));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Checks the footer of a Parquet file of `len` bytes whose last 8 bytes
/// are `tail`, fetching the footer with `footer(start, n)`: its size
/// against [`MAX_FOOTER_BYTES`] and the file, its schema's depth against
/// [`MAX_SCHEMA_DEPTH`]. A file that is not plain Parquet (an encrypted
/// footer, or none) is left to the Parquet reader's own errors.
pub(super) fn check_footer(
    len: u64,
    tail: &[u8],
    footer: impl FnOnce(u64, usize) -> R<Bytes>,
) -> R<()> {
    if tail.len() != 8 || &tail[4..] != b"PAR1" {
        return Ok(());
    }
    let n = u64::from(u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")));
    if n > MAX_FOOTER_BYTES {
        return Err(format!(
            "its footer claims {n} bytes, more than the {MAX_FOOTER_BYTES} a footer may hold"
        ));
    }
    if n + 8 > len {
        return Err(format!(
            "its footer claims {n} bytes, more than the file's {len}"
        ));
    }
    let bytes = footer(len - 8 - n, n as usize)?;
    schema_depth(&bytes).map(|_| ())
}

/// The nesting depth of a `FileMetaData`'s schema (field 2, a list of
/// `SchemaElement`s whose field 5 is the number of children), refused past
/// [`MAX_SCHEMA_DEPTH`].
fn schema_depth(footer: &[u8]) -> R<usize> {
    let mut t = Compact::new(footer);
    let mut last = 0;
    let mut depth = 0;
    while let Some((id, kind)) = t.field(&mut last).map_err(|e| format!("its footer: {e}"))? {
        if id != 2 || kind != 9 {
            t.skip(kind).map_err(|e| format!("its footer: {e}"))?;
            continue;
        }
        let (n, elem) = t.list()?;
        if elem != 12 {
            return Err("its footer: field `schema` is not a list of elements".into());
        }
        // Per open group, the children still to come.
        let mut open: Vec<i64> = Vec::new();
        for i in 0..n {
            let mut last_field = 0;
            let mut children = 0i64;
            while let Some((fid, k)) = t.field(&mut last_field)? {
                match (fid, k) {
                    (5, 5) => children = t.int(k)?,
                    _ => t.skip(k)?,
                }
            }
            if let Some(top) = open.last_mut() {
                *top -= 1;
            }
            if children > 0 {
                open.push(children);
                if open.len() > MAX_SCHEMA_DEPTH {
                    return Err(format!(
                        "its footer: field `schema` nests more than {MAX_SCHEMA_DEPTH} deep (element {i})"
                    ));
                }
            }
            depth = depth.max(open.len());
            while open.last().is_some_and(|&c| c <= 0) {
                open.pop();
            }
        }
    }
    Ok(depth)
}

/// What a page header says: its size decompressed and stored, and the
/// values a dictionary or data page claims.
#[derive(Debug, Default, PartialEq, Eq)]
struct PageHeader {
    dictionary: bool,
    uncompressed: i64,
    compressed: i64,
    values: i64,
}

/// Reads the page header at the start of `bytes`; returns it and its length.
fn page_header(bytes: &[u8]) -> R<(PageHeader, usize)> {
    let mut t = Compact::new(bytes);
    let mut h = PageHeader::default();
    let mut last = 0;
    while let Some((id, kind)) = t.field(&mut last)? {
        match (id, kind) {
            (1, 5) => h.dictionary = t.int(kind)? == 2,
            (2, 5) => h.uncompressed = t.int(kind)?,
            (3, 5) => h.compressed = t.int(kind)?,
            // data_page_header, dictionary_page_header, data_page_header_v2:
            // their field 1 is the number of values.
            (5 | 7 | 8, 12) => {
                let mut inner = 0;
                while let Some((fid, k)) = t.field(&mut inner)? {
                    match (fid, k) {
                        (1, 5) => h.values = t.int(k)?,
                        _ => t.skip(k)?,
                    }
                }
            }
            _ => t.skip(kind)?,
        }
    }
    Ok((h, t.at))
}

/// Walks the pages of the column chunk `chunk` (its bytes, from its first
/// page), checking each header against the chunk and the limits: the
/// decompressed size of a page at most [`MAX_PAGE_BYTES`] and of the chunk
/// at most `budget`, a dictionary's values at most 8 a byte of it (a
/// boolean takes a bit), a page within the chunk. Returns the chunk's
/// decompressed size.
pub(super) fn check_chunk(chunk: &[u8], budget: u64, what: &str) -> R<u64> {
    let mut at = 0usize;
    let mut total: u64 = 0;
    let mut page = 0;
    while at < chunk.len() {
        let (h, len) = page_header(&chunk[at..])
            .map_err(|e| format!("{what}, page {page}: its header: {e}"))?;
        let bad = |m: String| format!("{what}, page {page}: {m}");
        let (Ok(uncompressed), Ok(compressed)) =
            (u64::try_from(h.uncompressed), u64::try_from(h.compressed))
        else {
            return Err(bad("a negative page size".into()));
        };
        if uncompressed > MAX_PAGE_BYTES {
            return Err(bad(format!(
                "field `uncompressed_page_size` claims {uncompressed} bytes, more than the {MAX_PAGE_BYTES} a page may hold"
            )));
        }
        total = total.saturating_add(uncompressed);
        if total > budget {
            return Err(bad(format!(
                "its pages decompress to more than the {budget} bytes of the decoding budget \
                 (parquet_decoded_bytes)"
            )));
        }
        if h.dictionary
            && u64::try_from(h.values).unwrap_or(u64::MAX) > uncompressed.saturating_mul(8)
        {
            return Err(bad(format!(
                "field `num_values` of its dictionary claims {} values in {uncompressed} bytes",
                h.values
            )));
        }
        at = at
            .checked_add(len)
            .and_then(|a| a.checked_add(usize::try_from(compressed).ok()?))
            .filter(|&a| a <= chunk.len())
            .ok_or_else(|| {
                bad(format!(
                    "a page of {compressed} bytes past its column chunk's end"
                ))
            })?;
        page += 1;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A compact-protocol field header for id `id` after `last`.
    fn header(out: &mut Vec<u8>, last: &mut i16, id: i16, kind: u8) {
        let delta = id - *last;
        assert!((1..=15).contains(&delta));
        out.push(((delta as u8) << 4) | kind);
        *last = id;
    }

    fn varint(out: &mut Vec<u8>, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn i32_field(out: &mut Vec<u8>, last: &mut i16, id: i16, v: i32) {
        header(out, last, id, 5);
        varint(out, ((v << 1) ^ (v >> 31)) as u32 as u64);
    }

    /// A dictionary page header: `uncompressed` bytes, `values` values.
    fn dict_page(uncompressed: i32, compressed: i32, values: i32) -> Vec<u8> {
        let mut out = Vec::new();
        let mut last = 0;
        i32_field(&mut out, &mut last, 1, 2);
        i32_field(&mut out, &mut last, 2, uncompressed);
        i32_field(&mut out, &mut last, 3, compressed);
        header(&mut out, &mut last, 7, 12);
        let mut inner = 0;
        i32_field(&mut out, &mut inner, 1, values);
        out.push(0);
        out.push(0);
        out
    }

    #[test]
    fn page_headers_claiming_more_than_they_hold_are_refused() {
        let mut ok = dict_page(16, 4, 4);
        ok.extend([0; 4]);
        check_chunk(&ok, 1 << 20, "c").unwrap();
        let mut bomb = dict_page(300, 4, i32::MAX);
        bomb.extend([0; 4]);
        let e = check_chunk(&bomb, 1 << 20, "row group 0, column 0").unwrap_err();
        assert!(
            e.contains("num_values") && e.contains("row group 0, column 0"),
            "{e}"
        );
        let mut snappy = dict_page(i32::MAX, 4, 1);
        snappy.extend([0; 4]);
        let e = check_chunk(&snappy, u64::MAX, "c").unwrap_err();
        assert!(e.contains("uncompressed_page_size"), "{e}");
        let e = check_chunk(&dict_page(16, 400, 1), 1 << 20, "c").unwrap_err();
        assert!(e.contains("past its column chunk"), "{e}");
        let e = check_chunk(&ok, 8, "c").unwrap_err();
        assert!(e.contains("parquet_decoded_bytes"), "{e}");
    }

    /// A `FileMetaData` whose schema is a chain of groups `depth` deep.
    fn nested_footer(depth: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut last = 0;
        i32_field(&mut out, &mut last, 1, 1);
        header(&mut out, &mut last, 2, 9);
        let n = depth + 1;
        out.push(0xf0 | 12);
        varint(&mut out, n as u64);
        for i in 0..n {
            let mut f = 0;
            header(&mut out, &mut f, 4, 8);
            varint(&mut out, 1);
            out.push(b'x');
            if i < depth {
                i32_field(&mut out, &mut f, 5, 1);
            }
            out.push(0);
        }
        out.push(0);
        out
    }

    #[test]
    fn a_schema_nested_past_the_limit_is_refused_without_recursion() {
        assert_eq!(schema_depth(&nested_footer(3)).unwrap(), 3);
        let e = schema_depth(&nested_footer(10_000)).unwrap_err();
        assert!(e.contains("nests more than"), "{e}");
    }

    #[test]
    fn a_footer_larger_than_the_limit_is_refused_before_it_is_read() {
        let mut tail = (u32::MAX).to_le_bytes().to_vec();
        tail.extend(b"PAR1");
        let e = check_footer(u64::MAX, &tail, |_, _| unreachable!()).unwrap_err();
        assert!(e.contains("footer claims"), "{e}");
    }

    /// Random bytes as headers and footers: errors or a result, never a
    /// panic or a hang.
    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut seed = 7u64;
        for len in 0..2000 {
            let bytes: Vec<u8> = (0..len % 97)
                .map(|_| {
                    seed = zephon_core::hash::combine(seed, 1);
                    seed as u8
                })
                .collect();
            let _ = check_chunk(&bytes, 1 << 20, "c");
            let _ = schema_depth(&bytes);
        }
    }
}
