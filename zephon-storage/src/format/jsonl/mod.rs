//! JSONL shards: one JSON object per line, addressed through a line-offset index.

mod index;
mod seed;

pub use index::{EmptyLine, LineIndex};

use bytes::Bytes;
use memchr::memchr_iter;

use zephon_core::record::Schema;
use zephon_core::{Error, Record, Result};

/// Parses one JSONL line into a record; `line` (1-based) and the names are for errors.
pub fn parse_line(bytes: &[u8], dataset: &str, shard: &str, line: u64) -> Result<Record> {
    parse_line_with(bytes, None, dataset, shard, line)
}

/// [`parse_line`], taking the record's field names from `names` (the
/// shard's [`Schema`]) so records of one shard share them.
pub fn parse_line_with(
    bytes: &[u8],
    names: Option<&Schema>,
    dataset: &str,
    shard: &str,
    line: u64,
) -> Result<Record> {
    parse_line_in(bytes, None, names, dataset, shard, line)
}

/// [`parse_line_with`] for the line at `line_range` of `shard_bytes`: its
/// strings without escapes become
/// [`Value::TextView`](zephon_core::Value::TextView)s of those bytes (UTF-8
/// checked once, not copied); strings with escapes are decoded and owned,
/// as everywhere.
///
/// ```
/// use bytes::Bytes;
/// use zephon_core::Value;
/// use zephon_storage::format::jsonl::parse_line_shared;
/// let shard = Bytes::from_static(b"{\"text\":\"in place\",\"esc\":\"a\\nb\"}\n");
/// let r = parse_line_shared(&shard, 0..shard.len(), None, "d", "s", 1).unwrap();
/// assert!(matches!(r.get("text"), Some(Value::TextView(_))));
/// assert_eq!((r.text("text"), r.text("esc")), (Some("in place"), Some("a\nb")));
/// ```
pub fn parse_line_shared(
    shard_bytes: &Bytes,
    line_range: std::ops::Range<usize>,
    names: Option<&Schema>,
    dataset: &str,
    shard: &str,
    line: u64,
) -> Result<Record> {
    let Some(bytes) = shard_bytes.get(line_range.clone()) else {
        return Err(Error::MalformedRecord {
            dataset: dataset.to_owned(),
            shard: shard.to_owned(),
            line,
            message: format!(
                "bytes {}..{} lie outside the shard's {} bytes",
                line_range.start,
                line_range.end,
                shard_bytes.len()
            ),
        });
    };
    parse_line_in(bytes, Some(shard_bytes), names, dataset, shard, line)
}

/// The longest JSON line a record may be, in bytes (64 MiB): a line is
/// parsed whole, and a parsed JSON array takes many times its text's size,
/// so a 400 MB line of numbers asked gigabytes of memory. A longer line is
/// an error naming its shard and line.
pub const MAX_RECORD_BYTES: usize = 64 << 20;

fn parse_line_in(
    bytes: &[u8],
    base: Option<&Bytes>,
    names: Option<&Schema>,
    dataset: &str,
    shard: &str,
    line: u64,
) -> Result<Record> {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    let malformed = |message: String| Error::MalformedRecord {
        dataset: dataset.to_owned(),
        shard: shard.to_owned(),
        line,
        message,
    };
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(malformed(format!(
            "a line of {} bytes, more than the {MAX_RECORD_BYTES} a record may hold",
            bytes.len()
        )));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(malformed("empty line".into()));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let fast = serde::de::DeserializeSeed::deserialize(seed::RecordSeed { names, base }, &mut de)
        .and_then(|fields| de.end().map(|()| fields));
    match fast {
        Ok(fields) => Ok(Record {
            fields,
            ..Record::default()
        }),
        // The direct parse only knows objects; parsing the line again the
        // general way keeps the error text (what was found instead, where
        // the JSON broke) word for word, and costs nothing on good lines.
        Err(_) => Err(malformed(slow_error(bytes))),
    }
}

