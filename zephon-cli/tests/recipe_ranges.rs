//! Every setting of a `zephon run` recipe, and the run flags, outside its
//! documented range: a non-zero exit and an error naming the key and, for
//! the recipe, the line the key is written on.

use std::path::Path;
use std::process::{Command, Output};

const GOOD: &str = r#"[run]
runner = "threads"
workers = 2
max_batches = 5
parquet_decoded_bytes = 268435456

[[datasets]]
name = "web"
uri = "DATA"
weight = 1.0

[work_source]
seed = 1
chunk_size = 64
canonical_lanes = 2
world_size = 1
rank = 0
passes = 1
shuffle_block_size = 8

[[ops]]
op = "prefetch"
buffer_size = 64
parallelism = 3

[[ops]]
op = "fetch"
parallelism = 4

[[ops]]
op = "tokenize"
tokenizer = "TOKENIZER"
parallelism = 5
max_length = 64

[[ops]]
op = "shuffle"
buffer_size = 16

[[ops]]
op = "ensure_mixture"
max_buffer_size = 32

[[ops]]
op = "pack"
max_length = 65
algorithm = "wrap"

[[ops]]
op = "batch"
size = 2

[[ops]]
op = "lane_mux"

[[ops]]
op = "to_training"
seq_len = 66

[[ops]]
op = "prefetch_batches"
depth = 4
"#;

/// (the line as written in `GOOD`, its bad replacement, the key the error names)
const CASES: &[(&str, &str, &str)] = &[
    ("workers = 2", "workers = 100000", "run.workers"),
    ("max_batches = 5", "max_batches = 0", "run.max_batches"),
    (
        "parquet_decoded_bytes = 268435456",
        "parquet_decoded_bytes = 1024",
        "run.parquet_decoded_bytes",
    ),
    ("name = \"web\"", "name = \"\"", "datasets[0].name"),
    ("name = \"web\"", "name = \"  \"", "datasets[0].name"),
    ("weight = 1.0", "weight = nan", "datasets[0].weight"),
    ("weight = 1.0", "weight = inf", "datasets[0].weight"),
    (
        "chunk_size = 64",
        "chunk_size = 0",
        "work_source.chunk_size",
    ),
    (
        "chunk_size = 64",
        "chunk_size = 1099511627776",
        "work_source.chunk_size",
    ),
    (
        "canonical_lanes = 2",
        "canonical_lanes = 4294967295",
        "work_source.canonical_lanes",
    ),
    (
        "canonical_lanes = 2",
        "canonical_lanes = 0",
        "work_source.canonical_lanes",
    ),
    ("world_size = 1", "world_size = 0", "work_source.world_size"),
    ("rank = 0", "rank = 1", "work_source.rank"),
    ("passes = 1", "passes = 0", "work_source.passes"),
    ("passes = 1", "passes = 1099511627777", "work_source.passes"),
    (
        "passes = 1",
        "stop_after_passes = 1125899906842624",
        "work_source.stop_after_passes",
    ),
    (
        "passes = 1",
        "stop_after_passes = 0",
        "work_source.stop_after_passes",
    ),
    (
        "seed = 1",
        "stop_after_passes = 2",
        "work_source.stop_after_passes",
    ),
    (
        "passes = 1",
        "max_repeats = 1099511627777\nexhausted_policy = \"repeat\"",
        "work_source.max_repeats",
    ),
    (
        "passes = 1",
        "max_repeats = 2\nexhausted_policy = \"redistribute\"",
        "work_source.max_repeats",
    ),
    (
        "weight = 1.0",
        "max_repeats = 3\nweight = 1.0",
        "datasets[0].max_repeats",
    ),
    ("seed = 1", "token_samples = 0", "work_source.token_samples"),
    (
        "seed = 1",
        "token_samples = 2000000",
        "work_source.token_samples",
    ),
    (
        "weight = 1.0",
        "tokens_per_sample = nan",
        "datasets[0].tokens_per_sample",
    ),
    (
        "weight = 1.0",
        "tokens_per_sample = 0.0",
        "datasets[0].tokens_per_sample",
    ),
    (
        "weight = 1.0",
        "tokens_per_sample = 1e12",
        "datasets[0].tokens_per_sample",
    ),
    (
        "shuffle_block_size = 8",
        "shuffle_block_size = 0",
        "work_source.shuffle_block_size",
    ),
    ("buffer_size = 64", "buffer_size = 0", "ops[0].buffer_size"),
    (
        "parallelism = 3",
        "parallelism = 100000",
        "ops[0].parallelism",
    ),
    ("parallelism = 4", "parallelism = 0", "ops[1].parallelism"),
    (
        "parallelism = 5",
        "parallelism = 100000",
        "ops[2].parallelism",
    ),
    ("max_length = 64", "max_length = 0", "ops[2].max_length"),
    (
        "max_length = 64",
        "field = \"\"\nmax_length = 64",
        "ops[2].field",
    ),
    ("buffer_size = 16", "buffer_size = 0", "ops[3].buffer_size"),
    (
        "buffer_size = 16",
        "buffer_size = 9223372036854775807",
        "ops[3].buffer_size",
    ),
    (
        "max_buffer_size = 32",
        "max_buffer_size = 0",
        "ops[4].max_buffer_size",
    ),
    ("max_length = 65", "max_length = 0", "ops[5].max_length"),
    (
        "max_length = 65",
        "max_length = 9223372036854775807",
        "ops[5].max_length",
    ),
    (
        "algorithm = \"wrap\"",
        "max_candidate_age = 4\nalgorithm = \"wrap\"",
        "ops[5].max_candidate_age",
    ),
    (
        "algorithm = \"wrap\"",
        "max_candidate_age = 0\nalgorithm = \"best_fit_wrap\"",
        "ops[5].max_candidate_age",
    ),
    (
        "algorithm = \"wrap\"",
        "max_candidate_age = 2000000000000\nalgorithm = \"best_fit_wrap\"",
        "ops[5].max_candidate_age",
    ),
    (
        "algorithm = \"wrap\"",
        "group_field = \"\"\nalgorithm = \"wrap\"",
        "ops[5].group_field",
    ),
    ("size = 2", "size = 0", "ops[6].size"),
    ("size = 2", "size = 100000000", "ops[6].size"),
    ("seq_len = 66", "seq_len = 0", "ops[8].seq_len"),
    (
        "seq_len = 66",
        "seq_len = 9223372036854775807",
        "ops[8].seq_len",
    ),
    ("depth = 4", "depth = 100000000", "ops[9].depth"),
];

