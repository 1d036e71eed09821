//! `tokenize_chat` in a pipeline: the same records in the same order for any
//! parallelism, micro-batch and runner; bad conversations and templates are
//! errors naming the dataset, shard, sample and template line.

use proptest::prelude::*;
use serde_json::json;
use zephon_core::{Dataset, PipelineExt, Record, Runner, Value, WorkSource};
use zephon_ops::{ChatTokenizeConfig, TextPipelineExt};

const CHATML: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n\
    {% if m.role == 'assistant' %}{% generation %}{{ m.content }}<|im_end|>{% endgeneration %}\
    {% else %}{{ m.content }}<|im_end|>{% endif %}\n{% endfor %}";

fn config() -> ChatTokenizeConfig {
    ChatTokenizeConfig::from_bytes(include_bytes!("fixtures/tokenizer.json"))
        .unwrap()
        .chat_template(CHATML)
        .eos_token("<|endoftext|>")
}

/// Conversation `i`: 0 to 3 exchanges, some without an answer (dropped).
fn chat(i: u64) -> Record {
    let turns = i % 4;
    let mut m = vec![json!({"role": "system", "content": format!("system {i}")})];
    for t in 0..turns {
        m.push(json!({"role": "user", "content": format!("question {t} of {i}")}));
        m.push(json!({"role": "assistant", "content": format!("answer {t} ünïcode {i}")}));
    }
    Record::new().with("messages", Value::Json(json!(m)))
}

fn run(n: u64, parallelism: usize, micro: usize, runner: Runner) -> Vec<(Vec<u32>, Vec<u32>)> {
    futures::stream::iter((0..n).map(|i| Ok(chat(i))))
        .tokenize_chat(config().micro_batch(micro), parallelism)
        .into_blocking_iter(runner)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            let t = |k| r.tokens(k).unwrap().to_vec();
            (t("input_ids"), t("loss_mask"))
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    /// Parallelism, micro-batch size and runner never change the output.
    #[test]
    fn output_is_independent_of_execution_settings(
        n in 0u64..60, parallelism in 1usize..6, micro in 1usize..9, threads in any::<bool>()
    ) {
        let runner = if threads { Runner::threads() } else { Runner::Inline };
        let want = run(n, 1, 64, Runner::Inline);
        prop_assert_eq!(want.len() as u64, n - n.div_ceil(4));
        prop_assert_eq!(run(n, parallelism, micro, runner), want);
    }
}

fn first_error(records: Vec<Record>, config: ChatTokenizeConfig) -> String {
    let ds = Dataset::in_memory("chats", vec![records]).unwrap();
    let ws = WorkSource::builder()
        .dataset(ds, 1.0)
        .shuffle_within_shard(false)
        .build()
        .unwrap();
    let catalog = ws.catalog().clone();
    ws.stream()
        .fetch(1)
        .tokenize_chat(config, 2)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .find_map(|r| r.err())
        .expect("an error")
        .name_sources(&catalog)
        .to_string()
}

#[test]
fn bad_conversations_are_errors_naming_the_sample() {
    let with = |m: serde_json::Value| Record::new().with("messages", Value::Json(m));
    let cases = [
        (
            Record::new().with("text", "no chat"),
            "no messages field `messages`",
        ),
        (
            Record::new().with("messages", "a string"),
            "field `messages` is text, not a list of messages",
        ),
        (
            with(json!([{"role": "user", "content": "hi"}, {"content": "who?"}])),
            "message 1 has no `role`",
        ),
        (with(json!(["just text"])), "message 0 is not an object"),
    ];
    for (bad, message) in cases {
        let e = first_error(vec![chat(1), bad], config());
        assert_eq!(
            e,
            format!(
                "operator `tokenize_chat`: dataset `chats`, shard `memory://chats/0`, sample 1: {message}"
            )
        );
    }
    let raw = || {
        ChatTokenizeConfig::from_bytes(include_bytes!("fixtures/tokenizer.json"))
            .unwrap()
            .raw_content()
            .eos_token("<|endoftext|>")
    };
    let cases = [
        (
            with(json!([{"role": "user", "content": 5}])),
            "message 0: content is a number, not text",
        ),
        (
            with(json!([{"role": "user", "content": [{"type": "text"}]}])),
            "message 0, content part 0: a text part without text",
        ),
    ];
    for (bad, message) in cases {
        let e = first_error(vec![chat(1), bad], raw());
        assert_eq!(
            e,
            format!(
                "operator `tokenize_chat`: dataset `chats`, shard `memory://chats/0`, sample 1: {message}"
            )
        );
    }
}

#[test]
fn a_supervised_first_token_is_an_error() {
    // Packed rows mask labels across documents only because every
    // conversation starts unsupervised.
    let all =
        "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}";
    let e = first_error(vec![chat(1)], config().chat_template(all));
    assert!(
        e.starts_with("operator `tokenize_chat`: dataset `chats`, shard `memory://chats/0`, sample 0: the first token is supervised"),
        "{e}"
    );
}

