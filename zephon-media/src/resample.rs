//! `resample`: audio to a target sample rate with `rubato`'s FFT
//! resampler, a pure function of the samples.

use crate::audio::{Audio, AudioOp, AudioSample};
use crate::error::{MediaError, Result};
use rubato::audioadapter_buffers::direct::SequentialSlice;
use rubato::{Fft, FixedSync, Resampler};
use std::cell::RefCell;

/// Input frames per FFT chunk of the resampler.
const CHUNK: usize = 1024;

/// Resamplers kept per worker thread, by `(from, to, channels)`: building
/// one plans its FFTs, which costs more than resampling a short clip.
const CACHED: usize = 8;

type Cache = Vec<((u32, u32, usize), Fft<f32>)>;

thread_local! {
    static RESAMPLERS: RefCell<Cache> = const { RefCell::new(Vec::new()) };
}

/// Resamples every sound to `rate` Hz, each channel alike, with `rubato`'s
/// synchronous FFT resampler (band-limited: a sinc-windowed anti-aliasing
/// filter below the lower of the two Nyquist frequencies). A sound already
/// at `rate` is left as it is. The output has `ceil(frames × rate / from)`
/// frames, the resampler's delay trimmed so the first output sample lines
/// up with the first input sample (to within a fraction of a sample: the
/// filter's delay is not a whole number of output samples), and the sample's
/// [`length`](AudioSample::length) is scaled the same way.
///
/// The resampler is reset for each sound, so the output is a function of
/// the samples and the two rates only: the same on any thread, worker or
/// rank (the FFT may choose its SIMD path by the CPU, so machines of
/// different CPU features may differ in the last bits).
///
/// ```
/// use zephon_media::{Audio, AudioOp, AudioSample, Resample};
/// let sine: Vec<f32> = (0..4410).map(|i| (i as f32 * 440.0 * std::f32::consts::TAU / 44_100.0).sin()).collect();
/// let s = AudioSample::new(Audio::new(44_100, 1, sine)?, Default::default());
/// let out = Resample::new(16_000).apply(s)?;
/// assert_eq!((out.audio.sample_rate, out.audio.frames, out.length), (16_000, 1600, 1600));
/// // Away from the edges, the resampled sine is the sine at the new rate.
/// for n in [400, 801, 1200] {
///     let want = (n as f32 * 440.0 * std::f32::consts::TAU / 16_000.0).sin();
///     assert!((out.audio.samples[n] - want).abs() < 0.05);
/// }
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resample {
    rate: u32,
}

impl Resample {
    /// Resamples to `rate` Hz (1 or more).
    pub fn new(rate: u32) -> Self {
        Resample { rate }
    }

    /// The target rate.
    pub fn rate(&self) -> u32 {
        self.rate
    }

    pub(crate) fn check(&self) -> Result<()> {
        crate::error::check(self.rate >= 1, "resample.rate", "0 is out of range 1..")
    }

    /// `audio` at the target rate, or a message saying why not.
    pub fn resample(&self, audio: &Audio) -> std::result::Result<Audio, String> {
        let (from, to) = (audio.sample_rate, self.rate);
        if from == to || audio.frames == 0 {
            return Ok(Audio {
                sample_rate: to,
                ..audio.clone()
            });
        }
        let channels = audio.channels as usize;
        let want = scaled(audio.frames, from, to);
        let input = SequentialSlice::new(&audio.samples, channels, audio.frames)
            .map_err(|e| format!("resample input: {e}"))?;
        RESAMPLERS.with_borrow_mut(|cache| {
            let key = (from, to, channels);
            let at = match cache.iter().position(|(k, _)| *k == key) {
                Some(i) => i,
                None => {
                    let r = Fft::<f32>::new(
                        from as usize,
                        to as usize,
                        CHUNK,
                        channels,
                        FixedSync::Input,
                    )
                    .map_err(|e| format!("no resampler from {from} to {to} Hz: {e}"))?;
                    if cache.len() == CACHED {
                        cache.remove(0);
                    }
                    cache.push((key, r));
                    cache.len() - 1
                }
            };
            let r = &mut cache[at].1;
            r.reset();
            let room = r.process_all_needed_output_len(audio.frames);
            let mut out = vec![0f32; room * channels];
            let mut adapter = SequentialSlice::new_mut(&mut out, channels, room)
                .map_err(|e| format!("resample output: {e}"))?;
            let (_, produced) = r
                .process_all_into_buffer(&input, &mut adapter, audio.frames, None)
                .map_err(|e| format!("resampling from {from} to {to} Hz: {e}"))?;
            let frames = want.min(produced);
            let mut samples = Vec::with_capacity(frames * channels);
            for c in 0..channels {
                samples.extend_from_slice(&out[c * room..c * room + frames]);
            }
            Ok(Audio {
                sample_rate: to,
                channels: audio.channels,
                frames,
                samples,
            })
        })
    }
}

/// `ceil(n × to / from)`.
pub(crate) fn scaled(n: usize, from: u32, to: u32) -> usize {
    (n as u128 * to as u128).div_ceil(from.max(1) as u128) as usize
}

impl AudioOp for Resample {
    fn name(&self) -> &'static str {
        "resample"
    }

    fn apply(&self, mut s: AudioSample) -> Result<AudioSample> {
        self.check()?;
        let from = s.audio.sample_rate;
        let audio = self
            .resample(&s.audio)
            .map_err(|message| MediaError::Unsupported {
                op: "resample",
                ptr: s.ptr(),
                message,
            })?;
        s.length = scaled(s.length, from, self.rate).min(audio.frames);
        s.audio = audio;
        Ok(s)
    }
}
