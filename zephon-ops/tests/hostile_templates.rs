//! Chat templates as hostile input: random small templates built from the
//! constructs real templates use (loops, namespaces, macros, filters,
//! literals, huge numbers, nesting built at run time), and the real
//! templates of the parity fixture with mutated bytes. Each case ends in
//! rendered records or an error naming the sample or the setting, never a
//! panic or an abort, within a bounded time.
//!
//! `cargo test -p zephon-ops --test suite -- --nocapture hostile_templates::`
//! prints the table of cases.

use crate::hostile::{Outcome, Tally, mutated};
use proptest::prelude::*;
use serde_json::json;
use zephon_core::{Dataset, PipelineExt, Record, Runner, Value, WorkSource};
use zephon_ops::{ChatTokenizeConfig, TextPipelineExt};

/// Numbers a template may use: small ones, and ones past every bound.
fn number() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "0",
        "1",
        "2",
        "3",
        "40",
        "1000",
        "100000",
        "2147483647",
        "1000000000000",
        "-1",
    ])
    .prop_map(str::to_owned)
}

// `~` and the filters that turn any value into text are in: each measures
// what it prints (a list holding itself twice, doubled forty times, ran
// until memory ended there before).
fn filter() -> impl Strategy<Value = String> {
    let plain = prop::sample::select(vec![
        "tojson",
        "length",
        "string",
        "pprint",
        "list",
        "sort",
        "unique",
        "reverse",
        "items",
        "dictsort",
        "first",
        "last",
        "count",
        "default('d')",
        "tojson(indent=2)",
        "upper",
        "lower",
        "title",
        "capitalize",
        "trim",
        "safe",
        "escape",
        "join",
        "join(', ')",
        "indent(2)",
        "replace('a', 'bb')",
        "format",
    ])
    .prop_map(str::to_owned);
    prop_oneof![
        4 => plain,
        1 => number().prop_map(|n| format!("batch({n})")),
        1 => number().prop_map(|n| format!("slice({n})")),
        1 => number().prop_map(|n| format!("tojson(indent={n})")),
    ]
}

fn expr() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("messages".to_owned()),
        Just("messages[0]".to_owned()),
        Just("messages[0].content".to_owned()),
        Just("m.content".to_owned()),
        Just("m['role']".to_owned()),
        Just("ns.v".to_owned()),
        Just("v".to_owned()),
        Just("messages|length".to_owned()),
        Just("'text'".to_owned()),
        Just("none".to_owned()),
        Just("eos_token".to_owned()),
        number(),
        number().prop_map(|n| format!("range({n})")),
    ];
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            (inner.clone(), filter()).prop_map(|(e, f)| format!("({e})|{f}")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("[{a}, {b}]")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{{'k': {a}, 'j': {b}}}")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("', '.join([{a}, {b}])")),
            (inner.clone(), number()).prop_map(|(a, n)| format!("({a}) * {n}")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) == ({b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) + ({b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) ~ ({b})")),
            (inner.clone(), number()).prop_map(|(a, n)| format!("'{{:>{n}}}'.format({a})")),
            inner.clone().prop_map(|a| format!("({a}).strip()")),
            inner.clone().prop_map(|a| format!("({a}).split()")),
            inner.prop_map(|a| format!("({a})[0]")),
        ]
    })
}

fn statement() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        "[a-z <>|\n]{0,6}",
        expr().prop_map(|e| format!("{{{{ {e} }}}}")),
        expr().prop_map(|e| format!("{{% set ns.v = {e} %}}")),
        expr().prop_map(|e| format!("{{% set v = {e} %}}")),
        // Nesting built at run time.
        Just("{% set ns.v = [ns.v] %}".to_owned()),
        Just("{% set ns.v = {'a': ns.v} %}".to_owned()),
        Just("{% set ns.v = [ns.v, ns.v] %}".to_owned()),
    ];
    let leaf = prop_oneof![
        12 => leaf,
        1 => Just("{{ raise_exception('refused') }}".to_owned()),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        let body = prop::collection::vec(inner, 1..4).prop_map(|b| b.concat());
        prop_oneof![
            (expr(), body.clone())
                .prop_map(|(e, b)| format!("{{% for m in {e} %}}{b}{{% endfor %}}")),
            (number(), body.clone())
                .prop_map(|(n, b)| format!("{{% for i in range({n}) %}}{b}{{% endfor %}}")),
            (expr(), body.clone(), body.clone())
                .prop_map(|(e, a, b)| format!("{{% if {e} %}}{a}{{% else %}}{b}{{% endif %}}")),
            (body.clone(), expr()).prop_map(|(b, e)| format!(
                "{{% macro f(m) %}}{b}{{% endmacro %}}{{{{ f({e}) }}}}"
            )),
            body.clone()
                .prop_map(|b| format!("{{% generation %}}{b}{{% endgeneration %}}")),
            body.prop_map(|b| format!("{{% filter upper %}}{b}{{% endfilter %}}")),
        ]
    })
}

