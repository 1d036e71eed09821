//! Loading a `tokenizer.json` as the hostile input it may be: a size limit,
//! a check of the settings that multiply what a document becomes, and the
//! file's own padding and truncation switched off.
//!
//! A `tokenizer.json` carries settings of its own beside the vocabulary:
//! `truncation` and `padding` (which the Hugging Face library applies to
//! every encoding) and normalizers that rewrite the text before it is
//! split. Zephon's operators truncate and pad only when their own settings
//! ask for it ([`TokenizeConfig::max_length`](crate::TokenizeConfig::max_length),
//! [`TokenizeConfig::padding`](crate::TokenizeConfig::padding)), so the
//! file's `truncation` and `padding` are ignored whatever they say: a file
//! carrying `max_length: 8` would otherwise cut every document silently.
//!
//! ```
//! use zephon_ops::TokenizeConfig;
//! # let json = include_bytes!("../tests/fixtures/tokenizer.json");
//! let mut file: serde_json::Value = serde_json::from_slice(json)?;
//! file["truncation"] = serde_json::json!({
//!     "direction": "Right", "max_length": 2, "strategy": "LongestFirst", "stride": 0
//! });
//! let config = TokenizeConfig::from_bytes(serde_json::to_vec(&file)?)?;
//! // The file's truncation to 2 ids does not apply.
//! assert!(config.tokenizer().get_truncation().is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::error::Error;
use std::path::Path;
use tokenizers::Tokenizer;

/// The largest `tokenizer.json` read, in bytes (256 MiB; the largest
/// published vocabularies are tens of megabytes).
pub const TOKENIZER_FILE_BYTES: u64 = 256 << 20;

/// The most a file's normalizers may grow a text: the product, over its
/// `Replace` normalizers, of replacement length to pattern length (a regex
/// pattern counts as one byte). SentencePiece-style files replace a space
/// by `▁`, a growth of 3.
pub const MAX_NORMALIZER_GROWTH: u64 = 256;

fn error(source_name: &str, message: impl Into<String>) -> Error {
    Error::Tokenizer {
        source_name: source_name.to_owned(),
        message: message.into(),
    }
}

/// Reads and parses the `tokenizer.json` at `path` (a regular file of at
/// most [`TOKENIZER_FILE_BYTES`]).
pub(crate) fn read(path: &Path) -> crate::Result<Tokenizer> {
    let name = path.display().to_string();
    // Only a regular file: a FIFO or a device named as the tokenizer would
    // hang the read or read without end.
    let bytes = zephon_core::input::read_file(path, TOKENIZER_FILE_BYTES)
        .map_err(|e| error(&name, e.to_string()))?;
    parse(&bytes, &name)
}

/// Parses the bytes of a `tokenizer.json` named `source_name` in errors.
pub(crate) fn parse(bytes: &[u8], source_name: &str) -> crate::Result<Tokenizer> {
    if bytes.len() as u64 > TOKENIZER_FILE_BYTES {
        return Err(error(
            source_name,
            format!(
                "{} bytes, more than the {TOKENIZER_FILE_BYTES} a tokenizer file may hold",
                bytes.len()
            ),
        ));
    }
    let json: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| error(source_name, e.to_string()))?;
    if let Some(normalizer) = json.get("normalizer") {
        let growth = normalizer_growth(normalizer);
        if growth > MAX_NORMALIZER_GROWTH {
            return Err(error(
                source_name,
                format!(
                    "field `normalizer`: its Replace normalizers grow a text up to {growth} times, more than {MAX_NORMALIZER_GROWTH}"
                ),
            ));
        }
    }
    // The library indexes past the end of a string on some combinations of
    // added tokens and normalizers while it loads a file: a crafted file is
    // an error naming it, not a panic of the caller.
    let loaded = std::panic::catch_unwind(|| Tokenizer::from_bytes(bytes)).map_err(|p| {
        error(
            source_name,
            format!(
                "the tokenizers library failed on this file ({})",
                zephon_core::error::panic_message(&*p)
            ),
        )
    })?;
    let tokenizer = loaded.map_err(|e| error(source_name, e.to_string()))?;
    Ok(own_settings_off(tokenizer))
}