fn zephon() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zephon"))
}

/// A recipe over a small JSONL dataset in `dir`, with `GOOD`'s line `old`
/// replaced by `new`; returns its path and the line `new` sits on.
fn write_recipe(dir: &Path, old: &str, new: &str) -> (std::path::PathBuf, usize) {
    let data = dir.join("web");
    std::fs::create_dir_all(&data).unwrap();
    let docs: String = (0..40)
        .map(|i| {
            format!(
                "{{\"text\":\"document number {i} with a few words in it\",\"source\":\"s{}\"}}\n",
                i % 3
            )
        })
        .collect();
    std::fs::write(data.join("0.jsonl"), docs).unwrap();
    let tokenizer = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/data/tokenizer.json");
    let text = GOOD
        .replace("DATA", &data.display().to_string())
        .replace("TOKENIZER", &tokenizer.display().to_string());
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| *l == old)
        .unwrap_or_else(|| panic!("`{old}` is not a line of the recipe"));
    let mut lines: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    lines[at] = new.to_owned();
    let path = dir.join(format!("r{at}.toml"));
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    (path, at + 1)
}

fn run(args: &[&str], recipe: &Path) -> Output {
    zephon().arg("run").args(args).arg(recipe).output().unwrap()
}

#[test]
fn the_good_recipe_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_recipe(dir.path(), "workers = 2", "workers = 2");
    let out = run(&["--json"], &path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"batches\":5"));
}

/// Operator options in their range: (line of `GOOD`, replacement).
const IN_RANGE: &[(&str, &str)] = &[
    (
        "algorithm = \"wrap\"",
        "max_candidate_age = 3\nalgorithm = \"best_fit_wrap\"",
    ),
    (
        "algorithm = \"wrap\"",
        "group_field = \"source\"\nalgorithm = \"wrap\"",
    ),
    (
        "buffer_size = 16",
        "buffer_size = 16\nmode = \"block_warmup\"",
    ),
];

/// The operator options in range run.
#[test]
fn operator_options_in_range_run() {
    let dir = tempfile::tempdir().unwrap();
    for &(old, new) in IN_RANGE {
        let (path, _) = write_recipe(dir.path(), old, new);
        let out = run(&["--json"], &path);
        assert!(
            out.status.success(),
            "`{new}`: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn each_bad_setting_is_named_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    for &(old, new, key) in CASES {
        let (path, line) = write_recipe(dir.path(), old, new);
        let out = run(&["--explain"], &path);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "`{new}` was accepted: {err}");
        assert!(
            err.contains(&format!("`{key}`")) && err.contains(&format!("line {line}")),
            "`{new}` (line {line}): {err}"
        );
        assert!(!err.contains("panicked"), "`{new}`: {err}");
    }
}

/// A second dataset of the first one's name, on its own line.
#[test]
fn a_dataset_name_given_twice_is_named_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("web").display().to_string();
    let (path, line) = write_recipe(
        dir.path(),
        "weight = 1.0",
        &format!("weight = 1.0\n\n[[datasets]]\nname = \"web\"\nuri = \"{data}\""),
    );
    let out = run(&["--explain"], &path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("line {}, `datasets[1].name`", line + 3))
            && err.contains("`web` names datasets[0] already"),
        "{err}"
    );
}

