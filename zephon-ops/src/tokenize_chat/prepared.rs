//! A chat configuration resolved for encoding, and the encoding itself:
//! render, find the assistant spans, tokenize once, mask by overlap.

use super::config::ChatTokenizeConfig;
use super::template::ChatTemplate;
use crate::error::{Error, PtrDisplay};
use crate::stats::TextStats;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use zephon_core::{Record, Result, Value};

/// What one conversation becomes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Encoded {
    /// Ids and their loss mask (0 or 1 each), of equal length.
    Tokens(Vec<u32>, Vec<u32>),
    /// Fewer than two ids, or no supervised id: nothing to train on.
    Dropped,
}

/// Most text the prefix renderings of one conversation may make, in bytes
/// (4 GiB), where a template does not mark its assistant turns with
/// `{% generation %}`: a conversation of 4.4 MB in 200 assistant turns
/// makes 1.8 GB, in seconds.
pub(crate) const PREFIX_TEXT: u64 = 4 << 30;

/// A resolved configuration: the compiled template and the EOS id.
pub(crate) struct Prepared {
    pub(super) config: ChatTokenizeConfig,
    /// `None` for raw content.
    pub(super) template: Option<ChatTemplate>,
    pub(super) eos_id: Option<u32>,
}

/// 1 for every token whose byte range overlaps a span: a token straddling
/// a span's edge is supervised, an empty span supervises nothing.
///
/// A token `(s, e)` overlaps a span `(a, b)` when `a < e` and `b > s`: the
/// spans starting before `e` are a prefix of them sorted by start, and the
/// furthest end of that prefix says whether one reaches past `s`. So a
/// conversation of hundreds of thousands of turns costs a sort and a
/// binary search per token, not every span per token (10^11 comparisons
/// for one 10 MB record).
fn mask_from_spans(offsets: &[(usize, usize)], spans: &[(usize, usize)]) -> Vec<u32> {
    let mut by_start = spans.to_vec();
    by_start.sort_unstable();
    let reach: Vec<usize> = by_start
        .iter()
        .scan(0, |furthest, &(_, b)| {
            *furthest = (*furthest).max(b);
            Some(*furthest)
        })
        .collect();
    offsets
        .iter()
        .map(|&(s, e)| {
            let k = by_start.partition_point(|&(a, _)| a < e);
            (k > 0 && reach[k - 1] > s) as u32
        })
        .collect()
}

/// Zeroes every supervised run but the last contiguous one.
pub(crate) fn last_run_only(mask: &mut [u32]) {
    let Some(end) = mask.iter().rposition(|&m| m == 1) else {
        return;
    };
    let start = mask[..end]
        .iter()
        .rposition(|&m| m == 0)
        .map_or(0, |i| i + 1);
    for (i, m) in mask.iter_mut().enumerate() {
        *m = (i >= start && i <= end) as u32;
    }
}

fn json_kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "text",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    }
}

