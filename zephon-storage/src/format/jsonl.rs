//! JSONL shards: one JSON object per line, addressed through a line-offset index.

use memchr::memchr_iter;

/// Bytes read at a time when a shard is indexed from a stream.
const READ_BUFFER: usize = 1 << 20;
use zephon_core::record::Schema;
use zephon_core::{Error, Record, Result, Value};

/// Byte offsets of the lines of a JSONL shard: `starts[i]` is where sample `i`
/// begins, `starts[len]` is the end of the last line (past its newline).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LineIndex {
    /// Start offset of every line, plus the end offset.
    pub starts: Vec<u64>,
}

impl LineIndex {
    /// Indexes a whole shard. A final line without a trailing newline counts;
    /// an empty file has no samples.
    pub fn build(data: &[u8]) -> Self {
        let mut starts = Vec::with_capacity(data.len() / 256 + 2);
        starts.push(0);
        for nl in memchr_iter(b'\n', data) {
            starts.push(nl as u64 + 1);
        }
        if data.last().is_some_and(|&b| b != b'\n') {
            starts.push(data.len() as u64);
        }
        LineIndex { starts }
    }

    /// Indexes a shard read from `reader` through a bounded buffer, for
    /// files too large to hold in memory; the same index as [`build`](LineIndex::build).
    ///
    /// ```
    /// use zephon_storage::format::jsonl::LineIndex;
    /// let data = b"{\"a\":1}\n{\"a\":2}\n{\"a\":3}";
    /// let streamed = LineIndex::from_reader(&data[..]).unwrap();
    /// assert_eq!(streamed, LineIndex::build(data));
    /// assert_eq!(streamed.len(), 3);
    /// ```
    pub fn from_reader(mut reader: impl std::io::Read) -> std::io::Result<Self> {
        let mut buf = vec![0u8; READ_BUFFER];
        let mut starts = vec![0];
        let (mut at, mut last) = (0u64, b'\n');
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            starts.extend(memchr_iter(b'\n', &buf[..n]).map(|nl| at + nl as u64 + 1));
            at += n as u64;
            last = buf[n - 1];
        }
        if last != b'\n' {
            starts.push(at);
        }
        Ok(LineIndex { starts })
    }

    /// Number of samples (lines).
    pub fn len(&self) -> u64 {
        self.starts.len() as u64 - 1
    }

    /// Whether the shard has no lines.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Byte range `[start, end)` covering samples `first .. first + count`.
    pub fn byte_range(&self, first: u64, count: u64) -> (u64, u64) {
        (
            self.starts[first as usize],
            self.starts[(first + count) as usize],
        )
    }
}

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
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    let malformed = |message: String| Error::MalformedRecord {
        dataset: dataset.to_owned(),
        shard: shard.to_owned(),
        line,
        message,
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(malformed("empty line".into()));
    }
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(serde_json::Value::Object(map)) => Ok(Record {
            fields: map
                .into_iter()
                .map(|(k, v)| {
                    let k = match names {
                        Some(names) => names.name(&k),
                        None => k.into(),
                    };
                    (k, Value::from_json(v))
                })
                .collect(),
            ..Record::default()
        }),
        Ok(other) => Err(malformed(format!(
            "expected a JSON object, found {}",
            match other {
                serde_json::Value::Array(_) => "an array",
                serde_json::Value::String(_) => "a string",
                serde_json::Value::Number(_) => "a number",
                serde_json::Value::Bool(_) => "a boolean",
                _ => "null",
            }
        ))),
        Err(e) => Err(malformed(format!("not valid JSON: {e}"))),
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

/// A JSONL shard as a [`ShardIndex`](super::ShardIndex), for code that
/// handles every format alike (`zephon inspect`); the JSONL shard readers use
/// [`LineIndex`] directly to keep their richer errors.
#[derive(Debug)]
pub struct JsonlIndex(pub LineIndex);

impl super::ShardIndex for JsonlIndex {
    fn len(&self) -> u64 {
        self.0.len()
    }

    fn decode(&self, data: &bytes::Bytes, indices: &[u64]) -> super::FormatResult<Vec<Record>> {
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
    fn index_counts_lines_with_and_without_trailing_newline() {
        assert_eq!(LineIndex::build(b"").len(), 0);
        assert_eq!(LineIndex::build(b"{}\n{}\n").len(), 2);
        assert_eq!(LineIndex::build(b"{}\n{}").len(), 2);
        let idx = LineIndex::build(b"{\"a\":1}\n{\"a\":2}\n");
        assert_eq!(idx.byte_range(1, 1), (8, 16));
    }

    /// A reader that hands out at most `step` bytes a call, so lines and
    /// their newlines straddle the reads.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn streamed_index_equals_the_whole_file_index_whatever_the_reads() {
        let cases: [&[u8]; 5] = [
            b"",
            b"\n",
            b"{}\n{}\n",
            b"{}\n{}",
            b"{\"a\":1}\n\n{\"b\":22}\nxx",
        ];
        for data in cases {
            for step in [1, 2, 3, 7, 1 << 20] {
                let got = LineIndex::from_reader(Trickle { data, step }).unwrap();
                assert_eq!(got, LineIndex::build(data), "{data:?} in reads of {step}");
            }
        }
    }

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
}
