//! Token ids in their stored width: [`TokenView`] over a shard's bytes and
//! [`Tokens`], the one reading API for owned ids and views alike.

use bytes::Bytes;
use std::fmt;

/// Width of the little-endian ids a [`TokenView`] reads.
// A whole word: [`Value`](crate::Value) keeps its variant in this field's
// spare values, so with one byte here every value was written as a byte
// of tag beside seven bytes copied apart, and read back as one word the
// processor could not forward from those stores (a stall per field made,
// the largest cost of decoding an MDS sample). As a word the tag is one
// store, and `Value` stays 40 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u64)]
pub enum TokenWidth {
    /// Two bytes per id.
    U16,
    /// Four bytes per id.
    U32,
}

impl TokenWidth {
    /// Bytes per id.
    pub fn size(self) -> usize {
        match self {
            TokenWidth::U16 => 2,
            TokenWidth::U32 => 4,
        }
    }
}

/// Token ids read in place: little-endian `u16` or `u32` ids in a slice of
/// a shard's buffer (a memory map or a cached block), shared, not copied.
/// The ids are widened only when read; collation copies them once, into
/// the batch.
///
/// ```
/// use bytes::Bytes;
/// use zephon_core::record::{TokenView, TokenWidth};
/// // Three u16 ids starting at an odd byte of the buffer.
/// let buf = Bytes::from(vec![0xff, 1, 0, 0x34, 0x12, 0xff, 0xff]);
/// let v = TokenView::new(buf.slice(1..7), TokenWidth::U16).unwrap();
/// assert_eq!(v.tokens().to_vec(), [1, 0x1234, 0xffff]);
/// assert!(TokenView::new(buf.slice(1..6), TokenWidth::U16).is_err());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct TokenView {
    bytes: Bytes,
    width: TokenWidth,
}

impl TokenView {
    /// A view of `bytes` as ids of `width`; an error when the length is not
    /// a whole number of ids.
    pub fn new(bytes: Bytes, width: TokenWidth) -> Result<Self, String> {
        if !bytes.len().is_multiple_of(width.size()) {
            return Err(format!(
                "{} bytes is not a whole number of {width:?} token ids",
                bytes.len()
            ));
        }
        Ok(TokenView { bytes, width })
    }

    /// The stored width.
    pub fn width(&self) -> TokenWidth {
        self.width
    }

    /// The bytes the ids are read from.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The ids, to read.
    pub fn tokens(&self) -> Tokens<'_> {
        Tokens::View(self)
    }
}

impl fmt::Debug for TokenView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}:", self.width)?;
        f.debug_list().entries(self.tokens().iter()).finish()
    }
}

