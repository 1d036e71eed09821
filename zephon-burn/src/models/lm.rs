//! A small transformer language model, and the Zephon text pipeline that
//! feeds it: synthetic documents -> byte-level tokenize (`map_par`) ->
//! `pack_sequences` (best fit, long documents wrapped) -> batch ->
//! `to_training` collation -> prefetch.

use crate::convert::TrainingTensors;
use crate::error::Result;
use crate::harness::{PipelineSource, TimedModel};
use burn::module::Module;
use burn::nn::attention::generate_autoregressive_mask;
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, FloatDType, Tensor};
use serde::{Deserialize, Serialize};
use zephon_core::checkpoint::{Progress, Recipe, ResumeExt};
use zephon_core::{BlockingIter, Dataset, PipelineExt, Record, Runner, WorkSource};
use zephon_ops::{
    IdType, PackAlgorithm, PackConfig, TextPipelineExt, TrainingBatch, TrainingConfig,
};

/// Sizes of the [`TransformerLm`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LmConfig {
    /// Vocabulary size (256 for the byte-level tokenizer).
    #[serde(default = "default_vocab")]
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub d_model: usize,
    /// Attention heads.
    pub n_heads: usize,
    /// Transformer blocks.
    pub n_layers: usize,
    /// Width of the feed-forward layers.
    pub d_ff: usize,
    /// Longest sequence (size of the position table).
    pub max_seq_len: usize,
    /// Dropout rate.
    #[serde(default)]
    pub dropout: f64,
}

fn default_vocab() -> usize {
    256
}

/// A decoder-only transformer: token and position embeddings, pre-norm
/// blocks with causal attention kept within each packed document, and a
/// linear head, trained with next-token cross-entropy.
#[derive(Module, Debug)]
pub struct TransformerLm {
    tokens: Embedding,
    positions: Embedding,
    blocks: TransformerEncoder,
    head: Linear,
}

impl TransformerLm {
    /// A freshly initialised model on `device`.
    pub fn new(c: &LmConfig, device: &Device) -> Self {
        TransformerLm {
            tokens: EmbeddingConfig::new(c.vocab_size, c.d_model).init(device),
            positions: EmbeddingConfig::new(c.max_seq_len, c.d_model).init(device),
            blocks: TransformerEncoderConfig::new(c.d_model, c.d_ff, c.n_heads, c.n_layers)
                .with_dropout(c.dropout)
                .with_norm_first(true)
                .init(device),
            head: LinearConfig::new(c.d_model, c.vocab_size).init(device),
        }
    }

    /// Logits `[batch, seq_len, vocab]`; embeddings are cast to `dtype`.
    pub fn forward(&self, t: &TrainingTensors, dtype: FloatDType) -> Tensor<3> {
        let [b, l] = t.input_ids.dims();
        let device = t.input_ids.device();
        let x = self.tokens.forward(t.input_ids.clone())
            + self.positions.forward(t.position_ids.clone());
        let x = x.cast(dtype);
        // Masked (true) where j > i, or where i and j are in different
        // documents of a packed row.
        let seg = t.segment_ids.clone();
        let same_doc = seg
            .clone()
            .unsqueeze_dim::<3>(2)
            .expand([b, l, l])
            .equal(seg.unsqueeze_dim::<3>(1).expand([b, l, l]));
        let mask = generate_autoregressive_mask(b, l, &device).bool_or(same_doc.bool_not());
        let input = TransformerEncoderInput::new(x)
            .mask_attn(mask)
            .mask_pad(t.attention_mask.clone().bool_not());
        self.head.forward(self.blocks.forward(input))
    }
}

/// The LM's input: the batch's tensors and the float type to compute in.
#[derive(Clone, Debug)]
pub struct LmInput {
    /// The batch on the device.
    pub tensors: TrainingTensors,
    /// The compute float type.
    pub dtype: FloatDType,
}

impl TimedModel for TransformerLm {
    type Batch = TrainingBatch;
    type Input = LmInput;

    fn to_input(batch: TrainingBatch, device: &Device, dtype: FloatDType) -> Result<LmInput> {
        Ok(LmInput {
            tensors: TrainingTensors::from_batch(&batch, device)?,
            dtype,
        })
    }

    fn batch_len(batch: &TrainingBatch) -> usize {
        batch.batch_size
    }

