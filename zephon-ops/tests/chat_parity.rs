//! `tokenize_chat` gives the ids and loss masks of Python Zephon 0.2.0's
//! `TokenizeChat` (rendering with `transformers`' `apply_chat_template`) on
//! the committed tokenizer, for a ChatML template with `{% generation %}`
//! tags, an untagged Llama-3 style one, and no template (raw contents):
//! system prompts, several turns,
//! Unicode, a conversation without an answer, a length cap, loss on the
//! last turn only. The fixture is written by tests/fixtures/make_chat_fixture.py.

use zephon_core::{PipelineExt, Record, Runner, Value};
use zephon_ops::{ChatTokenizeConfig, TextPipelineExt, TextStats};

const TOKENIZER: &[u8] = include_bytes!("fixtures/tokenizer.json");
const FIXTURE: &str = include_str!("fixtures/chat_parity.json");

#[test]
fn ids_and_masks_match_python_zephon() {
    let fx: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
    let conversations = fx["conversations"].as_array().unwrap();
    let cases = fx["cases"].as_array().unwrap();
    assert!(cases.len() >= 30, "the fixture holds {} cases", cases.len());
    let mut compared = 0;
    for (n, case) in cases.iter().enumerate() {
        let name = case["template"].as_str().unwrap();
        let mut config = ChatTokenizeConfig::from_bytes(TOKENIZER).unwrap();
        config = match fx["templates"][name].as_str() {
            Some(t) => config.chat_template(t),
            None => config.raw_content(),
        };
        config = config
            .bos_token(fx["bos_token"].as_str().unwrap())
            .eos_token(fx["eos_token"].as_str().unwrap())
            .loss_on_last_turn_only(case["loss_on_last_turn_only"].as_bool().unwrap());
        if let Some(m) = case["max_length"].as_u64() {
            config = config.max_length(m as usize);
        }
        let chat = &conversations[case["conversation"].as_u64().unwrap() as usize];
        let record = Record::new().with("messages", Value::Json(chat.clone()));
        let stats = std::sync::Arc::new(TextStats::default());
        let out: Vec<_> = futures::stream::iter([Ok(record)])
            .tokenize_chat(config, 1)
            .with_stats(stats.clone())
            .into_blocking_iter(Runner::Inline)
            .unwrap()
            .collect();
        let what = format!("case {n} ({name}, conversation {})", case["conversation"]);
        if case.get("dropped").is_some() {
            assert!(out.is_empty(), "{what}: expected a drop, got {out:?}");
            assert_eq!(stats.chat_dropped.get(), 1, "{what}");
            continue;
        }
        assert_eq!(out.len(), 1, "{what}");
        let r = out
            .into_iter()
            .next()
            .unwrap()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let want = |k: &str| -> Vec<u32> {
            case[k]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect()
        };
        assert_eq!(r.tokens("input_ids").unwrap(), want("ids"), "{what}: ids");
        assert_eq!(r.tokens("loss_mask").unwrap(), want("mask"), "{what}: mask");
        assert!(
            r.get("messages").is_none(),
            "{what}: the conversation is kept"
        );
        compared += 1;
    }
    assert!(compared >= 35, "{compared} cases compared");
}
