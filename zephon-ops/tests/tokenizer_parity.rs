//! Zephon's ids equal those of the Python `tokenizers` package for the
//! committed fixture (see fixtures/make_fixture.py for how it was made).

use zephon_core::{PipelineExt, Record, Runner};
use zephon_ops::{TextPipelineExt, TokenizeConfig};

#[derive(serde::Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
}

fn fixture() -> Fixture {
    serde_json::from_str(include_str!("fixtures/parity.json")).expect("fixture parses")
}

fn config() -> TokenizeConfig {
    TokenizeConfig::from_bytes(include_bytes!("fixtures/tokenizer.json")).expect("tokenizer loads")
}

#[test]
fn ids_equal_python_tokenizers() {
    let fx = fixture();
    assert!(fx.cases.len() > 40);
    for (runner, per_worker) in [
        (Runner::Inline, false),
        (Runner::Threads { workers: 2 }, false),
        (Runner::Threads { workers: 2 }, true),
    ] {
        let docs = fx
            .cases
            .iter()
            .map(|c| Ok(Record::new().with("text", c.text.as_str())));
        let out: Vec<Record> = futures::stream::iter(docs.collect::<Vec<_>>())
            .tokenize(config().micro_batch(5).per_worker_tokenizers(per_worker), 3)
            .into_blocking_iter(runner)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(out.len(), fx.cases.len());
        for (case, rec) in fx.cases.iter().zip(&out) {
            assert_eq!(
                rec.tokens("input_ids").unwrap(),
                case.ids.as_slice(),
                "text {:?}",
                case.text
            );
        }
    }
}
