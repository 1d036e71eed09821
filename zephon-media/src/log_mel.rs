//! `log_mel`: batches of sounds to log-mel spectrograms (Hann window,
//! power spectrum, HTK mel filters, natural log with a floor).

use crate::audio_batch::AudioBatch;
use crate::error::{MediaError, PtrDisplay, Result};
use crate::mel_batch::MelBatch;
use realfft::{RealFftPlanner, RealToComplex};
use std::sync::Arc;

/// A log-mel spectrogram, as `torchaudio.transforms.MelSpectrogram` with
/// `mel_scale="htk"`, `norm=None`, `power=2`, `center=True` computes it,
/// except that the centring pads with zeros (not a reflection), followed by
/// a natural log with a floor:
///
/// - the signal `x` gets `n_fft / 2` zeros on each side; frame `t` is
///   `x[t·hop .. t·hop + n_fft]` of the padded signal, so a signal of `L`
///   samples gives `1 + L / hop` frames, frame `t` centred on sample `t·hop`;
/// - each frame is multiplied by the periodic Hann window
///   `w[n] = 0.5 − 0.5·cos(2πn / n_fft)`, and its power spectrum is
///   `P[k] = |Σ_n w[n]·x[n]·e^(−2πikn/n_fft)|²` for `k = 0 ..= n_fft/2`,
///   bin `k` at `k · sample_rate / n_fft` Hz (a real FFT, `realfft`);
/// - `n_mels + 2` points equally spaced on the HTK mel scale
///   `mel(f) = 2595·log10(1 + f/700)` from `f_min` to `f_max` are the
///   corners of `n_mels` triangular filters: filter `m` rises from 0 at
///   point `m` to 1 at point `m + 1` and falls to 0 at point `m + 2`
///   (linear in Hz, unnormalised); band `m` is `Σ_k filter_m(f_k)·P[k]`;
/// - the output is `ln(max(band, floor))`.
///
/// Values are laid out one row of frames per band: `[m · frames + t]`.
///
/// ```
/// use zephon_media::LogMel;
/// let mel = LogMel::new(16_000, 400, 160, 40);
/// // A 1 kHz sine: its energy lands in the band whose peak is nearest 1 kHz.
/// let sine: Vec<f32> = (0..4000).map(|i| (i as f32 * 1000.0 * std::f32::consts::TAU / 16_000.0).sin()).collect();
/// let spec = mel.compute(&sine)?;
/// assert_eq!(spec.len(), 40 * mel.frames(4000));
/// let t = 10; // a frame inside the signal
/// let band = (0..40).max_by(|&a, &b| spec[a * 26 + t].total_cmp(&spec[b * 26 + t])).unwrap();
/// let peak = mel.band_centres()[band];
/// assert!((peak - 1000.0).abs() < 120.0, "{peak}");
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogMel {
    sample_rate: u32,
    n_fft: usize,
    hop: usize,
    n_mels: usize,
    f_min: f64,
    f_max: Option<f64>,
    floor: f32,
}

/// The largest `n_fft` accepted.
const MAX_FFT: usize = 1 << 16;

impl LogMel {
    /// Spectrograms of sounds at `sample_rate` Hz, frames of `n_fft`
    /// samples (even, 2 to 65,536) every `hop` samples (1 or more), in
    /// `n_mels` bands (1 or more) from 0 Hz to the Nyquist frequency, floor
    /// `1e-10`.
    pub fn new(sample_rate: u32, n_fft: usize, hop: usize, n_mels: usize) -> Self {
        LogMel {
            sample_rate,
            n_fft,
            hop,
            n_mels,
            f_min: 0.0,
            f_max: None,
            floor: 1e-10,
        }
    }

    /// The lowest filter's lower corner, in Hz (default 0).
    pub fn f_min(mut self, hz: f64) -> Self {
        self.f_min = hz;
        self
    }

