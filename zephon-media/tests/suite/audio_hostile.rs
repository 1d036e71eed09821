//! Hostile audio bytes: errors naming the sample, never a panic, never a
//! buffer a header asked for beyond the limits.

use super::audio_common::{FLAC, MP3, WAV, fixtures, varied_wav, wav};
use zephon_core::{Dataset, PipelineExt, Record, Runner, Value, WorkSource};
use zephon_media::{
    AudioDecodeConfig, AudioFailure, AudioPipelineExt, AudioSample, CropAudio, LogMel, OnError,
    Resample,
};

fn failure(bytes: &[u8]) -> AudioFailure {
    AudioDecodeConfig::new("x").decode(bytes).unwrap_err()
}

fn is_limit(e: &AudioFailure) -> bool {
    matches!(e, AudioFailure::Limit(_))
}

/// The fixture WAV with its header's sample rate (and byte rate) replaced.
fn wav_at_rate(rate: u32) -> Vec<u8> {
    let mut w = WAV.to_vec();
    w[24..28].copy_from_slice(&rate.to_le_bytes());
    w[28..32].copy_from_slice(&rate.wrapping_mul(4).to_le_bytes());
    w
}

/// The fixture FLAC with STREAMINFO's 20-bit sample rate and 36-bit total
/// sample count replaced.
fn flac_declaring(rate: u32, total: u64) -> Vec<u8> {
    let mut f = FLAC.to_vec();
    // STREAMINFO follows "fLaC" and its 4-byte block header; the rate sits
    // at bit 80 of it, then 3 bits of channels, 5 of depth, 36 of count.
    let at = 8 + 10;
    let mut bits = u64::from_be_bytes(f[at..at + 8].try_into().unwrap());
    let keep = (bits >> 36) & 0xFF; // channels and depth
    bits = ((rate as u64 & 0xF_FFFF) << 44) | (keep << 36) | (total & 0xF_FFFF_FFFF);
    f[at..at + 8].copy_from_slice(&bits.to_be_bytes());
    f
}

