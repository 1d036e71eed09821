//! [`MelBatch`]: a batch of log-mel spectrograms as one array.

use std::sync::Arc;
use zephon_core::checkpoint::Delivered;
use zephon_core::checkpoint::cut::LaneCut;
use zephon_core::{LaneId, Laned, Record};

/// One batch of log-mel spectrograms as one array: `batch_size` sounds of
/// `channels × n_mels × frames` `f32` values, N×C×M×F (for each sound and
/// channel, one row of `frames` values per mel band, low bands first);
/// each sound's frames computed from signal rather than padding in
/// `lengths`; the labels, records, lane, index and cut of the
/// [`AudioBatch`](crate::AudioBatch) it was made from.
#[derive(Clone, Debug, PartialEq)]
pub struct MelBatch {
    /// The lane of the batch.
    pub lane: LaneId,
    /// The batch's number within its lane.
    pub index: u64,
    /// Sounds in the batch.
    pub batch_size: usize,
    /// Channels of every sound.
    pub channels: u16,
    /// Mel bands: M.
    pub n_mels: usize,
    /// Frames (hops) of every spectrogram: F.
    pub frames: usize,
    /// `batch_size * channels * n_mels * frames` values, N×C×M×F.
    pub values: Vec<f32>,
    /// Per sound, the frames whose centre lies within its signal (a model
    /// masks the rest).
    pub lengths: Vec<usize>,
    /// One label per sound, as the audio batch had them.
    pub labels: Vec<i64>,
    /// The source records.
    pub records: Vec<Record>,
    /// In a checkpointed pipeline, the lane's cut right after this batch.
    pub cut: Option<Arc<LaneCut>>,
}

impl MelBatch {
    /// The array's shape: `[N, C, M, F]`.
    pub fn shape(&self) -> [usize; 4] {
        [
            self.batch_size,
            self.channels as usize,
            self.n_mels,
            self.frames,
        ]
    }

    /// A stable digest of the whole batch, for checksums of runs.
    pub fn digest(&self) -> u64 {
        use zephon_core::hash::{combine, key};
        let mut h = key(&[
            self.lane as u64,
            self.index,
            self.batch_size as u64,
            self.channels as u64,
            self.n_mels as u64,
            self.frames as u64,
            crate::audio::f32_digest(&self.values),
        ]);
        for l in &self.lengths {
            h = combine(h, *l as u64);
        }
        for l in &self.labels {
            h = combine(h, *l as u64);
        }
        for r in &self.records {
            h = combine(h, r.digest());
        }
        h
    }
}

impl Laned for MelBatch {
    fn lane(&self) -> LaneId {
        self.lane
    }
}

impl Delivered for MelBatch {
    fn delivered_items(&self) -> u64 {
        self.batch_size as u64
    }

    fn cut(&self) -> Option<&Arc<LaneCut>> {
        self.cut.as_ref()
    }

    fn lane_index(&self) -> Option<u64> {
        Some(self.index)
    }
}
