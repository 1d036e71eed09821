//! [`LineIndex`]: where each line of a JSONL shard starts.

use memchr::memchr_iter;

/// Bytes read at a time when a shard is indexed from a stream.
const READ_BUFFER: usize = 1 << 20;

/// Lines whose starts share one whole (`u64`) offset in a [`LineIndex`].
const INDEX_BLOCK: usize = 1024;

/// An empty line met while a JSONL shard was indexed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmptyLine {
    /// Its number, counted from 1.
    pub line: u64,
}

impl std::fmt::Display for EmptyLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {} is empty (a JSONL line holds one JSON object)",
            self.line
        )
    }
}

impl std::error::Error for EmptyLine {}

impl EmptyLine {
    /// The error of a read of shard `shard` of `dataset`, naming the line.
    pub fn in_shard(self, dataset: &str, shard: &str) -> zephon_core::Error {
        zephon_core::Error::MalformedRecord {
            dataset: dataset.to_owned(),
            shard: shard.to_owned(),
            line: self.line,
            message: "empty line (a JSONL line holds one JSON object)".into(),
        }
    }
}

/// Byte offsets of the lines of a JSONL shard: [`start`](LineIndex::start)`(i)`
/// is where sample `i` begins, `start(len)` the end of the last line (past
/// its newline).
///
/// A local dataset keeps the index of every shard for its lifetime, so its
/// size is memory that grows with the data: offsets are kept in blocks of
/// 1,024 lines, each block one whole offset and every line its distance
/// from it in 32 bits, about 4 bytes a line instead of 8, allocated a block
/// at a time. A block spanning
/// 4 GiB or more (lines of 4 MiB on average) keeps the whole index at 8
/// bytes a line.
///
/// ```
/// use zephon_storage::format::jsonl::LineIndex;
/// let index = LineIndex::build(b"{\"a\":1}\n{\"a\":22}\n").unwrap();
/// assert_eq!((index.len(), index.start(1), index.start(2)), (2, 8, 17));
/// assert_eq!(index.starts().collect::<Vec<_>>(), [0, 8, 17]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineIndex {
    starts: Starts,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Starts {
    /// The first start of each block of [`INDEX_BLOCK`] lines, and the
    /// distance of each of its starts from it. Blocks are allocated whole,
    /// one at a time: one growing vector would copy itself as it doubles,
    /// holding up to three times the index for a moment, and keep up to
    /// twice it.
    Compact {
        bases: Vec<u64>,
        blocks: Vec<Vec<u32>>,
    },
    /// Every start whole.
    Wide(Vec<u64>),
}

impl LineIndex {
    /// An index holding the start of the first line (offset 0), to build
    /// by reading a shard in order: the newlines of each piece to
    /// [`add_newlines`](Self::add_newlines), then [`closed`](Self::closed).
    pub(crate) fn open() -> Self {
        let mut first = Vec::with_capacity(INDEX_BLOCK);
        first.push(0);
        LineIndex {
            starts: Starts::Compact {
                bases: vec![0],
                blocks: vec![first],
            },
        }
    }

    /// Adds the start of the next line (or the end of the last), at or
    /// past the previous one.
    #[inline]
    fn push(&mut self, start: u64) {
        match &mut self.starts {
            Starts::Compact { bases, blocks } => {
                let block = blocks.last_mut().expect("one block at least");
                if block.len() == INDEX_BLOCK {
                    let mut next = Vec::with_capacity(INDEX_BLOCK);
                    next.push(0);
                    blocks.push(next);
                    bases.push(start);
                    return;
                }
                let base = *bases.last().expect("a base per block");
                match u32::try_from(start - base) {
                    Ok(d) => block.push(d),
                    Err(_) => {
                        let mut all: Vec<u64> = self.starts().collect();
                        all.push(start);
                        self.starts = Starts::Wide(all);
                    }
                }
            }
            Starts::Wide(all) => all.push(start),
        }
    }

    /// The index of the given offsets: the start of every line, then the
    /// end of the last. `None` unless the first is 0 and each is past the
    /// one before (a line holds its newline at least).
    ///
    /// ```
    /// use zephon_storage::format::jsonl::LineIndex;
    /// assert_eq!(LineIndex::from_starts([0, 8, 17]), LineIndex::build(b"{\"a\":1}\n{\"a\":22}\n").ok());
    /// assert_eq!(LineIndex::from_starts([0, 8, 8]), None);
    /// assert_eq!(LineIndex::from_starts([3, 8]), None);
    /// ```
    pub fn from_starts(starts: impl IntoIterator<Item = u64>) -> Option<Self> {
        let mut starts = starts.into_iter();
        if starts.next() != Some(0) {
            return None;
        }
        let mut index = Self::open();
        let mut last = 0;
        for s in starts {
            if s <= last {
                return None;
            }
            index.push(s);
            last = s;
        }
        index.shrink();
        Some(index)
    }