impl Prepared {
    fn special(&self) -> BTreeMap<&'static str, String> {
        let c = &self.config;
        let mut m = BTreeMap::new();
        if let Some(t) = &c.bos_token {
            m.insert("bos_token", t.clone());
        }
        if let Some(t) = &c.eos_token {
            m.insert("eos_token", t.clone());
        }
        m
    }

    /// Without generation tags, assistant content starts where the render
    /// with a generation prompt ends: a template that ignores the prompt
    /// would supervise the role header.
    pub(super) fn check_generation_prompt(&self) -> crate::Result<()> {
        let Some(template) = self.template.as_ref().filter(|t| !t.tagged) else {
            return Ok(());
        };
        let probe = serde_json::json!([{"role": "user", "content": ""}]);
        let special = self.special();
        let render = |flag| {
            template
                .render(&probe, flag, &special, &self.config.vars)
                .map_err(|m| Error::Config {
                    key: "tokenize_chat.chat_template",
                    message: format!("rendering a one-message probe: {m}"),
                })
        };
        if render(true)?.0 == render(false)?.0 {
            return Err(Error::Config {
                key: "tokenize_chat.chat_template",
                message: "no `{% generation %}` tags, and the template ignores \
                          `add_generation_prompt`, so assistant turns cannot be located"
                    .into(),
            });
        }
        Ok(())
    }

    /// The messages of a conversation, checked: a list of objects, each
    /// with a text `role`; the system prompt put first if it has none.
    fn messages(&self, v: Option<&Value>) -> std::result::Result<Json, String> {
        let c = &self.config;
        let list = match v {
            Some(Value::Json(Json::Array(a))) => a,
            Some(other) => {
                return Err(format!(
                    "field `{}` is {}, not a list of messages",
                    c.field,
                    other.kind()
                ));
            }
            None => return Err(format!("no messages field `{}`", c.field)),
        };
        for (i, m) in list.iter().enumerate() {
            match m.get("role") {
                Some(Json::String(_)) => {}
                Some(_) => return Err(format!("message {i}: `role` is not text")),
                None if m.is_object() => return Err(format!("message {i} has no `role`")),
                None => return Err(format!("message {i} is not an object")),
            }
        }
        let has_system = list
            .first()
            .and_then(|m| m.get("role"))
            .and_then(Json::as_str)
            == Some("system");
        let mut list = list.clone();
        if let (Some(p), false) = (&c.system_prompt, has_system) {
            list.insert(0, serde_json::json!({"role": "system", "content": p}));
        }
        Ok(Json::Array(list))
    }

    /// The contents joined, each assistant turn followed by EOS; the spans
    /// cover an assistant turn and its EOS.
    fn raw_with_spans(
        &self,
        messages: &Json,
    ) -> std::result::Result<(String, Vec<(usize, usize)>), String> {
        let eos = self.config.eos_token.as_deref().unwrap_or_default();
        let mut text = String::new();
        let mut spans = Vec::new();
        for (i, m) in messages
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
            .iter()
            .enumerate()
        {
            let start = text.len();
            match m.get("content") {
                None => {}
                Some(Json::String(s)) => text.push_str(s),
                Some(Json::Array(parts)) => {
                    for (j, part) in parts.iter().enumerate() {
                        if part.get("type").and_then(Json::as_str) != Some("text") {
                            continue;
                        }
                        match part.get("text") {
                            Some(Json::String(s)) => text.push_str(s),
                            _ => {
                                return Err(format!(
                                    "message {i}, content part {j}: a text part without text"
                                ));
                            }
                        }
                    }
                }
                Some(other) => {
                    return Err(format!(
                        "message {i}: content is {}, not text",
                        json_kind(other)
                    ));
                }
            }
            if m.get("role").and_then(Json::as_str) == Some("assistant") {
                text.push_str(eos);
                spans.push((start, text.len()));
            }
        }
        Ok((text, spans))
    }

    /// Rendered text and the byte spans of the assistant turns.
    fn render_with_spans(
        &self,
        messages: &Json,
    ) -> std::result::Result<(String, Vec<(usize, usize)>), String> {
        let Some(template) = &self.template else {
            return self.raw_with_spans(messages);
        };
        let special = self.special();
        let (full, spans) = template.render(messages, false, &special, &self.config.vars)?;
        if template.tagged {
            return Ok((full, spans));
        }
        let list = messages.as_array().map(Vec::as_slice).unwrap_or(&[]);
        // Two renders of a prefix per assistant turn, each at most the
        // whole: the work grows as turns times length, which for 100,000
        // short messages was hours for one record. Bounded before it starts.
        let turns = list
            .iter()
            .filter(|m| m.get("role").and_then(Json::as_str) == Some("assistant"))
            .count() as u64;
        let work = turns.saturating_mul(2).saturating_mul(full.len() as u64);
        if work > PREFIX_TEXT {
            return Err(format!(
                "{turns} assistant turns in {} bytes of rendered text: locating each turn \
                 renders every prefix, about {work} bytes in all, past the {PREFIX_TEXT} \
                 allowed; mark the assistant turns with {{% generation %}} (one rendering) \
                 or split the conversation",
                full.len()
            ));
        }
        let mut spans = Vec::new();
        for (i, m) in list.iter().enumerate() {
            if m.get("role").and_then(Json::as_str) != Some("assistant") {
                continue;
            }
            let part = |n: usize, prompt| {
                template
                    .render(
                        &Json::Array(list[..n].to_vec()),
                        prompt,
                        &special,
                        &self.config.vars,
                    )
                    .map(|(t, _)| t)
            };
            let prefix = part(i, true)?;
            let upto = part(i + 1, false)?;
            if !(full.starts_with(&upto) && upto.starts_with(&prefix)) {
                return Err(format!(
                    "message {i}: the template renders by position (a partial rendering \
                     is not a prefix of the whole), so the assistant turn cannot be \
                     located; mark it with {{% generation %}}"
                ));
            }
            spans.push((prefix.len(), upto.len()));
        }
        Ok((full, spans))
    }

    /// Ids and loss mask of one conversation, as Python Zephon's
    /// `tokenize_chat` gives them.
    pub(crate) fn encode(
        &self,
        tok: &tokenizers::Tokenizer,
        messages: &Json,
    ) -> std::result::Result<Encoded, String> {
        if messages.as_array().is_none_or(Vec::is_empty) {
            return Ok(Encoded::Dropped);
        }
        let (text, spans) = self.render_with_spans(messages)?;
        let enc = crate::tokenize::guarded_encode(|| tok.encode(text.as_str(), false))?;
        let n = self
            .config
            .max_length
            .map_or(usize::MAX, |m| m.min(enc.len()));
        let mut ids = enc.get_ids()[..n.min(enc.len())].to_vec();
        let mut mask = mask_from_spans(&enc.get_offsets()[..ids.len()], &spans);
        if self.config.last_turn_only {
            last_run_only(&mut mask);
        }
        // Templates may leave out the final EOS: add it, supervised as the
        // token before it, unless the cap is reached.
        if let (Some(eos), Some(&last), Some(&m)) = (self.eos_id, ids.last(), mask.last())
            && self.template.is_some()
            && last != eos
            && self.config.max_length.is_none_or(|cap| ids.len() < cap)
        {
            ids.push(eos);
            mask.push(m);
        }
        if ids.len() < 2 || !mask.contains(&1) {
            return Ok(Encoded::Dropped);
        }
        if mask[0] == 1 {
            return Err(
                "the first token is supervised: a packed row could then train a \
                        prediction across documents; start the conversation with system or \
                        user content (or a BOS token)"
                    .into(),
            );
        }
        Ok(Encoded::Tokens(ids, mask))
    }

    /// Encodes a micro-batch, on a stack sized for the template's budget
    /// (one thread for the micro-batch, not one per rendering).
    pub(super) fn encode_chunk(
        &self,
        items: Vec<Result<Record>>,
        stats: &TextStats,
    ) -> Vec<Result<Record>> {
        let Some(fuel) = self.template.as_ref().map(ChatTemplate::fuel) else {
            return self.encode_chunk_here(items, stats);
        };
        let first = items
            .iter()
            .find_map(|r| r.as_ref().ok().and_then(|r| r.source().copied()));
        super::stack::with_stack(fuel, || self.encode_chunk_here(items, stats)).unwrap_or_else(
            |message| {
                vec![Err(Error::Chat {
                    ptr: PtrDisplay(first),
                    message,
                }
                .into())]
            },
        )
    }

    fn encode_chunk_here(
        &self,
        items: Vec<Result<Record>>,
        stats: &TextStats,
    ) -> Vec<Result<Record>> {
        let c = &self.config;
        let tok = &*c.tokenizer;
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let mut r = match item {
                Ok(r) => r,
                Err(e) => {
                    out.push(Err(e));
                    continue;
                }
            };
            let fail = |r: &Record, message: String| -> zephon_core::Error {
                Error::Chat {
                    ptr: PtrDisplay(r.source().copied()),
                    message,
                }
                .into()
            };
            let messages = match self.messages(r.get(&c.field)) {
                Ok(m) => m,
                Err(m) => {
                    out.push(Err(fail(&r, m)));
                    continue;
                }
            };
            match self.encode(tok, &messages) {
                Err(m) => out.push(Err(fail(&r, m))),
                Ok(Encoded::Dropped) => stats.chat_dropped.inc(),
                Ok(Encoded::Tokens(ids, mask)) => {
                    if !c.keep_messages {
                        r.take(&c.field);
                    }
                    stats.docs_tokenized.inc();
                    stats.tokens_tokenized.add(ids.len() as u64);
                    r.set(crate::fields::INPUT_IDS, Value::Tokens(ids));
                    r.set(c.mask_field.clone(), Value::Tokens(mask));
                    out.push(Ok(r));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The mask is the overlap rule itself, token by token against
        /// every span, for spans in any order, overlapping or empty, and
        /// tokens of any offsets (special tokens sit at 0..0).
        #[test]
        fn mask_is_the_overlap_of_each_token_with_any_span(
            offsets in prop::collection::vec((0usize..60, 0usize..8), 0..40),
            spans in prop::collection::vec((0usize..60, 0usize..12), 0..8),
        ) {
            let offsets: Vec<(usize, usize)> = offsets.iter().map(|&(s, n)| (s, s + n)).collect();
            let spans: Vec<(usize, usize)> = spans.iter().map(|&(a, n)| (a, a + n)).collect();
            let naive: Vec<u32> = offsets
                .iter()
                .map(|&(s, e)| spans.iter().any(|&(a, b)| s < b && e > a) as u32)
                .collect();
            prop_assert_eq!(mask_from_spans(&offsets, &spans), naive);
        }

        /// The result keeps exactly the last run of ones, nothing else.
        #[test]
        fn last_run_only_keeps_the_last_run(mask in proptest::collection::vec(0u32..2, 0..40)) {
            let mut out = mask.clone();
            last_run_only(&mut out);
            let ones: Vec<usize> = (0..out.len()).filter(|&i| out[i] == 1).collect();
            match mask.iter().rposition(|&m| m == 1) {
                None => prop_assert!(ones.is_empty()),
                Some(end) => {
                    let start = *ones.first().unwrap();
                    prop_assert_eq!(*ones.last().unwrap(), end);
                    prop_assert_eq!(ones.len(), end - start + 1);
                    prop_assert!(mask[start..=end].iter().all(|&m| m == 1));
                    prop_assert!(start == 0 || mask[start - 1] == 0);
                }
            }
        }
    }

    #[test]
    fn overlap_rule_supervises_straddling_tokens_only() {
        let offsets = [(0, 3), (3, 5), (5, 5), (5, 9), (9, 12)];
        assert_eq!(mask_from_spans(&offsets, &[(4, 9)]), [0, 1, 1, 1, 0]);
        assert_eq!(mask_from_spans(&offsets, &[(5, 9)]), [0, 0, 0, 1, 0]);
        assert_eq!(mask_from_spans(&offsets, &[(5, 5)]), [0, 0, 0, 0, 0]);
    }
}