/// An empty URI is refused, not read as the recipe's own folder.
#[test]
fn an_empty_dataset_uri_is_named_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let (path, line) = write_recipe(dir.path(), "weight = 1.0", "weight = 1.0");
    let text = std::fs::read_to_string(&path).unwrap();
    let data = dir.path().join("web").display().to_string();
    std::fs::write(
        &path,
        text.replace(&format!("uri = \"{data}\""), "uri = \"\""),
    )
    .unwrap();
    let out = run(&["--explain"], &path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("line {}, `datasets[0].uri`", line - 1)),
        "{err}"
    );
}

#[test]
fn bad_run_flags_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_recipe(dir.path(), "workers = 2", "workers = 2");
    for (flag, value) in [
        ("--max-batches", "0"),
        ("--observe", "nan"),
        ("--observe", "inf"),
        ("--observe", "-1"),
        ("--observe", "0"),
    ] {
        let out = run(&[&format!("{flag}={value}")], &path);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag} {value} was accepted: {err}");
        assert!(err.contains(flag), "{flag} {value}: {err}");
    }
}

/// `GOOD` with the `passes` line replaced by `new`, and `tokens` added to
/// its dataset.
fn with_exhaustion(dir: &Path, new: &str, tokens: &str) -> std::path::PathBuf {
    let (path, _) = write_recipe(dir, "passes = 1", new);
    if !tokens.is_empty() {
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("weight = 1.0", &format!("weight = 1.0\n{tokens}"));
        std::fs::write(&path, text).unwrap();
    }
    path
}

#[test]
fn exhaustion_policies_and_token_estimates_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = with_exhaustion(
        dir.path(),
        "exhausted_policy = \"repeat\"\nmax_repeats = 2",
        "tokens_per_sample = 9.5",
    );
    let out = run(&["--explain"], &path);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("9.5 tokens/sample") && text.contains("max_repeats: Some(2)"),
        "{text}"
    );
    let out = run(&["--json"], &path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn token_estimates_come_from_the_recipes_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_recipe(dir.path(), "seed = 1", "token_samples = 16");
    let out = run(&["--explain"], &path);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains(" tokens/sample"), "{text}");
}

#[test]
fn contradicting_exhaustion_settings_are_named_with_their_line() {
    let dir = tempfile::tempdir().unwrap();
    // `passes` stays written (line 18) while a policy is set.
    let (path, _) = write_recipe(dir.path(), "seed = 1", "exhausted_policy = \"stop\"");
    let out = run(&["--explain"], &path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("`work_source.passes`") && err.contains("line 18"),
        "{err}"
    );
    let path = with_exhaustion(dir.path(), "exhausted_policy = \"sometimes\"", "");
    let out = run(&["--explain"], &path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("sometimes") && err.contains("line 18") && !err.contains("panicked"),
        "{err}"
    );
}

/// `tracking` is what `--observe` reports from, `stage` or `operator`:
/// `off` was taken, and an observed run then reported "0 batches
/// delivered" after a full run. It is refused with its line.
#[test]
fn tracking_off_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let (path, line) = write_recipe(dir.path(), "workers = 2", "tracking = \"off\"");
    let out = run(&["--explain"], &path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("line {line}"))
            && err.contains("tracking")
            && err.contains("expected `stage` or `operator`"),
        "{err}"
    );
}

/// A batch size and a seq_len each in range whose product is past what a
/// training batch counts (2^31 - 1 positions) is refused with the line:
/// the collation reserved about 100 GiB before it failed.
#[test]
fn a_batch_of_more_positions_than_a_training_batch_counts_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_recipe(dir.path(), "size = 2", "size = 65536");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("seq_len = 66", "seq_len = 65536");
    std::fs::write(&path, &text).unwrap();
    let line = text.lines().position(|l| l == "seq_len = 65536").unwrap() + 1;
    let out = run(&["--explain"], &path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("line {line}")) && err.contains("past 2^31 - 1 tokens"),
        "{err}"
    );
}

/// What `tokenize` needs its tokenizer to check (room for the special
/// tokens in max_length) is refused when the recipe is built, before any
/// dataset is read, and an `overflow` typo is named even where max_length
/// is not set: both passed the build (the first failed at the first
/// sample, the second was ignored).
#[test]
fn tokenize_options_needing_the_tokenizer_are_refused_at_build() {
    let dir = tempfile::tempdir().unwrap();
    for (old, new, says) in [
        ("max_length = 64", "max_length = 1", "`tokenize.max_length`"),
        (
            "max_length = 64",
            "overflow = \"spilt\"",
            "overflow `spilt`",
        ),
    ] {
        let (path, _) = write_recipe(dir.path(), old, new);
        let out = run(&["--explain"], &path);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "`{new}` was accepted: {err}");
        assert!(
            err.contains("ops[2]") && err.contains(says),
            "`{new}`: {err}"
        );
    }
}