    /// Indexes a whole shard. A final line without a trailing newline counts;
    /// an empty file has no samples. An empty line (a newline at the start
    /// of a line) stops the indexing with its number: it is no record and
    /// would fail when read, and a file of newlines would take 4 bytes of
    /// index for each before its first read failed.
    ///
    /// ```
    /// use zephon_storage::format::jsonl::LineIndex;
    /// assert_eq!(LineIndex::build(b"{}\n{}").map(|i| i.len()), Ok(2));
    /// let err = LineIndex::build(b"{}\n\n{}\n").unwrap_err();
    /// assert_eq!(err.line, 2);
    /// assert_eq!(err.to_string(), "line 2 is empty (a JSONL line holds one JSON object)");
    /// assert_eq!(LineIndex::build(b"\n").unwrap_err().line, 1);
    /// ```
    pub fn build(data: &[u8]) -> Result<Self, EmptyLine> {
        let mut index = Self::open();
        index.add_newlines(0, data)?;
        Ok(index.closed(data.len() as u64, data.last().copied()))
    }

    /// Adds the newlines of `bytes`, which lie at offset `at` of the shard
    /// (just past what was added before), or stops at an empty line.
    pub(crate) fn add_newlines(&mut self, at: u64, bytes: &[u8]) -> Result<(), EmptyLine> {
        let mut start = self.start(self.len());
        for nl in memchr_iter(b'\n', bytes) {
            let nl = at + nl as u64;
            if nl == start {
                return Err(EmptyLine {
                    line: self.len() + 1,
                });
            }
            start = nl + 1;
            self.push(start);
        }
        Ok(())
    }

    /// The finished index of a shard of `len` bytes whose last byte is
    /// `last`: a final line without a newline counts. The index is kept as
    /// long as its dataset, so it gives back what growing it left spare.
    pub(crate) fn closed(mut self, len: u64, last: Option<u8>) -> Self {
        if last.is_some_and(|b| b != b'\n') {
            self.push(len);
        }
        self.shrink();
        self
    }

    fn shrink(&mut self) {
        match &mut self.starts {
            Starts::Compact { bases, blocks } => {
                bases.shrink_to_fit();
                blocks.shrink_to_fit();
                blocks
                    .last_mut()
                    .expect("one block at least")
                    .shrink_to_fit();
            }
            Starts::Wide(all) => all.shrink_to_fit(),
        }
    }

