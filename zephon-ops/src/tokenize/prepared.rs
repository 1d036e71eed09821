//! A configuration resolved for encoding, and the encoding itself.

use super::config::{OnMissing, Overflow, SpecialTokens, TokenizeConfig};
use crate::error::{Error, PtrDisplay};
use crate::fields;
use crate::stats::TextStats;
use std::sync::Mutex;
use zephon_core::{Record, Result, Value};

/// A resolved configuration plus the per-worker tokenizers.
pub(super) struct Prepared {
    pub(super) config: TokenizeConfig,
    pub(super) bos: Option<u32>,
    pub(super) eos: Option<u32>,
    /// Special ids per document: BOS and EOS, or what the tokenizer's
    /// post-processor adds.
    pub(super) n_special: usize,
    /// The pad id, when padding to `max_length`.
    pub(super) pad: Option<u32>,
    // With per-worker tokenizers, one is checked out per micro-batch.
    pub(super) pool: Mutex<Vec<tokenizers::Tokenizer>>,
}

impl Prepared {
    fn checkout(&self) -> tokenizers::Tokenizer {
        let pooled = self.pool.lock().ok().and_then(|mut p| p.pop());
        pooled.unwrap_or_else(|| (*self.config.tokenizer).clone())
    }

    fn give_back(&self, t: tokenizers::Tokenizer) {
        if let Ok(mut p) = self.pool.lock() {
            p.push(t);
        }
    }

    pub(super) fn encode_chunk(
        &self,
        items: Vec<Result<Record>>,
        stats: &TextStats,
    ) -> Vec<Result<Record>> {
        let tok = self.config.per_worker.then(|| self.checkout());
        let t: &tokenizers::Tokenizer = tok.as_ref().unwrap_or(&self.config.tokenizer);
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            match item {
                Ok(r) => self.encode_one(t, r, stats, &mut out),
                Err(e) => out.push(Err(e)),
            }
        }
        if let Some(tok) = tok {
            self.give_back(tok);
        }
        out
    }

    fn encode_one(
        &self,
        tok: &tokenizers::Tokenizer,
        mut r: Record,
        stats: &TextStats,
        out: &mut Vec<Result<Record>>,
    ) {
        let c = &self.config;
        let text = match r.take(&c.field) {
            Some(v) if v.as_text().is_some() => v,
            other => {
                if let Some(v) = other {
                    r.set(c.field.clone(), v);
                }
                match c.on_missing {
                    OnMissing::Skip => stats.skipped_missing.inc(),
                    OnMissing::Error => {
                        out.push(Err(Error::missing("tokenize", &c.field, "text", &r).into()))
                    }
                }
                return;
            }
        };
        let body = text.as_text().expect("text, checked above");
        let enc = match super::guarded_encode(|| tok.encode_fast(body, false)) {
            Ok(e) => e,
            Err(message) => {
                out.push(Err(Error::Encode {
                    field: c.field.clone(),
                    ptr: PtrDisplay(r.source().copied()),
                    message,
                }
                .into()));
                return;
            }
        };
        if c.keep_text {
            r.set(c.field.clone(), text);
        } else {
            drop(text);
        }
        let body = enc.get_ids();
        let n_special = self.n_special;
        let body = match (c.max_length, c.overflow) {
            (Some(m), Overflow::Truncate) if body.len() + n_special > m => {
                stats.truncated_docs.inc();
                stats
                    .truncated_tokens
                    .add((body.len() + n_special - m) as u64);
                &body[..m - n_special]
            }
            _ => body,
        };
        let ids = if c.special == SpecialTokens::TokenizerDefault {
            match self.with_default_specials(tok, body) {
                Ok(ids) => ids,
                Err(message) => {
                    out.push(Err(Error::Encode {
                        field: c.field.clone(),
                        ptr: PtrDisplay(r.source().copied()),
                        message,
                    }
                    .into()));
                    return;
                }
            }
        } else {
            let mut ids = Vec::with_capacity(body.len() + n_special);
            ids.extend(self.bos);
            ids.extend_from_slice(body);
            ids.extend(self.eos);
            ids
        };
        stats.docs_tokenized.inc();
        stats.tokens_tokenized.add(ids.len() as u64);
        match c.max_length {
            Some(m) if c.overflow == Overflow::Split && ids.len() > m => {
                stats.split_docs.inc();
                for piece in ids.chunks(m) {
                    out.push(Ok(self.finish(r.clone(), piece.to_vec())));
                }
            }
            _ => out.push(Ok(self.finish(r, ids))),
        }
    }

    /// `body` with the special ids the tokenizer's post-processor adds.
    fn with_default_specials(
        &self,
        tok: &tokenizers::Tokenizer,
        body: &[u32],
    ) -> std::result::Result<Vec<u32>, String> {
        let Some(post) = tok.get_post_processor() else {
            return Ok(body.to_vec());
        };
        let enc = tokenizers::Encoding::new(
            body.to_vec(),
            vec![0; body.len()],
            vec![String::new(); body.len()],
            vec![None; body.len()],
            vec![(0, 0); body.len()],
            vec![0; body.len()],
            vec![1; body.len()],
            Vec::new(),
            Default::default(),
        );
        tokenizers::PostProcessor::process(post, enc, None, true)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| e.to_string())
    }

    fn finish(&self, mut r: Record, mut ids: Vec<u32>) -> Record {
        let real = ids.len();
        if let (Some(pad), Some(m)) = (self.pad, self.config.max_length) {
            ids.resize(m.max(real), pad);
        }
        if self.config.attention_mask {
            let mut mask = vec![1; real];
            mask.resize(ids.len(), 0);
            r.set(fields::ATTENTION_MASK, Value::Tokens(mask));
        }
        r.set(fields::INPUT_IDS, Value::Tokens(ids));
        r
    }
}
