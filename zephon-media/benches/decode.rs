//! Decode + crop + resize of JPEGs to 224x224: the decoders (the `image`
//! crate's, `zune-jpeg` called directly) and the resizers (`image`'s
//! triangle filter, `fast_image_resize`'s bilinear convolution) side by side,
//! and the crate's own path (`decode_bytes` + `RandomResizedCrop`).
//!
//! `cargo bench -p zephon-media --bench decode`

use image::{ImageEncoder, RgbImage};
use std::hint::black_box;
use std::sync::LazyLock;

fn main() {
    divan::main();
}

/// A photo-like 500x375 RGB picture (ImageNet's median size): gradients
/// and a hashed texture, so the encoder has detail to keep.
fn picture(w: u32, h: u32) -> RgbImage {
    RgbImage::from_fn(w, h, |x, y| {
        let n = zephon_core::hash::key(&[x as u64 / 3, y as u64 / 3]) as u8 / 4;
        image::Rgb([
            (x * 255 / w) as u8 ^ n,
            (y * 255 / h) as u8,
            ((x + y) % 256) as u8 / 2 + n,
        ])
    })
}

static JPEG: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let img = picture(500, 375);
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90)
        .write_image(img.as_raw(), 500, 375, image::ExtendedColorType::Rgb8)
        .unwrap();
    out
});

/// The crop box every resizer gets: 80% of the picture, off centre.
const CROP: (u32, u32, u32, u32) = (40, 20, 400, 300);

fn decode_image_crate(bytes: &[u8]) -> (Vec<u8>, u32, u32) {
    let img = image::load_from_memory_with_format(bytes, image::ImageFormat::Jpeg).unwrap();
    let (w, h) = (img.width(), img.height());
    (img.into_rgb8().into_raw(), w, h)
}

fn decode_zune(bytes: &[u8]) -> (Vec<u8>, u32, u32) {
    let mut d = zune_jpeg::JpegDecoder::new(std::io::Cursor::new(bytes));
    let px = d.decode().unwrap();
    let (w, h) = d.dimensions().unwrap();
    (px, w as u32, h as u32)
}

fn resize_image_crate(px: Vec<u8>, w: u32, h: u32) -> Vec<u8> {
    let img = RgbImage::from_raw(w, h, px).unwrap();
    let (x, y, cw, ch) = CROP;
    let view = image::imageops::crop_imm(&img, x, y, cw, ch);
    image::imageops::resize(&*view, 224, 224, image::imageops::FilterType::Triangle).into_raw()
}

fn resize_fir(px: Vec<u8>, w: u32, h: u32) -> Vec<u8> {
    use fast_image_resize as fr;
    let src = fr::images::Image::from_vec_u8(w, h, px, fr::PixelType::U8x3).unwrap();
    let mut dst = fr::images::Image::new(224, 224, fr::PixelType::U8x3);
    let (x, y, cw, ch) = CROP;
    let opts = fr::ResizeOptions::new()
        .resize_alg(fr::ResizeAlg::Convolution(fr::FilterType::Bilinear))
        .crop(x as f64, y as f64, cw as f64, ch as f64);
    fr::Resizer::new().resize(&src, &mut dst, &opts).unwrap();
    dst.into_vec()
}

#[divan::bench]
fn decode_image(b: divan::Bencher) {
    b.bench(|| decode_image_crate(black_box(&JPEG)));
}

#[divan::bench]
fn decode_zune_jpeg(b: divan::Bencher) {
    b.bench(|| decode_zune(black_box(&JPEG)));
}

#[divan::bench]
fn resize_image_triangle(b: divan::Bencher) {
    let (px, w, h) = decode_zune(&JPEG);
    b.with_inputs(|| px.clone())
        .bench_values(|px| resize_image_crate(px, w, h));
}

#[divan::bench]
fn resize_fast_image_resize(b: divan::Bencher) {
    let (px, w, h) = decode_zune(&JPEG);
    b.with_inputs(|| px.clone())
        .bench_values(|px| resize_fir(px, w, h));
}

#[divan::bench]
fn full_image_decode_image_resize(b: divan::Bencher) {
    b.bench(|| {
        let (px, w, h) = decode_image_crate(black_box(&JPEG));
        resize_image_crate(px, w, h)
    });
}

#[divan::bench]
fn full_zune_decode_fir_resize(b: divan::Bencher) {
    b.bench(|| {
        let (px, w, h) = decode_zune(black_box(&JPEG));
        resize_fir(px, w, h)
    });
}

#[divan::bench]
fn full_image_decode_fir_resize(b: divan::Bencher) {
    b.bench(|| {
        let (px, w, h) = decode_image_crate(black_box(&JPEG));
        resize_fir(px, w, h)
    });
}

/// The crate's own path: `DecodeConfig::decode` then `RandomResizedCrop`.
#[divan::bench]
fn full_zephon_media(b: divan::Bencher) {
    use zephon_media::{DecodeConfig, ImageOp, ImageSample, RandomResizedCrop};
    let decode = DecodeConfig::new("jpg");
    let crop = RandomResizedCrop::new(224, 224).seed(1);
    let mut id = 0u64;
    b.bench_local(|| {
        id += 1;
        let image = decode.decode(black_box(&JPEG)).unwrap();
        let record = zephon_core::Record::new().with("i", id as i64);
        crop.apply(ImageSample { image, record }).unwrap()
    });
}
