//! A strict reader of `multipart/byteranges` bodies (RFC 9110, 14.6): the
//! answer to one request for many byte ranges. Every part must carry a
//! `Content-Range` that is one of the ranges asked for, exactly, with its
//! bytes in full; each asked range must come once. Anything else is an
//! error saying what the server sent, never a short or shifted sample.

use bytes::Bytes;

/// Most header lines one part may carry (servers send two).
const PART_HEADERS: usize = 16;

/// The boundary of a `multipart/byteranges` content type, `None` for any
/// other type or a boundary RFC 2046 does not allow (1 to 70 characters).
pub(crate) fn boundary(content_type: &str) -> Option<&str> {
    let mut params = content_type.split(';');
    let kind = params.next()?.trim();
    if !kind.eq_ignore_ascii_case("multipart/byteranges") {
        return None;
    }
    params.find_map(|p| {
        let (k, v) = p.split_once('=')?;
        if !k.trim().eq_ignore_ascii_case("boundary") {
            return None;
        }
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(v);
        (1..=70).contains(&v.len()).then_some(v)
    })
}

/// Parses `Content-Range: bytes FIRST-LAST/TOTAL` (TOTAL may be `*`) into
/// the half-open `(FIRST, LAST + 1)`.
pub(crate) fn content_range(v: &str) -> Option<(u64, u64)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (span, total) = rest.split_once('/')?;
    let (first, last) = span.split_once('-')?;
    let (first, last): (u64, u64) = (first.trim().parse().ok()?, last.trim().parse().ok()?);
    if total.trim() != "*" {
        let total: u64 = total.trim().parse().ok()?;
        if last >= total {
            return None;
        }
    }
    if first > last {
        return None;
    }
    Some((first, last.checked_add(1)?))
}

