//! Decode + resample + crop of 3 s clips of 44.1 kHz stereo 16-bit WAV to
//! 2 s of 16 kHz mono: a plain loop calling `symphonia` and `rubato`
//! directly, the crate's steps called one by one on the same clips, and the
//! crate's pipeline (`decode_audio` with the steps fused) under the inline
//! runner and on worker threads.
//!
//! `cargo bench -p zephon-media --bench audio`

use rubato::audioadapter_buffers::direct::SequentialSlice;
use rubato::{Fft, FixedSync, Resampler};
use std::hint::black_box;
use std::io::Cursor;
use std::sync::LazyLock;
use symphonia::core::formats::probe::Hint;
use symphonia::core::formats::{FormatOptions, TrackType};
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;
use zephon_core::{PipelineExt, Record, Runner, Value};
use zephon_media::{
    AudioDecodeConfig, AudioOp, AudioPipelineExt, AudioSample, CropAudio, Remix, Resample,
};

fn main() {
    divan::main();
}

const CLIPS: usize = 16;
const RATE: u32 = 44_100;
const FRAMES: usize = 3 * RATE as usize;
const CROP: usize = 32_000;

/// A 3 s stereo WAV: two sines and a hashed noise, different per `salt`.
fn clip(salt: u64) -> Vec<u8> {
    let data = (FRAMES * 4) as u32;
    let mut w = b"RIFF".to_vec();
    w.extend((36 + data).to_le_bytes());
    w.extend(b"WAVEfmt \x10\0\0\0\x01\0\x02\0");
    w.extend(RATE.to_le_bytes());
    w.extend((RATE * 4).to_le_bytes());
    w.extend(b"\x04\0\x10\0data");
    w.extend(data.to_le_bytes());
    for n in 0..FRAMES {
        let t = n as f64 / RATE as f64;
        let noise = (zephon_core::hash::key(&[salt, n as u64]) % 2000) as f64 - 1000.0;
        let l = 8000.0 * (std::f64::consts::TAU * 440.0 * t).sin() + noise;
        let r = 6000.0 * (std::f64::consts::TAU * 1234.0 * t).sin() - noise;
        w.extend((l as i16).to_le_bytes());
        w.extend((r as i16).to_le_bytes());
    }
    w
}

static WAVS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| (0..CLIPS as u64).map(clip).collect());

/// Planar f32 of one clip, straight from symphonia.
fn symphonia_decode(bytes: &[u8]) -> (Vec<f32>, usize, usize) {
    let mss = MediaSourceStream::new(Box::new(Cursor::new(bytes)), Default::default());
    let mut format = symphonia::default::get_probe()
        .probe(
            &Hint::new(),
            mss,
            FormatOptions::default(),
            MetadataOptions::default(),
        )
        .unwrap();
    let track = format.default_track(TrackType::Audio).unwrap();
    let id = track.id;
    let params = track
        .codec_params
        .as_ref()
        .unwrap()
        .audio()
        .unwrap()
        .clone();
    let channels = params.channels.as_ref().unwrap().count();
    let mut decoder = symphonia::default::get_codecs()
        .make_audio_decoder(&params, &Default::default())
        .unwrap();
    let mut planes: Vec<Vec<f32>> = vec![Vec::new(); channels];
    let mut scratch: Vec<Vec<f32>> = Vec::new();
    while let Some(p) = format.next_packet().unwrap() {
        if p.track_id != id {
            continue;
        }
        decoder
            .decode(&p)
            .unwrap()
            .copy_to_vecs_planar(&mut scratch);
        for (plane, s) in planes.iter_mut().zip(&scratch) {
            plane.extend_from_slice(s);
        }
    }
    let frames = planes[0].len();
    (planes.concat(), channels, frames)
}

/// The plain loop: symphonia, rubato (one resampler, reset per clip), a
/// mean of the channels, a crop at a fixed offset.
#[divan::bench]
fn plain_symphonia_rubato_loop(b: divan::Bencher) {
    let mut resampler = Fft::<f32>::new(RATE as usize, 16_000, 1024, 2, FixedSync::Input).unwrap();
    b.bench_local(|| {
        let mut out = Vec::with_capacity(CLIPS);
        for wav in WAVS.iter() {
            let (samples, channels, frames) = symphonia_decode(black_box(wav));
            let input = SequentialSlice::new(&samples, channels, frames).unwrap();
            resampler.reset();
            let room = resampler.process_all_needed_output_len(frames);
            let mut res = vec![0f32; room * channels];
            let mut adapter = SequentialSlice::new_mut(&mut res, channels, room).unwrap();
            let (_, n) = resampler
                .process_all_into_buffer(&input, &mut adapter, frames, None)
                .unwrap();
            let at = (n - CROP) / 2;
            let mono: Vec<f32> = (at..at + CROP)
                .map(|i| (res[i] + res[room + i]) * 0.5)
                .collect();
            out.push(mono);
        }
        out
    });
}

/// The crate's steps called in a loop on this thread: the same work as the
/// plain loop plus what the crate adds (limits, records, identity-seeded
/// crop).
#[divan::bench]
fn zephon_media_steps_loop(b: divan::Bencher) {
    let decode = AudioDecodeConfig::new("wav");
    let (resample, remix, crop) = (
        Resample::new(16_000),
        Remix::mono(),
        CropAudio::random(CROP, 1),
    );
    b.bench_local(|| {
        let mut out = Vec::with_capacity(CLIPS);
        for (i, wav) in WAVS.iter().enumerate() {
            let audio = decode.decode(black_box(wav)).unwrap();
            let s = AudioSample::new(audio, Record::new().with("i", i as i64));
            let s = crop
                .apply(remix.apply(resample.apply(s).unwrap()).unwrap())
                .unwrap();
            out.push(s);
        }
        out
    });
}

fn records() -> Vec<Record> {
    WAVS.iter()
        .enumerate()
        .map(|(i, w)| {
            Record::new()
                .with("wav", Value::Bytes(w.clone().into()))
                .with("i", i as i64)
        })
        .collect()
}

/// Records in, fused decode + resample + remix + crop, samples out in order.
fn pipeline(records: Vec<Record>, parallelism: usize, runner: Runner) -> usize {
    let config = AudioDecodeConfig::new("wav")
        .then(Resample::new(16_000))
        .then(Remix::mono())
        .then(CropAudio::random(CROP, 1));
    futures::stream::iter(records.into_iter().map(Ok))
        .decode_audio(config, parallelism)
        .into_blocking_iter(runner)
        .unwrap()
        .map(|s| s.unwrap().audio.frames)
        .sum::<usize>()
}

/// The crate's pipeline under the inline runner: everything on this thread,
/// the same work as the loops plus the stream's machinery.
#[divan::bench]
fn zephon_media_pipeline_inline(b: divan::Bencher) {
    let records = records();
    b.with_inputs(|| records.clone())
        .bench_local_values(|recs| pipeline(recs, 1, Runner::Inline));
}

/// The crate's pipeline under the threads runner with `parallelism`
/// workers.
#[divan::bench(args = [1, 2])]
fn zephon_media_pipeline_threads(b: divan::Bencher, parallelism: usize) {
    let records = records();
    b.with_inputs(|| records.clone())
        .bench_local_values(|recs| {
            let runner = Runner::Threads {
                workers: parallelism,
            };
            pipeline(recs, parallelism, runner)
        });
}