/// A random template: a namespace, then statements, then the generation
/// prompt (so untagged templates pass the probe when they print it).
fn template() -> impl Strategy<Value = String> {
    prop::collection::vec(statement(), 1..5).prop_map(|s| {
        format!(
            "{{% set ns = namespace(v=[]) %}}{{% set v = 0 %}}{{% set m = messages[0] %}}{}\
             {{% if add_generation_prompt %}}<|im_start|>assistant\n{{% endif %}}",
            s.concat()
        )
    })
}

fn conversation() -> Record {
    Record::new().with(
        "messages",
        Value::Json(json!([
            {"role": "user", "content": "Two plus two?"},
            {"role": "assistant", "content": "Four."},
            {"role": "user", "content": "And three?"},
            {"role": "assistant", "content": "Five, no: six."},
        ])),
    )
}

/// Renders two conversations with `source` under `fuel`: records, or an
/// error naming the sample (a rendering) or the template setting (a
/// template refused before the run).
fn judge(source: &str, fuel: u64) -> Outcome {
    let config = ChatTokenizeConfig::from_bytes(include_bytes!("fixtures/tokenizer.json"))
        .unwrap()
        .chat_template(source)
        .eos_token("<|endoftext|>")
        .template_fuel(fuel);
    if let Err(e) = config.check() {
        let e = e.to_string();
        return match e.contains("tokenize_chat.chat_template") {
            true => Outcome::Clean,
            false => Outcome::Silent(format!("a refusal naming no setting: {e}")),
        };
    }
    let ds = Dataset::in_memory("chats", vec![vec![conversation(), conversation()]]).unwrap();
    let ws = WorkSource::builder()
        .dataset(ds, 1.0)
        .shuffle_within_shard(false)
        .build()
        .unwrap();
    let catalog = ws.catalog().clone();
    let out: Vec<_> = ws
        .stream()
        .fetch(1)
        .tokenize_chat(config, 2)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .collect();
    match out.into_iter().find_map(|r| r.err()) {
        None => Outcome::Valid,
        Some(e) => {
            let e = e.name_sources(&catalog).to_string();
            match e.contains("chats") && e.contains("sample") {
                true => Outcome::Clean,
                false => Outcome::Silent(format!("an error naming no sample: {e}")),
            }
        }
    }
}

#[test]
fn random_small_templates() {
    let tally = Tally::new("chat templates (random small templates)");
    // A small budget keeps each case short; the bounds that do not depend
    // on it (printing, widths, the stack) are the same at any budget.
    tally.run(200, template(), |src| judge(src, 200_000));
    tally.finish();
}

#[test]
fn real_templates_with_mutated_bytes() {
    let tally = Tally::new("chat templates (parity templates, mutated bytes)");
    let fixture: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/chat_parity.json")).unwrap();
    let sources: Vec<Vec<u8>> = ["chatml", "chatml_json", "llama3"]
        .iter()
        .map(|n| {
            fixture["templates"][n]
                .as_str()
                .unwrap()
                .as_bytes()
                .to_vec()
        })
        .collect();
    let mutated = mutated(prop::sample::select(sources));
    tally.run(150, mutated, |bytes| {
        let src = String::from_utf8_lossy(bytes);
        judge(&src, zephon_ops::tokenize_chat::TEMPLATE_FUEL)
    });
    tally.finish();
}

/// Renders one conversation with `source` under `fuel`: the error's text,
/// or `None` when it rendered.
fn render_error(source: &str, fuel: u64) -> Option<String> {
    let config = ChatTokenizeConfig::from_bytes(include_bytes!("fixtures/tokenizer.json"))
        .unwrap()
        .chat_template(format!(
            "{source}{{% if add_generation_prompt %}}<|im_start|>assistant\n{{% endif %}}"
        ))
        .eos_token("<|endoftext|>")
        .template_fuel(fuel);
    if let Err(e) = config.check() {
        return Some(e.to_string());
    }
    let out: Vec<_> = futures::stream::iter([Ok(conversation())])
        .tokenize_chat(config, 1)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .collect();
    out.into_iter().find_map(|r| r.err()).map(|e| e.to_string())
}

