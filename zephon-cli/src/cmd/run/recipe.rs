//! The TOML recipe of `zephon run`: datasets, work source, operators, runner.
//! Every size, count and parallelism has the range of
//! `zephon_core::settings`, checked by [`super::check`] as the recipe loads.

use anyhow::{Context, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use zephon_core::work::ExhaustedPolicy;
use zephon_core::{BlockShuffle, Ownership, ShuffleMode, Tracking};

/// A whole recipe.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// How to run.
    #[serde(default)]
    pub run: RunSpec,
    /// What to read.
    pub datasets: Vec<DatasetSpec>,
    /// What to train on, in which order.
    #[serde(default)]
    pub work_source: WorkSourceSpec,
    /// The operators, source to consumer.
    pub ops: Vec<OpSpec>,
    /// How patient reads of remote datasets are, and the cache's block size.
    #[serde(default)]
    pub storage: StorageSpec,
}

/// `[storage]`: the retry policy of remote reads and the shard cache's
/// block size, each within the range `zephon_storage::StorageOptions`
/// documents; a key left out keeps its default there. `zephon run`'s flags
/// of the same names (`--retries`, `--io-timeout-ms`, ...) override them.
///
/// ```toml
/// [storage]
/// retries = 8               # 0 to 100 (default 3)
/// io_timeout_ms = 20000     # 1 to 86,400,000 (default 10,000)
/// block_deadline_ms = 300000 # 100 to 86,400,000 (default 120,000)
/// min_rate = 1024           # bytes a second, 0 (off) to 1 GiB (default 1,024)
/// block_bytes = 8388608     # 64 KiB to 256 MiB (default 4 MiB)
/// ```
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageSpec {
    /// Retries of a failed request (`StorageOptions::retries`).
    pub retries: Option<u64>,
    /// Limit of each wait for a body's bytes, in milliseconds
    /// (`StorageOptions::io_timeout`).
    pub io_timeout_ms: Option<u64>,
    /// Longest time one block or request takes, retries included, in
    /// milliseconds (`StorageOptions::block_deadline`).
    pub block_deadline_ms: Option<u64>,
    /// Slowest body accepted, in bytes a second (`StorageOptions::min_rate`).
    pub min_rate: Option<u64>,
    /// Size of the shard cache's blocks, in bytes (`CacheOptions::block_bytes`).
    pub block_bytes: Option<u64>,
}

impl StorageSpec {
    /// The storage options these settings give, each checked against its
    /// range: an error names the key (`storage.retries`, ...) and the
    /// flag that sets it too.
    pub fn options(&self) -> Result<zephon_storage::StorageOptions> {
        use std::time::Duration;
        use zephon_storage::options::{
            BLOCK_BYTES, BLOCK_DEADLINE_MS, MIN_RATE, RETRIES, TIMEOUT_MS,
        };
        let check = |key: &str, flag: &str, v: Option<u64>, range: zephon_core::settings::Range| {
            v.map(|v| range.check(&format!("storage.{key} (--{flag})"), v))
                .transpose()
        };
        let mut o = zephon_storage::StorageOptions::default();
        if let Some(n) = check("retries", "retries", self.retries, RETRIES)? {
            o.retries = n as usize;
        }
        if let Some(ms) = check(
            "io_timeout_ms",
            "io-timeout-ms",
            self.io_timeout_ms,
            TIMEOUT_MS,
        )? {
            o.io_timeout = Duration::from_millis(ms);
        }
        let deadline = self.block_deadline_ms;
        if let Some(ms) = check(
            "block_deadline_ms",
            "block-deadline-ms",
            deadline,
            BLOCK_DEADLINE_MS,
        )? {
            o.block_deadline = Duration::from_millis(ms);
        }
        if let Some(r) = check("min_rate", "min-rate", self.min_rate, MIN_RATE)? {
            o.min_rate = r;
        }
        if let Some(b) = check("block_bytes", "block-bytes", self.block_bytes, BLOCK_BYTES)? {
            o.cache.block_bytes = b;
        }
        o.validate()?;
        o.cache.validate()?;
        Ok(o)
    }
}

