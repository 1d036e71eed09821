//! `zephon inspect` on small datasets written here: a Megatron dataset (by
//! zephon-storage's `encode_megatron`, which follows Megatron-LM's `.idx`
//! layout) and a JSONL one; and on a remote token file, served by a few
//! lines of HTTP on 127.0.0.1 that honour single byte ranges.

#[path = "../../zephon-storage/tests/common/tiny.rs"]
#[allow(dead_code)]
mod tiny;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use zephon_storage::format::tokens::{TokenDtype, encode_megatron};

fn inspect(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_zephon"))
        .arg("inspect")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn inspect_reports_format_counts_fields_and_first_samples() {
    let t = tempfile::tempdir().unwrap();
    for (name, n) in [("a", 3u32), ("b", 5), ("c", 4)] {
        let docs: Vec<Vec<u32>> = (0..n).map(|d| (0..200 + d).collect()).collect();
        let (bin, idx) = encode_megatron(&docs, TokenDtype::U16).unwrap();
        std::fs::write(t.path().join(format!("{name}.bin")), bin).unwrap();
        std::fs::write(t.path().join(format!("{name}.idx")), idx).unwrap();
    }
    let dir = t.path().display().to_string();
    let (ok, out, err) = inspect(&[&dir, "--json", "-n", "2", "--width", "40"]);
    assert!(ok, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["format"], "megatron");
    assert_eq!(r["shards"], 3);
    assert_eq!(
        r["samples"],
        serde_json::json!({"min": 3, "median": 4, "max": 5, "total": 12})
    );
    assert_eq!(
        r["fields"],
        serde_json::json!([{"name": "tokens", "type": "tokens"}])
    );
    let first = r["first"].as_array().unwrap();
    assert_eq!(first.len(), 2);
    let shown = first[1]["tokens"].as_str().unwrap();
    assert!(
        shown.starts_with("[0, 1, 2") && shown.ends_with("(201 tokens)"),
        "{shown}"
    );
    assert!(r["bytes"].as_u64().unwrap() > 12 * 200 * 2);

    let (ok, text, _) = inspect(&[&dir]);
    assert!(ok);
    assert!(
        text.contains("format   megatron") && text.contains("12 total"),
        "{text}"
    );
}

#[test]
fn inspect_of_a_mixed_folder_says_what_it_found() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("a.jsonl"), "{\"text\":\"hi\"}\n").unwrap();
    std::fs::write(t.path().join("b.tar"), b"").unwrap();
    let (ok, _, err) = inspect(&[&t.path().display().to_string()]);
    assert!(!ok);
    assert!(
        err.contains("mixed formats") && err.contains("WebDataset"),
        "{err}"
    );
}

#[test]
fn inspect_refuses_a_manifest_naming_files_outside_the_folder() {
    let t = tempfile::tempdir().unwrap();
    let ds = t.path().join("ds");
    std::fs::create_dir_all(&ds).unwrap();
    std::fs::write(ds.join("a.bin"), [1u8; 8]).unwrap();
    std::fs::write(t.path().join("secret.bin"), *b"SECRET!!").unwrap();
    let m = serde_json::json!({"version": 1,
        "format": {"kind": "tokens", "dtype": "u8", "seq_len": 4},
        "shards": [{"path": "a.bin", "samples": 2, "bytes": 8},
                   {"path": "../secret.bin", "samples": 2, "bytes": 8}]});
    std::fs::write(ds.join("index.json"), m.to_string()).unwrap();
    let (ok, out, err) = inspect(&[&ds.display().to_string(), "--json", "-n", "4"]);
    assert!(!ok, "{out}");
    assert!(
        err.contains("index.json") && err.contains("shards[1] \"../secret.bin\""),
        "{err}"
    );
    // b"SECRET" as token ids: 83, 69, 67, 82.
    assert!(!out.contains("83"), "{out}");
}

#[test]
fn inspect_of_a_missing_folder_says_it_does_not_exist() {
    let t = tempfile::tempdir().unwrap();
    for uri in [
        t.path().join("nope").display().to_string(),
        format!("file://{}", t.path().join("nope2").display()),
    ] {
        let (ok, _, err) = inspect(&[&uri]);
        assert!(!ok && err.contains("does not exist"), "{uri}: {err}");
        assert!(!std::path::Path::new(uri.trim_start_matches("file://")).exists());
    }
}

#[test]
fn inspect_escapes_control_characters_in_samples() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(
        t.path().join("a.jsonl"),
        "{\"text\":\"\\u001b[2Jcleared\\u0007\",\"\\u001b]0;k\":1}\n",
    )
    .unwrap();
    let (ok, out, err) = inspect(&[&t.path().display().to_string()]);
    assert!(ok, "{err}");
    assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");
    assert!(out.contains("\\u{1b}[2Jcleared\\u{7}"), "{out}");
}

