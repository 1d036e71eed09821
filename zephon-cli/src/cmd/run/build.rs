//! Turns a recipe into a running pipeline: each operator checks that it gets
//! the element type it needs, so a misplaced operator is an error naming it.

use super::recipe::{OpSpec, Recipe, RunnerKind, TuningKind, resolve};
use anyhow::{Context, Result, bail};
use futures::{Stream, StreamExt};
use std::path::Path;
use std::sync::Arc;
use zephon_core::obs::{BoxPipeline, Explain, PlanDescription};
use zephon_core::{
    Batch, Catalog, PipelineExt, Record, Runner, SamplePtr, WorkSource, WorkSourceBuilder,
};
use zephon_media::{ImageBatch, ImageSample, MediaPipelineExt};
use zephon_ops::{
    ChatTokenizeConfig, MixtureConfig, OnMissing, Overflow, PackAlgorithm, PackConfig,
    PositionMode, SpecialTokens, TextPipelineExt, TextStats, TokenizeConfig, TrainingBatch,
    TrainingConfig, WeightBy,
};
use zephon_storage::{PrefetchExt, UriDatasetExt};

// Boxed with their descriptions, so `explain()` names every stage from the
// operators themselves.
type Boxed<T> = BoxPipeline<'static, zephon_core::Result<T>>;

/// What flows out of the last operator so far.
pub enum Stage {
    /// Sample pointers, with the catalog they index.
    Pointers(Boxed<SamplePtr>, Catalog),
    /// Records.
    Records(Boxed<Record>),
    /// Batches of records.
    Batches(Boxed<Batch<Record>>),
    /// Collated training batches.
    Training(Boxed<TrainingBatch>),
    /// Decoded images.
    Images(Boxed<ImageSample>),
    /// Batches of decoded images.
    ImageBatches(Boxed<Batch<ImageSample>>),
    /// Collated image batches.
    Collated(Boxed<ImageBatch>),
}

/// One delivered element, sized for the progress line.
pub enum Item {
    /// A record.
    Record(Record),
    /// A batch of records.
    Batch(Batch<Record>),
    /// A training batch.
    Training(TrainingBatch),
    /// A decoded image (counted, then dropped: nothing downstream reads
    /// it), with the tokens its record carries (a tokenized caption).
    Image(u64),
    /// A batch of decoded images.
    ImageBatch(Batch<ImageSample>),
    /// A collated image batch.
    Collated(ImageBatch),
}

impl Item {
    /// (samples, tokens) in this element.
    pub fn counts(&self) -> (u64, u64) {
        match self {
            Item::Record(r) => (1, input_tokens(r)),
            Item::Batch(b) => (b.len() as u64, b.items.iter().map(input_tokens).sum()),
            Item::Training(t) => (t.batch_size as u64, t.num_tokens() as u64),
            Item::Image(tokens) => (1, *tokens),
            // Image-text pairs: a caption tokenized before the decode.
            Item::ImageBatch(b) => (
                b.len() as u64,
                b.items.iter().map(|i| input_tokens(&i.record)).sum(),
            ),
            Item::Collated(b) => (
                b.batch_size as u64,
                b.records.iter().map(input_tokens).sum(),
            ),
        }
    }
}

/// The tokens of a record's `input_ids` (0 without them).
fn input_tokens(r: &Record) -> u64 {
    r.token_ids(zephon_ops::fields::INPUT_IDS)
        .map_or(0, |t| t.len() as u64)
}

fn boxed<S, T>(s: S) -> Boxed<T>
where
    S: Stream<Item = zephon_core::Result<T>> + Explain + Send + 'static,
{
    s.boxed_pipeline()
}

/// A built pipeline, its plan and runner.
pub struct Built {
    /// The elements.
    pub stream: futures::stream::BoxStream<'static, zephon_core::Result<Item>>,
    /// The plan in words.
    pub plan: PlanDescription,
    /// The runner.
    pub runner: Runner,
    /// Pointers this rank will read (when the work source is finite).
    pub samples: Option<u64>,
    /// The datasets, to name the dataset and shard of a failing sample.
    pub catalog: Catalog,
    /// The work source, for what its mixture schedule handed out.
    pub work_source: WorkSource,
    /// What the recipe's `tokenize_chat` operators count into (one set for
    /// all of them), when it has any: the conversations they dropped.
    pub chat_stats: Option<Arc<TextStats>>,
    /// The knobs of the tuned operators (`tuning = "auto"`), and the cores
    /// they may use together.
    pub tuning: Option<(Vec<zephon_core::knob::Knob>, usize)>,
}

