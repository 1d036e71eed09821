//! What a loader serves: host batches whose items it can count and cut.

use std::ops::Range;
use zephon_core::Batch;
use zephon_ops::TrainingBatch;

/// A host-side batch whose items can be counted and cut, so a loader can
/// report exact progress and serve a slice of its items.
pub trait HostBatch: Sized {
    /// Items (samples, rows) in the batch.
    fn num_items(&self) -> usize;
    /// Keeps the items in `range` (relative to this batch).
    fn keep(self, range: Range<usize>) -> Self;
}

impl<T> HostBatch for Batch<T> {
    fn num_items(&self) -> usize {
        self.items.len()
    }
    fn keep(mut self, range: Range<usize>) -> Self {
        self.items.truncate(range.end);
        self.items.drain(..range.start);
        self
    }
}

impl HostBatch for TrainingBatch {
    fn num_items(&self) -> usize {
        self.batch_size
    }
    fn keep(self, range: Range<usize>) -> Self {
        if range == (0..self.batch_size) {
            return self;
        }
        let l = self.seq_len;
        let ids: Vec<i64> = (range.start * l..range.end * l)
            .map(|i| self.input_ids.get(i).unwrap_or(0))
            .collect();
        let (lo, hi) = ((range.start * l) as i32, (range.end * l) as i32);
        // Segment boundaries inside the kept rows, shifted to start at 0; rows
        // always start a segment, so both ends are boundaries.
        let mut cu: Vec<i32> = self
            .cu_seqlens
            .iter()
            .filter(|&&b| b >= lo && b <= hi)
            .map(|b| b - lo)
            .collect();
        if cu.first() != Some(&0) {
            cu.insert(0, 0);
        }
        if cu.last() != Some(&(hi - lo)) {
            cu.push(hi - lo);
        }
        let max_seqlen = cu
            .windows(2)
            .map(|w| (w[1] - w[0]) as usize)
            .max()
            .unwrap_or(0);
        let cut = |from: usize, to: usize| from * l..to * l;
        let r = cut(range.start, range.end);
        TrainingBatch {
            // A slice of a lane-batch is not a lane boundary.
            cut: None,
            lane: self.lane,
            index: self.index,
            batch_size: range.len(),
            seq_len: l,
            input_ids: match self.input_ids {
                zephon_ops::TokenIds::U32(_) => {
                    zephon_ops::TokenIds::U32(ids.iter().map(|&x| x as u32).collect())
                }
                zephon_ops::TokenIds::I64(_) => zephon_ops::TokenIds::I64(ids),
            },
            labels: self.labels[r.clone()].to_vec(),
            loss_mask: self.loss_mask[r.clone()].to_vec(),
            position_ids: self.position_ids[r.clone()].to_vec(),
            segment_ids: self.segment_ids[r.clone()].to_vec(),
            attention_mask: self.attention_mask[r].to_vec(),
            cu_seqlens: cu,
            max_seqlen,
        }
    }
}

/// The items of an image batch are its images; a cut keeps their pixels,
/// labels and records.
#[cfg(feature = "media")]
impl HostBatch for zephon_media::ImageBatch {
    fn num_items(&self) -> usize {
        self.batch_size
    }
    fn keep(mut self, range: Range<usize>) -> Self {
        if range == (0..self.batch_size) {
            return self;
        }
        // Both layouts keep each image's values together (N first).
        let per = self.height as usize * self.width as usize * self.channels as usize;
        let values = range.start * per..range.end * per;
        self.pixels = match self.pixels {
            zephon_media::Pixels::U8(mut v) => {
                v.truncate(values.end);
                v.drain(..values.start);
                zephon_media::Pixels::U8(v)
            }
            zephon_media::Pixels::F32(mut v) => {
                v.truncate(values.end);
                v.drain(..values.start);
                zephon_media::Pixels::F32(v)
            }
        };
        keep_rows(&mut self.labels, &range);
        keep_rows(&mut self.records, &range);
        self.batch_size = range.len();
        // A slice of a lane-batch is not a lane boundary.
        self.cut = None;
        self
    }
}

/// The items of an audio batch are its sounds.
#[cfg(feature = "media")]
impl HostBatch for zephon_media::AudioBatch {
    fn num_items(&self) -> usize {
        self.batch_size
    }
    fn keep(mut self, range: Range<usize>) -> Self {
        if range == (0..self.batch_size) {
            return self;
        }
        let per = self.channels as usize * self.frames;
        self.samples.truncate(range.end * per);
        self.samples.drain(..range.start * per);
        keep_rows(&mut self.lengths, &range);
        keep_rows(&mut self.labels, &range);
        keep_rows(&mut self.records, &range);
        self.batch_size = range.len();
        self.cut = None;
        self
    }
}

/// The items of a spectrogram batch are its sounds.
#[cfg(feature = "media")]
impl HostBatch for zephon_media::MelBatch {
    fn num_items(&self) -> usize {
        self.batch_size
    }
    fn keep(mut self, range: Range<usize>) -> Self {
        if range == (0..self.batch_size) {
            return self;
        }
        let per = self.channels as usize * self.n_mels * self.frames;
        self.values.truncate(range.end * per);
        self.values.drain(..range.start * per);
        keep_rows(&mut self.lengths, &range);
        keep_rows(&mut self.labels, &range);
        keep_rows(&mut self.records, &range);
        self.batch_size = range.len();
        self.cut = None;
        self
    }
}

/// Keeps `range` of a per-item vector; one without an entry per item (no
/// labels) stays empty.
#[cfg(feature = "media")]
fn keep_rows<T>(v: &mut Vec<T>, range: &Range<usize>) {
    if v.is_empty() {
        return;
    }
    v.truncate(range.end);
    v.drain(..range.start.min(v.len()));
}
