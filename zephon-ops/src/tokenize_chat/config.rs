//! The options of [`TokenizeChat`](super::TokenizeChat).

use super::prepared::Prepared;
use super::template::ChatTemplate;
use crate::error::Error;
use crate::tokenize::DEFAULT_MICRO_BATCH;
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use zephon_core::settings::{MICRO_BATCH, SEQ_LEN};

/// The default field holding a conversation: a list of `{role, content}`.
pub const MESSAGES: &str = "messages";
pub use crate::fields::LOSS_MASK;

/// What [`TokenizeChat`](super::TokenizeChat) does: the tokenizer, its chat
/// template and special tokens, the fields, which turns carry the loss.
/// Cheap to clone (the tokenizer is shared).
#[derive(Clone)]
pub struct ChatTokenizeConfig {
    pub(super) tokenizer: Arc<tokenizers::Tokenizer>,
    pub(super) template: Option<String>,
    pub(super) bos_token: Option<String>,
    pub(super) eos_token: Option<String>,
    pub(super) field: String,
    pub(super) mask_field: String,
    pub(super) max_length: Option<usize>,
    pub(super) last_turn_only: bool,
    pub(super) system_prompt: Option<String>,
    pub(super) keep_messages: bool,
    pub(super) micro_batch: usize,
    pub(super) vars: BTreeMap<String, serde_json::Value>,
    pub(super) raw: bool,
    pub(super) fuel: u64,
}

impl fmt::Debug for ChatTokenizeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatTokenizeConfig")
            .field("vocab_size", &self.tokenizer.get_vocab_size(true))
            .field("template_bytes", &self.template.as_ref().map(String::len))
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("field", &self.field)
            .field("mask_field", &self.mask_field)
            .field("max_length", &self.max_length)
            .field("loss_on_last_turn_only", &self.last_turn_only)
            .field("template_fuel", &self.fuel)
            .finish_non_exhaustive()
    }
}

/// Template variables the operator sets itself.
const RESERVED: &[&str] = &[
    "messages",
    "add_generation_prompt",
    "bos_token",
    "eos_token",
];

/// A special token of `tokenizer_config.json`: a string, or an object with
/// its `content`.
fn token_text(v: Option<&serde_json::Value>) -> Option<String> {
    match v? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o.get("content")?.as_str().map(str::to_owned),
        _ => None,
    }
}

impl ChatTokenizeConfig {
    /// Wraps a tokenizer. Defaults: no template yet (set one with
    /// [`chat_template`](Self::chat_template) or
    /// [`tokenizer_config`](Self::tokenizer_config)), field `messages`, mask
    /// field `loss_mask`, no length cap, loss on every assistant turn.
    pub fn from_tokenizer(tokenizer: tokenizers::Tokenizer) -> Self {
        ChatTokenizeConfig {
            tokenizer: Arc::new(crate::tokenizer_file::own_settings_off(tokenizer)),
            template: None,
            bos_token: None,
            eos_token: None,
            field: MESSAGES.into(),
            mask_field: LOSS_MASK.into(),
            max_length: None,
            last_turn_only: false,
            system_prompt: None,
            keep_messages: false,
            micro_batch: DEFAULT_MICRO_BATCH,
            vars: BTreeMap::new(),
            raw: false,
            fuel: super::TEMPLATE_FUEL,
        }
    }

    /// Parses the bytes of a `tokenizer.json`.
    /// The checks of [`TokenizeConfig::from_file`](crate::TokenizeConfig::from_file)
    /// apply: a size limit, the normalizers checked, the file's own padding
    /// and truncation off.
    pub fn from_bytes(bytes: impl AsRef<[u8]>) -> crate::Result<Self> {
        crate::tokenizer_file::parse(bytes.as_ref(), "<bytes>").map(Self::from_tokenizer)
    }

