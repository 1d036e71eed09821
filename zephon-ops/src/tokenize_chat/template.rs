//! A chat template rendered with minijinja the way Hugging Face renders it
//! with Jinja2: `trim_blocks`, `lstrip_blocks`, loop controls, Python string
//! methods, `raise_exception`, and `{% generation %}` blocks recorded as
//! byte spans of the output.

use super::limits::{MAX_RENDER_BYTES, RenderBuffer, check_value};
use super::{filters, guard, operators, stack};
use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, ErrorKind, Value};
use std::collections::BTreeMap;
use std::fmt;
use zephon_core::settings::Range;

const NAME: &str = "chat_template";
const FILTER: &str = "zephon_generation";
// Private-use code points bracket a generation block in the output; they
// are removed before tokenizing, and a conversation that carries them
// itself is refused rather than mis-masked.
const OPEN: char = '\u{F8F0}';
const CLOSE: char = '\u{F8F1}';

/// A compiled chat template.
pub(super) struct ChatTemplate {
    env: Environment<'static>,
    fuel: u64,
    /// Whether the source marks assistant output with `{% generation %}`.
    pub(super) tagged: bool,
}

impl fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("tagged", &self.tagged)
            .finish_non_exhaustive()
    }
}

/// Rewrites `{% generation %}` / `{% endgeneration %}` (any whitespace
/// control) into a filter block, so the block keeps Jinja's whitespace rules
/// for block tags and its output reaches a filter that brackets it.
fn rewrite_generation(source: &str) -> (String, bool) {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    let mut tagged = false;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        let Some(end) = tag.find("%}") else {
            out.push_str(tag);
            return (out, tagged);
        };
        let inner = &tag[2..end];
        let (lead, body) = match inner.strip_prefix(['-', '+']) {
            Some(b) => (&inner[..1], b),
            None => ("", inner),
        };
        let (body, trail) = match body.strip_suffix(['-', '+']) {
            Some(b) => (b, &body[body.len() - 1..]),
            None => (body, ""),
        };
        match body.trim() {
            "generation" => {
                tagged = true;
                out.push_str(&format!("{{%{lead} filter {FILTER} {trail}%}}"));
            }
            "endgeneration" => out.push_str(&format!("{{%{lead} endfilter {trail}%}}")),
            _ => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    (out, tagged)
}

/// The most work one rendering of the chat template may do by default, in
/// the template engine's fuel: about one unit per instruction and per 64
/// bytes of text made or processed, so it bounds the time (a loop of loops
/// ran for hours), the memory (about 130 MB) and the depth of what a
/// template from a tokenizer's configuration can build. The ChatML and
/// Llama 3 templates of the parity tests take 74,000 to 82,000 for a
/// conversation of 1 MB, so conversations up to about 25 MB render within
/// it. Set per operator with
/// [`ChatTokenizeConfig::template_fuel`](super::ChatTokenizeConfig::template_fuel),
/// in [`TEMPLATE_FUEL_RANGE`].
pub const TEMPLATE_FUEL: u64 = 2_000_000;

/// The allowed budgets of one rendering: a rendering runs on a stack
/// reserved in proportion to its budget (see `stack`), so the largest is
/// bounded too.
pub const TEMPLATE_FUEL_RANGE: Range = Range::new(
    10_000,
    10_000_000,
    "a rendering's stack is reserved in proportion to its budget",
);

/// Widest field of Python's `str.format` a template may ask for: its
/// padding is made outside the template's budget, so `'{:>100000000000}'`
/// allocated 100 GB at once.
const MAX_FORMAT_WIDTH: u64 = 4096;

/// The width or precision past [`MAX_FORMAT_WIDTH`] that a replacement
/// field of the `str.format` string `s` asks for, if any.
fn widest_format_field(s: &str) -> Option<u64> {
    s.split('{')
        .skip(1)
        .filter_map(|field| {
            field
                .split('}')
                .next()?
                .split_once(':')
                .map(|(_, spec)| spec)
        })
        .flat_map(|spec| spec.split(|c: char| !c.is_ascii_digit()))
        .filter(|digits| !digits.is_empty())
        .map(|digits| digits.parse::<u64>().unwrap_or(u64::MAX))
        .find(|&n| n > MAX_FORMAT_WIDTH)
}

/// "template line N: message" for a minijinja error, the line in the
/// template source; `fuel` is the budget it ran under.
pub(super) fn describe(e: &minijinja::Error, fuel: u64) -> String {
    let detail = match e.kind() {
        ErrorKind::OutOfFuel => format!(
            "the chat template ran past its budget of {fuel} steps \
             (tokenize_chat.template_fuel; about one an instruction and one per 64 bytes \
             of text): a loop without end, a structure built far deeper or larger than \
             any conversation needs, or output far larger than the conversation"
        ),
        _ => e
            .detail()
            .map_or_else(|| e.kind().to_string(), str::to_owned),
    };
    match e.line() {
        Some(line) => format!("template line {line}: {detail}"),
        None => detail,
    }
}

impl ChatTemplate {
    /// Compiles `source` to render within `fuel` (in
    /// [`TEMPLATE_FUEL_RANGE`]); a syntax error names its line.
    pub(super) fn new(source: &str, fuel: u64) -> Result<Self, String> {
        super::limits::check_source(source)?;
        if source.contains(guard::PREFIX) {
            return Err(format!(
                "the template names `{}`, a prefix reserved for the engine's guards",
                guard::PREFIX
            ));
        }
        let (rewritten, tagged) = rewrite_generation(source);
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| describe(&e, fuel))?;
        super::limits::check_operators(&rewritten, syntax.clone())?;
        let rewritten = guard::rewrite(&rewritten, syntax.clone());
        env.set_syntax(syntax);
        operators::register(&mut env);
        filters::register(&mut env);
        env.set_fuel(Some(fuel));
        env.set_unknown_method_callback(|state, value, method, args| {
            if method == "format"
                && let Some(width) = value.as_str().and_then(widest_format_field)
            {
                return Err(minijinja::Error::new(
                    ErrorKind::InvalidOperation,
                    format!(
                        "str.format: a field {width} characters wide (at most {MAX_FORMAT_WIDTH})"
                    ),
                ));
            }
            // Python's methods turn their receiver and arguments into text
            // (`'{}'.format(x)`, `', '.join(x)`): measured as printing is.
            for v in std::iter::once(value).chain(args) {
                check_value(v, &format!(".{method}()"))?;
            }
            minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
        });
        env.add_function(
            "raise_exception",
            |message: String| -> Result<Value, minijinja::Error> {
                Err(minijinja::Error::new(
                    ErrorKind::InvalidOperation,
                    format!("raise_exception: {message}"),
                ))
            },
        );
        env.add_filter(FILTER, |body: String| format!("{OPEN}{body}{CLOSE}"));
        env.add_filter(
            "tojson",
            |value: &Value, kwargs: minijinja::value::Kwargs| {
                check_value(value, "tojson")?;
                super::tojson::tojson(value, kwargs)
            },
        );
        // Everything a template prints, and the filters that turn a whole
        // structure into text, measure it first (see `limits`).
        env.set_formatter(|out, state, value| {
            check_value(value, "{{ }}")?;
            minijinja::escape_formatter(out, state, value)
        });
        env.add_filter(
            "pprint",
            |value: &Value| -> Result<String, minijinja::Error> {
                check_value(value, "pprint")?;
                Ok(format!("{value:#?}"))
            },
        );
        env.add_filter(
            "string",
            |state: &minijinja::State, value: &Value| -> Result<Value, minijinja::Error> {
                check_value(value, "string")?;
                minijinja::filters::string(state, value)
            },
        );
        env.add_template_owned(NAME, rewritten)
            .map_err(|e| describe(&e, fuel))?;
        Ok(ChatTemplate { env, fuel, tagged })
    }

    /// The budget of one rendering.
    pub(super) fn fuel(&self) -> u64 {
        self.fuel
    }

    /// Renders `messages`; returns the text and the byte spans of its
    /// generation blocks. Runs on a stack sized for the budget (in place
    /// under [`stack::with_stack`] for it, as micro-batches are).
    pub(super) fn render(
        &self,
        messages: &serde_json::Value,
        add_generation_prompt: bool,
        special: &BTreeMap<&'static str, String>,
        vars: &BTreeMap<String, serde_json::Value>,
    ) -> Result<(String, Vec<(usize, usize)>), String> {
        stack::with_stack(self.fuel, || {
            self.render_here(messages, add_generation_prompt, special, vars)
        })?
    }

    fn render_here(
        &self,
        messages: &serde_json::Value,
        add_generation_prompt: bool,
        special: &BTreeMap<&'static str, String>,
        vars: &BTreeMap<String, serde_json::Value>,
    ) -> Result<(String, Vec<(usize, usize)>), String> {
        let mut ctx: BTreeMap<&str, Value> = BTreeMap::new();
        for (k, v) in vars {
            let v = <Value as serde::Deserialize>::deserialize(v)
                .map_err(|e| format!("template variable `{k}`: {e}"))?;
            ctx.insert(k, v);
        }
        ctx.extend(special.iter().map(|(k, v)| (*k, Value::from(v.as_str()))));
        let messages = <Value as serde::Deserialize>::deserialize(messages)
            .map_err(|e| format!("messages: {e}"))?;
        ctx.insert("messages", messages);
        ctx.insert("add_generation_prompt", Value::from(add_generation_prompt));
        let tmpl = self
            .env
            .get_template(NAME)
            .map_err(|e| describe(&e, self.fuel))?;
        let mut out = RenderBuffer::default();
        let rendered = tmpl.render_captured_to(Value::from(ctx), &mut out);
        if out.passed {
            return Err(format!(
                "the rendered text passed {MAX_RENDER_BYTES} bytes \
                 (tokenize_chat::MAX_RENDER_BYTES)"
            ));
        }
        rendered.map_err(|e| describe(&e, self.fuel))?;
        let raw = String::from_utf8(out.bytes)
            .map_err(|_| "the rendered text is not UTF-8".to_owned())?;
        if !raw.contains([OPEN, CLOSE]) {
            return Ok((raw, Vec::new()));
        }
        let mut text = String::with_capacity(raw.len());
        let mut spans = Vec::new();
        let mut open = None;
        for c in raw.chars() {
            match (c, open) {
                (OPEN, None) => open = Some(text.len()),
                (CLOSE, Some(start)) => {
                    spans.push((start, text.len()));
                    open = None;
                }
                (OPEN | CLOSE, _) => {
                    return Err(format!(
                        "the conversation contains U+{:04X}, reserved for generation blocks",
                        c as u32
                    ));
                }
                _ => text.push(c),
            }
        }
        if open.is_some() {
            return Err(format!(
                "the conversation contains U+{:04X}, reserved for generation blocks",
                OPEN as u32
            ));
        }
        Ok((text, spans))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(
        src: &str,
        messages: serde_json::Value,
    ) -> Result<(String, Vec<(usize, usize)>), String> {
        ChatTemplate::new(src, TEMPLATE_FUEL)?.render(
            &messages,
            false,
            &BTreeMap::new(),
            &BTreeMap::new(),
        )
    }

    #[test]
    fn generation_blocks_become_spans_with_block_whitespace_rules() {
        let src = "{% for m in messages %}\n  {%- if m.role == 'assistant' -%}\n  A:{% generation %}\n{{ m.content }}{% endgeneration %}\n{%- else %}U:{{ m.content }}\n{% endif %}\n{% endfor %}";
        let (text, spans) = render(
            src,
            serde_json::json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]),
        )
        .unwrap();
        assert_eq!(text, "U:hi\nA:yo");
        assert_eq!(spans, vec![(7, 9)]);
        assert_eq!(&text[7..9], "yo");
    }

    #[test]
    fn templates_that_would_run_for_hours_or_fill_memory_stop_at_their_budget() {
        for src in [
            // 10^10 steps: ran for hours before the budget.
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
            // 4 GB of text in one expression.
            "{{ 'x' * 4000000000 }}",
            // Doubling a string 40 times: 1 TB.
            "{% set s = namespace(v='x') %}{% for i in range(40) %}{% set s.v = s.v ~ s.v %}\
             {% endfor %}{{ s.v|length }}",
        ] {
            let t = std::time::Instant::now();
            let e = render(src, serde_json::json!([])).unwrap_err();
            assert!(
                e.contains("budget") && e.contains("loop without end"),
                "{e}"
            );
            assert!(t.elapsed() < std::time::Duration::from_secs(60), "{src}");
        }
    }

    /// Text that filters and methods make outside the engine's budget is
    /// bounded where it is asked for: each of these allocated a terabyte or
    /// a hundred gigabytes at once, an abort no error could report.
    #[test]
    fn widths_made_outside_the_budget_are_bounded() {
        for (src, says) in [
            (
                "{{ '' | tojson(indent=1000000000000) }}",
                "an indent of 1000000000000 characters",
            ),
            (
                "{{ '{:>100000000000}'.format('') }}",
                "100000000000 characters wide",
            ),
            (
                "{{ '{:.99999999999999999999f}'.format(1.0) }}",
                "characters wide",
            ),
        ] {
            let e = render(src, serde_json::json!([])).unwrap_err();
            assert!(e.contains(says), "{src}: {e}");
        }
        // Within the bounds, as Python renders them.
        assert_eq!(
            render(
                "{{ [1] | tojson(indent=2) }}|{{ '{:>5}'.format('a') }}",
                serde_json::json!([])
            )
            .unwrap()
            .0,
            "[\n  1\n]|    a"
        );
    }

    #[test]
    fn real_templates_render_a_conversation_of_megabytes_within_the_budget() {
        let fixture: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/fixtures/chat_parity.json")).unwrap();
        let turn = "the quick brown fox jumps over the lazy dog ".repeat(250);
        // 400 turns of 11 KB: 4.4 MB of text.
        let messages: Vec<serde_json::Value> = (0..400)
            .map(|i| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                serde_json::json!({"role": role, "content": turn})
            })
            .collect();
        // Each template of the parity fixture (`raw` has none).
        let templates: Vec<_> = fixture["templates"]
            .as_object()
            .unwrap()
            .iter()
            .filter_map(|(name, src)| Some((name, src.as_str()?)))
            .collect();
        assert_eq!(templates.len(), 3);
        for (name, src) in templates {
            let (text, _) =
                render(src, serde_json::json!(messages)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(text.len() > 400 * turn.len(), "{name}");
        }
    }

    #[test]
    fn errors_name_the_template_line() {
        let e = ChatTemplate::new("ok\n{% if %}", TEMPLATE_FUEL).unwrap_err();
        assert!(e.starts_with("template line 2:"), "{e}");
        let e = render(
            "a\nb\n{{ raise_exception('roles must alternate') }}",
            serde_json::json!([]),
        )
        .unwrap_err();
        assert!(
            e.contains("template line 3") && e.contains("roles must alternate"),
            "{e}"
        );
    }

    #[test]
    fn python_string_methods_and_reserved_characters() {
        let (text, _) = render(
            "{{ messages[0].content.strip() }}",
            serde_json::json!([{"content": "  x  "}]),
        )
        .unwrap();
        assert_eq!(text, "x");
        let e = render(
            "{% generation %}{{ messages[0].content }}{% endgeneration %}",
            serde_json::json!([{"content": "\u{F8F1}"}]),
        )
        .unwrap_err();
        assert!(e.contains("U+F8F1"), "{e}");
    }

    /// Structures a template builds at run time, too deep or too large to
    /// print, are refused when printed: a list holding itself twice, forty
    /// times over, took all memory when printed before.
    #[test]
    fn structures_built_at_run_time_are_bounded_where_they_are_printed() {
        let deep = "{% set ns = namespace(v=[]) %}{% for i in range(1000) %}\
                    {% set ns.v = [ns.v] %}{% endfor %}";
        let shared = "{% set ns = namespace(v=[1]) %}{% for i in range(40) %}\
                      {% set ns.v = [ns.v, ns.v] %}{% endfor %}";
        for (build, says) in [(deep, "nested more than"), (shared, "elements")] {
            for print in [
                "{{ ns.v }}",
                "{{ ns.v|tojson }}",
                "{{ ns.v|pprint }}",
                "{{ ns.v|string }}",
                // Ran until memory ended: Python's methods print too.
                "{{ '{}'.format(ns.v) }}",
                "{{ ', '.join([ns.v]) }}",
            ] {
                let src = format!("{build}{print}");
                let e = render(&src, serde_json::json!([])).unwrap_err();
                assert!(e.contains(says), "{print}: {e}");
            }
        }
        // Within the bounds, printed as before.
        let (text, _) = render(
            "{% set ns = namespace(v=[]) %}{% for i in range(3) %}{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v|tojson }}",
            serde_json::json!([]),
        )
        .unwrap();
        assert_eq!(text, "[[[[]]]]");
    }

    /// Structures nested as deep as the budget allows are dropped, compared
    /// and printed through `~` by recursion in the engine: each of these
    /// overflowed the stack of the thread rendering it (an abort, not an
    /// error) before renderings ran on a stack sized for their budget.
    #[test]
    fn structures_nested_as_deep_as_the_budget_allows_end_in_an_error_or_text() {
        let list = "{% set ns = namespace(x=[]) %}{% for i in range(20000) %}\
                    {% set ns.x = [ns.x] %}{% endfor %}";
        let dict = "{% set ns = namespace(x={}) %}{% for i in range(100000) %}\
                    {% set ns.x = {'a': ns.x} %}{% endfor %}";
        for build in [list, dict] {
            for print in ["{{ ns.x }}", "{{ ns.x|tojson }}"] {
                let e = render(&format!("{build}{print}"), serde_json::json!([])).unwrap_err();
                assert!(e.contains("nested more than"), "{print}: {e}");
            }
            // Built and never printed: dropped when the rendering ends.
            let (text, _) = render(&format!("{build}done"), serde_json::json!([])).unwrap();
            assert_eq!(text, "done");
        }
        // As deep as a small budget allows: sixty levels an instruction or
        // so, in loops that run until the budget ends, then the error.
        let fuel = 100_000;
        let open = "[".repeat(60);
        let close = "]".repeat(60);
        let src = format!(
            "{{% set ns = namespace(x=[], y=[]) %}}{{% for i in range(100000) %}}\
             {{% for j in range(100000) %}}{{% set ns.x = {open}ns.x{close} %}}\
             {{% endfor %}}{{% endfor %}}"
        );
        let e = ChatTemplate::new(&src, fuel)
            .unwrap()
            .render(
                &serde_json::json!([]),
                false,
                &BTreeMap::new(),
                &BTreeMap::new(),
            )
            .unwrap_err();
        assert!(
            e.contains("budget of 100000") && e.contains("tokenize_chat.template_fuel"),
            "{e}"
        );
        // The deepest pair that fits, compared (by recursion, on the
        // rendering's stack), and printed through `~`: measured first like
        // any printing since `~` is bounded (see `guard`).
        let build = format!(
            "{{% set ns = namespace(x=[], y=[]) %}}{{% for i in range(400) %}}\
             {{% set ns.x = {open}ns.x{close} %}}{{% set ns.y = {open}ns.y{close} %}}\
             {{% endfor %}}"
        );
        let render = |src: String| {
            ChatTemplate::new(&src, fuel).unwrap().render(
                &serde_json::json!([]),
                false,
                &BTreeMap::new(),
                &BTreeMap::new(),
            )
        };
        let (text, _) = render(format!("{build}{{{{ ns.x == ns.y }}}}")).unwrap();
        assert_eq!(text, "True");
        let e = render(format!("{build}{{{{ (ns.x ~ '')|length }}}}")).unwrap_err();
        assert!(e.contains("~: a value nested more than 256 deep"), "{e}");
    }

    #[test]
    fn the_budget_is_a_setting_checked_against_its_range() {
        let json = include_bytes!("../../tests/fixtures/tokenizer.json");
        let chatml = "{% for m in messages %}{{ m.content }}{% endfor %}\
                      {% if add_generation_prompt %}A:{% endif %}";
        let config = super::super::ChatTokenizeConfig::from_bytes(json)
            .unwrap()
            .chat_template(chatml);
        for fuel in [0, TEMPLATE_FUEL_RANGE.min - 1, TEMPLATE_FUEL_RANGE.max + 1] {
            let e = config.clone().template_fuel(fuel).check().unwrap_err();
            assert!(e.to_string().contains("tokenize_chat.template_fuel"), "{e}");
        }
        for fuel in [TEMPLATE_FUEL_RANGE.min, TEMPLATE_FUEL] {
            config.clone().template_fuel(fuel).check().unwrap();
        }
        // A rendering past its budget names the budget and the setting.
        let e = ChatTemplate::new(
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            TEMPLATE_FUEL_RANGE.min,
        )
        .unwrap()
        .render(
            &serde_json::json!([]),
            false,
            &BTreeMap::new(),
            &BTreeMap::new(),
        )
        .unwrap_err();
        assert!(
            e.contains(&format!("budget of {}", TEMPLATE_FUEL_RANGE.min))
                && e.contains("tokenize_chat.template_fuel"),
            "{e}"
        );
    }

    #[test]
    fn long_filter_chains_and_huge_sources_are_refused_at_compile_time() {
        let src = format!("{{{{ 'x'{} }}}}", "|trim".repeat(100_000));
        let e = ChatTemplate::new(&src, TEMPLATE_FUEL).unwrap_err();
        assert!(
            e.contains("template line 1") && e.contains("filters in one expression"),
            "{e}"
        );
        let src = format!("{{{{ 'x'{} }}}}", "|trim".repeat(10));
        assert_eq!(render(&src, serde_json::json!([])).unwrap().0, "x");
        // Twenty thousand `+` (or `and`) in one tag overflowed the stack
        // of the thread compiling it; within the bound, compiled.
        for op in [" + ", " and "] {
            let src = format!("x\n{{{{ {} }}}}", vec!["1"; 20_000].join(op));
            let e = ChatTemplate::new(&src, TEMPLATE_FUEL).unwrap_err();
            assert!(
                e.contains("template line 2") && e.contains("more than 256 operators in one tag"),
                "{e}"
            );
        }
        // Within it, with operators in strings not counted, as one call.
        let src = format!("{{{{ {} }}}}", vec!["'-+~'"; 250].join(" ~ "));
        assert_eq!(render(&src, serde_json::json!([])).unwrap().0.len(), 750);
        let e = ChatTemplate::new(
            &"x".repeat(super::super::MAX_TEMPLATE_BYTES + 1),
            TEMPLATE_FUEL,
        )
        .unwrap_err();
        assert!(e.contains("bytes, more than"), "{e}");
    }
}