/// Token ids of any stored width, borrowed from a value: owned `u32` ids or
/// a [`TokenView`]. Reading an id widens it to `u32`.
///
/// ```
/// use zephon_core::{Record, Value};
/// let r = Record::new().with("input_ids", Value::Tokens(vec![5, 6, 7]));
/// let t = r.token_ids("input_ids").unwrap();
/// assert_eq!((t.len(), t.get(1)), (3, Some(6)));
/// assert_eq!(t.iter().sum::<u32>(), 18);
/// assert_eq!(t.as_u32_slice(), Some(&[5, 6, 7][..]));
/// assert_eq!(t, [5, 6, 7]);
/// ```
#[derive(Clone, Copy)]
pub enum Tokens<'a> {
    /// Owned ids.
    U32(&'a [u32]),
    /// Ids read in place.
    View(&'a TokenView),
}

impl<'a> Tokens<'a> {
    /// Number of ids.
    pub fn len(&self) -> usize {
        match self {
            Tokens::U32(t) => t.len(),
            Tokens::View(v) => v.bytes.len() / v.width.size(),
        }
    }

    /// Whether there are no ids.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The stored width (owned ids are `u32`).
    pub fn width(&self) -> TokenWidth {
        match self {
            Tokens::U32(_) => TokenWidth::U32,
            Tokens::View(v) => v.width,
        }
    }

    /// Id `i`, if `i < len()`.
    pub fn get(&self, i: usize) -> Option<u32> {
        match self {
            Tokens::U32(t) => t.get(i).copied(),
            Tokens::View(v) => {
                let b = v.bytes.get(i * v.width.size()..(i + 1) * v.width.size())?;
                Some(match v.width {
                    TokenWidth::U16 => u16::from_le_bytes([b[0], b[1]]) as u32,
                    TokenWidth::U32 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                })
            }
        }
    }

    /// The ids in order, widened to `u32`.
    pub fn iter(&self) -> TokensIter<'a> {
        match *self {
            Tokens::U32(t) => TokensIter::U32(t.iter()),
            Tokens::View(v) => match v.width {
                TokenWidth::U16 => TokensIter::U16(v.bytes.chunks_exact(2)),
                TokenWidth::U32 => TokensIter::U32Le(v.bytes.chunks_exact(4)),
            },
        }
    }

    /// The ids as a `u32` slice without copying: owned ids, or a `u32` view
    /// whose bytes happen to be 4-byte aligned on a little-endian machine;
    /// `None` for other views (read them with [`iter`](Tokens::iter)).
    pub fn as_u32_slice(&self) -> Option<&'a [u32]> {
        match *self {
            Tokens::U32(t) => Some(t),
            Tokens::View(v) if v.width == TokenWidth::U32 && cfg!(target_endian = "little") => {
                // SAFETY: every bit pattern is a valid u32; `align_to` only
                // returns the aligned middle, and an empty prefix and suffix
                // mean it is the whole buffer.
                let (pre, mid, post) = unsafe { v.bytes.align_to::<u32>() };
                (pre.is_empty() && post.is_empty()).then_some(mid)
            }
            Tokens::View(_) => None,
        }
    }

    /// The ids, copied into a new `Vec<u32>`.
    pub fn to_vec(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.len());
        self.extend_into(&mut out);
        out
    }

    /// Appends the ids to `out`, widened to `u32`.
    pub fn extend_into(&self, out: &mut Vec<u32>) {
        match self.as_u32_slice() {
            Some(t) => out.extend_from_slice(t),
            None => out.extend(self.iter()),
        }
    }

    /// Writes the ids into `out` (of exactly `len()` elements), each through
    /// `f`: collation's one copy, into the batch's own element type.
    ///
    /// ```
    /// use zephon_core::{Record, Value};
    /// let r = Record::new().with("input_ids", Value::Tokens(vec![1, 2]));
    /// let mut row = [0i64; 2];
    /// r.token_ids("input_ids").unwrap().copy_into(&mut row, |t| t as i64);
    /// assert_eq!(row, [1, 2]);
    /// ```
    pub fn copy_into<T>(&self, out: &mut [T], f: impl Fn(u32) -> T) {
        assert_eq!(out.len(), self.len(), "copy_into needs len() slots");
        match *self {
            Tokens::U32(t) => out.iter_mut().zip(t).for_each(|(o, &t)| *o = f(t)),
            Tokens::View(v) => match v.width {
                TokenWidth::U16 => {
                    for (o, c) in out.iter_mut().zip(v.bytes.chunks_exact(2)) {
                        *o = f(u16::from_le_bytes([c[0], c[1]]) as u32);
                    }
                }
                TokenWidth::U32 => {
                    for (o, c) in out.iter_mut().zip(v.bytes.chunks_exact(4)) {
                        *o = f(u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
                    }
                }
            },
        }
    }
}

impl fmt::Debug for Tokens<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for Tokens<'a> {
    type Item = u32;
    type IntoIter = TokensIter<'a>;
    fn into_iter(self) -> TokensIter<'a> {
        self.iter()
    }
}

impl PartialEq for Tokens<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl PartialEq<[u32]> for Tokens<'_> {
    fn eq(&self, other: &[u32]) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter().copied())
    }
}

impl PartialEq<&[u32]> for Tokens<'_> {
    fn eq(&self, other: &&[u32]) -> bool {
        *self == **other
    }
}

impl<const N: usize> PartialEq<[u32; N]> for Tokens<'_> {
    fn eq(&self, other: &[u32; N]) -> bool {
        *self == other[..]
    }
}

impl PartialEq<Vec<u32>> for Tokens<'_> {
    fn eq(&self, other: &Vec<u32>) -> bool {
        *self == other[..]
    }
}

/// The ids of a [`Tokens`], widened to `u32`.
#[derive(Clone, Debug)]
pub enum TokensIter<'a> {
    /// Owned ids.
    U32(std::slice::Iter<'a, u32>),
    /// Little-endian `u16` ids.
    U16(std::slice::ChunksExact<'a, u8>),
    /// Little-endian `u32` ids.
    U32Le(std::slice::ChunksExact<'a, u8>),
}

impl Iterator for TokensIter<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        match self {
            TokensIter::U32(i) => i.next().copied(),
            TokensIter::U16(i) => i.next().map(|c| u16::from_le_bytes([c[0], c[1]]) as u32),
            TokensIter::U32Le(i) => i
                .next()
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            TokensIter::U32(i) => i.size_hint(),
            TokensIter::U16(i) | TokensIter::U32Le(i) => i.size_hint(),
        }
    }
}