/// `[run]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunSpec {
    /// `threads` (default) or `inline`.
    pub runner: RunnerKind,
    /// Worker threads of the threads runner (0: one per core; at most 4096).
    pub workers: usize,
    /// Stop after this many batches (at least 1).
    pub max_batches: Option<u64>,
    /// Tracking level when `--observe` is given: `stage` or `operator`
    /// (default). `off` is not one: observing with tracking off reported
    /// a finished run as "0 batches delivered".
    pub tracking: ObserveLevel,
    /// Bytes of decoded Parquet row groups the process keeps, all shards
    /// together (default 128 MiB; 1 MiB to 1 TiB): see
    /// `zephon_storage::format::parquet::set_decoded_budget`.
    pub parquet_decoded_bytes: Option<u64>,
    /// `fixed` (default): every operator keeps the parallelism the recipe
    /// gives it. `auto`: a tuner moves the parallelism of the `tokenize`
    /// operators while the run goes, from their live metrics, starting
    /// from the recipe's values, within `tuning_cores`; it cannot change
    /// the batches, and the run's summary lists what it changed.
    pub tuning: TuningKind,
    /// Workers the tuned operators may use together (1 to 4096; default:
    /// the machine's cores); only with `tuning = "auto"`.
    pub tuning_cores: Option<usize>,
    /// Anonymous memory (RssAnon) the process may hold while tuned, in
    /// bytes (1 MiB to 1 PiB; default none): above it the tuner adds no
    /// worker and takes workers back; only with `tuning = "auto"`.
    pub tuning_memory: Option<u64>,
}

/// `[run] tuning`.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum TuningKind {
    /// The recipe's parallelisms, as written.
    #[default]
    Fixed,
    /// Tuned while the pipeline runs.
    Auto,
}

impl Default for RunSpec {
    fn default() -> Self {
        RunSpec {
            runner: RunnerKind::Threads,
            workers: 0,
            max_batches: None,
            tracking: ObserveLevel::Operator,
            parquet_decoded_bytes: None,
            tuning: TuningKind::Fixed,
            tuning_cores: None,
            tuning_memory: None,
        }
    }
}

/// The tracking levels `--observe` can report from.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ObserveLevel {
    /// Per stage.
    Stage,
    /// Per stage and per operator.
    Operator,
}

impl From<ObserveLevel> for Tracking {
    fn from(l: ObserveLevel) -> Tracking {
        match l {
            ObserveLevel::Stage => Tracking::Stage,
            ObserveLevel::Operator => Tracking::Operator,
        }
    }
}

/// Runner names.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RunnerKind {
    /// One thread.
    Inline,
    /// A worker pool.
    Threads,
}

/// `[[datasets]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetSpec {
    /// Name (appears in errors and metrics).
    pub name: String,
    /// Path (relative to the recipe) or URI (`file://`, `s3://`, `gs://`,
    /// `azblob://`, `http(s)://`).
    pub uri: String,
    /// Mixture weight (finite and positive): a share of samples, or of
    /// tokens once every dataset has `tokens_per_sample`.
    #[serde(default = "one")]
    pub weight: f64,
    /// What this dataset does when read completely (over the work source's
    /// `exhausted_policy`).
    #[serde(default)]
    pub exhausted_policy: Option<PolicyKind>,
    /// Repeats after the first pass under `repeat` (0 to 2^40).
    #[serde(default)]
    pub max_repeats: Option<u64>,
    /// Average tokens per sample (finite, positive, at most 2^32): given for
    /// every dataset, the weights are token shares.
    #[serde(default)]
    pub tokens_per_sample: Option<f64>,
}

/// An `exhausted_policy` value.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PolicyKind {
    /// The stream ends where the dataset asks past its pass.
    Stop,
    /// Another pass, reshuffled (up to `max_repeats`).
    Repeat,
    /// The dataset leaves the mixture; its weight goes to the others.
    Redistribute,
}

fn one() -> f64 {
    1.0
}

/// A block shuffle size: a number, `auto`, `global` or `off`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum BlockSpec {
    /// Blocks of this many samples.
    Size(u64),
    /// `auto`, `global` or `off`.
    Word(String),
}

