//! What the audio steps do: resampling, remixing, cropping and padding,
//! collation.

use super::audio_common::{WAV, sine, tone};
use zephon_core::{Batch, Record};
use zephon_media::{
    Audio, AudioCollateConfig, AudioDecodeConfig, AudioOp, AudioSample, CropAudio, Remix, Resample,
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

#[test]
fn adapters_show_their_inner_stream_forward_size_hints_and_explain_their_stage() {
    use futures::Stream;
    use zephon_core::PipelineExt;
    use zephon_core::obs::Explain;
    use zephon_media::AudioPipelineExt;
    let recs = futures::stream::iter((0..5).map(|_| Ok(Record::new())));
    let s = recs.decode_audio(AudioDecodeConfig::new("x"), 3);
    assert!(format!("{s:?}").contains("Iter"), "{s:?}");
    assert_eq!(s.size_hint(), (0, Some(5)));
    let items = futures::stream::iter((0..4).map(|_| Ok(sample(8000, 1, &[vec![0.0; 4]]))));
    let c = items.crop_audio(CropAudio::center(2), 2);
    assert_eq!(c.size_hint(), (4, Some(4)));
    assert_eq!(c.name(), "crop_audio");
    let ds = zephon_core::Dataset::in_memory("d", vec![vec![Record::new(); 4]]).unwrap();
    let ws = zephon_core::WorkSource::builder()
        .dataset(ds, 1.0)
        .build()
        .unwrap();
    let p = ws
        .stream()
        .fetch(1)
        .decode_audio(AudioDecodeConfig::new("x").max_seconds(30.0), 2)
        .resample(Resample::new(16_000), 2)
        .remix(Remix::mono(), 1)
        .crop_audio(CropAudio::random(16_000, 1), 1)
        .batch(2)
        .collate_audio(AudioCollateConfig::new())
        .log_mel(zephon_media::LogMel::new(16_000, 400, 160, 80), 1);
    let mut stages = Vec::new();
    p.describe(&mut stages);
    let names: Vec<&str> = stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "work_source",
            "fetch",
            "decode_audio",
            "resample",
            "remix",
            "crop_audio",
            "batch",
            "collate_audio",
            "log_mel"
        ]
    );
    let decode = &stages[2];
    assert!(
        format!("{decode:?}").contains("max_seconds 30"),
        "{decode:?}"
    );
}
