//! What the audio steps do: resampling, remixing, cropping and padding,
//! collation, and the log-mel spectrogram against a naive DFT.

use super::audio_common::{WAV, sine, tone};
use zephon_core::{Batch, PipelineExt, Record, Runner};
use zephon_media::{
    Audio, AudioCollateConfig, AudioDecodeConfig, AudioOp, AudioPipelineExt, AudioSample,
    CropAudio, LogMel, Remix, Resample,
};

fn sample(rate: u32, channels: u16, planes: &[Vec<f64>]) -> AudioSample {
    let samples = planes.iter().flatten().map(|&x| x as f32).collect();
    AudioSample::new(Audio::new(rate, channels, samples).unwrap(), Record::new())
}

#[test]
fn resampling_keeps_what_fits_below_the_new_nyquist_and_removes_the_rest() {
    // 1 kHz and 7 kHz at 44.1 kHz, 0.2 s; to 16 kHz, 8 kHz to 22.05 kHz.
    let (a, b) = (
        sine(44_100, 8820, 1000.0, 0.5),
        sine(44_100, 8820, 7000.0, 0.3),
    );
    let hi = sine(44_100, 8820, 12_000.0, 0.4);
    let s = sample(
        44_100,
        2,
        &[a, b.iter().zip(&hi).map(|(x, y)| x + y).collect()],
    );
    let down = Resample::new(16_000).apply(s.clone()).unwrap();
    assert_eq!(
        (down.audio.sample_rate, down.audio.frames, down.length),
        (16_000, 3200, 3200)
    );
    let (l, r) = (
        &down.audio.channel(0)[400..2800],
        &down.audio.channel(1)[400..2800],
    );
    assert!(
        (tone(l, 16_000, 1000.0) - 0.5).abs() < 0.01,
        "{}",
        tone(l, 16_000, 1000.0)
    );
    assert!(tone(l, 16_000, 7000.0) < 0.005, "the channels stay apart");
    assert!(
        (tone(r, 16_000, 7000.0) - 0.3).abs() < 0.01,
        "{}",
        tone(r, 16_000, 7000.0)
    );
    // 12 kHz is above 8 kHz: filtered out, not folded to 4 kHz.
    assert!(
        tone(r, 16_000, 4000.0) < 0.01,
        "aliased: {}",
        tone(r, 16_000, 4000.0)
    );
    let up = Resample::new(48_000).apply(s.clone()).unwrap();
    assert_eq!(up.audio.frames, 9600);
    let l = &up.audio.channel(0)[1200..8400];
    assert!((tone(l, 48_000, 1000.0) - 0.5).abs() < 0.01);
    // In time with the input: the output matches the sine at the new rate
    // better than the sine one sample earlier or later.
    let want = sine(16_000, 3200, 1000.0, 0.5);
    let err = |lag: i64| -> f64 {
        (400..2800)
            .map(|n| (down.audio.channel(0)[n] as f64 - want[(n as i64 + lag) as usize]).powi(2))
            .sum()
    };
    assert!(
        err(0) * 4.0 < err(1).min(err(-1)),
        "{} {} {}",
        err(-1),
        err(0),
        err(1)
    );
    // The same rate is the identity; the same input, the same bits.
    assert_eq!(Resample::new(44_100).apply(s.clone()).unwrap(), s);
    assert_eq!(Resample::new(16_000).apply(s).unwrap(), down);
}

#[test]
fn remixing_averages_to_mono_and_duplicates_to_stereo() {
    let stereo = AudioSample::new(
        AudioDecodeConfig::new("x").decode(WAV).unwrap(),
        Record::new(),
    );
    let mono = Remix::mono().apply(stereo.clone()).unwrap();
    assert_eq!((mono.audio.channels, mono.audio.frames), (1, 2000));
    for n in 0..2000 {
        let want = (stereo.audio.channel(0)[n] + stereo.audio.channel(1)[n]) * 0.5;
        assert_eq!(mono.audio.samples[n], want);
    }
    let back = Remix::stereo().apply(mono.clone()).unwrap();
    assert_eq!(back.audio.channel(0), mono.audio.samples.as_slice());
    assert_eq!(back.audio.channel(1), mono.audio.samples.as_slice());
    assert_eq!(Remix::stereo().apply(stereo.clone()).unwrap(), stereo);
    let six = sample(8000, 6, &vec![vec![0.0; 4]; 6]);
    let e = Remix::stereo().apply(six).unwrap_err().to_string();
    assert!(
        e.contains("6 channels have no single stereo down-mix"),
        "{e}"
    );
}