/// A local Parquet dataset's row groups come from its footers: their
/// count, the largest group's rows, the largest shard's decoded size (of the
/// columns read) against the decoded-group budget.
#[test]
fn inspect_of_parquet_reports_its_row_groups() {
    use std::sync::Arc;
    use zephon_storage::format::parquet::arrow_array::{
        ArrayRef, Int64Array, RecordBatch, StringArray,
    };
    use zephon_storage::format::parquet::parquet::arrow::ArrowWriter;
    use zephon_storage::format::parquet::parquet::file::properties::WriterProperties;
    let t = tempfile::tempdir().unwrap();
    for (s, rows) in [(0i64, 250i64), (1, 120)] {
        let ids: Vec<i64> = (0..rows).map(|i| s * 1000 + i).collect();
        let texts: Vec<String> = ids
            .iter()
            .map(|i| format!("row {i} {}", "y".repeat(90)))
            .collect();
        let batch = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(ids)) as ArrayRef),
            ("text", Arc::new(StringArray::from(texts)) as ArrayRef),
        ])
        .unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(100))
            .build();
        let file = std::fs::File::create(t.path().join(format!("p{s}.parquet"))).unwrap();
        let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }
    let dir = t.path().display().to_string();
    let groups = |extra: &[&str]| {
        let mut args = vec![dir.as_str(), "--json", "-n", "1"];
        args.extend_from_slice(extra);
        let (ok, out, err) = inspect(&args);
        assert!(ok, "{err}");
        let r: serde_json::Value = serde_json::from_str(&out).unwrap();
        r["row_groups"].clone()
    };
    let all = groups(&[]);
    assert_eq!(all["groups"], 5, "{all}");
    assert_eq!(all["max_rows"], 100, "{all}");
    assert_eq!(all["budget"], 128u64 << 20, "{all}");
    assert_eq!(all["shards_over_budget"], 0, "{all}");
    // The 250-row shard's text alone is past 250 * 90 bytes.
    let decoded = all["max_shard_decoded_bytes"].as_u64().unwrap();
    assert!(decoded > 250 * 90, "{all}");
    let ids = groups(&["--columns", "id"]);
    let id_bytes = ids["max_shard_decoded_bytes"].as_u64().unwrap();
    assert!(id_bytes < decoded && id_bytes >= 250 * 8, "{ids}");
    // The text output says the same.
    let (ok, out, _) = inspect(&[&dir, "-n", "1"]);
    assert!(
        ok && out.contains("5 row groups, up to 100 rows each"),
        "{out}"
    );
}

