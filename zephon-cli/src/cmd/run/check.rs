//! The ranges of a recipe's settings, checked before anything is built, with
//! errors that name the key and the line it sits on.

use super::recipe::{BlockSpec, OpSpec, Recipe};
use anyhow::{Result, anyhow};
use toml::de::{DeTable, DeValue};
use zephon_core::settings::{
    BATCH_SIZE, BUFFER_SIZE, CANONICAL_LANES, CHUNK_SIZE, MAX_REPEATS, MAX_TOKENS_PER_SAMPLE,
    PARALLELISM, PASSES, PREFETCH_DEPTH, Range, SEQ_LEN, TOKEN_SAMPLES, WORKERS, WORLD_SIZE,
};
use zephon_core::work::ExhaustedPolicy;
use zephon_ops::pack::MAX_CANDIDATE_AGE;

/// One step of a key's path: a table key or an array index.
#[derive(Clone, Copy)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// The recipe's text, parsed once more with spans, to find the line of a key.
pub struct KeyLines<'a> {
    text: &'a str,
    root: Option<DeTable<'a>>,
}

impl<'a> KeyLines<'a> {
    /// Parses `text` (already known to be valid TOML).
    pub fn new(text: &'a str) -> Self {
        KeyLines {
            text,
            root: DeTable::parse(text).ok().map(|t| t.into_inner()),
        }
    }