impl ExactSizeIterator for TokensIter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The width is a word so that `Value` keeps its variant in one (see
    /// `TokenWidth`), without growing: every record moves its values.
    #[test]
    fn a_value_keeps_its_size() {
        assert_eq!(size_of::<TokenWidth>(), 8);
        assert_eq!(size_of::<crate::Value>(), 40);
        assert_eq!(size_of::<Option<crate::Value>>(), 40);
    }

    fn le16(ids: &[u16]) -> Vec<u8> {
        ids.iter().flat_map(|t| t.to_le_bytes()).collect()
    }

    fn le32(ids: &[u32]) -> Vec<u8> {
        ids.iter().flat_map(|t| t.to_le_bytes()).collect()
    }

    #[test]
    fn u16_view_at_an_odd_offset_reads_its_ids() {
        let ids = [0u16, 1, 0x00ff, 0xff00, 0xffff, 50_000];
        let mut buf = vec![0xaa];
        buf.extend(le16(&ids));
        buf.push(0xbb);
        let buf = Bytes::from(buf);
        let v = TokenView::new(buf.slice(1..1 + 2 * ids.len()), TokenWidth::U16).unwrap();
        let t = v.tokens();
        let want: Vec<u32> = ids.iter().map(|&t| t as u32).collect();
        assert_eq!(t.len(), ids.len());
        assert_eq!(t.to_vec(), want);
        assert_eq!(t.iter().collect::<Vec<_>>(), want);
        assert_eq!(t.get(4), Some(0xffff));
        assert_eq!(t.get(6), None);
        assert_eq!(t.as_u32_slice(), None);
        let mut out = vec![0u16; ids.len()];
        t.copy_into(&mut out, |x| x as u16);
        assert_eq!(out, ids);
    }

    #[test]
    fn u32_view_at_an_odd_offset_reads_its_ids() {
        let ids = [7u32, 0x0102_0304, u32::MAX, 65_536];
        let mut buf = vec![0xaa; 3];
        buf.extend(le32(&ids));
        let buf = Bytes::from(buf);
        let v = TokenView::new(buf.slice(3..), TokenWidth::U32).unwrap();
        let t = v.tokens();
        assert_eq!(t, ids);
        assert_eq!(t.get(1), Some(0x0102_0304));
        // Not 4-byte aligned, so no slice; reading still works.
        assert!(t.as_u32_slice().is_none() || cfg!(target_endian = "big"));
        let mut out = vec![0u64; ids.len()];
        t.copy_into(&mut out, u64::from);
        assert_eq!(out, ids.map(u64::from));
    }

    #[test]
    fn aligned_u32_view_is_a_slice() {
        let mut raw = vec![0u8; 16];
        // The ids start at the first 4-byte boundary of the buffer.
        let at = raw.as_ptr().align_offset(4);
        raw[at..at + 12].copy_from_slice(&le32(&[1, 2, 3]));
        let buf = Bytes::from(raw);
        assert_eq!(
            buf.as_ptr().align_offset(4),
            at,
            "Bytes kept the allocation"
        );
        let v = TokenView::new(buf.slice(at..at + 12), TokenWidth::U32).unwrap();
        if cfg!(target_endian = "little") {
            assert_eq!(v.tokens().as_u32_slice(), Some(&[1, 2, 3][..]));
        }
    }

    #[test]
    fn a_view_digests_compares_and_prints_as_its_owned_ids() {
        use crate::{Record, Value};
        let ids = [3u32, 60_000, 0];
        let mut buf = vec![9];
        buf.extend(le16(&ids.map(|t| t as u16)));
        let view = TokenView::new(Bytes::from(buf).slice(1..), TokenWidth::U16).unwrap();
        let a = Record::new().with("tokens", Value::TokenView(view));
        let b = Record::new().with("tokens", Value::Tokens(ids.to_vec()));
        assert_eq!(a.digest(), b.digest());
        assert_eq!(a, b);
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        let c = Record::new().with("tokens", Value::Tokens(vec![3, 60_000, 1]));
        assert_ne!(a.digest(), c.digest());
        assert_ne!(a, c);
        assert_eq!(a.tokens("tokens"), None, "a u16 view is no u32 slice");
        assert_eq!(a.token_ids("tokens").unwrap(), ids);
    }

    #[test]
    fn a_partial_id_is_an_error() {
        let err = TokenView::new(Bytes::from_static(&[1, 2, 3]), TokenWidth::U16).unwrap_err();
        assert!(err.contains("3 bytes"), "{err}");
        assert!(TokenView::new(Bytes::from_static(&[1, 2, 3, 4, 5, 6]), TokenWidth::U32).is_err());
    }
}
