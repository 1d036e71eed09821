//! What each audio format decodes to: the fixtures' known signals, exactly
//! for the lossless formats, by frequency and level for the lossy ones.

use super::audio_common::{FLAC, MP3, OGG, WAV, sine, tone, wav_of};
use zephon_core::{PipelineExt, Record, Runner, Value};
use zephon_media::{Audio, AudioDecodeConfig, AudioPipelineExt, AudioSample};

fn decode(bytes: &[u8]) -> Audio {
    AudioDecodeConfig::new("x").decode(bytes).unwrap()
}

#[test]
fn wav_and_flac_decode_to_the_exact_16_bit_samples() {
    let wav = decode(WAV);
    let flac = decode(FLAC);
    assert_eq!((wav.sample_rate, wav.channels, wav.frames), (8000, 2, 2000));
    assert_eq!(wav, flac, "the same integers, losslessly");
    // Planar: the left plane is the 440 Hz sine, the right the 880 Hz one,
    // each value a 16-bit integer over 32768.
    for (c, (freq, amp)) in [(440.0, 0.5), (880.0, 0.25)].into_iter().enumerate() {
        let want = sine(8000, 2000, freq, amp);
        for (n, (&got, w)) in wav.channel(c).iter().zip(&want).enumerate() {
            let q = got as f64 * 32768.0;
            assert_eq!(q, q.round(), "channel {c} sample {n} is not 16-bit");
            // The file holds round(w * 32767); one step of slack for the
            // rounding of a sine computed elsewhere.
            assert!(
                (q - (w * 32767.0).round()).abs() <= 1.0,
                "channel {c} sample {n}: {q} for {}",
                w * 32767.0
            );
        }
    }
}

#[test]
fn mp3_and_vorbis_decode_to_the_sine_they_encode() {
    for (name, bytes) in [("mp3", MP3), ("ogg", OGG)] {
        let a = decode(bytes);
        assert_eq!((a.sample_rate, a.channels), (16_000, 1), "{name}");
        // 0.5 s exactly: the MP3 encoder's delay and padding are trimmed
        // (the file records them), Vorbis' granule positions say where the
        // stream ends.
        assert_eq!(a.frames, 8000, "{name}");
        let mid = &a.samples[2000..6000];
        let at_1k = tone(mid, 16_000, 1000.0);
        assert!((at_1k - 0.5).abs() < 0.05, "{name}: 1 kHz at {at_1k}");
        for other in [250.0, 500.0, 2000.0, 3000.0] {
            let t = tone(mid, 16_000, other);
            assert!(t < 0.02, "{name}: {other} Hz at {t}");
        }
        let peak = mid.iter().fold(0f32, |m, x| m.max(x.abs()));
        assert!((0.45..0.56).contains(&peak), "{name}: peak {peak}");
    }
}

#[test]
fn a_path_field_is_read_and_the_record_keeps_its_other_fields() {
    let dir = std::env::temp_dir().join(format!("zephon-media-audio-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("a.flac");
    std::fs::write(&path, FLAC).unwrap();
    let recs = vec![
        Ok(Record::new()
            .with("audio", path.to_str().unwrap())
            .with("text", "hello")),
        Ok(Record::new()
            .with("audio", Value::Bytes(OGG.to_vec().into()))
            .with("text", "world")),
    ];
    let s = futures::stream::iter(recs).decode_audio(AudioDecodeConfig::new("audio"), 2);
    let stats = s.stats();
    let out: Vec<AudioSample> = s
        .into_blocking_iter(Runner::threads())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out[0].audio, decode(FLAC));
    assert_eq!(out[0].record.text("text"), Some("hello"));
    assert!(
        out[0].record.get("audio").is_none(),
        "the decoded field is taken out"
    );
    assert_eq!(out[1].record.text("text"), Some("world"));
    assert_eq!(out[1].length, out[1].audio.frames);
    assert_eq!(stats.decoded.get(), 2);
    assert_eq!(
        stats.frames.get(),
        (out[0].audio.frames + out[1].audio.frames) as u64
    );
}
#[test]
fn tags_and_extra_chunks_around_the_audio_are_passed_over() {
    // An ID3v1 tag after the MP3 frames, an ID3v2 tag before them.
    let mut id3v1 = MP3.to_vec();
    id3v1.extend(b"TAG");
    id3v1.extend([b' '; 125]);
    let mut id3v2 =
        b"ID3\x04\x00\x00\x00\x00\x00\x15TIT2\x00\x00\x00\x0b\x00\x00\x03hello song".to_vec();
    id3v2.extend(MP3);
    // A LIST chunk after the WAV's data chunk.
    let mut list = WAV.to_vec();
    list.extend(b"LIST\x0c\0\0\0INFOabcd\0\0\0\0");
    let riff = (list.len() - 8) as u32;
    list[4..8].copy_from_slice(&riff.to_le_bytes());
    assert_eq!(decode(&id3v1), decode(MP3));
    assert_eq!(decode(&id3v2), decode(MP3));
    assert_eq!(decode(&list), decode(WAV));
    // A chained Ogg file: its first stream.
    assert_eq!(decode(&[OGG, OGG].concat()), decode(OGG));
}

#[test]
fn wav_of_8_24_and_32_bit_pcm_and_float_decodes_to_the_values_it_holds() {
    // 8-bit is unsigned, offset by 128.
    let a = decode(&wav_of(8000, 1, 1, 8, &[0, 64, 128, 192, 255]));
    assert_eq!(a.samples, [-1.0, -0.5, 0.0, 0.5, 127.0 / 128.0]);
    let v24 = [-(1 << 23), -(1 << 22), 0, 1, (1 << 23) - 1];
    let bytes: Vec<u8> = v24
        .iter()
        .flat_map(|v: &i32| v.to_le_bytes()[..3].to_vec())
        .collect();
    let a = decode(&wav_of(8000, 1, 1, 24, &bytes));
    let want: Vec<f32> = v24.iter().map(|&v| v as f32 / (1 << 23) as f32).collect();
    assert_eq!(a.samples, want);
    let v32 = [i32::MIN, -(1 << 30), 0, 1 << 30];
    let bytes: Vec<u8> = v32.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(
        decode(&wav_of(8000, 1, 1, 32, &bytes)).samples,
        [-1.0, -0.5, 0.0, 0.5]
    );
    // IEEE float, stereo: interleaved in the file, planar out.
    let f = [0.25f32, -0.75, 0.5, 1.0, -1.0, 0.125];
    let bytes: Vec<u8> = f.iter().flat_map(|v| v.to_le_bytes()).collect();
    let a = decode(&wav_of(48_000, 2, 3, 32, &bytes));
    assert_eq!((a.sample_rate, a.channels, a.frames), (48_000, 2, 3));
    assert_eq!(a.samples, [0.25, 0.5, -1.0, -0.75, 1.0, 0.125]);
}