    /// The 1-based line of the key at `path`, from the span the parser gave it.
    fn line(&self, path: &[Step<'_>]) -> Option<usize> {
        let (Step::Key(last), parents) = path.split_last()? else {
            return None;
        };
        let mut table = self.root.as_ref()?;
        let mut steps = parents.iter().peekable();
        while let Some(step) = steps.next() {
            let Step::Key(k) = step else { return None };
            let mut value = table.get(*k)?.get_ref();
            if let Some(Step::Index(i)) = steps.peek() {
                steps.next();
                let DeValue::Array(a) = value else {
                    return None;
                };
                value = a.get(*i)?.get_ref();
            }
            let DeValue::Table(t) = value else {
                return None;
            };
            table = t;
        }
        let (key, _) = table.get_key_value(*last)?;
        let start = key.span().start;
        Some(
            self.text[..start.min(self.text.len())]
                .matches('\n')
                .count()
                + 1,
        )
    }
}

/// Checks every setting of `recipe` against its documented range.
pub fn check(recipe: &Recipe, lines: &KeyLines<'_>) -> Result<()> {
    let r = &recipe.run;
    in_range(
        lines,
        &[Step::Key("run"), Step::Key("workers")],
        r.workers as u64,
        WORKERS,
    )?;
    if let Some(b) = r.parquet_decoded_bytes {
        in_range(
            lines,
            &[Step::Key("run"), Step::Key("parquet_decoded_bytes")],
            b,
            zephon_storage::format::parquet::DECODED_BYTES,
        )?;
    }
    if r.max_batches == Some(0) {
        return Err(at(
            lines,
            &[Step::Key("run"), Step::Key("max_batches")],
            "0 batches; use at least 1, or leave it out to run to the end",
        ));
    }

    let w = &recipe.work_source;
    let ws = |k| [Step::Key("work_source"), Step::Key(k)];
    in_range(lines, &ws("chunk_size"), w.chunk_size, CHUNK_SIZE)?;
    in_range(
        lines,
        &ws("canonical_lanes"),
        w.canonical_lanes as u64,
        CANONICAL_LANES,
    )?;
    in_range(lines, &ws("world_size"), w.world_size as u64, WORLD_SIZE)?;
    if w.rank >= w.world_size {
        return Err(at(
            lines,
            &ws("rank"),
            &format!("rank {} is not below world_size {}", w.rank, w.world_size),
        ));
    }
    if !w.repeat && w.passes == 0 {
        return Err(at(
            lines,
            &ws("passes"),
            "0 passes; use at least 1, or `repeat = true`",
        ));
    }
    if !w.repeat {
        in_range(lines, &ws("passes"), w.passes, PASSES)?;
    }
    exhaustion(recipe, lines)?;
    if let BlockSpec::Size(0) = w.shuffle_block_size {
        return Err(at(
            lines,
            &ws("shuffle_block_size"),
            "a block of 0 samples; use at least 1, or \"off\"",
        ));
    }

    for (i, d) in recipe.datasets.iter().enumerate() {
        let key = |k| [Step::Key("datasets"), Step::Index(i), Step::Key(k)];
        if d.name.trim().is_empty() {
            return Err(at(
                lines,
                &key("name"),
                "empty: errors and figures name a dataset by it",
            ));
        }
        if d.uri.trim().is_empty() {
            return Err(at(
                lines,
                &key("uri"),
                &format!("empty for `{}`: give a folder or a URI", d.name),
            ));
        }
        if let Some(first) = recipe.datasets[..i].iter().position(|e| e.name == d.name) {
            return Err(at(
                lines,
                &key("name"),
                &format!(
                    "`{}` names datasets[{first}] already: per-dataset settings and figures go by \
                     name; give each dataset its own",
                    d.name
                ),
            ));
        }
        // Under a schedule a dataset may wait, at weight 0, for a phase
        // that names it.
        let scheduled = recipe.work_source.schedule.is_some();
        if !(d.weight.is_finite() && (d.weight > 0.0 || scheduled && d.weight == 0.0)) {
            return Err(at(
                lines,
                &key("weight"),
                &format!(
                    "weight {} of `{}`: must be finite and positive (or 0 under a schedule)",
                    d.weight, d.name
                ),
            ));
        }
    }

    // The batch size the next to_training collates, for the product check.
    let mut batch_size: Option<usize> = None;
    for (i, op) in recipe.ops.iter().enumerate() {
        let key = |k: &'static str| [Step::Key("ops"), Step::Index(i), Step::Key(k)];
        let one_of = |k: &'static str, value: &str, allowed: &[&str]| {
            if allowed.contains(&value) {
                return Ok(());
            }
            Err(at(
                lines,
                &key(k),
                &format!("`{value}` is not one of {}", allowed.join(", ")),
            ))
        };
        let check = |key: &'static str, value: usize, range: Range| {
            in_range(
                lines,
                &[Step::Key("ops"), Step::Index(i), Step::Key(key)],
                value as u64,
                range,
            )
        };
        match op {
            OpSpec::Prefetch(p) => {
                check("buffer_size", p.buffer_size, BUFFER_SIZE)?;
                check("parallelism", p.parallelism, PARALLELISM)?;
            }
            OpSpec::Fetch(f) => check("parallelism", f.parallelism, PARALLELISM)?,
            OpSpec::Tokenize(t) => {
                check("parallelism", t.parallelism, PARALLELISM)?;
                if let Some(n) = t.max_length {
                    check("max_length", n, SEQ_LEN)?;
                }
                one_of(
                    "special_tokens",
                    &t.special_tokens,
                    &["none", "bos", "eos", "bos_eos", "tokenizer_default"],
                )?;
                if t.field.trim().is_empty() {
                    return Err(at(
                        lines,
                        &key("field"),
                        "empty: name the text field to tokenize",
                    ));
                }
                if t.padding && t.max_length.is_none() {
                    return Err(at(
                        lines,
                        &key("padding"),
                        "pads to `max_length`, which is not set",
                    ));
                }
            }
            OpSpec::TokenizeChat(t) => {
                check("parallelism", t.parallelism, PARALLELISM)?;
                if let Some(n) = t.max_length {
                    check("max_length", n, SEQ_LEN)?;
                    if n < 2 {
                        return Err(at(
                            lines,
                            &key("max_length"),
                            &format!("{n} cannot hold a training pair (at least 2)"),
                        ));
                    }
                }
                if !t.raw_content && t.chat_template.is_none() && t.tokenizer_config.is_none() {
                    return Err(at(
                        lines,
                        &key("tokenizer"),
                        "no chat template: add `chat_template` or `tokenizer_config`, or set `raw_content = true`",
                    ));
                }
                if t.field.trim().is_empty() {
                    return Err(at(lines, &key("field"), "empty: name the messages field"));
                }
                if t.mask_field.is_empty() || t.mask_field == "input_ids" {
                    return Err(at(
                        lines,
                        &key("mask_field"),
                        "must be a non-empty name other than `input_ids`",
                    ));
                }
            }
            OpSpec::Shuffle(s) => check("buffer_size", s.buffer_size, BUFFER_SIZE)?,
            OpSpec::EnsureMixture(m) => check("max_buffer_size", m.max_buffer_size, BUFFER_SIZE)?,
            OpSpec::Pack(p) => {
                check("max_length", p.max_length, SEQ_LEN)?;
                if p.group_field
                    .as_deref()
                    .is_some_and(|f| f.is_empty() || f == "input_ids")
                {
                    return Err(at(
                        lines,
                        &key("group_field"),
                        "must be a non-empty field name other than `input_ids`",
                    ));
                }
                if let Some(age) = p.max_candidate_age {
                    if p.algorithm != "best_fit_wrap" {
                        return Err(at(
                            lines,
                            &key("max_candidate_age"),
                            "applies to algorithm = \"best_fit_wrap\" only",
                        ));
                    }
                    in_range(lines, &key("max_candidate_age"), age, MAX_CANDIDATE_AGE)?;
                }
            }
            OpSpec::Batch(b) => {
                check("size", b.size, BATCH_SIZE)?;
                batch_size = Some(b.size);
            }
            OpSpec::ToTraining(t) => {
                check("seq_len", t.seq_len, SEQ_LEN)?;
                // Each within its range, the two together may not be: a
                // batch's positions are counted in i32.
                if let Some(b) = batch_size
                    && b.saturating_mul(t.seq_len) > i32::MAX as usize
                {
                    return Err(at(
                        lines,
                        &key("seq_len"),
                        &format!(
                            "batches of {b} rows of {} tokens are past 2^31 - 1 tokens, \
                             the most a training batch counts: lower the batch size or seq_len",
                            t.seq_len
                        ),
                    ));
                }
                one_of("position_mode", &t.position_mode, &["document", "sequence"])?;
            }
            OpSpec::PrefetchBatches(p) => check("depth", p.depth, PREFETCH_DEPTH)?,
            OpSpec::LaneMux(_) | OpSpec::CollateImages(_) => {}
            OpSpec::DecodeImage(d) => check("parallelism", d.parallelism, PARALLELISM)?,
        }
    }
    Ok(())
}