#[test]
fn a_template_that_fails_to_render_names_its_line() {
    let template = "{% for m in messages %}\n{% generation %}{{ m.content }}{% endgeneration %}\n{% if m.role == 'tool' %}{{ raise_exception('no tools here') }}{% endif %}\n{% endfor %}";
    let tool = Record::new().with(
        "messages",
        Value::Json(json!([{"role": "tool", "content": "x"}])),
    );
    let e = first_error(vec![tool], config().chat_template(template));
    assert!(e.starts_with("operator `tokenize_chat`: dataset `chats`, shard `memory://chats/0`, sample 0: template line 3"), "{e}");
    assert!(e.contains("no tools here"), "{e}");
}

#[test]
fn bad_configurations_are_the_first_item() {
    let cfg = || ChatTokenizeConfig::from_bytes(include_bytes!("fixtures/tokenizer.json")).unwrap();
    let cases = [
        (cfg(), "tokenize_chat.chat_template"),
        (
            config().chat_template("{% if %}"),
            "tokenize_chat.chat_template",
        ),
        // No generation tags and blind to `add_generation_prompt`.
        (
            config().chat_template("{% for m in messages %}{{ m.content }}{% endfor %}"),
            "tokenize_chat.chat_template",
        ),
        (config().eos_token("<|nope|>"), "tokenize_chat.eos_token"),
        (config().max_length(1), "tokenize_chat.max_length"),
        (config().micro_batch(0), "tokenize_chat.micro_batch"),
        (
            config().template_var("messages", json!([])),
            "tokenize_chat.template_vars",
        ),
        (config().mask_field("input_ids"), "tokenize_chat.mask_field"),
    ];
    for (c, key) in cases {
        let mut it = futures::stream::iter([Ok(chat(1))])
            .tokenize_chat(c, 1)
            .into_blocking_iter(Runner::Inline)
            .unwrap();
        let e = it.next().expect("an item").expect_err(key);
        assert!(e.to_string().contains(&format!("`{key}`")), "{key}: {e}");
        assert!(it.next().is_none(), "{key}: the stream goes on");
    }
    let e = futures::stream::iter([Ok(chat(1))])
        .tokenize_chat(config(), 0)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .next()
        .unwrap()
        .unwrap_err();
    assert!(e.to_string().contains("`tokenize_chat.parallelism`"), "{e}");
}

#[test]
fn tokenizer_config_json_gives_template_and_special_tokens() {
    let dir = std::env::temp_dir().join(format!("zephon-chat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("tokenizer.json"),
        include_bytes!("fixtures/tokenizer.json"),
    )
    .unwrap();
    let tc = json!({
        "chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": CHATML}],
        "eos_token": {"content": "<|endoftext|>", "special": true},
    });
    std::fs::write(dir.join("tokenizer_config.json"), tc.to_string()).unwrap();
    let from_dir = ChatTokenizeConfig::from_dir(&dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let out = |c: ChatTokenizeConfig| -> Vec<u32> {
        futures::stream::iter([Ok(chat(2))])
            .tokenize_chat(c, 1)
            .into_blocking_iter(Runner::Inline)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .tokens("input_ids")
            .unwrap()
            .to_vec()
    };
    assert_eq!(out(from_dir), out(config()));
}

#[test]
fn the_system_prompt_is_added_only_where_none_is() {
    let sys = config().system_prompt("Be brief.").keep_messages(true);
    let no_system = Record::new().with(
        "messages",
        Value::Json(
            json!([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]),
        ),
    );
    let ids = |c: ChatTokenizeConfig, r: Record| -> Vec<u32> {
        let out: Vec<Record> = futures::stream::iter([Ok(r)])
            .tokenize_chat(c, 1)
            .into_blocking_iter(Runner::Inline)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(out[0].get("messages").is_some());
        out[0].tokens("input_ids").unwrap().to_vec()
    };
    let with_prompt = Record::new().with(
        "messages",
        Value::Json(json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])),
    );
    assert_eq!(
        ids(sys.clone(), no_system.clone()),
        ids(config().keep_messages(true), with_prompt)
    );
    assert_ne!(
        ids(sys.clone(), no_system.clone()),
        ids(config().keep_messages(true), no_system)
    );
    assert_eq!(
        ids(sys.clone(), chat(1)),
        ids(config().keep_messages(true), chat(1))
    );
}

/// A template without `{% generation %}` finds each assistant turn by
/// rendering the prefixes around it, work that grows as turns times
/// length: a record of 100,000 short messages took hours. Past the budget
/// for that work it is an error naming the sample and the way out.
#[test]
fn a_conversation_too_long_to_locate_by_prefixes_is_an_error() {
    let untagged = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
        {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    let messages: Vec<serde_json::Value> = (0..100_000)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "content": format!("turn {i}")})
        })
        .collect();
    let long = Record::new().with("messages", Value::Json(json!(messages)));
    let e = first_error(vec![long], config().chat_template(untagged));
    assert!(
        e.contains("sample 0")
            && e.contains("50000 assistant turns")
            && e.contains("{% generation %}"),
        "{e}"
    );
}
