//! What each format and colour type decodes to, and what the operators do
//! with it.

use super::common::{jpeg, png, png_rgb, rgb, webp_rgb};
use image::ExtendedColorType;
use zephon_core::obs::Explain;
use zephon_core::{PipelineExt, Record, Runner, Value};
use zephon_media::{
    CenterCrop, Channels, CollateConfig, DecodeConfig, Image, ImageOp, ImageSample, Layout,
    MediaPipelineExt, RandomResizedCrop,
};

fn decode(bytes: &[u8]) -> Image {
    DecodeConfig::new("x").decode(bytes).unwrap()
}

#[test]
fn webp_and_png_decode_exactly_and_jpeg_closely() {
    let want = rgb(17, 9, 3);
    for bytes in [png_rgb(17, 9, 3), webp_rgb(17, 9, 3)] {
        let img = decode(&bytes);
        assert_eq!((img.width, img.height, img.channels), (17, 9, 3));
        assert_eq!(img.pixels.as_u8().unwrap(), &want[..]);
    }
    let img = decode(&jpeg(17, 9, 3));
    assert_eq!((img.width, img.height, img.channels), (17, 9, 3));
}

#[test]
fn gray_alpha_and_16_bit_become_8_bit_rgb() {
    let gray = decode(&png(&[0, 100, 200, 255], 2, 2, ExtendedColorType::L8));
    assert_eq!(gray.channels, 3);
    assert_eq!(gray.pixel_u8(1, 0), Some(&[100, 100, 100][..]));
    let rgba = decode(&png(
        &[1, 2, 3, 0, 4, 5, 6, 255],
        2,
        1,
        ExtendedColorType::Rgba8,
    ));
    assert_eq!(
        rgba.pixels.as_u8().unwrap(),
        &[1, 2, 3, 4, 5, 6],
        "alpha dropped, not composited"
    );
    // 16-bit values in native byte order for the encoder.
    let wide: Vec<u8> = [0xFFFFu16, 0x0000, 0x8080]
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .collect();
    let img = decode(&png(&wide, 1, 1, ExtendedColorType::Rgb16));
    assert_eq!(img.pixels.as_u8().unwrap(), &[255, 0, 128]);
    let one = DecodeConfig::new("x")
        .channels(Channels::Gray)
        .decode(&png_rgb(5, 4, 1))
        .unwrap();
    assert_eq!((one.channels, one.pixels.len()), (1, 20));
}

/// A JPEG with an EXIF APP1 segment saying `orientation`.
fn with_orientation(jpeg: &[u8], orientation: u16) -> Vec<u8> {
    let mut tiff = b"MM\0\x2a\0\0\0\x08".to_vec();
    tiff.extend(1u16.to_be_bytes()); // one entry
    tiff.extend(0x0112u16.to_be_bytes()); // Orientation
    tiff.extend(3u16.to_be_bytes()); // SHORT
    tiff.extend(1u32.to_be_bytes());
    tiff.extend(orientation.to_be_bytes());
    tiff.extend([0, 0]);
    tiff.extend(0u32.to_be_bytes()); // no next IFD
    let mut app1 = b"Exif\0\0".to_vec();
    app1.extend(tiff);
    let mut out = jpeg[..2].to_vec();
    out.extend([0xFF, 0xE1]);
    out.extend(((app1.len() + 2) as u16).to_be_bytes());
    out.extend(app1);
    out.extend(&jpeg[2..]);
    out
}

#[test]
fn exif_orientation_is_applied_unless_turned_off() {
    let j = with_orientation(&jpeg(30, 10, 1), 6);
    let img = decode(&j);
    assert_eq!((img.width, img.height), (10, 30), "rotated 90 degrees");
    let raw = DecodeConfig::new("x")
        .orientation(false)
        .decode(&j)
        .unwrap();
    assert_eq!((raw.width, raw.height), (30, 10));
}