/// The process's own memory before and after opening: a JSONL shard of
/// 2,000,000 lines keeps its line offsets (about 8 MB: 4 bytes a line)
/// while the dataset is open, and the report shows them. (The kernel
/// updates the figure in steps of a few hundred KiB, so a small index
/// would not show.)
#[test]
fn inspect_reports_the_memory_an_open_dataset_keeps() {
    let t = tempfile::tempdir().unwrap();
    let text: String = (0..2_000_000).map(|i| format!("{{\"i\":{i}}}\n")).collect();
    std::fs::write(t.path().join("a.jsonl"), text).unwrap();
    let dir = t.path().display().to_string();
    let (ok, out, err) = inspect(&[dir.as_str(), "--json", "-n", "1"]);
    assert!(ok, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    let (before, after) = (
        r["memory"]["rss_anon_before_open"].as_u64().unwrap(),
        r["memory"]["rss_anon_after_open"].as_u64().unwrap(),
    );
    assert!(
        before > 0 && after >= before + (512 << 10),
        "{before} -> {after}"
    );
    let (ok, out, err) = inspect(&[dir.as_str(), "-n", "1"]);
    assert!(
        ok && out.contains("memory ") && out.contains("RssAnon"),
        "{out}{err}"
    );
}

/// Serves the files of `dir` over HTTP on 127.0.0.1, honouring a single
/// `Range: bytes=A-B`; returns the base URI and the body bytes sent.
fn range_server(dir: std::path::PathBuf) -> (String, Arc<AtomicU64>) {
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    let addr = tiny::serve(move |request, headers, conn| {
        let range = tiny::range(headers);
        let path = request.split_whitespace().nth(1).unwrap_or("/");
        let Ok(data) = std::fs::read(dir.join(path.trim_start_matches('/'))) else {
            return tiny::answer(conn, "404 Not Found", "", b"");
        };
        let (status, headers, body) = match range {
            Some((a, b)) => {
                let b = b.unwrap_or(data.len() - 1).min(data.len() - 1);
                let headers = format!("Content-Range: bytes {a}-{b}/{}\r\n", data.len());
                ("206 Partial Content", headers, &data[a..=b])
            }
            None => ("200 OK", String::new(), &data[..]),
        };
        counter.fetch_add(body.len() as u64, Ordering::Relaxed);
        tiny::answer(conn, status, &headers, body)
    });
    (format!("http://{addr}/"), sent)
}

/// Inspecting a remote token file reads its first samples by byte range,
/// not the whole shard (it downloaded all of it, whatever its size, to
/// print one sample).
#[test]
fn inspect_of_a_remote_token_file_reads_only_its_first_samples() {
    let t = tempfile::tempdir().unwrap();
    // 16 MiB of u16 tokens: 4,096 windows of 2,048.
    let tokens: Vec<u8> = (0..8u32 << 20)
        .flat_map(|i| ((i % 50_000) as u16).to_le_bytes())
        .collect();
    std::fs::write(t.path().join("train.bin"), &tokens).unwrap();
    std::fs::write(
        t.path().join("index.json"),
        format!(
            r#"{{"version":1,"format":{{"kind":"tokens","dtype":"u16","seq_len":2048}},"shards":[{{"path":"train.bin","samples":4096,"bytes":{}}}]}}"#,
            tokens.len()
        ),
    )
    .unwrap();
    let (uri, sent) = range_server(t.path().to_owned());
    let (ok, out, err) = inspect(&[uri.as_str(), "-n", "2"]);
    assert!(ok && out.contains("sample 1"), "{out}{err}");
    let sent = sent.load(Ordering::Relaxed);
    assert!(sent < 1 << 20, "{sent} bytes sent of {}", tokens.len());
}

/// A reader that leaves early (`zephon inspect DIR -n 1000 | head -1`) ends
/// the process by SIGPIPE, as it ends a shell tool; before, the next print
/// panicked with a backtrace and exit status 101.
#[cfg(unix)]
#[test]
fn a_closed_pipe_ends_inspect_quietly() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let t = tempfile::tempdir().unwrap();
    let lines: String = (0..10_000)
        .map(|i| format!("{{\"text\":\"document {i}\"}}\n"))
        .collect();
    std::fs::write(t.path().join("a.jsonl"), lines).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_zephon"))
        .args(["inspect", &t.path().display().to_string(), "-n", "10000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("dataset"), "{first}");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {err}",
        out.status
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// A `.zst` shard of skippable frames only holds no samples: `inspect`
/// refuses it as `rank-run` (and `run`) do, rather than reporting 0
/// samples with exit 0.
#[test]
fn inspect_and_run_agree_on_a_dataset_without_samples() {
    let t = tempfile::tempdir().unwrap();
    let mut frame = 0x184D_2A50u32.to_le_bytes().to_vec();
    frame.extend(4u32.to_le_bytes());
    frame.extend(b"skip");
    let data = t.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("a.jsonl.zst"), &frame).unwrap();
    let dir = data.display().to_string();
    let (ok, out, err) = inspect(&[&dir]);
    assert!(!ok, "inspect accepted it: {out}");
    assert!(err.contains("no samples"), "{err}");
    let run = Command::new(env!("CARGO_BIN_EXE_zephon"))
        .args(["rank-run", "--data", &dir, "--steps", "1", "--out"])
        .arg(t.path().join("out.jsonl"))
        .output()
        .unwrap();
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("no samples"));
}

/// A WebDataset of JPEGs and PNGs of known sizes, and one member that is
/// no image: `inspect` gives each image field's formats and sizes, from
/// the headers of the first `--image-samples` samples.
#[test]
fn inspect_describes_the_images_of_a_webdataset() {
    use image::ImageEncoder;
    let t = tempfile::tempdir().unwrap();
    let mut b = tar::Builder::new(Vec::new());
    for i in 0..10u32 {
        let (w, h) = (20 + 10 * i, 10 + i);
        let pixels = vec![(i * 20) as u8; (w * h * 3) as usize];
        let mut img = Vec::new();
        if i % 2 == 0 {
            image::codecs::jpeg::JpegEncoder::new(&mut img)
                .write_image(&pixels, w, h, image::ExtendedColorType::Rgb8)
                .unwrap();
        } else {
            image::codecs::png::PngEncoder::new(&mut img)
                .write_image(&pixels, w, h, image::ExtendedColorType::Rgb8)
                .unwrap();
        }
        if i == 9 {
            img = b"not an image at all".to_vec();
        }
        for (e, data) in [("img", img), ("cls", i.to_string().into_bytes())] {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            b.append_data(&mut header, format!("k{i:03}.{e}"), data.as_slice())
                .unwrap();
        }
    }
    std::fs::write(t.path().join("shard-0.tar"), b.into_inner().unwrap()).unwrap();
    let dir = t.path().display().to_string();
    let (ok, out, err) = inspect(&[&dir, "--json"]);
    assert!(ok, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    let images = r["images"].as_array().expect("an images section");
    assert_eq!(images.len(), 1, "{images:?}");
    let f = &images[0];
    assert_eq!(f["field"], "img");
    assert_eq!(f["formats"]["jpeg"], 5);
    assert_eq!(f["formats"]["png"], 4);
    assert_eq!(f["unreadable"], 1);
    // Widths 20..100 of the nine images, heights 10..18.
    assert_eq!(f["width"], serde_json::json!([20, 60, 100]));
    assert_eq!(f["height"], serde_json::json!([10, 14, 18]));
    assert_eq!(r["image_samples"], 10);
    let (ok, text, _) = inspect(&[&dir]);
    assert!(ok);
    assert!(
        text.contains("images   `img` in the first 10 samples: 5 jpeg, 4 png, 1 unreadable"),
        "{text}"
    );
    let (ok, out, _) = inspect(&[&dir, "--json", "--image-samples", "0"]);
    assert!(ok);
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(r.get("images").is_none(), "{r}");
}