/// The tuner's memory budget of `recipe`, checked against its range and
/// allowed only with `tuning = "auto"`.
fn check_tuning_memory(recipe: &Recipe) -> Result<()> {
    let r = &recipe.run;
    match (r.tuning, r.tuning_memory) {
        (TuningKind::Fixed, Some(_)) => bail!("run.tuning_memory: only with tuning = \"auto\""),
        (_, Some(m)) => zephon_core::tune::MEMORY
            .check("run.tuning_memory", m)
            .map(|_| ())
            .map_err(|e| anyhow::anyhow!("{e}")),
        (_, None) => Ok(()),
    }
}

/// The cores the tuned operators of `recipe` may use together, checked
/// against their range; `None` when the recipe does not tune.
fn tuning_cores(recipe: &Recipe) -> Result<Option<usize>> {
    let r = &recipe.run;
    match (r.tuning, r.tuning_cores) {
        (TuningKind::Fixed, Some(_)) => {
            bail!("run.tuning_cores: only with tuning = \"auto\"")
        }
        (TuningKind::Fixed, None) => Ok(None),
        (TuningKind::Auto, cores) => {
            let cores = cores.unwrap_or_else(zephon_core::runner::num_cpus);
            zephon_core::settings::PARALLELISM
                .check_usize("run.tuning_cores", cores)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            Ok(Some(cores))
        }
    }
}

/// Builds the work source of a recipe.
pub fn work_source(recipe: &Recipe, base: &Path) -> Result<WorkSource> {
    let w = &recipe.work_source;
    let mut b: WorkSourceBuilder = WorkSource::builder()
        .seed(w.seed)
        .chunk_size(w.chunk_size)
        .shuffle_shards(w.shuffle_shards)
        .shuffle_within_shard(w.shuffle_within_shard)
        .shuffle_block_size(w.block()?)
        .canonical_lanes(w.canonical_lanes)
        .rank(w.rank)
        .world_size(w.world_size)
        .ownership(w.ownership);
    let per_dataset = w.per_dataset(&recipe.datasets);
    let storage = recipe.storage.options()?;
    b = match w.stop_after_passes {
        Some(n) => b.stop_after_passes(n),
        None if w.repeat => b.repeat(),
        None => b.passes(w.passes),
    };
    for (i, d) in recipe.datasets.iter().enumerate() {
        let uri = resolve(base, &d.uri);
        let ds = zephon_core::Dataset::from_uri_with(&d.name, &uri, &storage)
            .with_context(|| format!("datasets[{i}] (`{}`, {uri})", d.name))?;
        b = b.dataset(ds, d.weight);
        if per_dataset {
            b = b.dataset_policy(&d.name, w.policy(d).0);
        }
        if let Some(t) = d.tokens_per_sample {
            b = b.tokens_per_sample(&d.name, t);
        }
    }
    if let Some(n) = w.token_samples {
        b = estimate_tokens(recipe, base, b, n)?;
    }
    if let Some(s) = &w.schedule {
        b = b.mixture_schedule(s.schedule()?);
    }
    Ok(b.build()?)
}

/// Estimates the tokens per sample of the datasets without one, with the
/// tokenizer and field of the recipe's first tokenize operator (special
/// tokens left out: they are the same few for every document).
fn estimate_tokens(
    recipe: &Recipe,
    base: &Path,
    b: WorkSourceBuilder,
    samples: u64,
) -> Result<WorkSourceBuilder> {
    let Some(t) = recipe.ops.iter().find_map(|op| match op {
        OpSpec::Tokenize(t) => Some(t),
        _ => None,
    }) else {
        bail!("work_source.token_samples: estimating tokens needs a tokenize operator");
    };
    let path = Path::new(&resolve(base, &t.tokenizer.display().to_string())).to_owned();
    let cfg = TokenizeConfig::from_file(&path)
        .with_context(|| format!("work_source.token_samples: tokenizer {}", path.display()))?;
    let field = t.field.clone();
    let count = |r: &Record| -> zephon_core::Result<u64> {
        let text = r.text(&field).ok_or_else(|| {
            zephon_core::Error::config("tokenize.field", format!("no text field `{field}`"))
        })?;
        let encoding = zephon_ops::tokenize::guarded_encode(|| cfg.tokenizer().encode(text, false))
            .map_err(|e| zephon_core::Error::config("tokenizer", e))?;
        Ok(encoding.len() as u64)
    };
    let rt = Runner::Inline.runtime()?;
    Ok(rt.block_on(b.estimate_tokens(samples, count))?)
}

