//! Small images made in the test, encoded with the image crate's encoders.

use image::{ExtendedColorType, ImageEncoder};

/// An RGB picture of `w × h` with detail everywhere (gradients and a hashed
/// texture), different for each `salt`.
pub fn rgb(w: u32, h: u32, salt: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity((w * h * 3) as usize);
    for y in 0..h {
        for x in 0..w {
            let n = zephon_core::hash::key(&[salt, x as u64 / 2, y as u64 / 2]);
            out.extend([
                (x * 255 / w.max(1)) as u8 ^ (n as u8 / 4),
                (y * 255 / h.max(1)) as u8,
                (n >> 8) as u8,
            ]);
        }
    }
    out
}

pub fn jpeg(w: u32, h: u32, salt: u64) -> Vec<u8> {
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 85)
        .write_image(&rgb(w, h, salt), w, h, ExtendedColorType::Rgb8)
        .unwrap();
    out
}

pub fn png(pixels: &[u8], w: u32, h: u32, color: ExtendedColorType) -> Vec<u8> {
    let mut out = Vec::new();
    image::codecs::png::PngEncoder::new(&mut out)
        .write_image(pixels, w, h, color)
        .unwrap();
    out
}

pub fn png_rgb(w: u32, h: u32, salt: u64) -> Vec<u8> {
    png(&rgb(w, h, salt), w, h, ExtendedColorType::Rgb8)
}

pub fn webp_rgb(w: u32, h: u32, salt: u64) -> Vec<u8> {
    let mut out = Vec::new();
    image::codecs::webp::WebPEncoder::new_lossless(&mut out)
        .write_image(&rgb(w, h, salt), w, h, ExtendedColorType::Rgb8)
        .unwrap();
    out
}

/// The sample `i` of a mixed set: JPEG, PNG and WebP of several sizes.
pub fn encoded(i: u64, salt: u64) -> Vec<u8> {
    let w = 24 + ((i * 7 + salt) % 40) as u32;
    let h = 20 + ((i * 13 + salt) % 36) as u32;
    match i % 3 {
        0 => jpeg(w, h, salt ^ i),
        1 => png_rgb(w, h, salt ^ i),
        _ => webp_rgb(w, h, salt ^ i),
    }
}

/// CRC-32 (ISO-HDLC), for PNG chunks made by hand.
pub fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}