    fn loss(&self, input: LmInput) -> Tensor<1> {
        let t = &input.tensors;
        let logits = self.forward(t, input.dtype);
        let [b, l, v] = logits.dims();
        let logp = log_softmax(logits.reshape([b * l, v]), 1);
        // Labels are -100 where no loss is taken; clamp them to a valid index
        // and zero those positions with the mask.
        let labels = t.labels.clone().reshape([b * l, 1]).clamp_min(0);
        let mask = t
            .loss_mask
            .clone()
            .reshape([b * l])
            .float()
            .cast(logp.dtype());
        let picked = logp.gather(1, labels).reshape([b * l]);
        let count = mask.clone().sum().clamp_min(1.0);
        (picked * mask).sum().neg() / count
    }
}

/// Synthetic text, tokenized by bytes, packed into rows of `seq_len` tokens
/// (several documents per row, long ones wrapped over rows), in batches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextData {
    /// Documents per epoch.
    pub num_docs: usize,
    /// Tokens per packed row.
    pub seq_len: usize,
    /// Rows per batch.
    pub batch_size: usize,
    /// Seed of the text and of the shuffle.
    #[serde(default)]
    pub seed: u64,
    /// Threads tokenizing (the `map_par` parallelism).
    #[serde(default = "default_workers")]
    pub workers: usize,
}

fn default_workers() -> usize {
    2
}

const WORDS: [&str; 16] = [
    "the",
    "data",
    "loader",
    "streams",
    "shards",
    "into",
    "batches",
    "while",
    "model",
    "trains",
    "fast",
    "tokens",
    "pack",
    "rows",
    "mix",
    "deterministic",
];