/// Splits `body` into the parts answering `asked` (half-open byte ranges,
/// sorted, not overlapping): `(from, bytes)` in the order of `asked`, each
/// a slice of `body` (no copy).
pub(crate) fn split(
    body: &Bytes,
    boundary: &str,
    asked: &[(u64, u64)],
) -> Result<Vec<(u64, Bytes)>, String> {
    let delim = format!("--{boundary}");
    let delim = delim.as_bytes();
    let mut got: Vec<Option<Bytes>> = vec![None; asked.len()];
    // The first delimiter opens the body, after an optional preamble.
    let mut pos = find(body, delim, 0)
        .filter(|&at| at == 0 || body[..at].ends_with(b"\r\n"))
        .ok_or("no multipart boundary in the body")?;
    loop {
        pos += delim.len();
        if body[pos..].starts_with(b"--") {
            break;
        }
        while matches!(body.get(pos), Some(b' ' | b'\t')) {
            pos += 1;
        }
        if !body[pos..].starts_with(b"\r\n") {
            return Err(format!("a malformed boundary line at byte {pos}"));
        }
        pos += 2;
        let mut headers = [httparse::EMPTY_HEADER; PART_HEADERS];
        let (used, headers) = match httparse::parse_headers(&body[pos..], &mut headers) {
            Ok(httparse::Status::Complete(h)) => h,
            Ok(httparse::Status::Partial) => {
                return Err(format!("the part headers at byte {pos} are cut short"));
            }
            Err(e) => return Err(format!("bad part headers at byte {pos}: {e}")),
        };
        let range = headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-range"))
            .ok_or_else(|| format!("the part at byte {pos} has no Content-Range"))?;
        let text = std::str::from_utf8(range.value).unwrap_or("(not UTF-8)");
        let (from, to) = content_range(text)
            .ok_or_else(|| format!("the part at byte {pos} has a bad Content-Range `{text}`"))?;
        let k = asked.partition_point(|a| a.0 < from);
        match asked.get(k) {
            Some(&(f, t)) if f == from && t == to => {}
            Some(&(f, t)) if f == from => {
                return Err(format!(
                    "bytes {f}..{t} came back as bytes {from}..{to} \
                     (the object is shorter than its manifest says, or the server cut the range)"
                ));
            }
            _ => {
                return Err(format!(
                    "a part of bytes {from}..{to}, which was not asked for"
                ));
            }
        }
        if got[k].is_some() {
            return Err(format!("bytes {from}..{to} came twice"));
        }
        pos += used;
        let len = usize::try_from(to - from).map_err(|_| "a part too large".to_string())?;
        let end = pos
            .checked_add(len)
            .filter(|&e| e <= body.len())
            .ok_or_else(|| {
                format!(
                    "bytes {from}..{to}: the body ends {} bytes into the part",
                    body.len() - pos
                )
            })?;
        got[k] = Some(body.slice(pos..end));
        pos = end;
        if !body[pos..].starts_with(b"\r\n") || !body[pos + 2..].starts_with(delim) {
            return Err(format!(
                "bytes {from}..{to}: no boundary after the part's {len} bytes \
                 (the part is shorter or longer than its Content-Range)"
            ));
        }
        pos += 2;
    }
    asked
        .iter()
        .zip(got)
        .map(|(&(from, to), b)| {
            b.map(|b| (from, b))
                .ok_or_else(|| format!("bytes {from}..{to} did not come"))
        })
        .collect()
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    memchr::memmem::find(&hay[from..], needle).map(|i| i + from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(parts: &[(&str, &[u8])]) -> Bytes {
        let mut b = Vec::new();
        for (range, data) in parts {
            b.extend_from_slice(b"\r\n--XYZ\r\nContent-Type: application/octet-stream\r\n");
            b.extend_from_slice(format!("Content-Range: {range}\r\n\r\n").as_bytes());
            b.extend_from_slice(data);
        }
        b.extend_from_slice(b"\r\n--XYZ--\r\n");
        Bytes::from(b)
    }

    #[test]
    fn reads_the_asked_parts_in_any_order() {
        let b = body(&[("bytes 10-12/100", b"def"), ("bytes 0-1/100", b"ab")]);
        let parts = split(&b, "XYZ", &[(0, 2), (10, 13)]).unwrap();
        assert_eq!(
            parts,
            vec![(0, Bytes::from("ab")), (10, Bytes::from("def"))]
        );
    }

    #[test]
    fn refuses_what_was_not_asked_short_long_missing_or_twice() {
        let asked = [(0, 2), (10, 13)];
        let cases: [(Bytes, &str); 6] = [
            (
                body(&[("bytes 0-1/100", b"ab"), ("bytes 10-11/100", b"de")]),
                "came back as bytes 10..12",
            ),
            (
                body(&[("bytes 0-1/100", b"ab"), ("bytes 20-22/100", b"xyz")]),
                "not asked",
            ),
            (
                body(&[("bytes 0-1/100", b"ab")]),
                "bytes 10..13 did not come",
            ),
            (
                body(&[("bytes 0-1/100", b"ab"), ("bytes 0-1/100", b"ab")]),
                "came twice",
            ),
            (
                body(&[("bytes 0-1/100", b"abc"), ("bytes 10-12/100", b"def")]),
                "no boundary after",
            ),
            (
                Bytes::from_static(b"\r\n--XYZ\r\nContent-Range: bytes 0-1/100\r\n\r\na"),
                "ends 1 bytes",
            ),
        ];
        for (b, want) in cases {
            let e = split(&b, "XYZ", &asked).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
        assert!(split(&Bytes::from_static(b"garbage"), "XYZ", &asked).is_err());
    }

    proptest::proptest! {
        /// A server's answer is input too: a body damaged anywhere (bytes
        /// replaced, inserted, removed, the tail cut) is read or refused,
        /// never a panic, and what is read is exactly the asked ranges.
        #[test]
        fn damaged_bodies_are_read_whole_or_refused(
            lens in proptest::collection::vec(1usize..40, 1..5),
            edits in proptest::collection::vec((0usize..4096, proptest::prelude::any::<u8>(), 0u8..4), 0..4),
        ) {
            let mut asked = Vec::new();
            let mut at = 0u64;
            for len in &lens {
                asked.push((at, at + *len as u64));
                at += *len as u64 + 7;
            }
            let ranges: Vec<String> = asked
                .iter()
                .map(|&(f, t)| format!("bytes {f}-{}/1000", t - 1))
                .collect();
            let data: Vec<Vec<u8>> = lens.iter().map(|&n| vec![b'x'; n]).collect();
            let parts: Vec<(&str, &[u8])> =
                ranges.iter().map(String::as_str).zip(data.iter().map(Vec::as_slice)).collect();
            let mut b = body(&parts).to_vec();
            let whole = edits.is_empty();
            for (i, byte, op) in edits {
                let i = i % (b.len() + 1);
                match op {
                    0 if i < b.len() => b[i] = byte,
                    1 => b.insert(i, byte),
                    2 if i < b.len() => {
                        b.remove(i);
                    }
                    _ => b.truncate(i),
                }
            }
            let read = split(&Bytes::from(b), "XYZ", &asked);
            proptest::prop_assert!(read.is_ok() || !whole, "{read:?}");
            if let Ok(got) = read {
                proptest::prop_assert_eq!(got.len(), asked.len());
                for ((from, bytes), &(f, t)) in got.iter().zip(&asked) {
                    proptest::prop_assert_eq!((*from, bytes.len() as u64), (f, t - f));
                }
            }
        }
    }

    #[test]
    fn boundaries_and_content_ranges() {
        assert_eq!(
            boundary("multipart/byteranges; boundary=00001"),
            Some("00001")
        );
        assert_eq!(
            boundary("Multipart/ByteRanges; boundary=\"a b\""),
            Some("a b")
        );
        assert_eq!(boundary("text/plain; boundary=x"), None);
        assert_eq!(content_range("bytes 0-9/10"), Some((0, 10)));
        assert_eq!(content_range("bytes 0-9/*"), Some((0, 10)));
        assert_eq!(content_range("bytes 0-10/10"), None);
        assert_eq!(content_range("bytes 5-4/10"), None);
        assert_eq!(content_range("bytes 0-18446744073709551615/*"), None);
    }
}