/// Why `bytes` is not a JSON object, in the words of the general parse.
fn slow_error(bytes: &[u8]) -> String {
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(serde_json::Value::Object(_)) => {
            // Only reachable if the direct parse refuses an object the
            // general one accepts; said plainly rather than hidden.
            "not valid JSON: refused by the record parser".into()
        }
        Ok(other) => format!(
            "expected a JSON object, found {}",
            match other {
                serde_json::Value::Array(_) => "an array",
                serde_json::Value::String(_) => "a string",
                serde_json::Value::Number(_) => "a number",
                serde_json::Value::Bool(_) => "a boolean",
                _ => "null",
            }
        ),
        Err(e) => format!("not valid JSON: {e}"),
    }
}

/// Parses the lines of `data`, which holds samples `first ..` of a shard
/// (so sample `first + i` is line `first + i + 1`).
pub fn parse_run(data: &[u8], first: u64, dataset: &str, shard: &str) -> Result<Vec<Record>> {
    parse_run_with(data, first, None, dataset, shard)
}

/// [`parse_run`] with the shard's field names (see [`parse_line_with`]).
///
/// ```
/// use zephon_core::record::{FieldName, Schema};
/// use zephon_storage::format::jsonl::parse_run_with;
/// let names = Schema::default();
/// let r = parse_run_with(b"{\"a\":1}\n{\"a\":2}\n", 0, Some(&names), "d", "s").unwrap();
/// let key = |i: usize| r[i].fields.keys().next().unwrap().clone();
/// assert!(FieldName::ptr_eq(&key(0), &key(1)));
/// ```
pub fn parse_run_with(
    data: &[u8],
    first: u64,
    names: Option<&Schema>,
    dataset: &str,
    shard: &str,
) -> Result<Vec<Record>> {
    let mut out = Vec::new();
    let mut start = 0;
    let ends = memchr_iter(b'\n', data).chain(std::iter::once(data.len()));
    for (line, nl) in (first + 1..).zip(ends) {
        if nl == data.len() && start == data.len() {
            break;
        }
        out.push(parse_line_with(
            &data[start..nl.min(data.len())],
            names,
            dataset,
            shard,
            line,
        )?);
        start = nl + 1;
    }
    Ok(out)
}

/// Parses the samples `samples` of a whole shard `data` into
/// `out`, cutting the lines where `index` says they are: the newlines were
/// found once when the shard was indexed, so a read need not scan for them.
/// Strings without escapes are views of `data` ([`parse_line_shared`]).
pub fn parse_indexed(
    data: &Bytes,
    index: &LineIndex,
    samples: std::ops::Range<u64>,
    names: &Schema,
    dataset: &str,
    shard: &str,
    out: &mut Vec<Record>,
) -> Result<()> {
    out.reserve((samples.end - samples.start) as usize);
    let mut from = index.start(samples.start) as usize;
    for line in samples.start + 1..=samples.end {
        let to = index.start(line) as usize;
        let bytes = &data[from..to];
        from = to;
        out.push(parse_line_in(
            bytes,
            Some(data),
            Some(names),
            dataset,
            shard,
            line,
        )?);
    }
    Ok(())
}

/// A JSONL shard as a [`ShardIndex`](super::ShardIndex), for code that
/// handles every format alike (`zephon inspect`); the JSONL shard readers use
/// [`LineIndex`] directly to keep their richer errors.
#[derive(Debug)]
pub struct JsonlIndex(pub LineIndex);

impl super::ShardIndex for JsonlIndex {
    fn len(&self) -> u64 {
        self.0.len()
    }

