//! Random and mutated bytes through each format's decoder and through the
//! operator: an audio result within the limits or an error, never a panic.

use super::audio_common::{FLAC, MP3, OGG, WAV, fixtures};
use proptest::prelude::*;
use zephon_core::{PipelineExt, Record, Runner, Value};
use zephon_media::{AudioDecodeConfig, AudioFailure, AudioPipelineExt};

fn member(key: &str, bytes: &[u8]) -> Record {
    Record::new()
        .with("flac", Value::Bytes(bytes.to_vec().into()))
        .with("__key__", key)
}

/// `base` with bytes overwritten and cut off, or `noise` behind one of the
/// formats' magic numbers (so the bytes get past the probe).
fn mutate(
    base: &[u8],
    edits: &[(prop::sample::Index, u8)],
    cut: Option<prop::sample::Index>,
    noise: Option<(usize, Vec<u8>)>,
) -> Vec<u8> {
    if let Some((magic, noise)) = noise {
        let m: &[u8] = [
            &b"RIFF\0\0\0\0WAVEfmt "[..],
            b"fLaC\0\0\0\x22",
            b"OggS\0\x02",
            b"\xff\xfb\x90\x64",
            b"ID3\x04\0\0",
        ][magic % 5];
        return [m, &noise].concat();
    }
    let mut bytes = base.to_vec();
    for (i, b) in edits {
        let i = i.index(bytes.len());
        bytes[i] = *b;
    }
    if let Some(c) = cut {
        bytes.truncate(c.index(bytes.len()));
    }
    bytes
}

/// Decodes or fails cleanly: no panic (turned into a "decoder failed"
/// message), and a result within the limits, of consistent shape.
fn decodes_or_fails_cleanly(bytes: &[u8]) -> Result<(), TestCaseError> {
    let max = 1u64 << 16;
    match AudioDecodeConfig::new("x").max_samples(max).decode(bytes) {
        Err(AudioFailure::Corrupt(m)) => {
            prop_assert!(!m.starts_with("the decoder failed"), "{}", m)
        }
        Err(_) => {}
        Ok(a) => {
            prop_assert!(a.samples.len() as u64 <= max);
            prop_assert_eq!(a.samples.len(), a.frames * a.channels as usize);
            prop_assert!(a.samples.iter().all(|x| x.is_finite()));
        }
    }
    Ok(())
}

fn edits() -> impl Strategy<Value = Vec<(prop::sample::Index, u8)>> {
    proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8)
}

fn noise() -> impl Strategy<Value = Option<(usize, Vec<u8>)>> {
    proptest::option::weighted(
        0.2,
        (0usize..5, proptest::collection::vec(any::<u8>(), 0..256)),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_wav_decodes_or_fails_cleanly(e in edits(), cut in proptest::option::of(any::<prop::sample::Index>()), n in noise()) {
        decodes_or_fails_cleanly(&mutate(WAV, &e, cut, n))?;
    }

    #[test]
    fn mutated_flac_decodes_or_fails_cleanly(e in edits(), cut in proptest::option::of(any::<prop::sample::Index>()), n in noise()) {
        decodes_or_fails_cleanly(&mutate(FLAC, &e, cut, n))?;
    }

    #[test]
    fn mutated_mp3_decodes_or_fails_cleanly(e in edits(), cut in proptest::option::of(any::<prop::sample::Index>()), n in noise()) {
        decodes_or_fails_cleanly(&mutate(MP3, &e, cut, n))?;
    }

    /// Through the operator: the good neighbours decode, the mutated
    /// member is a sample or an error naming its key, never a panic.
    #[test]
    fn mutated_members_in_a_pipeline_are_samples_or_errors_naming_them(
        base in 0usize..4, e in edits(), cut in proptest::option::of(any::<prop::sample::Index>()), n in noise(),
    ) {
        let bytes = mutate(fixtures()[base].1, &e, cut, n);
        let recs = vec![member("good_0", WAV), member("mutated", &bytes), member("good_1", FLAC)];
        let out: Vec<_> = futures::stream::iter(recs.into_iter().map(Ok))
            .decode_audio(AudioDecodeConfig::new("flac").max_samples(1 << 16), 2)
            .into_blocking_iter(Runner::threads())
            .unwrap()
            .collect();
        prop_assert!(out[0].is_ok());
        match &out[1] {
            Ok(s) => {
                prop_assert_eq!(out.len(), 3);
                prop_assert_eq!(s.record.text("__key__"), Some("mutated"));
                prop_assert!(out[2].is_ok());
            }
            Err(e) => {
                let m = e.to_string();
                prop_assert!(m.contains("member key `mutated`") && !m.contains("decoder failed"), "{}", m);
            }
        }
    }

    #[test]
    fn mutated_ogg_decodes_or_fails_cleanly(e in edits(), cut in proptest::option::of(any::<prop::sample::Index>()), n in noise()) {
        decodes_or_fails_cleanly(&mutate(OGG, &e, cut, n))?;
    }
}