/// Builds the whole pipeline.
pub fn build(recipe: &Recipe, base: &Path) -> Result<Built> {
    if let Some(b) = recipe.run.parquet_decoded_bytes {
        zephon_storage::format::parquet::set_decoded_budget(b)?;
    }
    let ws = work_source(recipe, base)?;
    let samples = ws.len();
    let catalog = ws.catalog().clone();
    let runner = match recipe.run.runner {
        RunnerKind::Inline => Runner::Inline,
        RunnerKind::Threads => Runner::Threads {
            workers: recipe.run.workers,
        },
    };
    let lanes = ws.owned_lanes();
    let seed = recipe.work_source.seed;
    check_tuning_memory(recipe)?;
    let cores = tuning_cores(recipe)?;
    let mut knobs = Vec::new();
    let pointers = ws.stream();
    let mut stage = Stage::Pointers(boxed(pointers), ws.catalog().clone());
    let mut chat_stats: Option<Arc<TextStats>> = None;
    for (i, op) in recipe.ops.iter().enumerate() {
        let at = || format!("ops[{i}] (`{}`)", op.name());
        let wrong = |have: &str, want: &str| -> anyhow::Error {
            anyhow::anyhow!(
                "{}: expects {want}, but the operators before it produce {have}",
                at()
            )
        };
        stage = match (op, stage) {
            (OpSpec::Prefetch(p), Stage::Pointers(s, cat)) => Stage::Pointers(
                boxed(s.prefetch_from(cat.clone(), p.buffer_size, p.parallelism)),
                cat,
            ),
            (OpSpec::Fetch(f), Stage::Pointers(s, cat)) => {
                Stage::Records(boxed(s.fetch_from(cat, f.parallelism)))
            }
            (OpSpec::Tokenize(t), Stage::Records(s)) => {
                let path = Path::new(&resolve(base, &t.tokenizer.display().to_string())).to_owned();
                let mut cfg = TokenizeConfig::from_file(&path)
                    .with_context(|| format!("{}: tokenizer {}", at(), path.display()))?
                    .field(t.field.clone())
                    .special_tokens(match t.special_tokens.as_str() {
                        "none" => SpecialTokens::None,
                        "bos" => SpecialTokens::Bos,
                        "eos" => SpecialTokens::Eos,
                        "bos_eos" => SpecialTokens::BosEos,
                        "tokenizer_default" => SpecialTokens::TokenizerDefault,
                        o => bail!(
                            "{}: special_tokens `{o}` is not one of none, bos, eos, bos_eos, tokenizer_default",
                            at()
                        ),
                    })
                    .on_missing(match t.on_missing.as_str() {
                        "error" => OnMissing::Error,
                        "skip" => OnMissing::Skip,
                        o => bail!("{}: on_missing `{o}` is not one of error, skip", at()),
                    });
                // Read whether or not max_length is set: a typo is named,
                // not passed over.
                let overflow = match t.overflow.as_str() {
                    "truncate" => Overflow::Truncate,
                    "split" => Overflow::Split,
                    o => bail!("{}: overflow `{o}` is not one of truncate, split", at()),
                };
                if let Some(n) = t.max_length {
                    cfg = cfg.max_length(n, overflow);
                }
                cfg = cfg.padding(t.padding);
                if let Some(id) = t.pad_token_id {
                    cfg = cfg.pad_id(id);
                }
                // What needs the tokenizer (its EOS and pad tokens, room for
                // the special tokens in max_length) is checked here, before
                // any dataset is read, as tokenize_chat's is.
                cfg.check().with_context(at)?;
                let tokenize = s.tokenize(cfg, t.parallelism);
                match cores {
                    // The tuner matches a knob to the operator of its name;
                    // a second `tokenize` keeps its own parallelism.
                    Some(cores) if knobs.is_empty() => {
                        anyhow::ensure!(
                            t.parallelism <= cores,
                            "{}: parallelism {} is above run.tuning_cores {cores}, the budget it is tuned within",
                            at(),
                            t.parallelism
                        );
                        let knob =
                            zephon_core::knob::Knob::parallelism("tokenize", t.parallelism, cores)
                                .with_context(at)?;
                        let tuned = tokenize.tuned(&knob);
                        knobs.push(knob);
                        Stage::Records(boxed(tuned))
                    }
                    _ => Stage::Records(boxed(tokenize)),
                }
            }
            (OpSpec::TokenizeChat(t), Stage::Records(s)) => {
                let path =
                    |p: &Path| Path::new(&resolve(base, &p.display().to_string())).to_owned();
                let tokenizer = path(&t.tokenizer);
                let bytes = zephon_core::input::read_file(&tokenizer, u64::MAX)
                    .with_context(|| format!("{}: tokenizer {}", at(), tokenizer.display()))?;
                let mut cfg = ChatTokenizeConfig::from_bytes(bytes)
                    .with_context(|| format!("{}: tokenizer {}", at(), tokenizer.display()))?;
                if let Some(tc) = &t.tokenizer_config {
                    let tc = path(tc);
                    let read = zephon_core::input::read_file(&tc, u64::MAX)
                        .map_err(anyhow::Error::from)
                        .and_then(|b| Ok(cfg.clone().tokenizer_config(b)?));
                    cfg = read
                        .with_context(|| format!("{}: tokenizer_config {}", at(), tc.display()))?;
                }
                if let Some(tmpl) = &t.chat_template {
                    cfg = cfg.chat_template(tmpl.clone());
                }
                if t.raw_content {
                    cfg = cfg.raw_content();
                }
                if let Some(b) = &t.bos_token {
                    cfg = cfg.bos_token(b.clone());
                }
                if let Some(e) = &t.eos_token {
                    cfg = cfg.eos_token(e.clone());
                }
                if let Some(p) = &t.system_prompt {
                    cfg = cfg.system_prompt(p.clone());
                }
                for (name, value) in &t.template_vars {
                    cfg = cfg.template_var(name.clone(), value.clone());
                }
                if let Some(n) = t.max_length {
                    cfg = cfg.max_length(n);
                }
                if let Some(n) = t.template_fuel {
                    cfg = cfg.template_fuel(n);
                }
                cfg = cfg
                    .field(t.field.clone())
                    .mask_field(t.mask_field.clone())
                    .loss_on_last_turn_only(t.loss_on_last_turn_only);
                // A template that does not compile is named here, with its
                // line, before anything runs.
                cfg.check().with_context(at)?;
                let mut chat = s.tokenize_chat(cfg, t.parallelism);
                match &chat_stats {
                    Some(stats) => chat = chat.with_stats(stats.clone()),
                    None => chat_stats = Some(chat.stats()),
                }
                Stage::Records(boxed(chat))
            }
            (OpSpec::Shuffle(sh), Stage::Records(s)) => Stage::Records(boxed(s.shuffle(
                sh.buffer_size,
                sh.mode,
                sh.seed.unwrap_or(seed),
            ))),
            (OpSpec::EnsureMixture(m), Stage::Records(s)) => {
                let weights = recipe
                    .datasets
                    .iter()
                    .enumerate()
                    .map(|(d, spec)| (d as u32, spec.weight));
                let cfg = MixtureConfig::new(weights)
                    .weight_by(match m.weight_by.as_str() {
                        "tokens" => WeightBy::Tokens,
                        "samples" => WeightBy::Samples,
                        o => bail!("{}: weight_by `{o}` is not one of tokens, samples", at()),
                    })
                    .max_buffer_size(m.max_buffer_size)
                    .drop_surplus(m.unbounded);
                Stage::Records(boxed(s.ensure_mixture(cfg)))
            }
            (OpSpec::Pack(p), Stage::Records(s)) => {
                let algorithm = match p.algorithm.as_str() {
                    "first_fit" => PackAlgorithm::FirstFit,
                    "best_fit" => PackAlgorithm::BestFit,
                    "wrap" => PackAlgorithm::Wrap,
                    "best_fit_wrap" => PackAlgorithm::BestFitWrap,
                    o => bail!(
                        "{}: algorithm `{o}` is not one of first_fit, best_fit, wrap, best_fit_wrap",
                        at()
                    ),
                };
                let mut config = PackConfig::new(p.max_length, algorithm);
                if let Some(age) = p.max_candidate_age {
                    config = config.max_candidate_age(age);
                }
                if let Some(f) = &p.group_field {
                    config = config.group_field(f.as_str());
                }
                Stage::Records(boxed(s.pack_sequences(config)))
            }
            (OpSpec::Batch(b), Stage::Records(s)) => {
                Stage::Batches(boxed(s.batch_with(b.size, b.drop_last)))
            }
            (OpSpec::DecodeImage(d), Stage::Records(s)) => {
                let config = d.config(seed, &at())?;
                Stage::Images(boxed(s.decode_image(config, d.parallelism)))
            }
            (OpSpec::Batch(b), Stage::Images(s)) => {
                Stage::ImageBatches(boxed(s.batch_with(b.size, b.drop_last)))
            }
            (OpSpec::LaneMux(_), Stage::Images(s)) => {
                Stage::Images(boxed(s.lane_mux(lanes.clone())))
            }
            (OpSpec::LaneMux(_), Stage::ImageBatches(s)) => {
                Stage::ImageBatches(boxed(s.lane_mux(lanes.clone())))
            }
            (OpSpec::CollateImages(c), Stage::ImageBatches(s)) => {
                Stage::Collated(boxed(s.collate_images(c.config(&at())?)))
            }
            (OpSpec::LaneMux(_), Stage::Records(s)) => {
                Stage::Records(boxed(s.lane_mux(lanes.clone())))
            }
            (OpSpec::LaneMux(_), Stage::Batches(s)) => {
                Stage::Batches(boxed(s.lane_mux(lanes.clone())))
            }
            (OpSpec::ToTraining(t), Stage::Batches(s)) => {
                let mut cfg = TrainingConfig::new(t.seq_len)
                    .pad_token_id(t.pad_token_id)
                    .position_mode(match t.position_mode.as_str() {
                        "sequence" => PositionMode::Sequence,
                        _ => PositionMode::Document,
                    });
                if let Some(eos) = t.eos_mask_loss {
                    cfg = cfg.eos_mask_loss(eos);
                }
                Stage::Training(boxed(s.to_training(cfg)))
            }
            (OpSpec::PrefetchBatches(p), stage) => match stage {
                Stage::Pointers(s, c) => Stage::Pointers(boxed(s.prefetch_batches(p.depth)), c),
                Stage::Records(s) => Stage::Records(boxed(s.prefetch_batches(p.depth))),
                Stage::Batches(s) => Stage::Batches(boxed(s.prefetch_batches(p.depth))),
                Stage::Training(s) => Stage::Training(boxed(s.prefetch_batches(p.depth))),
                Stage::Images(s) => Stage::Images(boxed(s.prefetch_batches(p.depth))),
                Stage::ImageBatches(s) => Stage::ImageBatches(boxed(s.prefetch_batches(p.depth))),
                Stage::Collated(s) => Stage::Collated(boxed(s.prefetch_batches(p.depth))),
            },
            (op, stage) => {
                let have = match stage {
                    Stage::Pointers(..) => "pointers",
                    Stage::Records(_) => "records",
                    Stage::Batches(_) => "batches",
                    Stage::Training(_) => "training batches",
                    Stage::Images(_) => "decoded images",
                    Stage::ImageBatches(_) => "batches of images",
                    Stage::Collated(_) => "collated image batches",
                };
                let want = match op {
                    OpSpec::Prefetch(_) | OpSpec::Fetch(_) => {
                        "pointers (put it right after the work source)"
                    }
                    OpSpec::Batch(_) => "records or decoded images (after fetch or decode_image)",
                    OpSpec::DecodeImage(_) => "records (after fetch)",
                    OpSpec::CollateImages(_) => "batches of images (decode_image, then batch)",
                    OpSpec::Tokenize(_)
                    | OpSpec::TokenizeChat(_)
                    | OpSpec::Shuffle(_)
                    | OpSpec::Pack(_)
                    | OpSpec::EnsureMixture(_) => "records (after fetch, before batch)",
                    OpSpec::ToTraining(_) => "batches (after batch)",
                    OpSpec::LaneMux(_) => "records, images or batches",
                    OpSpec::PrefetchBatches(_) => "anything",
                };
                return Err(wrong(have, want));
            }
        };
    }
    let (plan, stream) = match stage {
        Stage::Pointers(..) => bail!("`ops`: the pipeline ends with pointers; add a fetch"),
        Stage::Records(s) => (s.explain(runner), s.map(|r| r.map(Item::Record)).boxed()),
        Stage::Batches(s) => (s.explain(runner), s.map(|r| r.map(Item::Batch)).boxed()),
        Stage::Training(s) => (s.explain(runner), s.map(|r| r.map(Item::Training)).boxed()),
        Stage::Images(s) => (
            s.explain(runner),
            s.map(|r| r.map(|i| Item::Image(input_tokens(&i.record))))
                .boxed(),
        ),
        Stage::ImageBatches(s) => (
            s.explain(runner),
            s.map(|r| r.map(Item::ImageBatch)).boxed(),
        ),
        Stage::Collated(s) => (s.explain(runner), s.map(|r| r.map(Item::Collated)).boxed()),
    };
    Ok(Built {
        stream,
        plan,
        runner,
        samples,
        catalog,
        work_source: ws,
        chat_stats,
        tuning: cores.filter(|_| !knobs.is_empty()).map(|c| (knobs, c)),
    })
}