/// `[work_source]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkSourceSpec {
    /// Seed of every shuffle.
    pub seed: u64,
    /// Mixture chunk size (1 to 16 Mi).
    pub chunk_size: u64,
    /// Shard shuffle.
    pub shuffle_shards: bool,
    /// Within-shard shuffle.
    pub shuffle_within_shard: bool,
    /// Block shuffle: a block size of at least 1, `auto`, `global` or `off`.
    pub shuffle_block_size: BlockSpec,
    /// Passes over each dataset, at least 1 (ignored with `repeat`).
    pub passes: u64,
    /// Repeat forever, reshuffling every pass.
    pub repeat: bool,
    /// Repeat every dataset until each has completed this many passes (at
    /// least 1; not with `passes`, `repeat` or the per-dataset policies).
    pub stop_after_passes: Option<u64>,
    /// What a dataset does when read completely (`stop`, `repeat`,
    /// `redistribute`), unless its `[[datasets]]` entry says otherwise;
    /// setting any policy replaces `passes` and `repeat`.
    pub exhausted_policy: Option<PolicyKind>,
    /// Repeats after the first pass of the datasets that `repeat` without a
    /// `max_repeats` of their own (0 to 2^40).
    pub max_repeats: Option<u64>,
    /// Estimate the tokens per sample of every dataset without
    /// `tokens_per_sample` from this many of its records (1 to 1 Mi), with
    /// the first tokenize operator's tokenizer: the weights become token
    /// shares.
    pub token_samples: Option<u64>,
    /// Canonical lanes (1 to 65,536).
    pub canonical_lanes: u32,
    /// This process's rank (below `world_size`).
    pub rank: u32,
    /// Number of ranks (1 to 65,536, dividing `canonical_lanes`).
    pub world_size: u32,
    /// Lane ownership.
    pub ownership: Ownership,
    /// Mixture weights that change during the run (`[work_source.schedule]`).
    pub schedule: Option<ScheduleSpec>,
}

/// `[work_source.schedule]`: mixture weights by global position, as
/// `zephon_core::work::MixtureSchedule` takes them.
///
/// ```toml
/// [work_source.schedule]
/// unit = "global_batches"   # or "samples" (default), or "tokens"
/// global_batch = 256        # samples per global batch, with unit = "global_batches"
/// form = "phases"           # or "linear", with `step` positions per step
/// [[work_source.schedule.points]]
/// at = 1000
/// weights = { web = 0.5, code = 0.5 }
/// ```
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// `samples` (default), `global_batches` or `tokens`.
    #[serde(default)]
    pub unit: ScheduleUnitKind,
    /// Samples per global batch (at least 1), with `unit = "global_batches"`.
    pub global_batch: Option<u64>,
    /// `phases` (default) or `linear`.
    #[serde(default)]
    pub form: ScheduleFormKind,
    /// Positions per step of a linear schedule (at least 1).
    pub step: Option<u64>,
    /// The points, in increasing position.
    pub points: Vec<SchedulePoint>,
}

/// What a schedule's positions count.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleUnitKind {
    /// Global indices.
    #[default]
    Samples,
    /// Global batches of `global_batch` samples.
    GlobalBatches,
    /// Tokens, as the work source estimates them (needs tokens per sample
    /// for every dataset, or `token_samples`).
    Tokens,
}

/// How weights go from one point to the next.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleFormKind {
    /// Piecewise constant.
    #[default]
    Phases,
    /// Linear interpolation, in steps of `step` positions.
    Linear,
}

/// `[[work_source.schedule.points]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulePoint {
    /// Position, in the schedule's unit.
    pub at: u64,
    /// Weight by dataset name; datasets not named are out of the mixture.
    pub weights: std::collections::BTreeMap<String, f64>,
}

impl ScheduleSpec {
    /// The library's schedule; an option that does not fit the unit or
    /// form is an error naming it.
    pub fn schedule(&self) -> Result<zephon_core::work::MixtureSchedule> {
        use zephon_core::work::{MixtureSchedule, ScheduleUnit};
        let key = "work_source.schedule";
        let unit = match (self.unit, self.global_batch) {
            (ScheduleUnitKind::Samples, None) => ScheduleUnit::Samples,
            (ScheduleUnitKind::Tokens, None) => ScheduleUnit::Tokens,
            (ScheduleUnitKind::GlobalBatches, Some(size)) => ScheduleUnit::GlobalBatches { size },
            (ScheduleUnitKind::Samples | ScheduleUnitKind::Tokens, Some(_)) => {
                anyhow::bail!("{key}.global_batch: only with unit = \"global_batches\"")
            }
            (ScheduleUnitKind::GlobalBatches, None) => {
                anyhow::bail!(
                    "{key}.global_batch: unit = \"global_batches\" needs the samples per global batch"
                )
            }
        };
        let mut s = match (self.form, self.step) {
            (ScheduleFormKind::Phases, None) => MixtureSchedule::phases(unit),
            (ScheduleFormKind::Linear, Some(step)) => MixtureSchedule::linear(unit, step),
            (ScheduleFormKind::Phases, Some(_)) => {
                anyhow::bail!("{key}.step: only with form = \"linear\"")
            }
            (ScheduleFormKind::Linear, None) => {
                anyhow::bail!("{key}.step: form = \"linear\" needs the positions per step")
            }
        };
        for p in &self.points {
            let w: Vec<(&str, f64)> = p.weights.iter().map(|(n, w)| (n.as_str(), *w)).collect();
            s = s.at(p.at, &w);
        }
        Ok(s)
    }
}