    /// The highest filter's upper corner, in Hz (default `sample_rate / 2`).
    pub fn f_max(mut self, hz: f64) -> Self {
        self.f_max = Some(hz);
        self
    }

    /// The smallest band energy before the log (default `1e-10`; above 0).
    pub fn floor(mut self, floor: f32) -> Self {
        self.floor = floor;
        self
    }

    /// Mel bands.
    pub fn n_mels(&self) -> usize {
        self.n_mels
    }

    /// Frames of a signal of `samples` samples: `1 + samples / hop`.
    pub fn frames(&self, samples: usize) -> usize {
        1 + samples / self.hop.max(1)
    }

    fn nyquist(&self) -> f64 {
        self.sample_rate as f64 / 2.0
    }

    pub(crate) fn check(&self) -> Result<()> {
        use crate::error::check as c;
        c(
            self.sample_rate >= 1,
            "log_mel.sample_rate",
            "0 is out of range 1..",
        )?;
        c(
            self.n_fft >= 2 && self.n_fft.is_multiple_of(2) && self.n_fft <= MAX_FFT,
            "log_mel.n_fft",
            format!("{} is not even in 2..={MAX_FFT}", self.n_fft),
        )?;
        c(self.hop >= 1, "log_mel.hop", "0 is out of range 1..")?;
        c(self.n_mels >= 1, "log_mel.n_mels", "0 is out of range 1..")?;
        let f_max = self.f_max.unwrap_or(self.nyquist());
        c(
            self.f_min >= 0.0 && self.f_min < f_max && f_max <= self.nyquist(),
            "log_mel.f_min",
            format!(
                "need 0 <= f_min ({}) < f_max ({f_max}) <= sample_rate / 2 ({})",
                self.f_min,
                self.nyquist()
            ),
        )?;
        c(
            self.floor > 0.0 && self.floor.is_finite(),
            "log_mel.floor",
            format!("{} is not a finite value above 0", self.floor),
        )
    }

    /// The `n_mels + 2` filter corners in Hz, equally spaced in HTK mel.
    fn corners(&self) -> Vec<f64> {
        let mel = |f: f64| 2595.0 * (1.0 + f / 700.0).log10();
        let hz = |m: f64| 700.0 * (10f64.powf(m / 2595.0) - 1.0);
        let (lo, hi) = (mel(self.f_min), mel(self.f_max.unwrap_or(self.nyquist())));
        (0..self.n_mels + 2)
            .map(|i| hz(lo + (hi - lo) * i as f64 / (self.n_mels + 1) as f64))
            .collect()
    }

    /// Each band's peak frequency in Hz (the middle corner of its triangle).
    pub fn band_centres(&self) -> Vec<f64> {
        self.corners()[1..=self.n_mels].to_vec()
    }

    /// The filters: `n_mels` rows of `n_fft / 2 + 1` weights, one per FFT bin.
    pub fn filterbank(&self) -> Vec<f32> {
        let bins = self.n_fft / 2 + 1;
        let f = self.corners();
        let mut w = vec![0f32; self.n_mels * bins];
        for m in 0..self.n_mels {
            for k in 0..bins {
                let fk = k as f64 * self.sample_rate as f64 / self.n_fft as f64;
                let down = (fk - f[m]) / (f[m + 1] - f[m]);
                let up = (f[m + 2] - fk) / (f[m + 2] - f[m + 1]);
                w[m * bins + k] = down.min(up).max(0.0) as f32;
            }
        }
        w
    }

    /// The log-mel spectrogram of one channel, `n_mels × frames(len)`
    /// values; an error for an invalid option.
    pub fn compute(&self, signal: &[f32]) -> Result<Vec<f32>> {
        self.check()?;
        let plan = Plan::new(*self);
        let mut out = Vec::new();
        plan.run(signal, &mut out);
        Ok(out)
    }

    /// Spectrograms of every sound and channel of `batch`, padded frames
    /// included (each sound's valid frames in [`MelBatch::lengths`]).
    pub fn batch(&self, batch: AudioBatch) -> Result<MelBatch> {
        self.check()?;
        Plan::new(*self).batch(batch)
    }
}