    /// Indexes a shard read from `reader` through a bounded buffer, for
    /// files too large to hold in memory; the same index as
    /// [`build`](LineIndex::build), and an empty line an error of kind
    /// `InvalidData` naming it.
    ///
    /// ```
    /// use zephon_storage::format::jsonl::LineIndex;
    /// let data = b"{\"a\":1}\n{\"a\":2}\n{\"a\":3}";
    /// let streamed = LineIndex::from_reader(&data[..]).unwrap();
    /// assert_eq!(Ok(streamed.clone()), LineIndex::build(data));
    /// assert_eq!(streamed.len(), 3);
    /// ```
    pub fn from_reader(mut reader: impl std::io::Read) -> std::io::Result<Self> {
        let mut buf = vec![0u8; READ_BUFFER];
        let mut index = Self::open();
        let (mut at, mut last) = (0u64, None);
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            index
                .add_newlines(at, &buf[..n])
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            at += n as u64;
            last = Some(buf[n - 1]);
        }
        Ok(index.closed(at, last))
    }

    /// Number of samples (lines).
    pub fn len(&self) -> u64 {
        let starts = match &self.starts {
            Starts::Compact { blocks, .. } => {
                (blocks.len() - 1) * INDEX_BLOCK + blocks.last().expect("one block").len()
            }
            Starts::Wide(all) => all.len(),
        };
        starts as u64 - 1
    }

    /// Whether the shard has no lines.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where line `i` starts (`i <= len`; `start(len)` is the end of the
    /// last line).
    #[inline]
    pub fn start(&self, i: u64) -> u64 {
        let i = i as usize;
        match &self.starts {
            Starts::Compact { bases, blocks } => {
                bases[i / INDEX_BLOCK] + blocks[i / INDEX_BLOCK][i % INDEX_BLOCK] as u64
            }
            Starts::Wide(all) => all[i],
        }
    }

    /// Every start, then the end of the last line.
    pub fn starts(&self) -> impl Iterator<Item = u64> + '_ {
        (0..=self.len()).map(|i| self.start(i))
    }

    /// Bytes the index holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        match &self.starts {
            Starts::Compact { bases, blocks } => {
                bases.capacity() * 8
                    + blocks.capacity() * std::mem::size_of::<Vec<u32>>()
                    + blocks.iter().map(|b| b.capacity() * 4).sum::<usize>()
            }
            Starts::Wide(all) => all.capacity() * 8,
        }
    }

    /// Byte range `[start, end)` covering samples `first .. first + count`.
    pub fn byte_range(&self, first: u64, count: u64) -> (u64, u64) {
        (self.start(first), self.start(first + count))
    }

    /// The byte span of each run `(first, count)` of lines, as offsets
    /// into the shard's bytes (for [`each_prefetched`](crate::format::lines::each_prefetched)).
    pub(crate) fn run_spans(&self, runs: &[(u64, u64)]) -> Vec<(usize, usize)> {
        runs.iter()
            .map(|&(first, n)| {
                let (from, to) = self.byte_range(first, n);
                (from as usize, to as usize)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_counts_lines_with_and_without_trailing_newline() {
        assert_eq!(LineIndex::build(b"").unwrap().len(), 0);
        assert_eq!(LineIndex::build(b"{}\n{}\n").unwrap().len(), 2);
        assert_eq!(LineIndex::build(b"{}\n{}").unwrap().len(), 2);
        let idx = LineIndex::build(b"{\"a\":1}\n{\"a\":2}\n").unwrap();
        assert_eq!(idx.byte_range(1, 1), (8, 16));
    }

    /// Lines across several index blocks: every start where a plain scan
    /// puts it, about 4 bytes a line, whichever way the index is built.
    #[test]
    fn the_compact_index_gives_every_start() {
        let data: Vec<u8> = (0..3000)
            .flat_map(|i| {
                let mut line =
                    format!("{{\"i\":{i},\"t\":\"{}\"}}", "x".repeat(i % 37)).into_bytes();
                line.push(b'\n');
                line
            })
            .chain(*b"{\"last\":1}")
            .collect();
        let mut want = vec![0u64];
        want.extend(memchr_iter(b'\n', &data).map(|nl| nl as u64 + 1));
        want.push(data.len() as u64);
        let index = LineIndex::build(&data).unwrap();
        assert_eq!(index.len(), 3001);
        assert_eq!(index.starts().collect::<Vec<_>>(), want);
        assert!((0..=3001).all(|i| index.start(i) == want[i as usize]));
        assert_eq!(index.byte_range(1023, 2), (want[1023], want[1025]));
        assert_eq!(
            LineIndex::from_starts(want.iter().copied()),
            Some(index.clone())
        );
        assert_eq!(LineIndex::from_reader(&data[..]).unwrap(), index);
        assert!(
            index.heap_bytes() <= 4 * 3002 + 32 * 3,
            "{}",
            index.heap_bytes()
        );
    }

    /// A block spanning 4 GiB keeps whole offsets; a jump of that size
    /// where a block starts does not need to.
    #[test]
    fn offsets_past_32_bits_are_kept_whole() {
        let far = 5u64 << 30;
        let wide = LineIndex::from_starts([0, 10, far, far + 10]).unwrap();
        assert_eq!(wide.starts().collect::<Vec<_>>(), [0, 10, far, far + 10]);
        assert_eq!((wide.len(), wide.byte_range(1, 2)), (3, (10, far + 10)));
        assert!(matches!(wide.starts, Starts::Wide(_)));
        let starts: Vec<u64> = (0..1024).chain([far, far + 1, far + 2]).collect();
        let jump = LineIndex::from_starts(starts.iter().copied()).unwrap();
        assert_eq!(jump.starts().collect::<Vec<_>>(), starts);
        assert!(matches!(jump.starts, Starts::Compact { .. }));
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

    /// The same index, or the same empty line, however the reads cut the
    /// lines and their newlines.
    #[test]
    fn streamed_index_equals_the_whole_file_index_whatever_the_reads() {
        let cases: [(&[u8], Option<u64>); 8] = [
            (b"", None),
            (b"\n", Some(1)),
            (b"{}\n{}\n", None),
            (b"{}\n{}", None),
            (b"{}\n{}\n\n", Some(3)),
            (b"{\"a\":1}\n\n{\"b\":22}\nxx", Some(2)),
            (b"{\"a\":1}\n{\"b\":22}\nxx", None),
            (b"x\ny\nz\n\n\n", Some(4)),
        ];
        for (data, empty) in cases {
            let whole = LineIndex::build(data);
            assert_eq!(whole.as_ref().err().map(|e| e.line), empty, "{data:?}");
            for step in [1, 2, 3, 7, 1 << 20] {
                let got = LineIndex::from_reader(Trickle { data, step });
                match (&got, &whole) {
                    (Ok(got), Ok(whole)) => assert_eq!(got, whole, "{data:?} in reads of {step}"),
                    (Err(got), Err(whole)) => {
                        assert_eq!(got.kind(), std::io::ErrorKind::InvalidData);
                        assert_eq!(
                            got.to_string(),
                            whole.to_string(),
                            "{data:?} in reads of {step}"
                        );
                    }
                    _ => panic!("{data:?} in reads of {step}: {got:?} against {whole:?}"),
                }
            }
        }
    }
}