impl Default for WorkSourceSpec {
    fn default() -> Self {
        WorkSourceSpec {
            seed: 0,
            chunk_size: 1024,
            shuffle_shards: true,
            shuffle_within_shard: true,
            shuffle_block_size: BlockSpec::Word("off".into()),
            passes: 1,
            repeat: false,
            stop_after_passes: None,
            exhausted_policy: None,
            max_repeats: None,
            token_samples: None,
            canonical_lanes: 1,
            rank: 0,
            world_size: 1,
            ownership: Ownership::Contiguous,
            schedule: None,
        }
    }
}

impl WorkSourceSpec {
    /// Whether any exhaustion policy is set, here or on a dataset.
    pub fn per_dataset(&self, datasets: &[DatasetSpec]) -> bool {
        self.exhausted_policy.is_some()
            || self.max_repeats.is_some()
            || datasets
                .iter()
                .any(|d| d.exhausted_policy.is_some() || d.max_repeats.is_some())
    }

    /// The policy of `d` (`stop` unless set), and whether its `max_repeats`
    /// was set on the dataset itself.
    pub fn policy(&self, d: &DatasetSpec) -> (ExhaustedPolicy, bool) {
        match d.exhausted_policy.or(self.exhausted_policy) {
            None | Some(PolicyKind::Stop) => (ExhaustedPolicy::Stop, false),
            Some(PolicyKind::Redistribute) => (ExhaustedPolicy::Redistribute, false),
            Some(PolicyKind::Repeat) => (
                ExhaustedPolicy::Repeat {
                    max_repeats: d.max_repeats.or(self.max_repeats),
                },
                d.max_repeats.is_some(),
            ),
        }
    }

    /// The block shuffle setting.
    pub fn block(&self) -> Result<BlockShuffle> {
        Ok(match &self.shuffle_block_size {
            BlockSpec::Size(n) => BlockShuffle::Size(*n),
            BlockSpec::Word(w) => w.parse().context("work_source.shuffle_block_size")?,
        })
    }
}

/// One `[[ops]]` entry, tagged by `op`.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum OpSpec {
    /// Warm shards ahead of fetch.
    Prefetch(PrefetchSpec),
    /// Pointers to records.
    Fetch(FetchSpec),
    /// Tokenize a text field.
    Tokenize(TokenizeSpec),
    /// Render and tokenize conversations with a chat template.
    TokenizeChat(TokenizeChatSpec),
    /// Buffer shuffle.
    Shuffle(ShuffleSpec),
    /// Hold the token-level mixture.
    EnsureMixture(MixtureSpec),
    /// Pack token sequences into rows.
    Pack(PackSpec),
    /// Batches per lane.
    Batch(BatchSpec),
    /// Owned lanes in strict round robin.
    LaneMux(Empty),
    /// Collate batches for training.
    ToTraining(TrainingSpec),
    /// Finished elements buffered ahead of the consumer.
    PrefetchBatches(PrefetchBatchesSpec),
    /// Decode an image field, with its augmentations.
    DecodeImage(super::media::DecodeImageSpec),
    /// Collate batches of images into one array each.
    CollateImages(super::media::CollateImagesSpec),
}

impl OpSpec {
    /// The operator's name as written in recipes.
    pub fn name(&self) -> &'static str {
        match self {
            OpSpec::Prefetch(_) => "prefetch",
            OpSpec::Fetch(_) => "fetch",
            OpSpec::Tokenize(_) => "tokenize",
            OpSpec::TokenizeChat(_) => "tokenize_chat",
            OpSpec::Shuffle(_) => "shuffle",
            OpSpec::EnsureMixture(_) => "ensure_mixture",
            OpSpec::Pack(_) => "pack",
            OpSpec::Batch(_) => "batch",
            OpSpec::LaneMux(_) => "lane_mux",
            OpSpec::ToTraining(_) => "to_training",
            OpSpec::PrefetchBatches(_) => "prefetch_batches",
            OpSpec::DecodeImage(_) => "decode_image",
            OpSpec::CollateImages(_) => "collate_images",
        }
    }
}

