//! [`AudioBatch`]: a batch of sounds as one N×C×T array.

use std::sync::Arc;
use zephon_core::checkpoint::Delivered;
use zephon_core::checkpoint::cut::LaneCut;
use zephon_core::{LaneId, Laned, Record};

/// One batch of sounds as one array: `batch_size` sounds of `channels ×
/// frames` `f32` samples, N×C×T (each sound's channels one after another,
/// as [`Audio`](crate::Audio) holds them), every sound padded at the end
/// with zeros to `frames`; each sound's frames of signal in `lengths`; the
/// labels, when a label field was named; the records with their other
/// fields (transcripts, keys, lineage). Made by
/// [`collate_audio`](crate::AudioPipelineExt::collate_audio).
#[derive(Clone, Debug, PartialEq)]
pub struct AudioBatch {
    /// The lane of the batch.
    pub lane: LaneId,
    /// The batch's number within its lane.
    pub index: u64,
    /// Sounds in the batch.
    pub batch_size: usize,
    /// The sample rate of every sound.
    pub sample_rate: u32,
    /// Channels of every sound.
    pub channels: u16,
    /// Frames of every (padded) sound: T.
    pub frames: usize,
    /// `batch_size * channels * frames` values, N×C×T.
    pub samples: Vec<f32>,
    /// Per sound, its frames of signal before any padding (what a model
    /// masks beyond).
    pub lengths: Vec<usize>,
    /// One label per sound, when [`AudioCollateConfig::label`](crate::AudioCollateConfig::label) named a
    /// field; empty otherwise.
    pub labels: Vec<i64>,
    /// The source records (without the audio bytes and the label field).
    pub records: Vec<Record>,
    /// In a checkpointed pipeline, the lane's cut right after this batch.
    pub cut: Option<Arc<LaneCut>>,
}

impl AudioBatch {
    /// The array's shape: `[N, C, T]`.
    pub fn shape(&self) -> [usize; 3] {
        [self.batch_size, self.channels as usize, self.frames]
    }

    /// A stable digest of the whole batch (samples, lengths, labels,
    /// records), for checksums of runs.
    pub fn digest(&self) -> u64 {
        use zephon_core::hash::{combine, key};
        let mut h = key(&[
            self.lane as u64,
            self.index,
            self.batch_size as u64,
            self.sample_rate as u64,
            self.channels as u64,
            self.frames as u64,
            crate::audio::f32_digest(&self.samples),
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

impl Laned for AudioBatch {
    fn lane(&self) -> LaneId {
        self.lane
    }
}

impl Delivered for AudioBatch {
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
