//! The guards change no rendering within their bounds: random small
//! templates of strings, numbers, lists, `+`, `~`, `*`, parentheses,
//! filters and methods render to the same text, or the same error, with
//! the guards (`guard`, `operators`, `filters`) as in the engine alone
//! under the same settings. An error in an expression written over several
//! lines may be put on another of its lines (the engine names the line of
//! the instruction that failed, and a call starts where its operator's left
//! operand did), so those are compared without the line.

use super::template::{ChatTemplate, TEMPLATE_FUEL, describe};
use minijinja::Environment;
use minijinja::syntax::SyntaxConfig;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn space(newlines: bool) -> impl Strategy<Value = &'static str> {
    match newlines {
        true => prop::sample::select(vec!["", " ", "\n"]),
        false => prop::sample::select(vec!["", " ", "  "]),
    }
}

fn leaf() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "'a'",
        "'ab c'",
        "'é'",
        "''",
        "' x\\n y '",
        "0",
        "1",
        "2",
        "3",
        "-1",
        "40",
        "0.5",
        "none",
        "true",
        "[1, 'a']",
        "[]",
        "(1, 2)",
        "{'k': 'v'}",
        "range(3)",
        "x",
        "9223372036854775807",
    ])
    .prop_map(str::to_owned)
}

fn filter() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
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
        "indent(2, true)",
        "replace('a', 'bb')",
        "replace('', '-')",
        "format(1)",
        "length",
        "string",
        "list",
        "first",
        "reverse",
        "default('d')",
    ])
}

fn expr(newlines: bool) -> impl Strategy<Value = String> {
    leaf().prop_recursive(4, 24, 2, move |inner| {
        let space = || space(newlines);
        let op = prop::sample::select(vec!["+", "~", "*"]);
        prop_oneof![
            (inner.clone(), space(), op, space(), inner.clone())
                .prop_map(|(a, s, o, t, b)| format!("{a}{s}{o}{t}{b}")),
            (space(), inner.clone(), space()).prop_map(|(s, a, t)| format!("({s}{a}{t})")),
            (inner.clone(), filter()).prop_map(|(a, f)| format!("({a})|{f}")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("[{a}, {b}]")),
            inner.clone().prop_map(|a| format!("({a}).upper()")),
            (inner.clone(), inner).prop_map(|(a, b)| format!("{a} if {b} else 'n'")),
        ]
    })
}

fn template(newlines: bool) -> impl Strategy<Value = String> {
    (expr(newlines), expr(newlines), expr(newlines)).prop_map(|(a, b, c)| {
        format!(
            "{{% set x = 'q' %}}{{{{ {a} }}}}|{{% set v = {b} %}}{{{{ v }}}}\n\
             {{% for x in [{c}] %}}{{{{ x ~ loop.index }}}}{{% endfor %}}\
             {{% macro m(p={a}) %}}{{{{ p }}}}{{% endmacro %}}{{{{ m() }}}}"
        )
    })
}

/// The engine alone, with the settings of `ChatTemplate` and no guards.
fn plain_env() -> Environment<'static> {
    let mut env = Environment::new();
    let syntax = SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .unwrap();
    env.set_syntax(syntax);
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env
}

/// `src` rendered by the engine alone, with the settings of `ChatTemplate`.
fn unguarded(src: &str) -> Result<String, String> {
    let mut env = plain_env();
    env.add_template_owned("chat_template", src.to_owned())
        .map_err(|e| describe(&e, TEMPLATE_FUEL))?;
    let ctx = minijinja::context! { messages => Vec::<i32>::new(), add_generation_prompt => false };
    env.get_template("chat_template")
        .unwrap()
        .render(ctx)
        .map_err(|e| describe(&e, TEMPLATE_FUEL))
}

fn guarded(src: &str) -> Result<String, String> {
    let t = ChatTemplate::new(src, TEMPLATE_FUEL)?;
    t.render(
        &serde_json::json!([]),
        false,
        &BTreeMap::new(),
        &BTreeMap::new(),
    )
    .map(|(text, _)| text)
}

