//! `zephon-bench images` on WebDataset shards written here: one JSON line
//! per system, the same batch checksum at any parallelism, and the raw
//! ceiling beside it.

use image::ImageEncoder;
use std::path::Path;
use std::process::Command;

/// Two shards of `KEY.jpg` + `KEY.cls` samples, images of varied sizes.
fn shards(dir: &Path) {
    for s in 0..2 {
        let mut b = tar::Builder::new(Vec::new());
        for i in 0..12u32 {
            let (w, h) = (40 + 7 * i, 30 + 5 * (i % 4));
            let pixels: Vec<u8> = (0..w * h * 3)
                .map(|p| ((p * (i + 3)) % 251) as u8)
                .collect();
            let mut jpg = Vec::new();
            image::codecs::jpeg::JpegEncoder::new(&mut jpg)
                .write_image(&pixels, w, h, image::ExtendedColorType::Rgb8)
                .unwrap();
            let key = format!("s{s}-{i:03}");
            for (ext, data) in [("jpg", jpg), ("cls", (i % 5).to_string().into_bytes())] {
                let mut header = tar::Header::new_gnu();
                header.set_size(data.len() as u64);
                header.set_mode(0o644);
                header.set_cksum();
                b.append_data(&mut header, format!("{key}.{ext}"), data.as_slice())
                    .unwrap();
            }
        }
        std::fs::write(dir.join(format!("shard-{s}.tar")), b.into_inner().unwrap()).unwrap();
    }
}

fn bench(dir: &Path, extra: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_zephon-bench"))
        .args(["images", "--dir"])
        .arg(dir)
        .args(["--size", "32", "--batch", "5"])
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

#[test]
fn bench_images_reports_the_peers_keys_and_one_checksum_at_any_parallelism() {
    let t = tempfile::tempdir().unwrap();
    shards(t.path());
    let one = bench(t.path(), &["--parallelism", "1"]);
    let two = bench(t.path(), &["--parallelism", "2", "--raw"]);
    let zephon = |lines: &[serde_json::Value]| lines.last().unwrap().clone();
    let (a, b) = (zephon(&one), zephon(&two));
    assert_eq!(a["system"], "zephon");
    assert_eq!(a["images"], 24);
    for key in [
        "images_per_s",
        "first_batch_s",
        "seconds",
        "peak_rss_anon_mb",
    ] {
        assert!(a[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {a}");
    }
    assert_eq!(a["checksum"], b["checksum"], "{a}\n{b}");
    // The raw ceiling comes first, and the line carries the ratio to it.
    assert_eq!(two[0]["system"], "raw");
    assert_eq!(two[0]["images"], 24);
    assert!(b["images_per_s_ratio_to_raw"].as_f64().is_some(), "{b}");
    // Another seed, other crops.
    let c = zephon(&bench(t.path(), &["--parallelism", "1", "--seed", "5"]));
    assert_ne!(a["checksum"], c["checksum"]);
}
