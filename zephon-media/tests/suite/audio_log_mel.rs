//! The log-mel spectrogram against its definition computed with a naive
//! DFT, a sine's energy in its band, and the operator over batches.

use super::audio_common::sine;
use zephon_core::{PipelineExt, Record, Runner};
use zephon_media::{Audio, AudioCollateConfig, AudioPipelineExt, AudioSample, LogMel};

fn sample(rate: u32, channels: u16, planes: &[Vec<f64>]) -> AudioSample {
    let samples = planes.iter().flatten().map(|&x| x as f32).collect();
    AudioSample::new(Audio::new(rate, channels, samples).unwrap(), Record::new())
}

/// The log-mel spectrogram from its definition: zero-padded centred frames,
/// a periodic Hann window, a naive DFT, HTK triangles, `ln(max(e, floor))`.
fn reference(
    x: &[f64],
    rate: f64,
    n_fft: usize,
    hop: usize,
    n_mels: usize,
    f_lo: f64,
    f_hi: f64,
) -> Vec<f64> {
    let frames = 1 + x.len() / hop;
    let bins = n_fft / 2 + 1;
    let mel = |f: f64| 2595.0 * (1.0 + f / 700.0).log10();
    let inv = |m: f64| 700.0 * (10f64.powf(m / 2595.0) - 1.0);
    let pts: Vec<f64> = (0..n_mels + 2)
        .map(|i| inv(mel(f_lo) + (mel(f_hi) - mel(f_lo)) * i as f64 / (n_mels + 1) as f64))
        .collect();
    let mut out = vec![0.0; n_mels * frames];
    for t in 0..frames {
        let mut power = vec![0.0; bins];
        for (k, p) in power.iter_mut().enumerate() {
            let (mut re, mut im) = (0.0, 0.0);
            for n in 0..n_fft {
                let j = (t * hop + n) as i64 - (n_fft / 2) as i64;
                let v = if j >= 0 && (j as usize) < x.len() {
                    x[j as usize]
                } else {
                    0.0
                };
                let w = 0.5 - 0.5 * (std::f64::consts::TAU * n as f64 / n_fft as f64).cos();
                let ph = std::f64::consts::TAU * (k * n) as f64 / n_fft as f64;
                re += w * v * ph.cos();
                im -= w * v * ph.sin();
            }
            *p = re * re + im * im;
        }
        for m in 0..n_mels {
            let e: f64 = (0..bins)
                .map(|k| {
                    let f = k as f64 * rate / n_fft as f64;
                    let tri = if f <= pts[m] || f >= pts[m + 2] {
                        0.0
                    } else if f <= pts[m + 1] {
                        (f - pts[m]) / (pts[m + 1] - pts[m])
                    } else {
                        (pts[m + 2] - f) / (pts[m + 2] - pts[m + 1])
                    };
                    tri * power[k]
                })
                .sum();
            out[m * frames + t] = e.max(1e-10).ln();
        }
    }
    out
}

#[test]
fn log_mel_matches_a_naive_dft_and_puts_a_sine_in_its_band() {
    let x: Vec<f64> = sine(8000, 700, 440.0, 0.5)
        .iter()
        .zip(sine(8000, 700, 2300.0, 0.2))
        .enumerate()
        .map(|(n, (a, b))| a + b + 0.05 * ((n * 7919 % 101) as f64 / 50.0 - 1.0))
        .collect();
    let op = LogMel::new(8000, 64, 32, 12).f_min(50.0).f_max(3800.0);
    let got = op
        .compute(&x.iter().map(|&v| v as f32).collect::<Vec<_>>())
        .unwrap();
    let want = reference(&x, 8000.0, 64, 32, 12, 50.0, 3800.0);
    assert_eq!(got.len(), want.len());
    assert_eq!(got.len(), 12 * 22);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (*g as f64 - w).abs() < 2e-3 * w.abs().max(1.0),
            "value {i}: {g} for {w}"
        );
    }
    // A pure 1 kHz tone at 16 kHz: the loudest band is the one whose peak
    // is nearest 1 kHz, in every frame inside the signal.
    let op = LogMel::new(16_000, 512, 128, 40);
    let spec = op
        .compute(
            &sine(16_000, 8000, 1000.0, 0.5)
                .iter()
                .map(|&v| v as f32)
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let centres = op.band_centres();
    let nearest = (0..40)
        .min_by(|&a, &b| {
            (centres[a] - 1000.0)
                .abs()
                .total_cmp(&(centres[b] - 1000.0).abs())
        })
        .unwrap();
    let frames = op.frames(8000);
    for t in 4..frames - 4 {
        let loudest = (0..40)
            .max_by(|&a, &b| spec[a * frames + t].total_cmp(&spec[b * frames + t]))
            .unwrap();
        assert_eq!(loudest, nearest, "frame {t}");
    }
    // Silence is the floor.
    assert!(
        op.compute(&[0.0; 300])
            .unwrap()
            .iter()
            .all(|&v| v == 1e-10f32.ln())
    );
}

#[test]
fn log_mel_of_batches_keeps_labels_lengths_and_order() {
    let samples = (0..5usize).map(|i| {
        let s = sample(
            16_000,
            1,
            &[sine(16_000, 800 + 200 * i, 300.0 * (i + 1) as f64, 0.5)],
        );
        Ok(AudioSample {
            record: Record::new().with("cls", i as i64),
            ..s
        })
    });
    let out: Vec<_> = futures::stream::iter(samples)
        .batch(2)
        .collate_audio(AudioCollateConfig::new().label("cls"))
        .log_mel(LogMel::new(16_000, 400, 160, 32), 2)
        .into_blocking_iter(Runner::threads())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        out.iter().map(|b| b.shape()).collect::<Vec<_>>(),
        [[2, 1, 32, 7], [2, 1, 32, 9], [1, 1, 32, 11]]
    );
    assert_eq!(out[1].labels, [2, 3]);
    assert_eq!(out[1].lengths, [8, 9]);
    // Each spectrogram's valid frames are those of its sound alone (the
    // zeros of the padding are the zeros the centring adds).
    let alone = LogMel::new(16_000, 400, 160, 32)
        .compute(
            &sine(16_000, 1200, 900.0, 0.5)
                .iter()
                .map(|&v| v as f32)
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let frames = out[1].frames;
    for m in 0..32 {
        assert_eq!(
            &out[1].values[m * frames..m * frames + 8],
            &alone[m * 8..m * 8 + 8]
        );
    }
    let e = futures::stream::iter(vec![Ok(sample(8000, 1, &[vec![0.0; 10]]))])
        .batch(1)
        .collate_audio(AudioCollateConfig::new())
        .log_mel(LogMel::new(16_000, 400, 160, 32), 1)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .next()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("at 8000 Hz, the spectrogram's filters at 16000 Hz"),
        "{e}"
    );
}
