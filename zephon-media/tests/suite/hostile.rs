//! Hostile bytes: errors naming the sample, never a panic, never a buffer
//! a header asked for beyond `max_pixels`.

use super::common::{crc32, encoded, jpeg, png_rgb};
use proptest::prelude::*;
use zephon_core::{Dataset, PipelineExt, Record, Runner, Value, WorkSource};
use zephon_media::{
    DEFAULT_MAX_PIXELS, DecodeConfig, DecodeFailure, Flip, ImageSample, MediaPipelineExt, OnError,
    RandomResizedCrop,
};

/// A small real PNG whose header (IHDR, CRC fixed) declares `w × h`.
fn png_header(w: u32, h: u32) -> Vec<u8> {
    let mut p = png_rgb(4, 4, 1);
    p[16..20].copy_from_slice(&w.to_be_bytes());
    p[20..24].copy_from_slice(&h.to_be_bytes());
    let crc = crc32(&p[12..29]);
    p[29..33].copy_from_slice(&crc.to_be_bytes());
    p
}

/// A JPEG whose frame header (SOF0) declares `w × h`.
fn jpeg_declaring(w: u16, h: u16) -> Vec<u8> {
    let mut j = jpeg(16, 16, 1);
    let sof = j.windows(2).position(|p| p == [0xFF, 0xC0]).unwrap();
    j[sof + 5..sof + 7].copy_from_slice(&h.to_be_bytes());
    j[sof + 7..sof + 9].copy_from_slice(&w.to_be_bytes());
    j
}

#[test]
fn enormous_headers_are_refused_before_allocating() {
    let too_large = |e: DecodeFailure| matches!(e, DecodeFailure::TooLarge { .. });
    let c = DecodeConfig::new("x");
    let e = c.decode(&png_header(100_000, 100_000)).unwrap_err();
    assert!(too_large(e.clone()), "{e}");
    assert_eq!(
        e.to_string(),
        format!("100000x100000 is more than max_pixels {DEFAULT_MAX_PIXELS}")
    );
    let e = c.decode(&jpeg_declaring(60_000, 60_000)).unwrap_err();
    assert!(too_large(e.clone()), "{e}");
    // Under a small limit, a small image is refused too.
    let e = DecodeConfig::new("x")
        .max_pixels(100)
        .decode(&png_rgb(11, 10, 1))
        .unwrap_err();
    assert!(too_large(e.clone()), "{e}");
    // A header within the limit but with too little data is corrupt.
    assert!(matches!(
        c.decode(&png_header(64, 64)),
        Err(DecodeFailure::Corrupt(_))
    ));
}

fn pipeline_error(records: Vec<Record>, config: DecodeConfig) -> String {
    let ds = Dataset::in_memory("pets", vec![records]).unwrap();
    let ws = WorkSource::builder()
        .dataset(ds, 1.0)
        .shuffle_within_shard(false)
        .build()
        .unwrap();
    let catalog = ws.catalog().clone();
    ws.stream()
        .fetch(1)
        .decode_image(config, 2)
        .into_blocking_iter(Runner::threads())
        .unwrap()
        .find_map(|r| r.err())
        .expect("an error")
        .name_sources(&catalog)
        .to_string()
}

fn member(key: &str, bytes: Vec<u8>) -> Record {
    Record::new()
        .with("jpg", Value::Bytes(bytes.into()))
        .with("__key__", key)
}

#[test]
fn errors_name_dataset_shard_sample_and_member_key() {
    let good = jpeg(20, 20, 1);
    let truncated = good[..good.len() / 3].to_vec();
    let e = pipeline_error(
        vec![
            member("cat_000", good.clone()),
            member("cat_001", truncated),
        ],
        DecodeConfig::new("jpg"),
    );
    assert!(
        e.starts_with("operator `decode_image`: dataset `pets`, shard `memory://pets/0`, sample 1: member key `cat_001`: "),
        "{e}"
    );
    let e = pipeline_error(
        vec![member("dog", b"GIF89a, not what the name says".to_vec())],
        DecodeConfig::new("jpg"),
    );
    assert!(
        e.contains("member key `dog`: not a JPEG, PNG or WebP image (30 bytes starting 47 49 46"),
        "{e}"
    );
    let e = pipeline_error(
        vec![member("big", png_header(90_000, 90_000))],
        DecodeConfig::new("jpg"),
    );
    assert!(
        e.ends_with("member key `big`: 90000x90000 is more than max_pixels 67108864"),
        "{e}"
    );
    // A missing field is a schema mistake: an error even under skip.
    let e = pipeline_error(
        vec![Record::new().with("png", Value::Bytes(good.into()))],
        DecodeConfig::new("jpg").on_error(OnError::Skip),
    );
    assert!(e.ends_with("sample 0: no bytes or path field `jpg`"), "{e}");
}