/// The exhaustion settings: one way of ending the run, `max_repeats` only
/// where a dataset repeats, tokens per sample for every dataset or none.
fn exhaustion(recipe: &Recipe, lines: &KeyLines<'_>) -> Result<()> {
    let w = &recipe.work_source;
    let ws = |k| [Step::Key("work_source"), Step::Key(k)];
    let ds = |i, k| [Step::Key("datasets"), Step::Index(i), Step::Key(k)];
    let repeats = |d| matches!(w.policy(d).0, ExhaustedPolicy::Repeat { .. });
    if let Some(m) = w.max_repeats {
        in_range(lines, &ws("max_repeats"), m, MAX_REPEATS)?;
        if !recipe.datasets.iter().any(repeats) {
            return Err(at(
                lines,
                &ws("max_repeats"),
                "no dataset has exhausted_policy = \"repeat\"",
            ));
        }
    }
    if let Some(n) = w.token_samples {
        in_range(lines, &ws("token_samples"), n, TOKEN_SAMPLES)?;
        if !recipe
            .ops
            .iter()
            .any(|op| matches!(op, OpSpec::Tokenize(_)))
        {
            return Err(at(
                lines,
                &ws("token_samples"),
                "estimating tokens per sample needs a tokenize operator",
            ));
        }
    }
    // An estimate fills in the datasets without a count of their own.
    let with_tokens = match w.token_samples {
        Some(_) => 0,
        None => recipe
            .datasets
            .iter()
            .filter(|d| d.tokens_per_sample.is_some())
            .count(),
    };
    for (i, d) in recipe.datasets.iter().enumerate() {
        if let Some(m) = d.max_repeats {
            in_range(lines, &ds(i, "max_repeats"), m, MAX_REPEATS)?;
            if !repeats(d) {
                return Err(at(
                    lines,
                    &ds(i, "max_repeats"),
                    &format!(
                        "`{}` does not repeat: max_repeats needs exhausted_policy = \"repeat\"",
                        d.name
                    ),
                ));
            }
        }
        match d.tokens_per_sample {
            Some(t) if !(t.is_finite() && t > 0.0 && t <= MAX_TOKENS_PER_SAMPLE) => {
                return Err(at(
                    lines,
                    &ds(i, "tokens_per_sample"),
                    &format!(
                        "{t} for `{}`: must be finite, positive and at most {MAX_TOKENS_PER_SAMPLE}",
                        d.name
                    ),
                ));
            }
            None if with_tokens > 0 => {
                return Err(at(
                    lines,
                    &ds(i, "tokens_per_sample"),
                    &format!(
                        "`{}` has none, but {with_tokens} other dataset(s) do: give it for every dataset, or for none",
                        d.name
                    ),
                ));
            }
            _ => {}
        }
    }
    // Settings that contradict each other are named last, so a value out
    // of its own range is named first.
    let passes_written = lines.line(&ws("passes")).is_some();
    let per_dataset = w.per_dataset(&recipe.datasets);
    if let Some(n) = w.stop_after_passes {
        if n == 0 {
            return Err(at(
                lines,
                &ws("stop_after_passes"),
                "0 passes; use at least 1",
            ));
        }
        in_range(lines, &ws("stop_after_passes"), n, PASSES)?;
        if w.repeat || passes_written || per_dataset {
            return Err(at(
                lines,
                &ws("stop_after_passes"),
                &format!(
                    "ends the run once every dataset has completed {n} passes: not with `passes`, `repeat`, `exhausted_policy` or `max_repeats`"
                ),
            ));
        }
    }
    if per_dataset && (w.repeat || passes_written) {
        let key = if w.repeat { "repeat" } else { "passes" };
        return Err(at(
            lines,
            &ws(key),
            "not with exhaustion policies: use exhausted_policy = \"repeat\" and max_repeats",
        ));
    }
    Ok(())
}

