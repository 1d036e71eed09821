//! `tokenize` options Python Zephon users rely on: padding to `max_length`
//! with a pad id, and the tokenizer's own special tokens.

use zephon_core::{PipelineExt, Record, Runner};
use zephon_ops::{Overflow, SpecialTokens, TextPipelineExt, TokenizeConfig};

const TOKENIZER: &[u8] = include_bytes!("fixtures/tokenizer.json");
const TEXT: &str = "the loader streams shards of text into packed rows, café 日本";

fn run(config: TokenizeConfig, texts: &[&str]) -> Vec<Record> {
    let records: Vec<_> = texts
        .iter()
        .map(|t| Ok(Record::new().with("text", *t)))
        .collect();
    futures::stream::iter(records)
        .tokenize(config, 2)
        .into_blocking_iter(Runner::threads())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn ids(r: &Record, k: &str) -> Vec<u32> {
    r.tokens(k).unwrap().to_vec()
}

#[test]
fn padding_fills_to_max_length_with_the_pad_id_and_a_zero_mask() {
    let plain = run(TokenizeConfig::from_bytes(TOKENIZER).unwrap(), &[TEXT]);
    let n = plain[0].tokens("input_ids").unwrap().len();
    let m = n + 5;
    let base = || {
        TokenizeConfig::from_bytes(TOKENIZER)
            .unwrap()
            .max_length(m, Overflow::Truncate)
            .padding(true)
            .attention_mask(true)
    };
    let tok = base();
    let pad = tok.token_id("<|pad|>").unwrap();
    let out = run(tok, &[TEXT, ""]);
    let want: Vec<u32> = ids(&plain[0], "input_ids")
        .into_iter()
        .chain([pad; 5])
        .collect();
    assert_eq!(ids(&out[0], "input_ids"), want);
    assert_eq!(
        ids(&out[0], "attention_mask"),
        [vec![1; n], vec![0; 5]].concat()
    );
    assert_eq!(
        ids(&out[1], "input_ids"),
        vec![pad; m],
        "an empty text is all padding"
    );
    assert_eq!(ids(&out[1], "attention_mask"), vec![0; m]);
    // An explicit id wins; split pieces are padded one by one.
    let out = run(
        TokenizeConfig::from_bytes(TOKENIZER)
            .unwrap()
            .max_length(4, Overflow::Split)
            .padding(true)
            .pad_id(7),
        &[TEXT],
    );
    let pieces: Vec<u32> = ids(&plain[0], "input_ids");
    assert_eq!(out.len(), n.div_ceil(4));
    for (piece, want) in out.iter().zip(pieces.chunks(4)) {
        let mut want = want.to_vec();
        want.resize(4, 7);
        assert_eq!(ids(piece, "input_ids"), want);
    }
}

#[test]
fn padding_needs_max_length() {
    let e = futures::stream::iter([Ok(Record::new().with("text", "x"))])
        .tokenize(
            TokenizeConfig::from_bytes(TOKENIZER).unwrap().padding(true),
            1,
        )
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .next()
        .unwrap()
        .unwrap_err();
    assert!(e.to_string().contains("`tokenize.padding`"), "{e}");
}

/// The committed tokenizer with a post-processor that brackets a sequence
/// as `<|endoftext|> $A <|pad|>` (as Llama's adds BOS).
fn with_post_processor() -> tokenizers::Tokenizer {
    let mut json: serde_json::Value = serde_json::from_slice(TOKENIZER).unwrap();
    let vocab = |t: &str| {
        json["added_tokens"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["content"] == t)
            .unwrap()["id"]
            .clone()
    };
    let (bos, tail) = (vocab("<|endoftext|>"), vocab("<|pad|>"));
    json["post_processor"] = serde_json::json!({
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<|pad|>", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {
            "<|endoftext|>": {"id": "<|endoftext|>", "ids": [bos], "tokens": ["<|endoftext|>"]},
            "<|pad|>": {"id": "<|pad|>", "ids": [tail], "tokens": ["<|pad|>"]}
        }
    });
    tokenizers::Tokenizer::from_bytes(serde_json::to_vec(&json).unwrap()).unwrap()
}