#[test]
fn skipped_samples_are_counted_and_the_same_for_any_parallelism() {
    let recs: Vec<Record> = (0..30u64)
        .map(|i| {
            let mut b = encoded(i, 9);
            if i % 4 == 1 {
                b.truncate(b.len() / 2);
            }
            member(&format!("k{i}"), b).with("i", i as i64)
        })
        .collect();
    let run = |p: usize| {
        let s = futures::stream::iter(recs.clone().into_iter().map(Ok))
            .decode_image(DecodeConfig::new("jpg").on_error(OnError::Skip), p);
        let stats = s.stats();
        let kept: Vec<i64> = s
            .into_blocking_iter(Runner::threads())
            .unwrap()
            .map(|r| r.unwrap().record.get("i").unwrap().as_int().unwrap())
            .collect();
        (kept, stats.skipped.get(), stats.decoded.get())
    };
    let (kept, skipped, decoded) = run(1);
    assert!((1..=8).contains(&skipped), "{skipped}");
    assert_eq!(kept.len() as u64 + skipped, 30);
    assert_eq!(decoded, kept.len() as u64);
    assert_eq!(run(4), (kept, skipped, decoded));
}

#[test]
fn out_of_range_options_are_errors_at_the_first_poll() {
    let first = |s: Box<dyn Iterator<Item = zephon_core::Result<ImageSample>>>| {
        s.into_iter().next().unwrap().unwrap_err().to_string()
    };
    let recs = || futures::stream::iter(vec![Ok(Record::new())]);
    let it = |s| Box::new(s) as Box<dyn Iterator<Item = _>>;
    let e = first(it(recs()
        .decode_image(DecodeConfig::new("x"), 0)
        .into_blocking_iter(Runner::Inline)
        .unwrap()));
    assert!(e.contains("`decode_image.parallelism`"), "{e}");
    let e = first(it(recs()
        .decode_image(DecodeConfig::new("x").max_pixels(0), 1)
        .into_blocking_iter(Runner::Inline)
        .unwrap()));
    assert!(e.contains("`decode_image.max_pixels`"), "{e}");
    let samples = || futures::stream::iter(Vec::<zephon_core::Result<ImageSample>>::new());
    let e = first(it(samples()
        .random_resized_crop(RandomResizedCrop::new(4, 4).scale(0.5, 0.1), 1)
        .into_blocking_iter(Runner::Inline)
        .unwrap()));
    assert!(e.contains("`random_resized_crop.scale`"), "{e}");
    let e = first(it(samples()
        .flip(Flip::new(2.0, 0), 1)
        .into_blocking_iter(Runner::Inline)
        .unwrap()));
    assert!(e.contains("`flip.p`"), "{e}");
}

fn any_encoding() -> impl Strategy<Value = Vec<u8>> {
    (0u64..60).prop_map(|i| encoded(i, 3))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random bytes, and real encodings with bytes overwritten or cut off:
    /// the decoder returns (an image within the limit, of consistent size,
    /// or an error), never panics; nor does the header probe.
    #[test]
    fn mutated_bytes_decode_or_fail_cleanly(
        base in any_encoding(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        cut in proptest::option::of(any::<prop::sample::Index>()),
        noise in proptest::collection::vec(any::<u8>(), 0..64),
        random in any::<bool>(),
    ) {
        let mut bytes = if random { noise } else { base };
        if !bytes.is_empty() {
            for (i, b) in &edits {
                let i = i.index(bytes.len());
                bytes[i] = *b;
            }
            if let Some(c) = cut {
                bytes.truncate(c.index(bytes.len()));
            }
        }
        let config = DecodeConfig::new("x").max_pixels(1 << 16);
        let r = config.decode(&bytes);
        // The header probe `zephon inspect` uses sees the same bytes: no
        // panic either, and where both read them, the same size (the
        // decoder turns it by any EXIF orientation).
        let probed = zephon_media::probe_image(&bytes);
        if let Err(m) = &probed {
            prop_assert!(!m.starts_with("the decoder failed"), "{}", m);
        }
        if let (Ok(info), Ok(img)) = (&probed, &r) {
            let (w, h) = (img.width, img.height);
            prop_assert!((info.width, info.height) == (w, h) || (info.height, info.width) == (w, h),
                "probe {:?}, decoded {}x{}", info, w, h);
        }
        // `decode` turns a decoder's panic into this error: none may happen.
        if let Err(DecodeFailure::Corrupt(m)) = &r {
            prop_assert!(!m.starts_with("the decoder failed"), "{}", m);
        }
        if let Ok(img) = r {
            prop_assert!(img.width as u64 * img.height as u64 <= 1 << 16);
            prop_assert_eq!(img.pixels.len(), img.width as usize * img.height as usize * 3);
        }
    }
}
