//! `zephon run` on the example recipes, and its errors.

use std::path::PathBuf;
use std::process::Command;

fn zephon() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zephon"))
}

fn recipe(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/recipes")
        .join(name)
}

#[test]
fn example_recipes_run_with_observability() {
    for name in ["fetch_batch.toml", "tokenize_pack.toml"] {
        let out = zephon()
            .args(["run", "--json", "--observe", "60", "--max-batches", "12"])
            .arg(recipe(name))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<serde_json::Value> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let summary = lines
            .iter()
            .find_map(|l| l.get("summary"))
            .expect("a summary line");
        assert_eq!(summary["batches"], 12, "{name}");
        let metrics = lines
            .iter()
            .find_map(|l| l.get("metrics"))
            .expect("a metrics line");
        assert!(
            !metrics["operators"].as_array().unwrap().is_empty(),
            "{name}"
        );
        assert!(
            lines.iter().any(|l| l.get("bottleneck").is_some()),
            "{name}"
        );
        if name == "tokenize_pack.toml" {
            assert!(summary["tokens"].as_u64().unwrap() > 0);
        }
    }
}

#[test]
fn a_bad_recipe_names_the_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[[datasets]]\nname = \"a\"\nuri = \"x\"\n\n[[ops]]\nop = \"batch\"\nsiez = 4\n",
    )
    .unwrap();
    let out = zephon().arg("run").arg(&path).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("siez") && err.contains("line"), "{err}");
}

#[test]
fn a_misplaced_operator_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("0.jsonl"), "{\"text\":\"a\"}\n").unwrap();
    let path = dir.path().join("r.toml");
    std::fs::write(
        &path,
        "[[datasets]]\nname = \"a\"\nuri = \"d\"\n[[ops]]\nop = \"batch\"\nsize = 2\n[[ops]]\nop = \"fetch\"\n",
    )
    .unwrap();
    let out = zephon().arg("run").arg(&path).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ops[0]") && err.contains("batch"), "{err}");
}

/// A pipeline that fails mid-run (a shard with a line that is not JSON,
/// after good ones) fails the run under both runners: exit status 1, the
/// error naming the shard on stderr, and no summary as if the data had run
/// out. (Panics inside operators become the same kind of error: see
/// zephon-core's `tests/panics.rs`; every recipe setting that used to make an
/// operator panic is now refused when the recipe is read.)
#[test]
fn a_failing_pipeline_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let good: String = (0..40).map(|i| format!("{{\"i\": {i}}}\n")).collect();
    std::fs::write(data.join("a.jsonl"), &good).unwrap();
    std::fs::write(data.join("b.jsonl"), format!("{good}{{not json\n{good}")).unwrap();
    for runner in ["inline", "threads"] {
        let path = dir.path().join(format!("{runner}.toml"));
        std::fs::write(
            &path,
            format!(
                r#"[run]
runner = "{runner}"

[[datasets]]
name = "broken"
uri = "{data}"

[[ops]]
op = "fetch"
parallelism = 2

[[ops]]
op = "batch"
size = 4

[[ops]]
op = "lane_mux"

[[ops]]
op = "prefetch_batches"
depth = 2
"#,
                data = data.display(),
            ),
        )
        .unwrap();
        let out = zephon()
            .args(["run", "--json"])
            .arg(&path)
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{runner}: {err}\n{stdout}");
        assert!(
            err.contains("the run failed after") && err.contains("b.jsonl"),
            "{runner}: {err}"
        );
        assert!(!stdout.contains("\"summary\""), "{runner}: {stdout}");
    }
}