#[test]
fn tokenizer_default_adds_what_the_post_processor_adds_and_keeps_it_when_truncating() {
    let tok = with_post_processor();
    let own = tok.encode(TEXT, true).unwrap().get_ids().to_vec();
    let plain = tok.encode(TEXT, false).unwrap().get_ids().to_vec();
    assert_eq!(own.len(), plain.len() + 2, "the template adds two ids");
    let cfg = || {
        TokenizeConfig::from_tokenizer(tok.clone()).special_tokens(SpecialTokens::TokenizerDefault)
    };
    assert_eq!(ids(&run(cfg(), &[TEXT])[0], "input_ids"), own);
    // Truncation as the tokenizer itself does it: specials kept, text cut.
    let mut truncating = tok.clone();
    truncating
        .with_truncation(Some(tokenizers::TruncationParams {
            max_length: 6,
            ..Default::default()
        }))
        .unwrap();
    let own6 = truncating.encode(TEXT, true).unwrap().get_ids().to_vec();
    assert_eq!(own6.len(), 6);
    assert_eq!(
        ids(
            &run(cfg().max_length(6, Overflow::Truncate), &[TEXT])[0],
            "input_ids"
        ),
        own6
    );
    // Without a post-processor, nothing is added.
    let none = TokenizeConfig::from_bytes(TOKENIZER)
        .unwrap()
        .special_tokens(SpecialTokens::TokenizerDefault);
    assert_eq!(ids(&run(none, &[TEXT])[0], "input_ids"), plain);
}

/// Text read in place from a shard (`Value::TextView`) tokenizes as the
/// same text owned does, and `keep_text` keeps it as it came.
#[test]
fn text_read_in_place_tokenizes_as_owned_text() {
    use zephon_core::Value;
    use zephon_core::record::ByteString;
    let shard = bytes::Bytes::from(format!("<{TEXT}>"));
    let view = ByteString::try_from(shard.slice(1..shard.len() - 1)).unwrap();
    let config = || {
        TokenizeConfig::from_bytes(TOKENIZER)
            .unwrap()
            .keep_text(true)
    };
    let owned = run(config(), &[TEXT]);
    let viewed: Vec<Record> =
        futures::stream::iter([Ok(Record::new().with("text", Value::TextView(view)))])
            .tokenize(config(), 2)
            .into_blocking_iter(Runner::threads())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
    assert_eq!(ids(&viewed[0], "input_ids"), ids(&owned[0], "input_ids"));
    assert!(matches!(viewed[0].get("text"), Some(Value::TextView(_))));
    assert_eq!(viewed[0], owned[0]);
}

/// A tokenizer's configuration is input: one whose pre-tokenizer's regular
/// expression backtracks past Oniguruma's retry limit makes the tokenizer
/// panic on some texts. That text's sample fails with an error naming its
/// field and its place; the pipeline does not end in a panic.
#[test]
fn a_tokenizer_that_panics_on_a_text_fails_that_sample_by_name() {
    let mut json: serde_json::Value = serde_json::from_slice(TOKENIZER).unwrap();
    json["pre_tokenizer"] = serde_json::json!({
        "type": "Split", "pattern": {"Regex": "(a+)+b"}, "behavior": "Isolated", "invert": false
    });
    let config = TokenizeConfig::from_bytes(json.to_string().as_bytes()).unwrap();
    let ptr = zephon_core::SamplePtr {
        dataset: 0,
        shard: 3,
        sample: 7,
        lane: 0,
    };
    let fine = Record::new().with("text", "ab ab");
    let mut hostile = Record::new().with("text", "a".repeat(40));
    hostile.lineage = zephon_core::record::Lineage::from_buf([ptr]);
    let out: Vec<_> = futures::stream::iter([Ok(fine), Ok(hostile)])
        .tokenize(config, 1)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .collect();
    assert!(out[0].is_ok());
    let err = out[1].as_ref().unwrap_err().to_string();
    assert!(
        err.contains("text") && err.contains("sample 7") && err.contains("retry-limit"),
        "{err}"
    );
}
