//! A ranged answer must be the range asked. The storage services take a
//! `206 Partial Content` as the bytes asked for without reading its
//! `Content-Range`, so a server (or a proxy or cache in front of it)
//! answering with another range of the same length would hand a reader
//! the wrong samples without a word. The transport checks it: a `206` to a
//! request for `bytes=A-B` must say it holds bytes `A-E` with `E <= B`.

/// The single range a request asks for (`Range: bytes=A-B` or `bytes=A-`),
/// as its first byte and its last (if given); `None` for no range, or a
/// form this check leaves alone (several ranges, a suffix).
pub(crate) fn asked(headers: &http::HeaderMap) -> Option<(u64, Option<u64>)> {
    let v = headers.get(http::header::RANGE)?.to_str().ok()?;
    let (first, last) = v.trim().strip_prefix("bytes=")?.split_once('-')?;
    let first = first.trim().parse().ok()?;
    let last = last.trim();
    if last.contains(',') {
        return None;
    }
    Some((
        first,
        if last.is_empty() {
            None
        } else {
            Some(last.parse().ok()?)
        },
    ))
}

/// Whether a `206` answer with `headers` holds the range `asked`; the
/// reason it does not, otherwise.
pub(crate) fn check(asked: (u64, Option<u64>), headers: &http::HeaderMap) -> Result<(), String> {
    let (first, last) = asked;
    let want = match last {
        Some(l) => format!("bytes {first}-{l}"),
        None => format!("bytes {first}-"),
    };
    let Some(v) = headers.get(http::header::CONTENT_RANGE) else {
        return Err(format!(
            "the server answered a request for {want} with part of the object but no \
             Content-Range saying which part"
        ));
    };
    let text = String::from_utf8_lossy(v.as_bytes());
    let got = text
        .trim()
        .strip_prefix("bytes ")
        .and_then(|r| r.split_once('/'))
        .and_then(|(r, _)| r.split_once('-'))
        .and_then(|(a, b)| Some((a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?)));
    match got {
        Some((a, b)) if a == first && a <= b && last.is_none_or(|l| b <= l) => Ok(()),
        _ => Err(format!(
            "the server answered a request for {want} with `Content-Range: {text}`: not the \
             bytes asked for"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(name: http::HeaderName, v: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(name, v.parse().unwrap());
        h
    }

    #[test]
    fn the_range_asked_is_read_from_the_request() {
        let r = |v: &str| asked(&headers(http::header::RANGE, v));
        assert_eq!(r("bytes=10-19"), Some((10, Some(19))));
        assert_eq!(r("bytes=10-"), Some((10, None)));
        assert_eq!(r("bytes=0-1,5-6"), None);
        assert_eq!(r("bytes=-5"), None);
        assert_eq!(asked(&http::HeaderMap::new()), None);
    }

    #[test]
    fn an_answer_must_hold_the_range_asked() {
        let c = |v: &str| headers(http::header::CONTENT_RANGE, v);
        assert!(check((10, Some(19)), &c("bytes 10-19/100")).is_ok());
        // The object ends before the range asked does.
        assert!(check((10, Some(19)), &c("bytes 10-14/15")).is_ok());
        assert!(check((10, None), &c("bytes 10-99/100")).is_ok());
        let e = check((10, Some(19)), &c("bytes 20-29/100")).unwrap_err();
        assert!(e.contains("bytes 10-19") && e.contains("20-29/100"), "{e}");
        assert!(check((10, Some(19)), &c("bytes 10-29/100")).is_err());
        assert!(check((10, Some(19)), &c("garbage")).is_err());
        let e = check((10, Some(19)), &http::HeaderMap::new()).unwrap_err();
        assert!(e.contains("no Content-Range"), "{e}");
    }
}
