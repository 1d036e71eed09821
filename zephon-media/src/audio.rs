//! [`Audio`], [`AudioSample`] and [`AudioOp`], the step trait of the audio
//! operators.

use crate::error::{PtrDisplay, Result};
use std::fmt;
use std::sync::Arc;
use zephon_core::{Identity, LaneId, Laned, Record};

/// Decoded sound: `channels` planes of `frames` samples each, `f32` in
/// `[-1, 1]` as decoded, **planar** (channel-major, C×T) in one contiguous
/// buffer: channel `c`'s samples are `samples[c * frames..(c + 1) * frames]`.
///
/// ```
/// use zephon_media::Audio;
/// let a = Audio::new(16_000, 2, vec![0.1, 0.2, 0.3, -0.1, -0.2, -0.3])?;
/// assert_eq!(a.frames, 3);
/// assert_eq!(a.channel(1), &[-0.1, -0.2, -0.3]);
/// assert!((a.seconds() - 3.0 / 16_000.0).abs() < 1e-12);
/// assert!(Audio::new(16_000, 2, vec![0.0; 5]).is_err());
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, PartialEq)]
pub struct Audio {
    /// Samples per second, per channel.
    pub sample_rate: u32,
    /// Number of channels (1 mono, 2 stereo, ...).
    pub channels: u16,
    /// Samples per channel.
    pub frames: usize,
    /// `channels * frames` values, planar.
    pub samples: Vec<f32>,
}

impl Audio {
    /// Planar audio; an error unless `samples` divides into `channels`
    /// (1 or more) planes of equal length and `sample_rate` is 1 or more.
    pub fn new(sample_rate: u32, channels: u16, samples: Vec<f32>) -> Result<Self> {
        crate::error::check(
            channels > 0 && sample_rate > 0 && samples.len().is_multiple_of(channels as usize),
            "audio.samples",
            format!(
                "{} values for {channels} channels at {sample_rate} Hz",
                samples.len()
            ),
        )?;
        Ok(Audio {
            sample_rate,
            channels,
            frames: samples.len() / channels as usize,
            samples,
        })
    }

    /// The samples of channel `c` (empty past the last channel).
    pub fn channel(&self, c: usize) -> &[f32] {
        self.samples
            .get(c * self.frames..(c + 1) * self.frames)
            .unwrap_or_default()
    }

    /// The duration in seconds.
    pub fn seconds(&self) -> f64 {
        self.frames as f64 / self.sample_rate.max(1) as f64
    }

    /// A stable digest of the rate, the shape and the values (floats by
    /// their bits).
    pub fn digest(&self) -> u64 {
        zephon_core::hash::key(&[
            self.sample_rate as u64,
            self.channels as u64,
            self.frames as u64,
            f32_digest(&self.samples),
        ])
    }
}

/// A digest of `f32` values by their bits.
pub(crate) fn f32_digest(v: &[f32]) -> u64 {
    use zephon_core::hash::{bytes, combine};
    v.chunks(1024).fold(2, |h, c| {
        let b: Vec<u8> = c.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect();
        combine(h, bytes(&b))
    })
}

impl fmt::Debug for Audio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Audio")
            .field("sample_rate", &self.sample_rate)
            .field("channels", &self.channels)
            .field("frames", &self.frames)
            .finish_non_exhaustive()
    }
}

/// Decoded audio travelling with the record it came from: the record keeps
/// the lane, the lineage (the sample's identity, which seeds every random
/// choice) and the other fields (label, transcript, key); the audio bytes
/// field is taken out of it.
#[derive(Clone, Debug, PartialEq)]
pub struct AudioSample {
    /// The audio.
    pub audio: Audio,
    /// Frames of real signal at the start of `audio`: `audio.frames`, less
    /// the zeros a padding step appended (what a model masks).
    pub length: usize,
    /// The source record, without the decoded bytes field.
    pub record: Record,
}

impl AudioSample {
    /// A sample whose audio is all signal (`length == audio.frames`).
    pub fn new(audio: Audio, record: Record) -> Self {
        AudioSample {
            length: audio.frames,
            audio,
            record,
        }
    }

    /// The sample's source pointer, for messages.
    pub(crate) fn ptr(&self) -> PtrDisplay {
        PtrDisplay(self.record.source().copied())
    }

    /// A stable digest of the audio, the length and the record.
    pub fn digest(&self) -> u64 {
        zephon_core::hash::key(&[
            self.audio.digest(),
            self.length as u64,
            self.record.digest(),
        ])
    }
}

impl Laned for AudioSample {
    fn lane(&self) -> LaneId {
        self.record.lane
    }
}

impl Identity for AudioSample {
    /// The record's identity (its lineage): what random choices are seeded
    /// from.
    fn identity(&self) -> u64 {
        self.record.identity()
    }
}

/// One step over a sound: a pure function of its input (random choices
/// seeded from the sample's identity), so it may run on any thread.
///
/// ```
/// use zephon_media::{Audio, AudioOp, AudioSample, CropAudio};
/// let s = AudioSample::new(Audio::new(10, 1, (0..10).map(|i| i as f32).collect())?, Default::default());
/// let out = CropAudio::center(4).apply(s)?;
/// assert_eq!(out.audio.samples, [3.0, 4.0, 5.0, 6.0]);
/// # Ok::<(), zephon_core::Error>(())
/// ```
pub trait AudioOp: fmt::Debug + Send + Sync + 'static {
    /// The operator's name, for metrics, `explain()` and errors.
    fn name(&self) -> &'static str;
    /// Applies the step to one sample.
    fn apply(&self, sample: AudioSample) -> Result<AudioSample>;
}

/// Several audio steps applied one after another inside one task (what
/// [`AudioDecodeConfig::then`](crate::AudioDecodeConfig::then) builds).
///
/// ```
/// use zephon_media::{Audio, AudioCompose, AudioOp, AudioSample, CropAudio, Remix};
/// let ops = AudioCompose::new().then(Remix::mono()).then(CropAudio::center(2));
/// let s = AudioSample::new(Audio::new(8, 2, vec![1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0])?, Default::default());
/// let out = ops.apply(s)?;
/// assert_eq!((out.audio.channels, out.audio.samples.as_slice()), (1, &[0.5, 0.5][..]));
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct AudioCompose {
    ops: Vec<Arc<dyn AudioOp>>,
}

impl AudioCompose {
    /// No steps (the identity).
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a step.
    pub fn then(mut self, op: impl AudioOp) -> Self {
        self.ops.push(Arc::new(op));
        self
    }

    /// Whether there are no steps.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The steps' names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.ops.iter().map(|o| o.name()).collect()
    }
}

impl AudioOp for AudioCompose {
    fn name(&self) -> &'static str {
        "augment_audio"
    }
    fn apply(&self, sample: AudioSample) -> Result<AudioSample> {
        self.ops.iter().try_fold(sample, |s, op| op.apply(s))
    }
}