/// What every frame needs, made once per operator: the FFT's plan, the
/// window and the filters.
pub(crate) struct Plan {
    config: LogMel,
    fft: Arc<dyn RealToComplex<f32>>,
    window: Vec<f32>,
    bank: Vec<f32>,
}

impl Plan {
    /// The plan of a checked `config`.
    pub(crate) fn new(config: LogMel) -> Self {
        let n = config.n_fft;
        let window = (0..n)
            .map(|i| (0.5 - 0.5 * (std::f64::consts::TAU * i as f64 / n as f64).cos()) as f32)
            .collect();
        Plan {
            fft: RealFftPlanner::<f32>::new().plan_fft_forward(n),
            window,
            bank: config.filterbank(),
            config,
        }
    }

    /// Appends the spectrogram of `signal` to `out`.
    fn run(&self, signal: &[f32], out: &mut Vec<f32>) {
        let c = &self.config;
        let (n, half, bins) = (c.n_fft, c.n_fft / 2, c.n_fft / 2 + 1);
        let frames = c.frames(signal.len());
        let mut frame = self.fft.make_input_vec();
        let mut spectrum = self.fft.make_output_vec();
        let mut scratch = self.fft.make_scratch_vec();
        let mut power = vec![0f32; bins];
        let base = out.len();
        out.resize(base + c.n_mels * frames, 0.0);
        for t in 0..frames {
            // Sample i of the frame is signal[t·hop + i − n/2], zero outside.
            let start = (t * c.hop) as isize - half as isize;
            for (i, (x, w)) in frame.iter_mut().zip(&self.window).enumerate() {
                let j = start + i as isize;
                *x = if j >= 0 && (j as usize) < signal.len() {
                    signal[j as usize] * w
                } else {
                    0.0
                };
            }
            // The lengths match the plan's, so this cannot fail.
            let _ = self
                .fft
                .process_with_scratch(&mut frame, &mut spectrum, &mut scratch);
            for (p, z) in power.iter_mut().zip(&spectrum) {
                *p = z.norm_sqr();
            }
            for m in 0..c.n_mels {
                let row = &self.bank[m * bins..(m + 1) * bins];
                let e: f32 = row.iter().zip(&power).map(|(w, p)| w * p).sum();
                out[base + m * frames + t] = e.max(c.floor).ln();
            }
        }
        debug_assert_eq!(n, frame.len());
    }

    /// Spectrograms of a whole batch.
    pub(crate) fn batch(&self, b: AudioBatch) -> Result<MelBatch> {
        let c = &self.config;
        if b.batch_size > 0 && b.sample_rate != c.sample_rate {
            return Err(MediaError::Unsupported {
                op: "log_mel",
                ptr: PtrDisplay(b.records.first().and_then(|r| r.source().copied())),
                message: format!(
                    "batch (lane {}, index {}) is at {} Hz, the spectrogram's filters at {} Hz: resample first",
                    b.lane, b.index, b.sample_rate, c.sample_rate
                ),
            }
            .into());
        }
        let frames = c.frames(b.frames);
        let mut values = Vec::with_capacity(b.batch_size * b.channels as usize * c.n_mels * frames);
        for plane in b.samples.chunks_exact(b.frames.max(1)) {
            self.run(plane, &mut values);
        }
        if b.frames == 0 {
            // No samples at all: every spectrogram is all floor.
            values.resize(
                b.batch_size * b.channels as usize * c.n_mels * frames,
                c.floor.ln(),
            );
        }
        Ok(MelBatch {
            lane: b.lane,
            index: b.index,
            batch_size: b.batch_size,
            channels: b.channels,
            n_mels: c.n_mels,
            frames,
            values,
            lengths: b.lengths.iter().map(|&l| c.frames(l).min(frames)).collect(),
            labels: b.labels,
            records: b.records,
            cut: b.cut,
        })
    }
}
