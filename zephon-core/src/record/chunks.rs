//! [`PointerChunks`]: the records a shard reads for `fetch`, made in their
//! places in the chunks `fetch` asked for.

use super::{Lineage, Record};
use crate::pointer::SamplePtr;

/// The records of a [`Shard::read_pointer_chunks`](crate::Shard::read_pointer_chunks)
/// call as a shard reader makes them: one per pointer, in pointer order,
/// each with its lane and lineage set from its pointer, placed in chunks cut
/// as asked (the first `first` long, each later one `len` long). A reader
/// that fills each record where it stays saves the move of every record
/// into a batch afterwards: `batch` takes a full chunk of one lane as it is.
///
/// ```
/// use zephon_core::record::PointerChunks;
/// use zephon_core::{Record, SamplePtr, Value};
/// let ptrs: Vec<SamplePtr> = (0..5)
///     .map(|sample| SamplePtr { dataset: 0, shard: 0, sample, lane: 1 })
///     .collect();
/// let mut out = PointerChunks::new(&ptrs, 2, 2);
/// while let Some((ptr, r)) = out.next_record() {
///     r.fields.insert("i".into(), Value::Int(ptr.sample as i64 * 10));
/// }
/// let chunks = out.finish().unwrap();
/// assert_eq!(chunks.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 1]);
/// assert_eq!(chunks[1][1].get("i"), Some(&Value::Int(30)));
/// assert_eq!((chunks[2][0].lane, chunks[2][0].lineage.as_slice()), (1, &ptrs[4..5]));
/// ```
#[derive(Debug)]
pub struct PointerChunks<'a> {
    ptrs: &'a [SamplePtr],
    /// Records made so far.
    made: usize,
    len: usize,
    /// Records the last chunk still takes.
    room: usize,
    chunks: Vec<Vec<Record>>,
}

impl<'a> PointerChunks<'a> {
    /// Room for the records of `ptrs`, cut after the first `first` and then
    /// every `len` (each at least 1).
    pub fn new(ptrs: &'a [SamplePtr], first: usize, len: usize) -> Self {
        let len = len.max(1);
        let first = first.max(1).min(ptrs.len());
        let mut chunks = Vec::with_capacity(1 + (ptrs.len() - first).div_ceil(len));
        chunks.push(Vec::with_capacity(first));
        PointerChunks {
            ptrs,
            made: 0,
            len,
            room: first,
            chunks,
        }
    }