/// Each of these made text without a bound: a structure of forty
/// instructions printed as terabytes through `~` or a filter taking text,
/// a string doubled or grown by a filter past what the budget could see
/// coming, or output written in a loop. Each now ends within seconds in an
/// error naming what was refused.
#[test]
fn text_bombs_are_refused_naming_the_bound() {
    let fuel = zephon_ops::tokenize_chat::TEMPLATE_FUEL;
    let max_fuel = zephon_ops::tokenize_chat::TEMPLATE_FUEL_RANGE.max;
    let shared = "{% set ns = namespace(x=[1]) %}{% for i in range(40) %}\
                  {% set ns.x = [ns.x, ns.x] %}{% endfor %}";
    let mut cases: Vec<(String, u64, &str)> = vec![
        (
            format!("{shared}{{{{ (ns.x ~ '')|length }}}}"),
            fuel,
            "~: a value of more than",
        ),
        (
            format!("{shared}{{{{ ('' ~ ns.x)|length }}}}"),
            fuel,
            "~: a value of more than",
        ),
        (
            format!("{shared}{{{{ [ns.x]|join|length }}}}"),
            fuel,
            "|join: a value of more than",
        ),
        (
            format!("{shared}{{{{ 'x'|replace('x', ns.x) }}}}"),
            fuel,
            "|replace: a value of",
        ),
        (
            format!("{shared}{{{{ '%s'|format(ns.x) }}}}"),
            fuel,
            "|format: a value of",
        ),
        // Real strings doubled, and grown by filters.
        (
            "{% set ns = namespace(s='x' * 10000000) %}{% for i in range(40) %}\
             {% set ns.s = ns.s + ns.s %}{% endfor %}"
                .into(),
            max_fuel,
            "+: text of more than 67108864 bytes",
        ),
        (
            "{% set ns = namespace(s='x' * 10000000) %}{% for i in range(40) %}\
             {% set ns.s = ns.s ~ ns.s %}{% endfor %}"
                .into(),
            max_fuel,
            "~: text of more than 67108864 bytes",
        ),
        ("{{ 'x' * 100000000 }}".into(), fuel, "*: text of more than"),
        (
            "{{ ('x' * 1000)|replace('x', 'y' * 100000)|length }}".into(),
            fuel,
            "|replace: text of more than",
        ),
        (
            "{{ ('x\n' * 1000)|indent(100000)|length }}".into(),
            fuel,
            "|indent: text of more than",
        ),
        (
            "{% set s = 'x' * 10000000 %}{{ [s, s, s, s, s, s, s, s]|join|length }}".into(),
            fuel,
            "|join: a value holding more than 67108864 bytes of text",
        ),
        (
            "{{ range(100000)|join('y' * 1000)|length }}".into(),
            fuel,
            "|join: text of more than",
        ),
        (
            "{{ '%100000000s'|format('x') }}".into(),
            fuel,
            "characters wide",
        ),
        // Output: printed in a loop, and raw text in a loop.
        (
            "{% for i in range(100000) %}{{ 'x' * 10000000 }}{% endfor %}".into(),
            max_fuel,
            "passed 67108864 bytes (tokenize_chat::MAX_RENDER_BYTES)",
        ),
        (
            format!(
                "{{% for i in range(1000) %}}{{% for j in range(100) %}}{}{{% endfor %}}{{% endfor %}}",
                "x".repeat(1000)
            ),
            max_fuel,
            "passed 67108864 bytes",
        ),
        // The names the guards call are reserved.
        ("{% set __zephon_add = 1 %}".into(), fuel, "reserved"),
    ];
    for filter in [
        "upper",
        "lower",
        "title",
        "capitalize",
        "trim",
        "safe",
        "escape",
        "e",
        "indent",
        "replace('1', '2')",
    ] {
        cases.push((
            format!("{shared}{{{{ ns.x|{filter}|length }}}}"),
            fuel,
            "a value of more than 1048576 elements",
        ));
    }
    for (src, fuel, says) in cases {
        let t = std::time::Instant::now();
        let e = render_error(&src, fuel).unwrap_or_else(|| panic!("rendered: {src}"));
        assert!(e.contains(says), "{src}: {e}");
        assert!(
            t.elapsed() < std::time::Duration::from_secs(20),
            "{src}: {:?}",
            t.elapsed()
        );
    }
}