    fn decode(&self, data: &Bytes, indices: &[u64]) -> super::FormatResult<Vec<Record>> {
        indices
            .iter()
            .map(|&i| {
                let (from, to) = self.0.byte_range(i, 1);
                parse_line(&data[from as usize..to as usize], "", "", i + 1).map_err(|e| match e {
                    Error::MalformedRecord { line, message, .. } => {
                        format!("line {line}: {message}")
                    }
                    other => other.to_string(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_run_names_the_line() {
        let recs = parse_run(b"{\"a\":1}\n{\"a\":\"x\"}\n", 0, "d", "s").unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[1].text("a"), Some("x"));
        let err = parse_run(b"{\"a\":1}\nnot json\n", 10, "d", "s.jsonl")
            .unwrap_err()
            .to_string();
        assert!(err.contains("s.jsonl") && err.contains("line 12"), "{err}");
    }

    #[test]
    fn a_line_longer_than_a_record_may_be_is_refused_before_it_is_parsed() {
        let mut line = b"{\"a\": [".to_vec();
        line.extend(b"1,".repeat(MAX_RECORD_BYTES / 2));
        line.extend(b"1]}\n");
        let err = parse_run(&line, 0, "d", "big.jsonl")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("big.jsonl")
                && err.contains("line 1")
                && err.contains("a record may hold"),
            "{err}"
        );
    }
}

#[cfg(test)]
mod same_as_value {
    //! The direct record parse against the general one it replaced:
    //! `serde_json::Value`, then [`Value::from_json`] for each field; and
    //! the same line parsed inside a shard's bytes, its strings as views.
    use super::*;
    use proptest::prelude::*;
    use zephon_core::Value;

    fn through_value(bytes: &[u8]) -> std::result::Result<Record, String> {
        match serde_json::from_slice::<serde_json::Value>(bytes) {
            Ok(serde_json::Value::Object(map)) => Ok(Record {
                fields: map
                    .into_iter()
                    .map(|(k, v)| (k.into(), Value::from_json(v)))
                    .collect(),
                ..Record::default()
            }),
            _ => Err(slow_error(bytes)),
        }
    }

    /// JSON text for a string, each character written raw, as a short
    /// escape or as `\u` escapes (surrogate pairs beyond the BMP).
    fn string_text() -> impl Strategy<Value = String> {
        let ch = prop_oneof![
            proptest::char::range(' ', '~'),
            proptest::char::any(),
            prop::sample::select(vec![
                '"', '\\', '/', '\n', '\t', '\u{8}', '\u{c}', '\r', '\0'
            ]),
            prop::sample::select(vec!['é', 'ß', '中', '😀', '\u{fffd}', '\u{10ffff}']),
        ];
        prop::collection::vec((ch, 0u8..3), 0..12).prop_map(|cs| {
            let mut out = String::from("\"");
            for (c, how) in cs {
                match (c, how) {
                    ('"', _) => out.push_str("\\\""),
                    ('\\', _) => out.push_str("\\\\"),
                    ('\n', 0) => out.push_str("\\n"),
                    ('\t', 0) => out.push_str("\\t"),
                    ('/', 0) => out.push_str("\\/"),
                    (c, _) if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                    (c, 1) => {
                        let mut units = [0u16; 2];
                        for u in c.encode_utf16(&mut units) {
                            out.push_str(&format!("\\u{u:04X}"));
                        }
                    }
                    (c, _) => out.push(c),
                }
            }
            out.push('"');
            out
        })
    }

    fn number_text() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "0",
                "-0",
                "0.0",
                "-0.0",
                "1e0",
                "1E+2",
                "-1e-2",
                "9223372036854775807",
                "9223372036854775808",
                "-9223372036854775808",
                "-9223372036854775809",
                "18446744073709551615",
                "18446744073709551616",
                "1.7976931348623157e308",
                "-1.7976931348623157e308",
                "5e-324",
                "2.2250738585072014e-308",
                "1e400",
                "123456789012345678901234567890",
                "0.1",
                "1.0000000000000002",
            ])
            .prop_map(str::to_owned),
            any::<i64>().prop_map(|i| i.to_string()),
            any::<u64>().prop_map(|u| u.to_string()),
            any::<f64>()
                .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
                .prop_map(|f| format!("{f:e}")),
            any::<f64>()
                .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
                .prop_map(|f| format!("{f:?}")),
        ]
    }