    /// Every pointer, in order.
    pub fn pointers(&self) -> &'a [SamplePtr] {
        self.ptrs
    }

    /// The next pointer and its record, empty but for its lane and lineage,
    /// in its place; `None` once every pointer has its record.
    #[inline]
    pub fn next_record(&mut self) -> Option<(&'a SamplePtr, &mut Record)> {
        let p = self.next_pointer()?;
        let r = self.place(Record {
            lane: p.lane,
            lineage: Lineage::from_buf([*p]),
            ..Record::default()
        });
        Some((p, r))
    }

    /// Places an empty record (its lane and lineage set) for every pointer
    /// still without one, and hands back every record, in pointer order, to
    /// fill in any order: a reader whose samples come out in another order
    /// than the pointers' (grouped by the part of the shard they lie in)
    /// fills each in its place instead of moving it there afterwards.
    ///
    /// ```
    /// use zephon_core::record::PointerChunks;
    /// use zephon_core::{SamplePtr, Value};
    /// let ptrs: Vec<SamplePtr> = [5, 1, 4]
    ///     .map(|sample| SamplePtr { dataset: 0, shard: 0, sample, lane: 0 })
    ///     .to_vec();
    /// let mut out = PointerChunks::new(&ptrs, 2, 2);
    /// let mut records = out.place_all();
    /// for k in [1, 2, 0] {
    ///     let sample = records[k].lineage.as_slice()[0].sample;
    ///     records[k].fields.insert("i".into(), Value::Int(sample as i64));
    /// }
    /// let chunks = out.finish().unwrap();
    /// assert_eq!(chunks[0][0].get("i"), Some(&Value::Int(5)));
    /// assert_eq!(chunks[1][0].get("i"), Some(&Value::Int(4)));
    /// ```
    pub fn place_all(&mut self) -> Vec<&mut Record> {
        while let Some(p) = self.next_pointer() {
            self.place(Record {
                lane: p.lane,
                lineage: Lineage::from_buf([*p]),
                ..Record::default()
            });
        }
        self.chunks.iter_mut().flatten().collect()
    }

    /// Places `r` as the record of the next pointer, its lane and lineage
    /// replaced by that pointer's (what a shard stored there is not the
    /// read's); `false`, placing nothing, once every pointer has its record.
    pub fn push(&mut self, mut r: Record) -> bool {
        let Some(p) = self.next_pointer() else {
            return false;
        };
        r.lane = p.lane;
        r.lineage = Lineage::from_buf([*p]);
        self.place(r);
        true
    }

    /// The pointer whose record comes next, counted as made.
    #[inline]
    fn next_pointer(&mut self) -> Option<&'a SamplePtr> {
        let p = self.ptrs.get(self.made)?;
        self.made += 1;
        Some(p)
    }

    /// `r` at the end of the open chunk.
    #[inline]
    fn place(&mut self, r: Record) -> &mut Record {
        let chunk = self.open_chunk();
        chunk.push(r);
        chunk.last_mut().expect("just pushed")
    }

    /// The chunk the next record goes in: the last one, or a new one when
    /// that is full.
    #[inline]
    fn open_chunk(&mut self) -> &mut Vec<Record> {
        if self.room == 0 {
            let rest = self.ptrs.len() - (self.made - 1);
            self.room = self.len.min(rest);
            self.chunks.push(Vec::with_capacity(self.room));
        }
        self.room -= 1;
        self.chunks.last_mut().expect("one chunk from the start")
    }

    /// The chunks, once every pointer has its record; otherwise how many
    /// records were made, as an error message.
    pub fn finish(self) -> Result<Vec<Vec<Record>>, String> {
        if self.made != self.ptrs.len() {
            return Err(format!(
                "{} records made for {} pointers",
                self.made,
                self.ptrs.len()
            ));
        }
        let mut chunks = self.chunks;
        chunks.retain(|c| !c.is_empty());
        Ok(chunks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Value;

    fn ptrs(n: u64) -> Vec<SamplePtr> {
        (0..n)
            .map(|sample| SamplePtr {
                dataset: 2,
                shard: 3,
                sample,
                lane: (sample % 3) as u32,
            })
            .collect()
    }

    #[test]
    fn chunks_are_cut_as_asked_whatever_the_sizes() {
        for n in 0..12u64 {
            for first in 0..6 {
                for len in 0..6 {
                    let ptrs = ptrs(n);
                    let mut out = PointerChunks::new(&ptrs, first, len);
                    let mut k = 0;
                    while let Some((p, r)) = out.next_record() {
                        assert_eq!(p.sample, k);
                        r.fields.insert("k".into(), Value::Int(k as i64));
                        k += 1;
                        // Half the records placed whole instead.
                        if k < n && k % 2 == 1 {
                            assert!(out.push(Record::new().with("k", k as i64)));
                            k += 1;
                        }
                    }
                    assert!(!out.push(Record::new()));
                    let chunks = out.finish().unwrap();
                    let sizes: Vec<usize> = chunks.iter().map(Vec::len).collect();
                    let mut want = Vec::new();
                    let mut left = n as usize;
                    let mut next = first.max(1);
                    while left > 0 {
                        want.push(next.min(left));
                        left -= next.min(left);
                        next = len.max(1);
                    }
                    assert_eq!(sizes, want, "n {n} first {first} len {len}");
                    let flat: Vec<Record> = chunks.into_iter().flatten().collect();
                    for (r, p) in flat.iter().zip(&ptrs) {
                        assert_eq!(r.get("k"), Some(&Value::Int(p.sample as i64)));
                        assert_eq!((r.lane, r.lineage.as_slice()), (p.lane, &[*p][..]));
                    }
                }
            }
        }
    }

    #[test]
    fn too_few_records_is_an_error() {
        let ptrs = ptrs(3);
        let mut out = PointerChunks::new(&ptrs, 2, 2);
        out.next_record();
        assert_eq!(out.finish().unwrap_err(), "1 records made for 3 pointers");
    }
}