    /// Loads a Hugging Face tokenizer folder: `tokenizer.json`, and the chat
    /// template, BOS and EOS tokens of its `tokenizer_config.json`.
    pub fn from_dir(dir: impl AsRef<Path>) -> crate::Result<Self> {
        let dir = dir.as_ref();
        let read = |name: &str| {
            let path = dir.join(name);
            zephon_core::input::read_file(&path, crate::tokenizer_file::TOKENIZER_FILE_BYTES)
                .map_err(|e| Error::Tokenizer {
                    source_name: path.display().to_string(),
                    message: e.to_string(),
                })
        };
        let tokenizer = Self::from_bytes(read("tokenizer.json")?).map_err(|e| match e {
            Error::Tokenizer { message, .. } => Error::Tokenizer {
                source_name: dir.join("tokenizer.json").display().to_string(),
                message,
            },
            other => other,
        })?;
        tokenizer.tokenizer_config(read("tokenizer_config.json")?)
    }

    /// Takes the `chat_template` (a string, or the `default` entry of a list
    /// of named templates), `bos_token` and `eos_token` of a
    /// `tokenizer_config.json`; what it lacks stays as it was.
    pub fn tokenizer_config(mut self, json: impl AsRef<[u8]>) -> crate::Result<Self> {
        let bad = |message: String| Error::Tokenizer {
            source_name: "tokenizer_config.json".into(),
            message,
        };
        let v: serde_json::Value =
            serde_json::from_slice(json.as_ref()).map_err(|e| bad(e.to_string()))?;
        match v.get("chat_template") {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::String(s)) => self.template = Some(s.clone()),
            Some(serde_json::Value::Array(named)) => {
                let default = named
                    .iter()
                    .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                    .and_then(|t| t.get("template")?.as_str())
                    .ok_or_else(|| bad("`chat_template` lists no `default` template".into()))?;
                self.template = Some(default.to_owned());
            }
            Some(_) => return Err(bad("`chat_template` is neither text nor a list".into())),
        }
        if let Some(t) = token_text(v.get("bos_token")) {
            self.bos_token = Some(t);
        }
        if let Some(t) = token_text(v.get("eos_token")) {
            self.eos_token = Some(t);
        }
        Ok(self)
    }

    /// The Jinja chat template, given directly.
    pub fn chat_template(mut self, template: impl Into<String>) -> Self {
        self.template = Some(template.into());
        self
    }

    /// The BOS token text, passed to the template as `bos_token`.
    pub fn bos_token(mut self, token: impl Into<String>) -> Self {
        self.bos_token = Some(token.into());
        self
    }

    /// The EOS token text, passed to the template as `eos_token`; its id
    /// ends every conversation whose rendering does not already end with it
    /// (supervised when the last token before it is).
    pub fn eos_token(mut self, token: impl Into<String>) -> Self {
        self.eos_token = Some(token.into());
        self
    }

    /// The field holding the conversation (default `messages`).
    pub fn field(mut self, name: impl Into<String>) -> Self {
        self.field = name.into();
        self
    }

    /// The output field of the loss mask (default `loss_mask`); not
    /// `input_ids`.
    pub fn mask_field(mut self, name: impl Into<String>) -> Self {
        self.mask_field = name.into();
        self
    }

    /// Keeps the first `n` ids of a rendered conversation, `n` from 2 to
    /// 16 Mi (one training pair at least; checked when the operator starts).
    pub fn max_length(mut self, n: usize) -> Self {
        self.max_length = Some(n);
        self
    }

    /// The loss on the last contiguous run of assistant tokens only, instead
    /// of every assistant turn.
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner, Value};
    /// use zephon_ops::{ChatTokenizeConfig, TextPipelineExt};
    /// # let json = include_bytes!("../../tests/fixtures/tokenizer.json");
    /// let template = "{% for m in messages %}{{ m.role }}: \
    ///     {% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}\
    ///     {% else %}{{ m.content }}{% endif %}\n{% endfor %}";
    /// let chat = serde_json::json!([
    ///     {"role": "user", "content": "one?"}, {"role": "assistant", "content": "1"},
    ///     {"role": "user", "content": "two?"}, {"role": "assistant", "content": "2"},
    /// ]);
    /// // The number of supervised runs in the mask.
    /// let runs = |last: bool| -> Result<usize, Box<dyn std::error::Error>> {
    ///     let config = ChatTokenizeConfig::from_bytes(json)?
    ///         .chat_template(template)
    ///         .loss_on_last_turn_only(last);
    ///     let r = futures::stream::iter([Ok(Record::new().with("messages", Value::Json(chat.clone())))])
    ///         .tokenize_chat(config, 1)
    ///         .into_blocking_iter(Runner::Inline)?
    ///         .next()
    ///         .unwrap()?;
    ///     let mask = r.tokens("loss_mask").unwrap();
    ///     Ok(mask.windows(2).filter(|w| w == &[0, 1]).count())
    /// };
    /// assert_eq!((runs(false)?, runs(true)?), (2, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn loss_on_last_turn_only(mut self, on: bool) -> Self {
        self.last_turn_only = on;
        self
    }

    /// A system message put first in every conversation that has none.
    pub fn system_prompt(mut self, text: impl Into<String>) -> Self {
        self.system_prompt = Some(text.into());
        self
    }

    /// A variable the template reads, the same for every conversation
    /// (Python Zephon's `chat_template_kwargs`, e.g. `enable_thinking`).
    /// The operator's own variables (`messages`, `add_generation_prompt`,
    /// `bos_token`, `eos_token`) cannot be set this way (checked when the
    /// operator starts).
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner, Value};
    /// use zephon_ops::{ChatTokenizeConfig, TextPipelineExt};
    /// # let json = include_bytes!("../../tests/fixtures/tokenizer.json");
    /// let template = "{% for m in messages %}{{ m.role }}: \
    ///     {% if m.role == 'assistant' %}{% if think %}<think>{% endif %}\
    ///     {% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}";
    /// let chat = serde_json::json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]);
    /// let ids = |think: bool| -> Result<Vec<u32>, Box<dyn std::error::Error>> {
    ///     let config = ChatTokenizeConfig::from_bytes(json)?
    ///         .chat_template(template)
    ///         .template_var("think", serde_json::json!(think));
    ///     let mut out = futures::stream::iter([Ok(Record::new().with("messages", Value::Json(chat.clone())))])
    ///         .tokenize_chat(config, 1)
    ///         .into_blocking_iter(Runner::Inline)?;
    ///     Ok(out.next().unwrap()?.tokens("input_ids").unwrap().to_vec())
    /// };
    /// assert!(ids(true)?.len() > ids(false)?.len());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn template_var(mut self, name: impl Into<String>, value: serde_json::Value) -> Self {
        self.vars.insert(name.into(), value);
        self
    }

    /// No template: the message contents are joined as they are, each
    /// assistant turn followed by the EOS token and supervised with it
    /// (Python Zephon's `apply_chat_template=False`). Needs
    /// [`eos_token`](Self::eos_token) and no chat template.
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner, Value};
    /// use zephon_ops::{ChatTokenizeConfig, TextPipelineExt};
    /// # let json = include_bytes!("../../tests/fixtures/tokenizer.json");
    /// let config = ChatTokenizeConfig::from_bytes(json)?.raw_content().eos_token("<|endoftext|>");
    /// let chat = serde_json::json!([{"role": "user", "content": "Say hi. "}, {"role": "assistant", "content": "hi"}]);
    /// let out: Vec<Record> = futures::stream::iter([Ok(Record::new().with("messages", Value::Json(chat)))])
    ///     .tokenize_chat(config, 1)
    ///     .into_blocking_iter(Runner::Inline)?
    ///     .collect::<Result<_, _>>()?;
    /// let mask = out[0].tokens("loss_mask").unwrap();
    /// assert_eq!(mask.iter().rev().take_while(|&&m| m == 1).count(), 2); // `hi`, EOS
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn raw_content(mut self) -> Self {
        self.raw = true;
        self
    }

    /// Keeps the conversation field in the output record (dropped by
    /// default, to free its memory early).
    pub fn keep_messages(mut self, keep: bool) -> Self {
        self.keep_messages = keep;
        self
    }

    /// Conversations per micro-batch handed to a worker, in [`MICRO_BATCH`]
    /// (1 to 65,536; checked when the operator starts).
    pub fn micro_batch(mut self, n: usize) -> Self {
        self.micro_batch = n;
        self
    }

    /// The budget of one rendering of the chat template, in the template
    /// engine's fuel (about one an instruction and one per 64 bytes of
    /// text), in [`TEMPLATE_FUEL_RANGE`](super::TEMPLATE_FUEL_RANGE)
    /// (checked when the operator starts); by default
    /// [`TEMPLATE_FUEL`](super::TEMPLATE_FUEL), which conversations of up
    /// to about 25 MB stay within. A rendering past it is an error naming
    /// the sample and this setting.
    pub fn template_fuel(mut self, fuel: u64) -> Self {
        self.fuel = fuel;
        self
    }

    /// Checks the configuration: the template compiles (a syntax error names
    /// its line), the special tokens are in the vocabulary, lengths are in
    /// range.
    ///
    /// ```
    /// use zephon_ops::ChatTokenizeConfig;
    /// # let json = include_bytes!("../../tests/fixtures/tokenizer.json");
    /// let config = ChatTokenizeConfig::from_bytes(json)?;
    /// let e = config.chat_template("{% for m in messages %}\n{{ m.content }\n").check().unwrap_err();
    /// assert!(e.to_string().contains("template line 2"), "{e}");
    /// # Ok::<(), zephon_ops::Error>(())
    /// ```
    pub fn check(&self) -> crate::Result<()> {
        self.prepare().map(|_| ())
    }

    pub(super) fn prepare(&self) -> crate::Result<Prepared> {
        let config = |key, message| Error::Config { key, message };
        Error::in_range(MICRO_BATCH, "tokenize_chat.micro_batch", self.micro_batch)?;
        if !super::TEMPLATE_FUEL_RANGE.contains(self.fuel) {
            return Err(config(
                "tokenize_chat.template_fuel",
                super::TEMPLATE_FUEL_RANGE.message(self.fuel),
            ));
        }
        if let Some(m) = self.max_length {
            Error::in_range(SEQ_LEN, "tokenize_chat.max_length", m)?;
            if m < 2 {
                return Err(config(
                    "tokenize_chat.max_length",
                    format!("{m} cannot hold a training pair (at least 2)"),
                ));
            }
        }
        if self.field.is_empty() {
            return Err(config("tokenize_chat.field", "empty".into()));
        }
        if self.mask_field.is_empty() || self.mask_field == crate::fields::INPUT_IDS {
            return Err(config(
                "tokenize_chat.mask_field",
                format!(
                    "`{}`: must be a non-empty name other than `input_ids`",
                    self.mask_field
                ),
            ));
        }
        if let Some(name) = self.vars.keys().find(|k| RESERVED.contains(&k.as_str())) {
            return Err(config(
                "tokenize_chat.template_vars",
                format!("`{name}` is set by the operator itself"),
            ));
        }
        let template = match (self.raw, self.template.as_deref()) {
            (true, None) if self.eos_token.is_none() => {
                return Err(config(
                    "tokenize_chat.eos_token",
                    "none: without a template, an EOS token ends every assistant turn".into(),
                ));
            }
            (true, None) => None,
            (true, Some(_)) => {
                return Err(config(
                    "tokenize_chat.chat_template",
                    "given, but raw content is asked for: use one or the other".into(),
                ));
            }
            (false, None) => {
                return Err(config(
                    "tokenize_chat.chat_template",
                    "none: give one, or a tokenizer_config.json with `chat_template`".into(),
                ));
            }
            (false, Some(source)) => Some(
                ChatTemplate::new(source, self.fuel)
                    .map_err(|m| config("tokenize_chat.chat_template", m))?,
            ),
        };
        let id = |key, token: &Option<String>| -> crate::Result<Option<u32>> {
            token
                .as_deref()
                .map(|t| {
                    self.tokenizer.token_to_id(t).ok_or_else(|| {
                        config(key, format!("`{t}` is not in the tokenizer's vocabulary"))
                    })
                })
                .transpose()
        };
        id("tokenize_chat.bos_token", &self.bos_token)?;
        let eos_id = id("tokenize_chat.eos_token", &self.eos_token)?;
        let prepared = Prepared {
            config: self.clone(),
            template,
            eos_id,
        };
        prepared.check_generation_prompt()?;
        Ok(prepared)
    }
}