/// An operator without options.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

/// `op = "prefetch"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefetchSpec {
    /// Pointers looked ahead (1 to 16 Mi).
    pub buffer_size: usize,
    /// Concurrent downloads (1 to 4096).
    #[serde(default = "four")]
    pub parallelism: usize,
}

fn four() -> usize {
    4
}

/// `op = "fetch"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchSpec {
    /// Reads in flight (1 to 4096).
    #[serde(default = "four")]
    pub parallelism: usize,
}

/// `op = "tokenize"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizeSpec {
    /// A `tokenizer.json` (relative to the recipe).
    pub tokenizer: PathBuf,
    /// Source field.
    #[serde(default = "text")]
    pub field: String,
    /// Micro-batches encoding at once (1 to 4096).
    #[serde(default = "four")]
    pub parallelism: usize,
    /// `none`, `bos`, `eos`, `bos_eos` or `tokenizer_default` (what the
    /// tokenizer's post-processor adds).
    #[serde(default = "eos")]
    pub special_tokens: String,
    /// Pad every record shorter than `max_length` up to it.
    #[serde(default)]
    pub padding: bool,
    /// The id padding fills with (default: the vocabulary's pad token, else
    /// its EOS).
    pub pad_token_id: Option<u32>,
    /// Longest sequence (1 to 16 Mi); longer documents are cut.
    pub max_length: Option<usize>,
    /// `truncate` or `split` (one document becomes several records).
    #[serde(default = "truncate")]
    pub overflow: String,
    /// `error` or `skip` for a record without the field.
    #[serde(default = "error_word")]
    pub on_missing: String,
}

/// `op = "tokenize_chat"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizeChatSpec {
    /// A `tokenizer.json` (relative to the recipe).
    pub tokenizer: PathBuf,
    /// A `tokenizer_config.json` (relative to the recipe) giving the chat
    /// template, BOS and EOS.
    pub tokenizer_config: Option<PathBuf>,
    /// The chat template itself (overrides the tokenizer config's).
    pub chat_template: Option<String>,
    /// BOS token text (overrides the tokenizer config's).
    pub bos_token: Option<String>,
    /// EOS token text (overrides the tokenizer config's).
    pub eos_token: Option<String>,
    /// Field holding the list of messages.
    #[serde(default = "messages")]
    pub field: String,
    /// Output field of the loss mask.
    #[serde(default = "loss_mask")]
    pub mask_field: String,
    /// Longest conversation in tokens (2 to 16 Mi); longer ones are cut.
    pub max_length: Option<usize>,
    /// Loss on the last assistant turn only.
    #[serde(default)]
    pub loss_on_last_turn_only: bool,
    /// No template: contents joined, EOS after each assistant turn.
    #[serde(default)]
    pub raw_content: bool,
    /// A system message for conversations that have none.
    pub system_prompt: Option<String>,
    /// The budget of one rendering of the template, in the template
    /// engine's fuel (10,000 to 10 million; default 2 million).
    pub template_fuel: Option<u64>,
    /// Variables the template reads, the same for every conversation
    /// (e.g. `enable_thinking = false`).
    #[serde(default)]
    pub template_vars: std::collections::BTreeMap<String, serde_json::Value>,
    /// Micro-batches encoding at once (1 to 4096).
    #[serde(default = "four")]
    pub parallelism: usize,
}

fn messages() -> String {
    "messages".into()
}
fn loss_mask() -> String {
    "loss_mask".into()
}

fn text() -> String {
    "text".into()
}
fn eos() -> String {
    "eos".into()
}
fn truncate() -> String {
    "truncate".into()
}
fn error_word() -> String {
    "error".into()
}

/// `op = "shuffle"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShuffleSpec {
    /// Elements buffered per lane (1 to 16 Mi).
    pub buffer_size: usize,
    /// `reservoir`, `block` or `block_warmup`.
    #[serde(default)]
    pub mode: ShuffleMode,
    /// Seed (default: the work source's).
    pub seed: Option<u64>,
}

/// `op = "ensure_mixture"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixtureSpec {
    /// `tokens` or `samples`.
    #[serde(default = "tokens")]
    pub weight_by: String,
    /// Records held per lane (1 to 16 Mi).
    #[serde(default = "thousand")]
    pub max_buffer_size: usize,
    /// Drop surplus to hold the mixture exactly.
    #[serde(default)]
    pub unbounded: bool,
}

fn tokens() -> String {
    "tokens".into()
}
fn thousand() -> usize {
    1024
}