fn in_range(lines: &KeyLines<'_>, path: &[Step<'_>], value: u64, range: Range) -> Result<()> {
    if range.contains(value) {
        return Ok(());
    }
    Err(at(lines, path, &range.message(value)))
}

/// An error naming the key at `path`, its line where the key is written
/// (a default value has none), and what is wrong.
fn at(lines: &KeyLines<'_>, path: &[Step<'_>], message: &str) -> anyhow::Error {
    let mut key = String::new();
    for step in path {
        match step {
            Step::Key(k) if key.is_empty() => key.push_str(k),
            Step::Key(k) => {
                key.push('.');
                key.push_str(k);
            }
            Step::Index(i) => key.push_str(&format!("[{i}]")),
        }
    }
    match lines.line(path) {
        Some(line) => anyhow!("line {line}, `{key}`: {message}"),
        None => anyhow!("`{key}`: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_is_the_keys_not_the_headers() {
        let text = "[[datasets]]\nname = \"a\"\nuri = \"x\"\n\n[[ops]]\nop = \"fetch\"\n\n[[ops]]\nop = \"batch\"\n\nsize = 0\n";
        let e = Recipe::parse(text).unwrap_err().to_string();
        assert!(e.contains("line 11") && e.contains("`ops[1].size`"), "{e}");
        let e = Recipe::parse(&text.replace("size = 0", "size = 4").replace(
            "[[datasets]]",
            "[work_source]\nseed = 1\ncanonical_lanes = 4294967295\n[[datasets]]",
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("line 3") && e.contains("`work_source.canonical_lanes`"),
            "{e}"
        );
    }
}