#[test]
fn random_crops_depend_on_the_identity_only_and_cover_every_offset() {
    let ramp: Vec<f64> = (0..20).map(|i| i as f64).collect();
    let op = CropAudio::random(16, 3);
    let mut seen = [false; 5];
    for identity in 0..200u64 {
        let at = op.offset(20, 16, identity);
        assert_eq!(at, op.offset(20, 16, identity));
        seen[at] = true;
    }
    assert_eq!(seen, [true; 5], "offsets 0..=4 all drawn");
    assert_ne!(
        (0..50).map(|i| op.offset(20, 16, i)).collect::<Vec<_>>(),
        (0..50)
            .map(|i| CropAudio::random(16, 4).offset(20, 16, i))
            .collect::<Vec<_>>(),
        "another seed, other crops"
    );
    // Stereo: both channels cut at the same offset.
    let s = sample(8000, 2, &[ramp.clone(), ramp.iter().map(|x| -x).collect()]);
    let out = op.apply(s.clone()).unwrap();
    let at = out.audio.samples[0] as usize;
    assert_eq!(at, op.offset(20, 16, zephon_core::Identity::identity(&s)));
    let want: Vec<f32> = (at..at + 16).map(|i| i as f32).collect();
    assert_eq!(out.audio.channel(0), want.as_slice());
    assert_eq!(
        out.audio.channel(1),
        want.iter().map(|x| -x).collect::<Vec<_>>().as_slice()
    );
    assert_eq!(out.length, 16);
    // Shorter: padded with zeros, the length says how much is signal.
    let short = CropAudio::center(30).apply(s.clone()).unwrap();
    assert_eq!((short.audio.frames, short.length), (30, 20));
    assert_eq!(&short.audio.channel(1)[18..22], &[-18.0, -19.0, 0.0, 0.0]);
    let kept = CropAudio::center(30).pad(false).apply(s.clone()).unwrap();
    assert_eq!(kept, s);
    assert_eq!(
        CropAudio::center(10).apply(s).unwrap().audio.samples[0],
        5.0
    );
}

#[test]
fn collation_pads_to_the_longest_or_a_fixed_length_and_refuses_mismatches() {
    let s = |n: usize, v: f64| sample(8000, 2, &[vec![v; n], vec![-v; n]]);
    let batch = |items| Batch {
        lane: 1,
        index: 4,
        items,
        cut: None,
    };
    let b = AudioCollateConfig::new()
        .collate(batch(vec![s(2, 1.0), s(3, 2.0)]))
        .unwrap();
    assert_eq!((b.shape(), b.lane, b.index), ([2, 2, 3], 1, 4));
    assert_eq!(
        b.samples,
        [
            1.0, 1.0, 0.0, -1.0, -1.0, 0.0, 2.0, 2.0, 2.0, -2.0, -2.0, -2.0
        ]
    );
    assert_eq!(b.lengths, [2, 3]);
    let fixed = AudioCollateConfig::new()
        .frames(4)
        .collate(batch(vec![s(2, 1.0)]))
        .unwrap();
    assert_eq!(fixed.shape(), [1, 2, 4]);
    let e = AudioCollateConfig::new()
        .frames(2)
        .collate(batch(vec![s(3, 1.0)]))
        .unwrap_err();
    assert!(e.to_string().contains("at most 2 frames"), "{e}");
    let other = sample(16_000, 2, &[vec![0.0; 2], vec![0.0; 2]]);
    let e = AudioCollateConfig::new()
        .collate(batch(vec![s(2, 1.0), other]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("row 1 of batch (lane 1, index 4) is 2 channels of 2 frames at 16000 Hz"),
        "{e}"
    );
    let e = AudioCollateConfig::new()
        .label("cls")
        .collate(batch(vec![s(2, 1.0)]))
        .unwrap_err();
    assert!(
        e.to_string().contains("no integer label field `cls`"),
        "{e}"
    );
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
