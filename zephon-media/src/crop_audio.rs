//! `crop_audio`: sounds to a fixed number of frames, cropped at a random
//! offset (a function of the seed and the sample's identity), at the
//! centre or at the start, and padded with zeros when shorter.

use crate::audio::{AudioOp, AudioSample};
use crate::error::Result;
use crate::rng::SampleRng;
use zephon_core::Identity;

/// Tells this operator's draws apart from other operators' with one seed.
const SALT: u64 = 0x0041_4352_4f50; // "ACROP"

/// Where a crop starts when a sound is longer than the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CropAt {
    /// A uniform offset in `0..=frames - target`, drawn from the seed and
    /// the sample's identity.
    Random {
        /// The seed the offset is drawn from, with each sample's identity.
        seed: u64,
    },
    /// The centre: offset `(frames - target) / 2`.
    Center,
    /// The start: offset 0 (a truncation).
    Start,
}

/// Gives every sound exactly `frames` frames (at the rate it has at that
/// point: resample first): a longer one is cropped where [`CropAt`] says,
/// a shorter one keeps all its frames and is padded at the end with zeros
/// (unless [`CropAudio::pad`] turns that off). The sample's
/// [`length`](AudioSample::length) then counts the frames of signal, so a
/// model can mask the padding.
///
/// A random offset comes from [`SampleRng`] seeded by `(seed, sample
/// identity)`: the sample's lineage, not the thread, worker, rank or
/// arrival order, so any parallelism, runner or rank count gives every
/// sample the same crop. The pass is not part of a pointer: a sample seen
/// in two passes gets the same crop unless the seed changes per pass.
///
/// ```
/// use zephon_media::{Audio, AudioOp, AudioSample, CropAudio};
/// let s = |n: usize| AudioSample::new(Audio::new(10, 1, (0..n).map(|i| i as f32).collect()).unwrap(), Default::default());
/// assert_eq!(CropAudio::start(3).apply(s(10))?.audio.samples, [0.0, 1.0, 2.0]);
/// let padded = CropAudio::center(4).apply(s(2))?;
/// assert_eq!((padded.audio.samples.as_slice(), padded.length), (&[0.0, 1.0, 0.0, 0.0][..], 2));
/// let op = CropAudio::random(4, 7);
/// assert_eq!(op.offset(10, 4, 99), op.offset(10, 4, 99));
/// assert!(op.offset(10, 4, 99) <= 6);
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CropAudio {
    frames: usize,
    at: CropAt,
    pad: bool,
}

impl CropAudio {
    /// Crops of `frames` frames (1 or more) at `at`, padded.
    pub fn new(frames: usize, at: CropAt) -> Self {
        CropAudio {
            frames,
            at,
            pad: true,
        }
    }

    /// Random crops of `frames` frames, seeded by `seed`.
    pub fn random(frames: usize, seed: u64) -> Self {
        Self::new(frames, CropAt::Random { seed })
    }

    /// Centre crops of `frames` frames.
    pub fn center(frames: usize) -> Self {
        Self::new(frames, CropAt::Center)
    }

    /// The first `frames` frames (and zero padding to that length: the
    /// fixed-duration step of a pipeline without augmentation).
    pub fn start(frames: usize) -> Self {
        Self::new(frames, CropAt::Start)
    }

    /// Whether a shorter sound is padded with zeros to `frames` (default
    /// on); off, it is left as it is and the collation pads it.
    pub fn pad(mut self, on: bool) -> Self {
        self.pad = on;
        self
    }

    /// The target length.
    pub fn frames(&self) -> usize {
        self.frames
    }

    pub(crate) fn check(&self) -> Result<()> {
        crate::error::check(
            self.frames >= 1,
            "crop_audio.frames",
            "0 is out of range 1..",
        )
    }

    /// The first frame of the crop of a sound of `frames` frames to
    /// `target`, for the sample of identity `identity` (0 when the sound is
    /// not longer than the target).
    pub fn offset(&self, frames: usize, target: usize, identity: u64) -> usize {
        let spare = frames.saturating_sub(target);
        match self.at {
            CropAt::Random { seed } => {
                SampleRng::new(seed, SALT, identity).below(spare as u64 + 1) as usize
            }
            CropAt::Center => spare / 2,
            CropAt::Start => 0,
        }
    }
}

impl AudioOp for CropAudio {
    fn name(&self) -> &'static str {
        "crop_audio"
    }

    fn apply(&self, mut s: AudioSample) -> Result<AudioSample> {
        self.check()?;
        let (n, t) = (s.audio.frames, self.frames);
        if n == t || (n < t && !self.pad) {
            return Ok(s);
        }
        let c = s.audio.channels as usize;
        let from = self.offset(n, t, s.identity());
        let keep = t.min(n);
        let mut out = Vec::with_capacity(c * t);
        for k in 0..c {
            out.extend_from_slice(&s.audio.samples[k * n + from..k * n + from + keep]);
            out.resize((k + 1) * t, 0.0);
        }
        // Signal left in the crop: the frames of real signal past the
        // offset, up to the crop's end.
        s.length = s.length.saturating_sub(from).min(keep);
        s.audio.samples = out;
        s.audio.frames = t;
        Ok(s)
    }
}
