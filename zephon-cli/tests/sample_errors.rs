//! An operator failing on one sample names the dataset and the shard file it
//! came from, and says so once.

use std::process::Command;

fn run_recipe(dir: &std::path::Path, docs: &str, ops: &str) -> String {
    let data = dir.join("web");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("part-0.jsonl"), docs).unwrap();
    let tokenizer =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/data/tokenizer.json");
    let recipe = dir.join("r.toml");
    std::fs::write(
        &recipe,
        format!(
            "[[datasets]]\nname = \"webtext\"\nuri = \"{}\"\n[work_source]\nshuffle_within_shard = false\n\
             [[ops]]\nop = \"fetch\"\n[[ops]]\nop = \"tokenize\"\ntokenizer = \"{}\"\n{ops}",
            data.display(),
            tokenizer.display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_zephon"))
        .args(["run", "--json"])
        .arg(&recipe)
        .output()
        .unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_record_without_the_field_names_dataset_and_shard_once() {
    let dir = tempfile::tempdir().unwrap();
    let err = run_recipe(
        dir.path(),
        "{\"text\":\"a\"}\n{\"body\":\"b\"}\n",
        "[[ops]]\nop = \"batch\"\nsize = 2\n",
    );
    assert!(
        err.contains("dataset `webtext`")
            && err.contains("part-0.jsonl")
            && err.contains("sample 1"),
        "{err}"
    );
    assert_eq!(err.matches("no text field `text`").count(), 1, "{err}");
    assert_eq!(err.matches("tokenize").count(), 1, "{err}");
}