/// A chain of one operator longer than `guard`'s nested calls allow.
fn long_chain() -> impl Strategy<Value = String> {
    let operand = prop::sample::select(vec!["'a'", "'é'", "1", "2", "x", "[1]"]);
    let op = prop::sample::select(vec!["+", "~", "*"]);
    (prop::collection::vec(operand, 17..40), op)
        .prop_map(|(operands, op)| format!("{{% set x = 'q' %}}{{{{ {} }}}}", operands.join(op)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 150, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn guarded_templates_render_as_the_engine_does(src in template(false)) {
        prop_assert_eq!(guarded(&src), unguarded(&src), "{}", src);
    }

    /// A long chain is one call, whose operands are all evaluated first:
    /// the same text, or an error (which one may differ).
    #[test]
    fn long_chains_render_as_the_engine_does(src in long_chain()) {
        match unguarded(&src) {
            Ok(text) => prop_assert_eq!(guarded(&src), Ok(text), "{}", src),
            Err(_) => prop_assert!(guarded(&src).is_err(), "{}", src),
        }
    }

    #[test]
    fn guarded_templates_over_several_lines_render_as_the_engine_does(src in template(true)) {
        let unlined = |r: Result<String, String>| r.map_err(|e| e.split_once(": ").map_or(e.clone(), |(_, d)| d.to_owned()));
        prop_assert_eq!(unlined(guarded(&src)), unlined(unguarded(&src)), "{}", src);
    }
}

/// What the guards cost a rendering: the parity templates on a
/// conversation of 40 turns, rendered by `ChatTemplate` and by the engine
/// alone doing what `render_here` does besides (the context converted, the
/// text scanned for generation marks). Prints the ratio; run with
/// `cargo test -p zephon-ops --release --lib guard_cost -- --ignored --nocapture`.
#[test]
#[ignore]
fn guard_cost() {
    let fixture: serde_json::Value =
        serde_json::from_str(include_str!("../../tests/fixtures/chat_parity.json")).unwrap();
    let turn = "the quick brown fox jumps over the lazy dog ".repeat(5);
    let messages: Vec<serde_json::Value> = (0..40)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            serde_json::json!({"role": role, "content": turn})
        })
        .collect();
    let messages = serde_json::json!(messages);
    let special: BTreeMap<&'static str, String> = [
        ("bos_token", "<s>".to_owned()),
        ("eos_token", "</s>".to_owned()),
    ]
    .into();
    for name in ["chatml", "chatml_json", "llama3"] {
        let src = fixture["templates"][name].as_str().unwrap();
        let guarded = ChatTemplate::new(src, TEMPLATE_FUEL).unwrap();
        let mut env = plain_env();
        env.add_filter("zephon_generation", |b: String| {
            format!("\u{F8F0}{b}\u{F8F1}")
        });
        let plain_src = src
            .replace("{% generation %}", "{% filter zephon_generation %}")
            .replace("{% endgeneration %}", "{% endfilter %}");
        env.add_template_owned("t", plain_src).unwrap();
        let plain = env.get_template("t").unwrap();
        let render_plain = || {
            let mut ctx: BTreeMap<&str, minijinja::Value> = BTreeMap::new();
            let m = <minijinja::Value as serde::Deserialize>::deserialize(&messages).unwrap();
            ctx.insert("messages", m);
            ctx.insert("add_generation_prompt", false.into());
            ctx.extend(special.iter().map(|(k, v)| (*k, v.as_str().into())));
            let raw = plain.render(minijinja::Value::from(ctx)).unwrap();
            let text: String = raw
                .chars()
                .filter(|c| !matches!(c, '\u{F8F0}' | '\u{F8F1}'))
                .collect();
            std::hint::black_box(text);
        };
        let render_guarded = || {
            let out = guarded.render(&messages, false, &special, &BTreeMap::new());
            std::hint::black_box(out.unwrap());
        };
        let time = |f: &dyn Fn()| {
            let start = std::time::Instant::now();
            (0..500).for_each(|_| f());
            start.elapsed()
        };
        let (mut a, mut b) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
        super::stack::with_stack(TEMPLATE_FUEL, || {
            time(&render_plain);
            time(&render_guarded);
            for _ in 0..5 {
                a += time(&render_plain);
                b += time(&render_guarded);
            }
        })
        .unwrap();
        let ratio = b.as_secs_f64() / a.as_secs_f64();
        println!("{name}: engine alone {a:?}, guarded {b:?}: {ratio:.2}x");
    }
}
