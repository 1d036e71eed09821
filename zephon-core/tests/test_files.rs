//! Every integration test file of the workspace is built: with
//! `autotests = false` (see `suite.rs`), a file in `tests/` that neither
//! `suite.rs` declares as a module nor `Cargo.toml` names as a test would
//! silently never compile nor run.

use std::collections::BTreeSet;
use std::path::Path;

/// The names in `text` that follow `prefix` up to `end`, one per line.
fn names_after(text: &str, prefix: &str, end: char) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix(prefix))
        .filter_map(|rest| rest.split(end).next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_test_file_is_a_module_of_the_suite_or_a_test_of_its_own() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut checked = 0;
    for krate in std::fs::read_dir(&root).unwrap() {
        let krate = krate.unwrap().path();
        let Ok(suite) = std::fs::read_to_string(krate.join("tests/suite.rs")) else {
            continue;
        };
        let manifest = std::fs::read_to_string(krate.join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains("autotests = false"),
            "{}: a suite without autotests = false builds every file twice",
            krate.display()
        );
        let modules = names_after(&suite, "mod ", ';');
        let tests = names_after(&manifest, "name = \"", '"');
        for file in std::fs::read_dir(krate.join("tests")).unwrap() {
            let path = file.unwrap().path();
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let stem = path.file_stem().unwrap().to_str().unwrap().to_owned();
            assert!(
                stem == "suite" || modules.contains(&stem) || tests.contains(&stem),
                "{} is neither a module of tests/suite.rs nor a [[test]] of Cargo.toml: it is never built",
                path.display()
            );
            checked += 1;
        }
    }
    // The four crates with a suite, their files counted.
    assert!(checked > 80, "only {checked} test files found");
}