    fn value_text() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            prop::sample::select(vec!["null", "true", "false"]).prop_map(str::to_owned),
            number_text(),
            string_text(),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec((string_text(), inner), 0..4).prop_map(|kv| {
                    let kv: Vec<String> = kv.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
                    format!("{{{}}}", kv.join(","))
                }),
            ]
        })
    }

    /// A line: mostly objects whose keys repeat often (duplicates), with
    /// spaces around the tokens; sometimes another JSON value or a broken one.
    fn object_text() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            prop::sample::select(vec!["\"a\"", "\"text\"", "\"\\u0061\"", "\"id\""])
                .prop_map(str::to_owned),
            string_text(),
        ];
        let ws = prop::sample::select(vec!["", " ", "\t", "  \r "]);
        prop::collection::vec((key, value_text(), ws), 0..6).prop_map(|kv| {
            let kv: Vec<String> = kv
                .into_iter()
                .map(|(k, v, w)| format!("{w}{k}{w}:{w}{v}{w}"))
                .collect();
            format!("{{{}}}", kv.join(","))
        })
    }

    /// A line: mostly objects whose keys repeat often (duplicates), with
    /// spaces around the tokens; sometimes another JSON value or a broken one.
    fn line_text() -> impl Strategy<Value = String> {
        prop_oneof![
            6 => object_text(),
            1 => value_text(),
            1 => (object_text(), 0usize..64, "[\\]\\[{}:,\"x ]{0,2}").prop_map(|(o, at, junk)| {
                let mut at = at.min(o.len());
                while !o.is_char_boundary(at) {
                    at -= 1;
                }
                format!("{}{junk}{}", &o[..at], &o[at..])
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn direct_parse_gives_the_records_and_errors_of_the_general_one(line in line_text()) {
            let names = Schema::default();
            for names in [None, Some(&names)] {
                // The line inside a shard, between two others.
                let shard = Bytes::from(format!("{{\"x\":1}}\n{line}\n{{}}\n"));
                let at = 8..8 + line.len();
                let shared = parse_line_shared(&shard, at, names, "d", "s", 7);
                let got = parse_line_with(line.as_bytes(), names, "d", "s", 7);
                match (&shared, &got) {
                    (Ok(a), Ok(b)) => {
                        prop_assert_eq!(format!("{a:?}"), format!("{b:?}"));
                        prop_assert_eq!(a, b);
                        for (_, v) in a.fields.iter() {
                            if let Value::TextView(t) = v {
                                prop_assert!(shard.as_ptr_range().contains(&t.as_ptr()) || t.is_empty());
                            }
                        }
                    }
                    (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
                    (a, b) => prop_assert!(false, "{line}: {a:?} against {b:?}"),
                }
                match (got, through_value(line.as_bytes())) {
                    (Ok(got), Ok(want)) => {
                        // Debug tells -0.0 from 0.0, which `==` on floats does not.
                        prop_assert_eq!(format!("{got:?}"), format!("{want:?}"));
                        prop_assert_eq!(got, want);
                    }
                    (Err(Error::MalformedRecord { message, line: 7, .. }), Err(want)) => {
                        prop_assert_eq!(message, want);
                    }
                    (got, want) => prop_assert!(false, "{line}: {got:?} against {want:?}"),
                }
            }
        }
    }

    /// A value nested past serde_json's depth limit is an error naming the
    /// line on both paths, never a stack overflow.
    #[test]
    fn a_value_nested_too_deep_is_an_error() {
        let line = format!("{{\"a\":{}{}}}", "[".repeat(100_000), "]".repeat(100_000));
        let shard = Bytes::from(line);
        for parsed in [
            parse_line(&shard, "d", "s", 4),
            parse_line_shared(&shard, 0..shard.len(), None, "d", "s", 4),
        ] {
            let err = parsed.unwrap_err().to_string();
            assert!(
                err.contains("line 4") && err.contains("recursion limit"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_repeated_key_keeps_its_last_value_and_errors_keep_their_words() {
        let r = parse_line(br#"{"a":1,"b":2,"a":"x"}"#, "d", "s", 1).unwrap();
        assert_eq!(r.text("a"), Some("x"));
        assert_eq!(r.fields.len(), 2);
        for (line, says) in [
            (&b"[1]"[..], "expected a JSON object, found an array"),
            (b"\"a\"", "expected a JSON object, found a string"),
            (b"3", "expected a JSON object, found a number"),
            (b"true", "expected a JSON object, found a boolean"),
            (b"null", "expected a JSON object, found null"),
            (
                b"{\"a\":1} x",
                "not valid JSON: trailing characters at line 1 column 9",
            ),
            (
                b"{\"a\":}",
                "not valid JSON: expected value at line 1 column 6",
            ),
        ] {
            let err = parse_line(line, "d", "s", 3).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        }
    }
}
