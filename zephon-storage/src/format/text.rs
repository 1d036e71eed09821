//! Text fields that share a shard's bytes: what a format of another crate
//! uses for its text fields, as the formats here do.

use bytes::Bytes;
use zephon_core::record::ByteString;

/// `bytes` as text sharing their buffer, once checked as UTF-8.
///
/// Every text field of an MDS, WebDataset or JSONL shard goes through this
/// check, and the standard library's is byte by byte past the last whole
/// 16-byte word: most of a 50-250 byte field. `simdutf8` checks 64 bytes at
/// a time, the tail included. A field it refuses is checked again by the
/// standard library, whose error says where the bad byte lies, and which
/// stays the judge: nothing is taken as text that it would refuse.
/// `cargo bench -p zephon-storage --bench text` measures both checks.
///
/// ```
/// use bytes::Bytes;
/// use zephon_core::Value;
/// use zephon_storage::format::text::text_view;
///
/// let shard = Bytes::from_static(b"[\"h\xc3\xa9llo\", \"\xff\"]");
/// let text = text_view(shard.slice(2..8)).unwrap();
/// assert_eq!(&*text, "h\u{e9}llo");
/// // A view of the shard's bytes, not a copy.
/// assert_eq!(text.as_bytes().as_ptr(), shard[2..].as_ptr());
/// let v = Value::TextView(text);
/// assert_eq!(v.as_text(), Some("h\u{e9}llo"));
/// // The error says where the bad byte lies.
/// assert_eq!(text_view(shard.slice(12..13)).unwrap_err().valid_up_to(), 0);
/// ```
pub fn text_view(bytes: Bytes) -> Result<ByteString, std::str::Utf8Error> {
    if simdutf8::basic::from_utf8(&bytes).is_err() {
        std::str::from_utf8(&bytes)?;
    }
    // SAFETY: `bytes` were just checked as UTF-8, by `simdutf8` or, where
    // it refused them, by the standard library.
    Ok(unsafe { ByteString::from_bytes_unchecked(bytes) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_of_every_length_is_shared_and_bad_bytes_are_refused_where_they_lie() {
        let line = "héllo wörld, ünïcode and plain ascii ".repeat(8);
        let shard = Bytes::from(line.clone());
        for len in 0..line.len() {
            let slice = shard.slice(..len);
            let std = std::str::from_utf8(&slice);
            match text_view(slice.clone()) {
                Ok(t) => {
                    assert_eq!(Some(&*t), std.ok(), "length {len}");
                    // A view, not a copy.
                    assert_eq!(t.as_bytes().as_ptr(), shard.as_ptr());
                }
                Err(e) => assert_eq!(Some(e), std.err(), "length {len}"),
            }
        }
        let mut bad = b"x".repeat(100);
        bad[70] = 0xff;
        let e = text_view(Bytes::from(bad)).unwrap_err();
        assert_eq!(e.valid_up_to(), 70);
    }
}
