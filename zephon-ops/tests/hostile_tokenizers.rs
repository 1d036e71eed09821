//! `tokenizer.json` files as hostile input: the fixture with its settings
//! replaced by hostile ones (padding and truncation of huge or absurd
//! lengths, normalizers that grow text, pre-tokenizers with backtracking
//! patterns, post-processors naming unknown tokens, vocabulary entries with
//! huge ids, models of another type) and with mutated bytes. Each case ends
//! in a tokenizer that encodes documents, or an error naming the file or
//! the sample, never a panic or a blow-up; a file's own padding and
//! truncation never change the ids.
//!
//! `cargo test -p zephon-ops --test suite -- --nocapture hostile_tokenizers::`
//! prints the table of cases.

use crate::hostile::{Outcome, Tally, mutated};
use proptest::prelude::*;
use serde_json::{Value as Json, json};
use zephon_core::{Dataset, PipelineExt, Record, Runner, WorkSource};
use zephon_ops::{TextPipelineExt, TokenizeConfig};

const FIXTURE: &[u8] = include_bytes!("fixtures/tokenizer.json");

fn length() -> impl Strategy<Value = Json> {
    prop::sample::select(vec![
        json!(0),
        json!(1),
        json!(8),
        json!(1_000_000_000u64),
        json!(u32::MAX),
        json!(u64::MAX),
        json!(-1),
        json!(null),
        json!("8"),
    ])
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just(" ".to_owned()),
        Just("▁".to_owned()),
        "[a-z ]{1,3}",
        (1usize..6).prop_map(|k| "x".repeat(10usize.pow(k as u32))),
    ]
}

fn regex() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "", " ", "(a+)+$", "\\p{L}+", "(?=a)", "[", "\\s*", "(.*)*x", "\\d{1,3}", "(?i)A",
    ])
    .prop_map(str::to_owned)
}

fn normalizer() -> impl Strategy<Value = Json> {
    let one = prop_oneof![
        (text(), text())
            .prop_map(|(p, c)| json!({"type": "Replace", "pattern": {"String": p}, "content": c})),
        (regex(), text())
            .prop_map(|(p, c)| json!({"type": "Replace", "pattern": {"Regex": p}, "content": c})),
        text().prop_map(|p| json!({"type": "Prepend", "prepend": p})),
        prop::sample::select(vec!["NFKC", "NFD", "Lowercase", "Nmt", "NoSuchNormalizer"])
            .prop_map(|t| json!({"type": t})),
        Just(json!({"type": "Strip", "strip_left": true, "strip_right": true})),
    ];
    prop_oneof![
        one.clone(),
        prop::collection::vec(one, 0..6)
            .prop_map(|n| json!({"type": "Sequence", "normalizers": n})),
    ]
}

fn pre_tokenizer() -> impl Strategy<Value = Json> {
    let one = prop_oneof![
        (regex(), any::<bool>()).prop_map(|(r, invert)| json!({
            "type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": invert
        })),
        text().prop_map(|r| json!({
            "type": "Metaspace", "replacement": r, "prepend_scheme": "always", "split": true
        })),
        (any::<bool>(), any::<bool>()).prop_map(|(a, u)| json!({
            "type": "ByteLevel", "add_prefix_space": a, "trim_offsets": true, "use_regex": u
        })),
        prop::sample::select(vec![
            "Digits",
            "Punctuation",
            "WhitespaceSplit",
            "Whitespace",
            "Bogus"
        ])
        .prop_map(|t| json!({"type": t, "individual_digits": true})),
    ];
    prop_oneof![
        one.clone(),
        prop::collection::vec(one, 0..4)
            .prop_map(|p| json!({"type": "Sequence", "pretokenizers": p})),
    ]
}

/// One hostile edit of the fixture's JSON, and whether it touches only the
/// file's own padding and truncation (which must not change the ids).
fn edit() -> impl Strategy<Value = (Vec<&'static str>, Json, bool)> {
    prop_oneof![
        (length(), length(), length()).prop_map(|(fixed, multiple, id)| (
            vec!["padding"],
            json!({
                "strategy": {"Fixed": fixed}, "direction": "Right", "pad_to_multiple_of": multiple,
                "pad_id": id, "pad_type_id": 0, "pad_token": "<|endoftext|>"
            }),
            true
        )),
        length().prop_map(|multiple| (
            vec!["padding"],
            json!({
                "strategy": "BatchLongest", "direction": "Left", "pad_to_multiple_of": multiple,
                "pad_id": 0, "pad_type_id": 0, "pad_token": "<|endoftext|>"
            }),
            true
        )),
        (length(), length(), any::<bool>()).prop_map(|(max, stride, left)| (
            vec!["truncation"],
            json!({
                "direction": if left { "Left" } else { "Right" }, "max_length": max,
                "strategy": "LongestFirst", "stride": stride
            }),
            true
        )),
        normalizer().prop_map(|n| (vec!["normalizer"], n, false)),
        pre_tokenizer().prop_map(|p| (vec!["pre_tokenizer"], p, false)),
        (text(), length()).prop_map(|(t, id)| (
            vec!["post_processor"],
            json!({
                "type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": t, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [id], "tokens": ["<|endoftext|>"]}}
            }),
            false
        )),
        prop::sample::select(vec![json!(0.5), json!(1.5), json!(-1.0), json!("x")])
            .prop_map(|d| (vec!["model", "dropout"], d, false)),
        length().prop_map(|id| (vec!["model", "vocab", "zzzz"], id, false)),
        Just((vec!["model", "merges", "0"], json!("qq ww"), false)),
        prop::sample::select(vec!["WordPiece", "WordLevel", "Unigram", "Nothing"])
            .prop_map(|t| (vec!["model", "type"], json!(t), false)),
        (length(), text(), any::<bool>()).prop_map(|(id, content, special)| (
            vec!["added_tokens", "0"],
            json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": true, "special": special}),
            false
        )),
    ]
}