/// A document of 8 to 71 words drawn from a small vocabulary, determined by
/// `(seed, id)`.
fn document(seed: u64, id: u64) -> String {
    let n = 8 + zephon_core::hash::key(&[seed, id]) % 64;
    (0..n)
        .map(|j| WORDS[(zephon_core::hash::key(&[seed, id, j]) % WORDS.len() as u64) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}

impl TextData {
    /// Checks the sizes against their documented ranges: `num_docs` in
    /// [`SAMPLES`](crate::config::SAMPLES), `seq_len` in
    /// [`SEQ_LEN`](zephon_core::settings::SEQ_LEN), `batch_size` in
    /// [`BATCH_SIZE`](zephon_core::settings::BATCH_SIZE) and `workers` in
    /// [`PARALLELISM`](zephon_core::settings::PARALLELISM), whether the data
    /// comes from a timing config or is built in code.
    pub fn validate(&self) -> Result<()> {
        use zephon_core::settings::{BATCH_SIZE, PARALLELISM, SEQ_LEN};
        crate::limits::in_range("data.num_docs", self.num_docs, crate::limits::SAMPLES)?;
        crate::limits::in_range("data.seq_len", self.seq_len, SEQ_LEN)?;
        crate::limits::in_range("data.batch_size", self.batch_size, BATCH_SIZE)?;
        crate::limits::in_range("data.workers", self.workers, PARALLELISM)
    }

    fn documents(&self) -> zephon_core::Result<Dataset> {
        let docs: Vec<Record> = (0..self.num_docs as u64)
            .map(|i| Record::new().with("text", document(self.seed, i)))
            .collect();
        Dataset::in_memory("synthetic-text", vec![docs])
    }

    /// Byte-level tokenizer: id = byte value; 0 never occurs in text, so it
    /// serves as padding.
    fn tokenizer(&self) -> impl Fn(Record) -> zephon_core::Result<Record> + Clone + use<> {
        let seq_len = self.seq_len;
        move |mut r: Record| {
            let ids: Vec<u32> = r
                .text("text")
                .unwrap_or("")
                .bytes()
                .take(seq_len)
                .map(u32::from)
                .collect();
            r.set(zephon_ops::fields::INPUT_IDS, ids);
            Ok(r)
        }
    }

    fn runner(&self) -> Runner {
        if self.workers > 1 {
            Runner::threads()
        } else {
            Runner::Inline
        }
    }

    fn pack(&self) -> PackConfig {
        PackConfig::new(self.seq_len, PackAlgorithm::BestFitWrap)
    }

    /// The pipeline of epoch `epoch`.
    pub fn pipeline(&self, epoch: usize) -> zephon_core::Result<BlockingIter<TrainingBatch>> {
        let ws = WorkSource::builder()
            .dataset(self.documents()?, 1.0)
            .seed(self.seed.wrapping_add(epoch as u64))
            .shuffle_within_shard(true)
            .build()?;
        ws.stream()
            .fetch(self.workers)
            .map_par(self.tokenizer(), self.workers)
            .pack_sequences(self.pack())
            .batch(self.batch_size)
            .to_training(TrainingConfig::new(self.seq_len).id_type(IdType::I64))
            .prefetch_batches(4)
            .into_blocking_iter(self.runner())
    }

    /// Rank `rank` of `world_size` of a data-parallel run over
    /// `canonical_lanes` lanes: the documents of epoch 0, split into lanes.
    /// Step `t`'s global batch is lane-batch `t` of every lane, whatever the
    /// world size.
    pub fn work_source(
        &self,
        canonical_lanes: u32,
        rank: u32,
        world_size: u32,
    ) -> zephon_core::Result<WorkSource> {
        WorkSource::builder()
            .dataset(self.documents()?, 1.0)
            .seed(self.seed)
            .shuffle_within_shard(true)
            .canonical_lanes(canonical_lanes)
            .rank(rank)
            .world_size(world_size)
            .build()
    }

    /// The pipeline on `ws` (a [`work_source`](Self::work_source), or an
    /// epoch or lane share of one): packed rows batched per lane, the owned
    /// lanes in round robin. Packing decides how many rows an epoch has;
    /// a [`ZephonDataLoader`](crate::ZephonDataLoader) over it needs
    /// [`ItemCount::Counted`](crate::ItemCount::Counted).
    pub fn pipeline_on(&self, ws: WorkSource) -> zephon_core::Result<BlockingIter<TrainingBatch>> {
        let lanes = ws.owned_lanes();
        ws.stream()
            .fetch(self.workers)
            .map_par(self.tokenizer(), self.workers)
            .pack_sequences(self.pack())
            .batch(self.batch_size)
            .lane_mux(lanes)
            .to_training(TrainingConfig::new(self.seq_len).id_type(IdType::I64))
            .prefetch_batches(4)
            .into_blocking_iter(self.runner())
    }

    /// The run's recipe: the work source and the settings that shape the
    /// batches, so a checkpoint of another run is refused.
    pub fn recipe(&self, ws: &WorkSource) -> Recipe {
        Recipe::new(ws)
            .setting("tokenize", "bytes")
            .setting("pack", self.pack())
            .setting("batch_size", self.batch_size)
    }

    /// The checkpointable pipeline of `ws`'s lanes: from the start, or from
    /// where `progress` (a [`Recipe::resume`]) left off. It yields the owned
    /// lanes' batches in strict round robin, so one step is one batch of
    /// each owned lane; count what the training step consumes with
    /// [`checkpointed`](zephon_core::checkpoint::CheckpointedExt::checkpointed).
    ///
    /// ```
    /// use zephon_burn::models::lm::TextData;
    /// use zephon_core::checkpoint::{Checkpoint, CheckpointedExt};
    /// let d = TextData { num_docs: 20, seq_len: 16, batch_size: 2, seed: 1, workers: 1 };
    /// // Two ranks, one lane each, train 2 steps and checkpoint.
    /// let mut parts = Vec::new();
    /// for rank in 0..2 {
    ///     let ws = d.work_source(2, rank, 2)?;
    ///     let p = d.recipe(&ws).start(&ws);
    ///     let mut it = d.resumable_pipeline(&ws, &p)?.checkpointed(p);
    ///     for _ in 0..2 { it.next().unwrap()?; }
    ///     parts.push(it.checkpoint());
    /// }
    /// // One rank resumes at step 2 of both lanes.
    /// let ws = d.work_source(2, 0, 1)?;
    /// let p = d.recipe(&ws).resume(&ws, &Checkpoint::merge(parts)?)?;
    /// let next: Vec<_> = d.resumable_pipeline(&ws, &p)?.take(2)
    ///     .map(|b| b.map(|b| (b.lane, b.index))).collect::<Result<_, _>>()?;
    /// assert_eq!(next, [(0, 2), (1, 2)]);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn resumable_pipeline(
        &self,
        ws: &WorkSource,
        progress: &Progress,
    ) -> zephon_core::Result<BlockingIter<TrainingBatch>> {
        ws.stream()
            .fetch(self.workers)
            .map_par(self.tokenizer(), self.workers)
            .pack_sequences(self.pack())
            .batch(self.batch_size)
            .resume_from(progress)
            .lane_mux_from(progress)
            .to_training(TrainingConfig::new(self.seq_len).id_type(IdType::I64))
            .prefetch_batches(4)
            .into_blocking_iter(self.runner())
    }

    /// A harness batch source over [`TextData::pipeline`].
    pub fn source(
        &self,
    ) -> Result<
        PipelineSource<
            impl FnMut(usize) -> zephon_core::Result<BlockingIter<TrainingBatch>> + use<>,
        >,
    > {
        self.validate()?;
        let data = self.clone();
        // Packing decides the number of rows, so the batch count is unknown.
        Ok(PipelineSource::new(move |epoch| data.pipeline(epoch)))
    }
}