/// `--explain` takes its stages from the operators themselves, so the plan
/// names them as the metrics of a run do, in the same order.
#[test]
fn the_plan_names_the_stages_as_the_metrics_do() {
    let path = recipe("tokenize_pack.toml");
    let explain = zephon()
        .args(["run", "--json", "--explain"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        explain.status.success(),
        "{}",
        String::from_utf8_lossy(&explain.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&explain.stdout).unwrap();
    let planned: Vec<String> = plan["plan"]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .filter(|n| n != "work_source")
        .collect();
    assert!(
        planned.contains(&"pack_sequences".to_owned()),
        "{planned:?}"
    );

    let out = zephon()
        .args(["run", "--json", "--observe", "60", "--max-batches", "4"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let metrics = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find_map(|l| l.get("metrics").cloned())
        .expect("a metrics line");
    let measured: Vec<String> = metrics["operators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(planned, measured);
}

/// The schedule recipe runs, its plan shows the schedule, and a recipe
/// schedule with an option of the wrong form is named.
#[test]
fn a_scheduled_recipe_runs_and_shows_its_schedule() {
    let out = zephon()
        .args(["run", "--max-batches", "120"])
        .arg(recipe("schedule.toml"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("schedule phases by global batches of 16: from 0 {web 1} then from 10 {code 1, web 1} then from 20 {code 1}"),
        "{stdout}"
    );
    assert!(stdout.contains("3 segment(s)"), "{stdout}");
    assert!(
        stdout.contains("from 20 {code 1}; at global index 0, in phase 1 of 3;"),
        "{stdout}"
    );
    assert!(stdout.contains("120 batches"), "{stdout}");
    // 120 lane-batches of 4 are 30 global batches: the third phase is on.
    assert!(
        stdout.contains("schedule: the work source is in phase 3 of 3 (from global batch 20"),
        "{stdout}"
    );
    assert!(
        stdout.contains("phase 2 from global batch 10: 160 samples handed out; web 50.0% (target 50.0%), code 50.0% (target 50.0%)"),
        "{stdout}"
    );

    // The same figures as JSON: per phase its first global index, and per
    // dataset its target share and the samples handed out.
    let out = zephon()
        .args(["run", "--json", "--max-batches", "120"])
        .arg(recipe("schedule.toml"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let schedule: serde_json::Value = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find_map(|v| v.get("schedule").cloned())
        .unwrap_or_else(|| panic!("no schedule line: {stdout}"));
    assert_eq!(schedule["current"], 2, "{schedule}");
    let phases = schedule["phases"].as_array().unwrap();
    let starts: Vec<u64> = phases
        .iter()
        .map(|p| p["start"].as_u64().unwrap())
        .collect();
    assert_eq!(starts, [0, 160, 320]);
    let figures = |p: usize| -> Vec<(String, f64, u64)> {
        phases[p]["datasets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["name"].as_str().unwrap().to_owned(),
                    d["target"].as_f64().unwrap(),
                    d["handed_out"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(
        figures(0),
        [("web".to_owned(), 1.0, 160), ("code".to_owned(), 0.0, 0)]
    );
    assert_eq!(
        figures(1),
        [("web".to_owned(), 0.5, 80), ("code".to_owned(), 0.5, 80)]
    );
    let third = figures(2);
    assert_eq!((third[0].1, third[0].2, third[1].1), (0.0, 0, 1.0));
    // At least the 160 samples delivered in it; the queues may hold more.
    assert!(third[1].2 >= 160, "{schedule}");

    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(recipe("schedule.toml"))
        .unwrap()
        .replace("../data/", &format!("{}/", recipe("../data").display()))
        .replace("form = \"phases\"", "form = \"phases\"\nstep = 3");
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, text).unwrap();
    let out = zephon().arg("run").arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("work_source.schedule.step: only with form = \"linear\""),
        "{stderr}"
    );
}

/// `--tuning auto` (or `tuning = "auto"` in `[run]`): a tuner moves the
/// tokenizer's parallelism while the run goes; the run delivers what the
/// fixed one does, and lists what the tuner changed. Its budget is checked
/// against its range, and only goes with `auto`.
#[test]
fn a_tuned_run_delivers_what_a_fixed_one_does_and_says_what_changed() {
    let run = |extra: &[&str]| {
        let out = zephon()
            .args(["run", "--json"])
            .arg(recipe("tokenize_pack.toml"))
            .args(extra)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), stdout, stderr)
    };
    let lines = |stdout: &str| -> Vec<serde_json::Value> {
        stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let (ok, fixed, err) = run(&[]);
    assert!(ok, "{err}");
    let (ok, tuned, err) = run(&["--tuning", "auto", "--tuning-cores", "2"]);
    assert!(ok, "{err}");
    let summary = |l: &[serde_json::Value]| {
        let s = l.iter().find_map(|l| l.get("summary")).unwrap().clone();
        (
            s["batches"].clone(),
            s["samples"].clone(),
            s["tokens"].clone(),
        )
    };
    let (fixed, tuned) = (lines(&fixed), lines(&tuned));
    assert_eq!(summary(&fixed), summary(&tuned));
    assert!(fixed.iter().all(|l| l.get("tuning").is_none()));
    let report = tuned
        .iter()
        .find_map(|l| l.get("tuning"))
        .expect("a tuning line");
    assert!(!report.as_array().unwrap().is_empty(), "{report}");
    let (ok, _, err) = run(&["--tuning", "auto", "--tuning-cores", "0"]);
    assert!(!ok && err.contains("run.tuning_cores"), "{err}");
    let (ok, _, err) = run(&["--tuning-cores", "2"]);
    assert!(!ok && err.contains("only with tuning"), "{err}");
    // The recipe's parallelism 2 cannot start above a budget of 1.
    let (ok, _, err) = run(&["--tuning", "auto", "--tuning-cores", "1"]);
    assert!(!ok && err.contains("above run.tuning_cores 1"), "{err}");
    // A memory budget: checked against its range, only with `auto`; under
    // one the process is above (1 MiB), the batches are still the same.
    let (ok, _, err) = run(&["--tuning", "auto", "--tuning-memory", "1000"]);
    assert!(!ok && err.contains("run.tuning_memory"), "{err}");
    let (ok, _, err) = run(&["--tuning-memory", "1048576"]);
    assert!(!ok && err.contains("only with tuning"), "{err}");
    let (ok, held, err) = run(&["--tuning", "auto", "--tuning-memory", "1048576"]);
    assert!(ok, "{err}");
    assert_eq!(summary(&lines(&held)), summary(&fixed));
}

/// The image recipe over WebDataset shards written here: every image
/// decoded, cropped and collated, the plan naming the operators, and every
/// image at parallelism 1 too (that the batches are the same is the media
/// crate's property tests' to show). Bad image settings are named.
#[test]
fn the_image_recipe_decodes_crops_and_collates() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("images");
    image_shards(&data, false);
    let text = std::fs::read_to_string(recipe("images.toml"))
        .unwrap()
        .replace(
            "../../results/data/timing_images",
            &data.display().to_string(),
        );
    let run = |text: &str| run_json(t.path(), text);
    let (ok, out, err) = run(&text);
    assert!(ok, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let plan = lines
        .iter()
        .find_map(|l| l.get("plan"))
        .unwrap()
        .to_string();
    for op in ["decode_image", "collate_images"] {
        assert!(plan.contains(op), "{op} not in {plan}");
    }
    let summary = lines.iter().find_map(|l| l.get("summary")).unwrap();
    assert_eq!(summary["samples"], 40, "{summary}");
    assert_eq!(
        summary["batches"], 2,
        "two lanes of 20, one batch each: {summary}"
    );
    // Parallelism 1 gives the same run.
    let (ok, one, err) = run(&text.replace("parallelism = 2", "parallelism = 1"));
    assert!(ok, "{err}");
    let one: Vec<serde_json::Value> = one
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        one.iter().find_map(|l| l.get("summary")).unwrap()["samples"],
        40
    );
    for (bad, says) in [
        ("random_crop = 64 ", "random_crop = 64\ncenter_crop = 32 "),
        ("flip = 0.5", "flip = 1.5"),
        ("random_crop = 64", "random_crop = 0"),
    ] {
        let (ok, _, err) = run(&text.replacen(bad, says, 1));
        assert!(!ok, "{says}: ran");
        assert!(err.contains("ops[1] (`decode_image`)"), "{says}: {err}");
    }
    // A collate before any batch of images is named.
    let misplaced = text.replace("op = \"batch\"\nsize = 32", "op = \"lane_mux\"");
    let (ok, _, err) = run(&misplaced);
    assert!(!ok && err.contains("collate_images"), "{err}");
}

/// Two WebDataset shards of 20 JPEGs each (`KEY.jpg`, `KEY.cls`), with a
/// caption (`KEY.txt`) when `captions`.
fn image_shards(data: &std::path::Path, captions: bool) {
    use image::ImageEncoder;
    std::fs::create_dir_all(data).unwrap();
    for s in 0..2 {
        let mut b = tar::Builder::new(Vec::new());
        for i in 0..20u32 {
            let (w, h) = (70 + 3 * i, 66 + i);
            let pixels: Vec<u8> = (0..w * h * 3)
                .map(|p| ((p * (i + 1)) % 251) as u8)
                .collect();
            let mut jpg = Vec::new();
            image::codecs::jpeg::JpegEncoder::new(&mut jpg)
                .write_image(&pixels, w, h, image::ExtendedColorType::Rgb8)
                .unwrap();
            let mut members = vec![("jpg", jpg), ("cls", (i % 10).to_string().into_bytes())];
            if captions {
                let words = ["a", "photo", "of", "the", "garden", "at", "dusk"];
                let caption: Vec<&str> = (0..3 + (i as usize + s) % 5)
                    .map(|k| words[(k * 3 + i as usize) % words.len()])
                    .collect();
                members.push(("txt", caption.join(" ").into_bytes()));
            }
            for (e, d) in members {
                let mut header = tar::Header::new_gnu();
                header.set_size(d.len() as u64);
                header.set_mode(0o644);
                header.set_cksum();
                b.append_data(&mut header, format!("s{s}-{i:03}.{e}"), d.as_slice())
                    .unwrap();
            }
        }
        std::fs::write(data.join(format!("shard-{s}.tar")), b.into_inner().unwrap()).unwrap();
    }
}

/// Runs `zephon run --json` on a recipe text written into `dir`: whether
/// it succeeded, its output and its errors.
fn run_json(dir: &std::path::Path, text: &str) -> (bool, String, String) {
    let path = dir.join("r.toml");
    std::fs::write(&path, text).unwrap();
    let out = zephon()
        .args(["run", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The summary line of [`run_json`], or the error output.
fn run_summary(dir: &std::path::Path, text: &str) -> Result<serde_json::Value, String> {
    let (ok, out, err) = run_json(dir, text);
    if !ok {
        return Err(err);
    }
    Ok(out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|l| l.get("summary").cloned())
        .expect("a summary line"))
}

#[test]
fn the_image_text_recipe_carries_the_captions_tokens_with_the_images() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("pairs");
    image_shards(&data, true);
    let tokenizer = recipe("../data/tokenizer.json");
    let text = std::fs::read_to_string(recipe("image_text.toml"))
        .unwrap()
        .replace("\"/tmp/w3\"", &format!("{:?}", data.display().to_string()))
        .replace(
            "\"../data/tokenizer.json\"",
            &format!("{:?}", tokenizer.display().to_string()),
        );
    let pairs = run_summary(t.path(), &text).unwrap();
    assert_eq!(pairs["samples"], 40, "{pairs}");
    assert_eq!(pairs["batches"], 3, "40 pairs in batches of 16: {pairs}");
    let tokens = pairs["tokens"].as_u64().unwrap();
    assert!(
        tokens >= 40 * 3,
        "every caption has three words or more: {pairs}"
    );
    // The captions alone, tokenized without any image: the same tokens.
    let start = text.find("[[ops]]\nop = \"decode_image\"").unwrap();
    let end = text.find("[[ops]]\nop = \"batch\"").unwrap();
    let text_only = format!("{}{}", &text[..start], &text[end..]).replace(
        "[[ops]]\nop = \"collate_images\"\nlayout = \"chw\"\nlabel = \"cls\"\n",
        "",
    );
    let captions = run_summary(t.path(), &text_only).unwrap();
    assert_eq!(captions["samples"], 40, "{captions}");
    assert_eq!(
        captions["tokens"].as_u64(),
        Some(tokens),
        "{captions} against {pairs}"
    );
    // One worker per operator: the same pairs.
    let one = run_summary(
        t.path(),
        &text.replace("parallelism = 2", "parallelism = 1"),
    )
    .unwrap();
    assert_eq!(one["tokens"].as_u64(), Some(tokens), "{one}");
    // A caption field the shards lack is named.
    let err = run_summary(
        t.path(),
        &text.replace("field = \"txt\"", "field = \"caption\""),
    )
    .unwrap_err();
    assert!(err.contains("caption"), "{err}");
}