fn set(file: &mut Json, path: &[&str], value: Json) {
    let mut at = file;
    for (i, key) in path.iter().enumerate() {
        let last = i + 1 == path.len();
        at = match at {
            Json::Array(items) => {
                let k: usize = key.parse().unwrap();
                if last {
                    items.insert(k.min(items.len()), value);
                    return;
                }
                &mut items[k]
            }
            Json::Object(map) => {
                if last {
                    map.insert((*key).to_owned(), value);
                    return;
                }
                map.entry(*key).or_insert(json!({}))
            }
            _ => return,
        };
    }
}

fn documents() -> Vec<Record> {
    [
        "Two plus two is four.",
        "",
        "ünïcode ▁ text\twith\ttabs",
        &"long line ".repeat(300),
    ]
    .iter()
    .map(|t| Record::new().with("text", *t))
    .collect()
}

/// The ids of `documents()` under the tokenizer file `bytes`, or the error:
/// a refused file must be named, a failed document too.
fn encode(bytes: &[u8]) -> Result<Vec<Vec<u32>>, Outcome> {
    let config = match TokenizeConfig::from_bytes(bytes) {
        Ok(c) => c,
        Err(e) => {
            let e = e.to_string();
            return Err(match e.starts_with("tokenizer `<bytes>`") {
                true => Outcome::Clean,
                false => Outcome::Silent(format!("a refusal naming no file: {e}")),
            });
        }
    };
    let ds = Dataset::in_memory("docs", vec![documents()]).unwrap();
    let ws = WorkSource::builder()
        .dataset(ds, 1.0)
        .shuffle_within_shard(false)
        .build()
        .unwrap();
    let catalog = ws.catalog().clone();
    let mut ids = Vec::new();
    for r in ws
        .stream()
        .fetch(1)
        .tokenize(config, 2)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
    {
        match r {
            Ok(r) => ids.push(r.tokens("input_ids").unwrap_or_default().to_vec()),
            Err(e) => {
                let e = e.name_sources(&catalog).to_string();
                return Err(match e.contains("docs") && e.contains("sample") {
                    true => Outcome::Clean,
                    false => Outcome::Silent(format!("an error naming no sample: {e}")),
                });
            }
        }
    }
    Ok(ids)
}

#[test]
fn hostile_settings() {
    let tally = Tally::new("tokenizer.json (hostile settings)");
    let base = encode(FIXTURE).unwrap_or_else(|_| panic!("the fixture encodes"));
    let fixture: Json = serde_json::from_slice(FIXTURE).unwrap();
    tally.run(200, prop::collection::vec(edit(), 1..4), |edits| {
        let mut file = fixture.clone();
        for (path, value, _) in edits {
            set(&mut file, path, value.clone());
        }
        let only_own_settings = edits.iter().all(|e| e.2);
        match encode(&serde_json::to_vec(&file).unwrap()) {
            Ok(ids) if only_own_settings && ids != base => {
                Outcome::Silent("the file's own padding or truncation changed the ids".into())
            }
            Ok(ids) => match ids.iter().map(Vec::len).max() {
                // Growth is bounded by the normalizer limit.
                Some(n) if n > 256 * 3000 * 4 => {
                    Outcome::Silent(format!("a document of 3 KB became {n} ids"))
                }
                _ => Outcome::Valid,
            },
            Err(o) => o,
        }
    });
    tally.finish();
}

#[test]
fn mutated_bytes() {
    let tally = Tally::new("tokenizer.json (mutated bytes)");
    tally.run(100, mutated(Just(FIXTURE.to_vec())), |bytes| {
        match encode(bytes) {
            Ok(_) => Outcome::Valid,
            Err(o) => o,
        }
    });
    tally.finish();
}

/// A file on which the tokenizers library panics while loading (an added
/// token the normalizers rewrite, found by `hostile_settings`): an error
/// naming the file.
#[test]
fn a_file_the_library_panics_on_while_loading_is_an_error_naming_it() {
    let mut file: Json = serde_json::from_slice(FIXTURE).unwrap();
    set(
        &mut file,
        &["added_tokens", "0"],
        serde_json::json!({
            "content": "\u{2581}", "id": 0, "lstrip": false, "normalized": true,
            "rstrip": false, "single_word": false, "special": false
        }),
    );
    set(
        &mut file,
        &["normalizer"],
        serde_json::json!({
            "type": "Sequence",
            "normalizers": [{"type": "Prepend", "prepend": ""}, {"type": "NFKC"}]
        }),
    );
    let bytes = serde_json::to_vec(&file).unwrap();
    let e = match TokenizeConfig::from_bytes(bytes) {
        Ok(_) => panic!("the file loaded"),
        Err(e) => e.to_string(),
    };
    assert!(e.starts_with("tokenizer `<bytes>`"), "{e}");
    assert!(e.contains("the tokenizers library failed"), "{e}");
}