/// The tokenizer without its own padding and truncation: the operators'
/// settings alone decide those.
pub(crate) fn own_settings_off(mut tokenizer: Tokenizer) -> Tokenizer {
    tokenizer.with_padding(None);
    // Switching truncation off cannot fail (only a stride check can).
    let _ = tokenizer.with_truncation(None);
    tokenizer
}

/// How many times a normalizer (or a sequence of them) may grow a text,
/// saturating. Nested sequences are walked with a stack of their own: the
/// JSON parser has already bounded the depth.
fn normalizer_growth(normalizer: &serde_json::Value) -> u64 {
    let mut growth: u64 = 1;
    let mut todo = vec![normalizer];
    while let Some(v) = todo.pop() {
        match v {
            serde_json::Value::Array(items) => todo.extend(items),
            serde_json::Value::Object(map) => {
                if map.get("type").and_then(|t| t.as_str()) == Some("Replace") {
                    let content = map
                        .get("content")
                        .and_then(|c| c.as_str())
                        .map_or(0, str::len);
                    let pattern = match map.get("pattern") {
                        Some(serde_json::Value::Object(p)) => {
                            p.get("String").and_then(|s| s.as_str()).map_or(1, str::len)
                        }
                        _ => 1,
                    };
                    let ratio = (content as u64).div_ceil(pattern.max(1) as u64).max(1);
                    growth = growth.saturating_mul(ratio);
                }
                todo.extend(map.values());
            }
            _ => {}
        }
    }
    growth
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> serde_json::Value {
        serde_json::from_slice(include_bytes!("../tests/fixtures/tokenizer.json")).unwrap()
    }

    fn encode_len(file: &serde_json::Value, text: &str) -> usize {
        let t = parse(&serde_json::to_vec(file).unwrap(), "t.json").unwrap();
        t.encode(text, false).unwrap().get_ids().len()
    }

    #[test]
    fn a_files_own_truncation_and_padding_do_not_apply() {
        let text = "the quick brown fox jumps over the lazy dog ".repeat(20);
        let plain = encode_len(&fixture(), &text);
        assert!(plain > 20, "{plain}");
        let mut f = fixture();
        f["truncation"] = serde_json::json!({
            "direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0
        });
        assert_eq!(encode_len(&f, &text), plain);
        let mut f = fixture();
        f["padding"] = serde_json::json!({
            "strategy": {"Fixed": 10240}, "direction": "Right", "pad_to_multiple_of": 1000000000u64,
            "pad_id": 0, "pad_type_id": 0, "pad_token": "<pad>"
        });
        assert_eq!(encode_len(&f, &text), plain);
    }

    #[test]
    fn a_normalizer_that_grows_text_without_bound_is_refused() {
        let mut f = fixture();
        f["normalizer"] = serde_json::json!({
            "type": "Sequence",
            "normalizers": [{"type": "Replace", "pattern": {"String": "a"}, "content": "b".repeat(1_000_000)}]
        });
        let e = parse(&serde_json::to_vec(&f).unwrap(), "big.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("big.json") && e.contains("normalizer") && e.contains("1000000 times"),
            "{e}"
        );
        // Sixteen times twice is 256: at the limit, accepted.
        f["normalizer"] = serde_json::json!({
            "type": "Sequence",
            "normalizers": [
                {"type": "Replace", "pattern": {"String": "a"}, "content": "b".repeat(16)},
                {"type": "Replace", "pattern": {"Regex": "c+"}, "content": "d".repeat(16)}
            ]
        });
        parse(&serde_json::to_vec(&f).unwrap(), "ok.json").unwrap();
    }

    #[test]
    fn a_file_larger_than_the_limit_is_refused_before_it_is_parsed() {
        let p = std::env::temp_dir().join(format!("zephon-huge-{}.json", std::process::id()));
        // Sparse: no disk is filled.
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(TOKENIZER_FILE_BYTES + 1).unwrap();
        let e = read(&p).unwrap_err().to_string();
        std::fs::remove_file(&p).unwrap();
        assert!(e.contains("zephon-huge") && e.contains("limit"), "{e}");
    }
}