#[test]
fn bytes_are_decoded_by_what_they_are_not_by_their_name_and_paths_are_read() {
    let dir = std::env::temp_dir().join(format!("zephon-media-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("a.jpg");
    std::fs::write(&path, png_rgb(6, 5, 2)).unwrap();
    let recs = vec![
        Ok(Record::new().with("png", Value::Bytes(jpeg(8, 4, 1).into()))),
        Ok(Record::new().with("png", path.to_str().unwrap())),
    ];
    let out: Vec<ImageSample> = futures::stream::iter(recs)
        .decode_image(DecodeConfig::new("png"), 1)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!((out[0].image.width, out[1].image.width), (8, 6));
    assert!(
        out[0].record.get("png").is_none(),
        "the bytes field is taken out"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn chw_is_the_transpose_of_hwc() {
    let samples: Vec<ImageSample> = (0..3)
        .map(|i| ImageSample {
            image: decode(&png_rgb(5, 4, i)),
            record: Record::new(),
        })
        .collect();
    let batch = |layout| {
        CollateConfig::new(layout)
            .collate(zephon_core::Batch {
                lane: 0,
                index: 0,
                items: samples.clone(),
                cut: None,
            })
            .unwrap()
    };
    let (hwc, chw) = (batch(Layout::Hwc), batch(Layout::Chw));
    assert_eq!(hwc.shape(), [3, 4, 5, 3]);
    assert_eq!(chw.shape(), [3, 3, 4, 5]);
    let (a, b) = (hwc.pixels.as_u8().unwrap(), chw.pixels.as_u8().unwrap());
    for n in 0..3 {
        for y in 0..4 {
            for x in 0..5 {
                for c in 0..3 {
                    assert_eq!(
                        a[((n * 4 + y) * 5 + x) * 3 + c],
                        b[((n * 3 + c) * 4 + y) * 5 + x]
                    );
                }
            }
        }
    }
}

#[test]
fn mixed_sizes_in_a_batch_are_an_error_naming_the_row() {
    let s = |w| ImageSample {
        image: Image::new_u8(w, 2, 1, vec![0; w as usize * 2]).unwrap(),
        record: Record::new(),
    };
    let e = CollateConfig::new(Layout::Hwc)
        .collate(zephon_core::Batch {
            lane: 1,
            index: 4,
            items: vec![s(2), s(3)],
            cut: None,
        })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("row 1 of batch (lane 1, index 4) is 3x2x1 u8"),
        "{e}"
    );
}

#[test]
fn the_crop_falls_back_to_the_centre_and_keeps_boxes_inside() {
    // A ratio no box of the scale can meet: every try misses.
    let op = RandomResizedCrop::new(8, 8)
        .scale(0.99, 1.0)
        .ratio(10.0, 10.0);
    assert_eq!(op.crop_box(40, 40, 1), (0, 18, 40, 4));
    let op = RandomResizedCrop::new(8, 8);
    for id in 0..500 {
        let (l, t, w, h) = op.crop_box(50, 30, id);
        assert!(
            w > 0 && h > 0 && l + w <= 50 && t + h <= 30,
            "{id}: {:?}",
            (l, t, w, h)
        );
    }
    let s = ImageSample {
        image: Image::new_u8(3, 3, 1, (0..9).collect()).unwrap(),
        record: Record::new(),
    };
    assert_eq!(
        CenterCrop::new(1, 1).apply(s).unwrap().image.pixels.as_u8(),
        Some(&[4][..])
    );
}

#[test]
fn adapters_show_their_inner_stream_forward_size_hints_and_explain_their_stage() {
    use futures::Stream;
    let recs = futures::stream::iter((0..5).map(|_| Ok(Record::new())));
    let s = recs.decode_image(DecodeConfig::new("x"), 3);
    assert!(format!("{s:?}").contains("Iter"), "{s:?}");
    assert_eq!(s.size_hint(), (0, Some(5)));
    let items = futures::stream::iter((0..4).map(|_| {
        Ok(ImageSample {
            image: Image::new_u8(1, 1, 1, vec![0]).unwrap(),
            record: Record::new(),
        })
    }));
    let c = items.center_crop(CenterCrop::new(1, 1), 2);
    assert_eq!(c.size_hint(), (4, Some(4)));
    assert_eq!(c.name(), "center_crop");
    let ds = zephon_core::Dataset::in_memory("d", vec![vec![Record::new(); 4]]).unwrap();
    let ws = zephon_core::WorkSource::builder()
        .dataset(ds, 1.0)
        .build()
        .unwrap();
    let p = ws
        .stream()
        .fetch(1)
        .decode_image(DecodeConfig::new("x"), 2)
        .flip(zephon_media::Flip::new(0.5, 1), 1)
        .batch(2)
        .collate_images(CollateConfig::new(Layout::Chw));
    let mut stages = Vec::new();
    p.describe(&mut stages);
    let names: Vec<&str> = stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "work_source",
            "fetch",
            "decode_image",
            "flip",
            "batch",
            "collate_images"
        ]
    );
}
