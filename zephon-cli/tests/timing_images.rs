//! `zephon timing` on the image classifier: WebDataset shards in a local
//! folder, written by the command when the folder holds none, or made
//! elsewhere (plain tars, no manifest) and read as they are.

use image::ImageEncoder;
use std::path::Path;
use std::process::Command;

const CONFIG: &str = "\
model: { name: image_classifier, conv_channels: [2, 4], num_classes: 5 }
data:
  name: webdataset_images
  dir: shards
  image_size: 16
  batch_size: 4
  num_classes: 5
  decode_workers: 1
GENERATE
timing: { warmup_batches: 1 }
";

fn timing(dir: &Path, generate: &str) -> String {
    std::fs::write(dir.join("c.yaml"), CONFIG.replace("GENERATE", generate)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_zephon"))
        .current_dir(dir)
        .args(["timing", "-c", "c.yaml", "--epochs", "1", "--device", "cpu"])
        .args(["--save-dir", "out", "--quiet"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(dir.join("out/timing_summary.yaml")).unwrap()
}

fn tars(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tar"))
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect();
    v.sort();
    v
}

#[test]
fn synthetic_shards_are_written_once_then_read() {
    let dir = tempfile::tempdir().unwrap();
    let generate = "  generate: { num_samples: 12, width: 48, height: 36, shard_samples: 5 }";
    let summary = timing(dir.path(), generate);
    assert!(summary.contains("image_classifier"), "{summary}");
    assert!(summary.contains("decode_image"), "{summary}");
    let written = tars(&dir.path().join("shards"));
    assert_eq!(written.len(), 3, "12 samples in shards of 5");
    // The second run reads what the first wrote, and writes nothing.
    timing(dir.path(), generate);
    assert_eq!(tars(&dir.path().join("shards")), written);
}

#[test]
fn tars_made_elsewhere_are_read_without_generate() {
    let dir = tempfile::tempdir().unwrap();
    let shards = dir.path().join("shards");
    std::fs::create_dir(&shards).unwrap();
    for s in 0..2 {
        let mut b = tar::Builder::new(Vec::new());
        for i in 0..6u32 {
            let (w, h) = (30 + 5 * i, 24 + 3 * i);
            let pixels: Vec<u8> = (0..w * h * 3)
                .map(|p| ((p * (i + 5)) % 241) as u8)
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
        std::fs::write(
            shards.join(format!("shard-{s}.tar")),
            b.into_inner().unwrap(),
        )
        .unwrap();
    }
    let summary = timing(dir.path(), "");
    assert!(summary.contains("decode_image"), "{summary}");
    // 12 images in batches of 4, the first a warm-up.
    assert!(summary.contains("batches: 2"), "{summary}");
}