#[test]
fn absurd_rates_lengths_and_channel_counts_are_refused_from_the_header() {
    for rate in [1u32, 500, 1_000_000, u32::MAX] {
        let e = failure(&wav_at_rate(rate));
        assert!(is_limit(&e), "{rate} Hz: {e}");
        assert!(
            e.to_string().contains(&format!("sample rate {rate} Hz")),
            "{e}"
        );
    }
    // FLAC's largest expressible rate: its reader finds no frame of that
    // rate and refuses the stream before the limits are looked at.
    assert!(
        AudioDecodeConfig::new("x")
            .decode(&flac_declaring(655_350, 2000))
            .is_err()
    );
    // A length of 2^36 - 1 frames, and one longer than the stream.
    let e = failure(&flac_declaring(8000, (1 << 36) - 1));
    assert!(
        is_limit(&e) && e.to_string().contains("declares 68719476735 frames"),
        "{e}"
    );
    let e = failure(&flac_declaring(8000, 4000));
    assert!(matches!(e, AudioFailure::Corrupt(_)), "{e}");
    assert_eq!(
        AudioDecodeConfig::new("x")
            .decode(&flac_declaring(8000, 2000))
            .unwrap()
            .frames,
        2000
    );
    // A WAV whose RIFF and data chunks claim 4 GiB and hold 8 bytes.
    let mut w = wav(16_000, 1, &[0; 4]);
    w[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    w[40..44].copy_from_slice(&(u32::MAX - 36).to_le_bytes());
    let e = failure(&w);
    assert!(is_limit(&e) && e.to_string().contains("declares"), "{e}");
    // Within the default limit, refused under a smaller one.
    let e = AudioDecodeConfig::new("x")
        .max_seconds(0.1)
        .decode(WAV)
        .unwrap_err();
    assert!(is_limit(&e), "{e}");
    let e = AudioDecodeConfig::new("x")
        .max_samples(3999)
        .decode(WAV)
        .unwrap_err();
    assert!(is_limit(&e), "{e}");
    assert!(
        AudioDecodeConfig::new("x")
            .max_samples(4000)
            .decode(WAV)
            .is_ok()
    );
    let e = AudioDecodeConfig::new("x")
        .max_channels(1)
        .decode(WAV)
        .unwrap_err();
    assert!(is_limit(&e) && e.to_string().contains("2 channels"), "{e}");
    let e = AudioDecodeConfig::new("x")
        .sample_rates(16_000..=48_000)
        .decode(WAV)
        .unwrap_err();
    assert!(
        is_limit(&e) && e.to_string().contains("outside 16000..=48000"),
        "{e}"
    );
    // Many channels in the header.
    let mut w = wav(8000, 1, &[0; 64]);
    w[22..24].copy_from_slice(&64u16.to_le_bytes());
    assert!(AudioDecodeConfig::new("x").decode(&w).is_err());
}

#[test]
fn truncated_files_and_bytes_that_are_not_audio_are_corrupt() {
    for (name, bytes) in fixtures() {
        for cut in [bytes.len() / 2, bytes.len() * 3 / 4, 60] {
            let e = failure(&bytes[..cut]);
            assert!(
                matches!(e, AudioFailure::Corrupt(_)),
                "{name} cut at {cut}: {e}"
            );
        }
    }
    for junk in [
        &b""[..],
        b"hello, world",
        b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR",
        &[0u8; 4096],
    ] {
        let e = failure(junk);
        assert!(
            e.to_string()
                .starts_with("not a readable WAV, FLAC, MP3 or Ogg Vorbis stream"),
            "{e}"
        );
    }
    let e = failure(b"RIFF\x04\0\0\0WAVE");
    assert!(matches!(e, AudioFailure::Corrupt(_)), "{e}");
}

fn pipeline_error(records: Vec<Record>, config: AudioDecodeConfig) -> String {
    let ds = Dataset::in_memory("speech", vec![records]).unwrap();
    let ws = WorkSource::builder()
        .dataset(ds, 1.0)
        .shuffle_within_shard(false)
        .build()
        .unwrap();
    let catalog = ws.catalog().clone();
    ws.stream()
        .fetch(1)
        .decode_audio(config, 2)
        .into_blocking_iter(Runner::threads())
        .unwrap()
        .find_map(|r| r.err())
        .expect("an error")
        .name_sources(&catalog)
        .to_string()
}

fn member(key: &str, bytes: &[u8]) -> Record {
    Record::new()
        .with("flac", Value::Bytes(bytes.to_vec().into()))
        .with("__key__", key)
}

#[test]
fn errors_name_dataset_shard_sample_and_member_key() {
    let e = pipeline_error(
        vec![
            member("utt_000", FLAC),
            member("utt_001", &FLAC[..FLAC.len() / 2]),
        ],
        AudioDecodeConfig::new("flac"),
    );
    assert!(
        e.starts_with("operator `decode_audio`: dataset `speech`, shard `memory://speech/0`, sample 1: member key `utt_001`: "),
        "{e}"
    );
    let e = pipeline_error(
        vec![member("img", b"GIF89a, not audio")],
        AudioDecodeConfig::new("flac"),
    );
    assert!(
        e.contains("member key `img`: not a readable WAV, FLAC, MP3 or Ogg Vorbis stream (17 bytes starting 47 49 46"),
        "{e}"
    );
    let e = pipeline_error(
        vec![member("long", &flac_declaring(8000, 1 << 35))],
        AudioDecodeConfig::new("flac"),
    );
    assert!(
        e.contains("member key `long`: declares 34359738368 frames of 2 channels at 8000 Hz, more than max_samples 67108864"),
        "{e}"
    );
    let e = pipeline_error(
        vec![member("fast", &wav_at_rate(1_000_000))],
        AudioDecodeConfig::new("flac"),
    );
    assert!(
        e.ends_with(
            "sample 0: member key `fast`: sample rate 1000000 Hz is outside 1000..=384000 Hz"
        ),
        "{e}"
    );
    // A missing field is a schema mistake: an error even under skip.
    let e = pipeline_error(
        vec![Record::new().with("wav", Value::Bytes(WAV.to_vec().into()))],
        AudioDecodeConfig::new("flac").on_error(OnError::Skip),
    );
    assert!(
        e.ends_with("sample 0: no bytes or path field `flac`"),
        "{e}"
    );
}

#[test]
fn skipped_samples_are_counted_and_the_same_for_any_parallelism() {
    let recs: Vec<Record> = (0..30u64)
        .map(|i| {
            let mut b = varied_wav(i, 4);
            if i % 4 == 1 {
                b.truncate(b.len() / 2);
            }
            member(&format!("k{i}"), &b).with("i", i as i64)
        })
        .collect();
    let run = |p: usize| {
        let s = futures::stream::iter(recs.clone().into_iter().map(Ok))
            .decode_audio(AudioDecodeConfig::new("flac").on_error(OnError::Skip), p);
        let stats = s.stats();
        let kept: Vec<i64> = s
            .into_blocking_iter(Runner::threads())
            .unwrap()
            .map(|r| r.unwrap().record.get("i").unwrap().as_int().unwrap())
            .collect();
        (kept, stats.skipped.get(), stats.decoded.get())
    };
    let (kept, skipped, decoded) = run(1);
    assert_eq!(skipped, 8);
    assert!(kept.iter().all(|i| i % 4 != 1));
    assert_eq!(decoded, 22);
    assert_eq!(run(4), (kept, skipped, decoded));
}

#[test]
fn out_of_range_options_are_errors_at_the_first_poll() {
    let first = |s: Box<dyn Iterator<Item = zephon_core::Result<AudioSample>>>| {
        s.into_iter().next().unwrap().unwrap_err().to_string()
    };
    let it = |s| Box::new(s) as Box<dyn Iterator<Item = _>>;
    let recs = || futures::stream::iter(vec![Ok(Record::new())]);
    for (config, key) in [
        (
            AudioDecodeConfig::new("x").max_samples(0),
            "decode_audio.max_samples",
        ),
        (
            AudioDecodeConfig::new("x").max_seconds(0.0),
            "decode_audio.max_seconds",
        ),
        (
            AudioDecodeConfig::new("x").max_channels(0),
            "decode_audio.max_channels",
        ),
        (
            AudioDecodeConfig::new("x").sample_rates(0..=10),
            "decode_audio.sample_rates",
        ),
    ] {
        let e = first(it(recs()
            .decode_audio(config, 1)
            .into_blocking_iter(Runner::Inline)
            .unwrap()));
        assert!(e.contains(&format!("`{key}`")), "{e}");
    }
    let e = first(it(recs()
        .decode_audio(AudioDecodeConfig::new("x"), 0)
        .into_blocking_iter(Runner::Inline)
        .unwrap()));
    assert!(e.contains("`decode_audio.parallelism`"), "{e}");
    let samples = || futures::stream::iter(Vec::<zephon_core::Result<AudioSample>>::new());
    let e = first(it(samples()
        .resample(Resample::new(0), 1)
        .into_blocking_iter(Runner::Inline)
        .unwrap()));
    assert!(e.contains("`resample.rate`"), "{e}");
    let e = first(it(samples()
        .crop_audio(CropAudio::center(0), 1)
        .into_blocking_iter(Runner::Inline)
        .unwrap()));
    assert!(e.contains("`crop_audio.frames`"), "{e}");
    for (mel, key) in [
        (LogMel::new(16_000, 401, 160, 80), "log_mel.n_fft"),
        (LogMel::new(16_000, 400, 0, 80), "log_mel.hop"),
        (LogMel::new(16_000, 400, 160, 0), "log_mel.n_mels"),
        (
            LogMel::new(16_000, 400, 160, 80).f_max(9000.0),
            "log_mel.f_min",
        ),
        (
            LogMel::new(16_000, 400, 160, 80).floor(0.0),
            "log_mel.floor",
        ),
    ] {
        let e = mel.compute(&[0.0; 10]).unwrap_err().to_string();
        assert!(e.contains(&format!("`{key}`")), "{e}");
    }
}

#[test]
fn an_mp3_without_its_xing_header_is_still_measured_before_decoding() {
    // Without the Xing frame the file says nothing of its length: the
    // reader counts the frames, so the limit still applies up front.
    let mut bare = MP3.to_vec();
    let at = bare.windows(4).position(|w| w == b"Xing").unwrap();
    bare[at..at + 4].copy_from_slice(b"None");
    let one = AudioDecodeConfig::new("x").decode(&bare).unwrap();
    // The encoder's delay and padding are no longer known, so kept.
    assert!(
        (8000..8000 + 2 * 1152).contains(&one.frames),
        "{}",
        one.frames
    );
    let two = [&bare[..], &bare[..]].concat();
    let e = AudioDecodeConfig::new("x")
        .max_seconds(0.75)
        .decode(&two)
        .unwrap_err();
    assert!(
        is_limit(&e) && e.to_string().starts_with("declares 19584 frames"),
        "{e}"
    );
    // Concatenated streams with their headers end where the first header says.
    assert_eq!(
        AudioDecodeConfig::new("x")
            .decode(&[MP3, MP3].concat())
            .unwrap()
            .frames,
        8000
    );
}