/// `op = "pack"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackSpec {
    /// Row length (1 to 16 Mi tokens).
    pub max_length: usize,
    /// `first_fit`, `best_fit`, `wrap` or `best_fit_wrap`.
    pub algorithm: String,
    /// `best_fit_wrap` only: documents a candidate may wait before it is
    /// placed first in the next row, closed at once (1 to 2^40).
    #[serde(default)]
    pub max_candidate_age: Option<u64>,
    /// A record field whose value keys separate bins: rows never mix two
    /// values (a non-empty name other than `input_ids`).
    #[serde(default)]
    pub group_field: Option<String>,
}

/// `op = "batch"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchSpec {
    /// Elements per batch (1 to 1,048,576).
    pub size: usize,
    /// Drop each lane's last partial batch.
    #[serde(default)]
    pub drop_last: bool,
}

/// `op = "to_training"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingSpec {
    /// Row length (1 to 16 Mi tokens).
    pub seq_len: usize,
    /// Padding id.
    #[serde(default)]
    pub pad_token_id: u32,
    /// `document` (positions restart with each document) or `sequence`
    /// (`0..seq_len` across each row).
    #[serde(default = "document")]
    pub position_mode: String,
    /// An EOS id: no loss on predictions made from it.
    pub eos_mask_loss: Option<u32>,
}

fn document() -> String {
    "document".into()
}

/// `op = "prefetch_batches"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefetchBatchesSpec {
    /// Elements buffered ahead (0 to 65,536).
    pub depth: usize,
}

/// The longest recipe read, 16 MiB: a recipe is a few hundred lines of
/// TOML; a path naming anything much longer is not one.
const RECIPE_LIMIT: u64 = 16 << 20;

impl Recipe {
    /// Reads and parses a recipe; errors name the key and the line.
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = zephon_core::input::read_file(path, RECIPE_LIMIT)
            .with_context(|| format!("reading recipe {}", path.display()))?;
        let text = String::from_utf8(bytes)
            .with_context(|| format!("reading recipe {}: not UTF-8", path.display()))?;
        Self::parse(&text).with_context(|| format!("recipe {}", path.display()))
    }

    /// Parses recipe text.
    pub fn parse(text: &str) -> Result<Self> {
        let recipe: Recipe = toml::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
        if recipe.datasets.is_empty() {
            anyhow::bail!("`datasets`: a recipe needs at least one [[datasets]] entry");
        }
        if recipe.ops.is_empty() {
            anyhow::bail!("`ops`: a recipe needs at least one [[ops]] entry");
        }
        super::check::check(&recipe, &super::check::KeyLines::new(text))?;
        Ok(recipe)
    }
}

/// Resolves a dataset URI or path relative to the recipe's folder (made
/// absolute where it exists, so errors and metrics show a clean path).
pub fn resolve(base: &Path, uri: &str) -> String {
    if uri.contains("://") || Path::new(uri).is_absolute() {
        return uri.to_owned();
    }
    let joined = base.join(uri);
    std::fs::canonicalize(&joined)
        .unwrap_or(joined)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_key_and_line() {
        let e = Recipe::parse(
            "[[datasets]]\nname = \"a\"\nuri = \"x\"\n\n[[ops]]\nop = \"fetch\"\nparalelism = 2\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("paralelism") && e.contains("line 5"), "{e}");
        let e = Recipe::parse("[[datasets]]\nname = \"a\"\n[[ops]]\nop = \"fetch\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("uri"), "{e}");
        let e = Recipe::parse("[[datasets]]\nname = \"a\"\nuri = \"x\"\n[[ops]]\nop = \"fecth\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("fecth") && e.contains("line 5"), "{e}");
        let e = Recipe::parse("[work_source]\nseed = \"x\"\n[[datasets]]\nname = \"a\"\nuri = \"x\"\n[[ops]]\nop = \"fetch\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("seed") && e.contains("line 2"), "{e}");
    }

    #[test]
    fn defaults_fill_in() {
        let r = Recipe::parse("[[datasets]]\nname = \"a\"\nuri = \"x\"\n[[ops]]\nop = \"fetch\"\n[[ops]]\nop = \"batch\"\nsize = 8\n")
            .unwrap();
        assert_eq!(r.run.runner, RunnerKind::Threads);
        assert_eq!(r.work_source.chunk_size, 1024);
        assert_eq!(r.ops.len(), 2);
        assert_eq!(r.ops[1].name(), "batch");
    }
}
