//! `zephon run` recipes with `tokenize_chat`, `tokenize` padding and
//! special tokens, and the `to_training` options: a good recipe runs, and
//! each bad setting is an error naming the key and its line.

use std::path::Path;
use std::process::{Command, Output};

const CHAT: &str = r#"[run]
runner = "threads"
max_batches = 3

[[datasets]]
name = "chats"
uri = "DATA"
weight = 1.0

[work_source]
seed = 1
canonical_lanes = 2

[[ops]]
op = "fetch"

[[ops]]
op = "tokenize_chat"
tokenizer = "TOKENIZER"
chat_template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}{% generation %}{{ m.content }}<|im_end|>{% endgeneration %}{% else %}{{ m.content }}<|im_end|>{% endif %}\n{% endfor %}"
eos_token = "<|endoftext|>"
system_prompt = "Be brief."
max_length = 200
loss_on_last_turn_only = false
parallelism = 2
template_vars = { enable_thinking = false }

[[ops]]
op = "batch"
size = 2

[[ops]]
op = "to_training"
seq_len = 256
position_mode = "sequence"
eos_mask_loss = 0
"#;

const TEXT: &str = r#"[[datasets]]
name = "web"
uri = "DATA"

[[ops]]
op = "fetch"

[[ops]]
op = "tokenize"
tokenizer = "TOKENIZER"
special_tokens = "tokenizer_default"
max_length = 16
padding = true
pad_token_id = 1

[[ops]]
op = "batch"
size = 2

[[ops]]
op = "to_training"
seq_len = 16
"#;

/// (recipe, the line as written, its bad replacement, the key the error names)
const CASES: &[(&str, &str, &str, &str)] = &[
    (
        CHAT,
        "max_length = 200",
        "max_length = 1",
        "ops[1].max_length",
    ),
    (
        CHAT,
        "max_length = 200",
        "max_length = 9223372036854775807",
        "ops[1].max_length",
    ),
    (
        CHAT,
        "parallelism = 2",
        "parallelism = 0",
        "ops[1].parallelism",
    ),
    (
        CHAT,
        "eos_token = \"<|endoftext|>\"",
        "eos_token = \"<|none|>\"",
        "tokenize_chat.eos_token",
    ),
    (
        CHAT,
        "template_vars = { enable_thinking = false }",
        "template_vars = { messages = 1 }",
        "tokenize_chat.template_vars",
    ),
    (
        CHAT,
        "loss_on_last_turn_only = false",
        "raw_content = true",
        "tokenize_chat.chat_template",
    ),
    (
        CHAT,
        "position_mode = \"sequence\"",
        "position_mode = \"row\"",
        "ops[3].position_mode",
    ),
    (
        TEXT,
        "special_tokens = \"tokenizer_default\"",
        "special_tokens = \"all\"",
        "ops[1].special_tokens",
    ),
    (TEXT, "max_length = 16", "", "ops[1].padding"),
];

fn write(dir: &Path, recipe: &str, old: &str, new: &str) -> (std::path::PathBuf, usize) {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let docs: String = (0..20)
        .map(|i| {
            let m = serde_json::json!([
                {"role": "user", "content": format!("question {i}")},
                {"role": "assistant", "content": format!("answer {i}")},
            ]);
            format!(
                "{}\n",
                serde_json::json!({"text": format!("document {i}"), "messages": m})
            )
        })
        .collect();
    std::fs::write(data.join("0.jsonl"), docs).unwrap();
    let tokenizer = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/data/tokenizer.json");
    let text = recipe
        .replace("DATA", &data.display().to_string())
        .replace("TOKENIZER", &tokenizer.display().to_string());
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let at = lines
        .iter()
        .position(|l| l == old)
        .unwrap_or_else(|| panic!("`{old}` is not a line of the recipe"));
    lines[at] = new.to_owned();
    let path = dir.join(format!("r{at}.toml"));
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    (path, at + 1)
}

fn run(args: &[&str], recipe: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zephon"))
        .arg("run")
        .args(args)
        .arg(recipe)
        .output()
        .unwrap()
}

#[test]
fn the_good_recipes_run() {
    let dir = tempfile::tempdir().unwrap();
    for (recipe, line, batches) in [(CHAT, "max_batches = 3", 3), (TEXT, "max_length = 16", 10)] {
        let (path, _) = write(dir.path(), recipe, line, line);
        let out = run(&["--json"], &path);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(&format!("\"batches\":{batches}")),
            "{stdout}"
        );
    }
}

#[test]
fn each_bad_setting_is_named_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    for &(recipe, old, new, key) in CASES {
        let (path, line) = write(dir.path(), recipe, old, new);
        let out = run(&["--explain"], &path);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "`{new}` was accepted: {err}");
        assert!(err.contains(&format!("`{key}`")), "`{new}`: {err}");
        if key.starts_with("ops[") && !new.is_empty() {
            assert!(
                err.contains(&format!("line {line}")),
                "`{new}` (line {line}): {err}"
            );
        }
        assert!(!err.contains("panicked"), "`{new}`: {err}");
    }
}

#[test]
fn a_template_that_does_not_compile_names_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let old = CHAT
        .lines()
        .find(|l| l.starts_with("chat_template"))
        .unwrap();
    let (path, _) = write(
        dir.path(),
        CHAT,
        old,
        "chat_template = \"{% for m in messages %}\\n{{ m.content }\"",
    );
    let out = run(&["--explain"], &path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("ops[1] (`tokenize_chat`)") && err.contains("template line 2"),
        "{err}"
    );
}

#[test]
fn the_example_chat_recipe_runs() {
    let recipe = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/recipes/chat_sft.toml");
    let out = run(&["--json"], &recipe);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Six conversations, one without an answer (dropped): three batches of 2, 2, 1.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("\"batches\":3") && stdout.contains("\"samples\":5"),
        "{stdout}"
    );
    let summary = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v.get("summary").cloned())
        .unwrap_or_else(|| panic!("no summary line: {stdout}"));
    assert_eq!(summary["chat_dropped"], 1, "{summary}");
    // The same figure in words, beside the others.
    let out = run(&[], &recipe);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("1 conversation dropped by tokenize_chat"),
        "{stdout}"
    );
}

/// A recipe without `tokenize_chat` says nothing of conversations.
#[test]
fn a_recipe_without_chat_reports_no_dropped_conversations() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write(dir.path(), TEXT, "max_length = 16", "max_length = 16");
    let out = run(&["--json"], &path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("\"summary\"") && !stdout.contains("chat_dropped"),
        "{stdout}"
    );
}
