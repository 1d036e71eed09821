//! `to_training`: batches of token rows collated into [`TrainingBatch`]es.

use crate::error::{Error, Result};
use crate::fields;
use crate::training::{IGNORE_INDEX, IdType, TokenIds, TrainingBatch};
use std::borrow::Cow;
use zephon_core::context::Probe;
use zephon_core::obs::{Explain, StageDescription};
use zephon_core::record::Tokens;
use zephon_core::settings::SEQ_LEN;
use zephon_core::{Batch, LaneId, Record};

/// Collates `(ids, segment_ids)` rows; see [`TrainingBatch::from_rows`].
pub(crate) fn collate(
    rows: &[(&[u32], &[u32])],
    seq_len: usize,
    pad_id: u32,
    id_type: IdType,
    lane: LaneId,
    index: u64,
) -> Result<TrainingBatch> {
    // Checked before anything is reserved: the batch's five arrays hold
    // rows x seq_len positions each, and cu_seqlens (i32) counts them, so
    // 65,536 rows of 65,536 tokens reserved about 100 GiB before the count
    // overflowed at the end of a row.
    let n = rows
        .len()
        .checked_mul(seq_len)
        .filter(|&n| n <= i32::MAX as usize)
        .ok_or_else(|| Error::Config {
            key: "to_training.seq_len",
            message: format!(
                "{} rows of {seq_len} tokens are past 2^31 - 1 tokens, the most a batch's \
                 cu_seqlens (i32) counts: lower the batch size or seq_len",
                rows.len()
            ),
        })?;
    let mut ids = Vec::with_capacity(n);
    let mut labels = Vec::with_capacity(n);
    let mut position_ids = Vec::with_capacity(n);
    let mut segment_ids = Vec::with_capacity(n);
    let mut attention_mask = Vec::with_capacity(n);
    let mut cu_seqlens = vec![0i32];
    let mut max_seqlen = 0usize;
    for (row, &(r_ids, r_segs)) in rows.iter().enumerate() {
        let bad = |message: String| Error::BadRow {
            lane,
            index,
            row,
            message,
        };
        if r_ids.len() > seq_len {
            return Err(bad(format!(
                "{} tokens, more than seq_len {seq_len}",
                r_ids.len()
            )));
        }
        if r_segs.len() != r_ids.len() {
            return Err(bad(format!(
                "{} segment ids for {} tokens",
                r_segs.len(),
                r_ids.len()
            )));
        }
        let base = row * seq_len;
        let mut seg_start = 0usize;
        for t in 0..seq_len {
            let seg = r_segs.get(t).copied().unwrap_or(0);
            let real = seg != 0;
            if t > 0 && seg != segment_ids[base + t - 1] {
                cu_seqlens.push(
                    i32::try_from(base + t).map_err(|_| bad("batch over 2^31 tokens".into()))?,
                );
                max_seqlen = max_seqlen.max(t - seg_start);
                seg_start = t;
            }
            ids.push(if real { r_ids[t] } else { pad_id });
            segment_ids.push(seg);
            attention_mask.push(real);
            position_ids.push(if real { (t - seg_start) as i64 } else { 0 });
            // The label of t is the next token of the same document.
            let next_same = real && t + 1 < r_ids.len() && r_segs[t + 1] == seg;
            labels.push(if next_same {
                r_ids[t + 1] as i64
            } else {
                IGNORE_INDEX
            });
        }
        if seq_len > 0 {
            cu_seqlens.push(
                i32::try_from(base + seq_len).map_err(|_| bad("batch over 2^31 tokens".into()))?,
            );
            max_seqlen = max_seqlen.max(seq_len - seg_start);
        }
    }
    let loss_mask = labels.iter().map(|&l| l != IGNORE_INDEX).collect();
    let input_ids = match id_type {
        IdType::U32 => TokenIds::U32(ids),
        IdType::I64 => TokenIds::I64(ids.into_iter().map(i64::from).collect()),
    };
    Ok(TrainingBatch {
        cut: None,
        lane,
        index,
        batch_size: rows.len(),
        seq_len,
        input_ids,
        labels,
        loss_mask,
        position_ids,
        segment_ids,
        attention_mask,
        cu_seqlens,
        max_seqlen,
    })
}

/// How [`TrainingBatch::position_ids`] are numbered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PositionMode {
    /// From 0 at the start of every document of a packed row (padding 0):
    /// Python Zephon's `preserve` over packed positions.
    #[default]
    Document,
    /// `0..seq_len` across each whole row, padding included: Python
    /// Zephon's `sequence`, for recipes that number a packed row
    /// continuously. Document boundaries stay in `cu_seqlens`.
    Sequence,
}

/// How [`ToTraining`] collates: the row length, the pad id, the id type,
/// positions, which labels carry a loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrainingConfig {
    /// Tokens per row; shorter rows are padded.
    pub seq_len: usize,
    /// The id written at padding positions.
    pub pad_token_id: u32,
    /// `u32` or `i64` ids.
    pub id_type: IdType,
    /// How positions are numbered.
    pub position_mode: PositionMode,
    /// With an EOS id, no loss is taken on the prediction made from an EOS
    /// token (for packed `[A, EOS, B, EOS]`, the `EOS -> B` label).
    pub eos_mask_loss: Option<u32>,
}

impl TrainingConfig {
    /// Checks `seq_len` against [`SEQ_LEN`] (1 to 16 Mi tokens): a row is
    /// allocated whole, so a larger one is a typo, not a plan.
    ///
    /// ```
    /// use zephon_ops::TrainingConfig;
    /// assert!(TrainingConfig::new(2048).validate().is_ok());
    /// let e = TrainingConfig::new(usize::MAX).validate().unwrap_err();
    /// assert!(e.to_string().contains("to_training.seq_len"), "{e}");
    /// ```
    pub fn validate(&self) -> Result<()> {
        Error::in_range(SEQ_LEN, "to_training.seq_len", self.seq_len).map(|_| ())
    }

    /// Rows of `seq_len`, padded with id 0, `u32` ids; `seq_len` must lie
    /// in [`SEQ_LEN`] (see [`validate`](Self::validate)).
    pub fn new(seq_len: usize) -> Self {
        TrainingConfig {
            seq_len,
            pad_token_id: 0,
            id_type: IdType::U32,
            position_mode: PositionMode::Document,
            eos_mask_loss: None,
        }
    }

    /// Sets how positions are numbered (default: per document).
    ///
    /// ```
    /// use zephon_core::{Batch, Record, Value};
    /// use zephon_ops::{PositionMode, TrainingConfig};
    /// let row = Record::new()
    ///     .with("input_ids", Value::Tokens(vec![5, 6, 7, 8]))
    ///     .with("segment_ids", Value::Tokens(vec![1, 1, 2, 2]));
    /// let batch = Batch { lane: 0, index: 0, items: vec![row], cut: None };
    /// let per_doc = TrainingConfig::new(5).collate(&batch)?;
    /// assert_eq!(per_doc.position_ids, [0, 1, 0, 1, 0]);
    /// let per_row = TrainingConfig::new(5).position_mode(PositionMode::Sequence).collate(&batch)?;
    /// assert_eq!(per_row.position_ids, [0, 1, 2, 3, 4]);
    /// assert_eq!(per_row.cu_seqlens, per_doc.cu_seqlens);
    /// # Ok::<(), zephon_ops::Error>(())
    /// ```
    pub fn position_mode(mut self, mode: PositionMode) -> Self {
        self.position_mode = mode;
        self
    }

    /// Takes no loss on predictions made from `eos_id` tokens. Matching is
    /// by id: if BOS and EOS share an id, the prediction after a BOS is
    /// masked too.
    ///
    /// ```
    /// use zephon_core::{Batch, Record, Value};
    /// use zephon_ops::{IGNORE_INDEX, TrainingConfig};
    /// // One row of two documents, each ending with EOS (id 2), not packed
    /// // by document: the label after the first EOS is the second's start.
    /// let row = Record::new().with("input_ids", Value::Tokens(vec![10, 11, 2, 12, 2]));
    /// let batch = Batch { lane: 0, index: 0, items: vec![row], cut: None };
    /// let b = TrainingConfig::new(5).eos_mask_loss(2).collate(&batch)?;
    /// assert_eq!(b.labels, [11, 2, IGNORE_INDEX, 2, IGNORE_INDEX]);
    /// assert_eq!(b.num_valid_tokens(), 3);
    /// # Ok::<(), zephon_ops::Error>(())
    /// ```
    pub fn eos_mask_loss(mut self, eos_id: u32) -> Self {
        self.eos_mask_loss = Some(eos_id);
        self
    }

    /// Sets the pad id.
    pub fn pad_token_id(mut self, id: u32) -> Self {
        self.pad_token_id = id;
        self
    }

    /// Sets the id type.
    pub fn id_type(mut self, t: IdType) -> Self {
        self.id_type = t;
        self
    }

    /// Collates one batch of records carrying [`fields::INPUT_IDS`] and,
    /// optionally, [`fields::SEGMENT_IDS`] (a record without segment ids is
    /// one document) and [`fields::LOSS_MASK`] (one 0 or 1 per id, as
    /// [`tokenize_chat`](crate::TextPipelineExt::tokenize_chat) writes it:
    /// the label of position `t` is kept only where the mask of `t + 1` is
    /// 1). A `seq_len` [`validate`](Self::validate) refuses, or a mask of
    /// another length than its ids, is an error.
    pub fn collate(&self, batch: &Batch<Record>) -> Result<TrainingBatch> {
        self.validate()?;
        // Ids stored as u32 are read in place; views in another width are
        // widened here, the one copy before the batch's own arrays.
        fn widen(t: Tokens<'_>) -> Cow<'_, [u32]> {
            match t.as_u32_slice() {
                Some(s) => Cow::Borrowed(s),
                None => Cow::Owned(t.to_vec()),
            }
        }
        let rows = batch
            .items
            .iter()
            .map(|r| {
                let ids = r
                    .token_ids(fields::INPUT_IDS)
                    .map(widen)
                    .ok_or_else(|| Error::missing("to_training", fields::INPUT_IDS, "tokens", r))?;
                // A record without segment ids is one document.
                let segs = match r.token_ids(fields::SEGMENT_IDS) {
                    Some(s) => widen(s),
                    None => Cow::Owned(vec![1; ids.len()]),
                };
                Ok((ids, segs))
            })
            .collect::<Result<Vec<_>>>()?;
        let pairs: Vec<(&[u32], &[u32])> = rows.iter().map(|(i, s)| (&**i, &**s)).collect();
        let mut out = collate(
            &pairs,
            self.seq_len,
            self.pad_token_id,
            self.id_type,
            batch.lane,
            batch.index,
        )?;
        out.cut = batch.cut.clone();
        let l = self.seq_len;
        for (row, r) in batch.items.iter().enumerate() {
            let Some(mask) = r.token_ids(fields::LOSS_MASK) else {
                continue;
            };
            let n = pairs[row].0.len();
            if mask.len() != n {
                return Err(Error::BadRow {
                    lane: batch.lane,
                    index: batch.index,
                    row,
                    message: format!("{} loss mask values for {n} tokens", mask.len()),
                });
            }
            for t in 0..n.saturating_sub(1) {
                if mask.get(t + 1) == Some(0) {
                    out.labels[row * l + t] = IGNORE_INDEX;
                }
            }
        }
        if let Some(eos) = self.eos_mask_loss {
            let ids = &out.input_ids;
            for (t, label) in out.labels.iter_mut().enumerate() {
                if out.attention_mask[t] && ids.get(t) == Some(i64::from(eos)) {
                    *label = IGNORE_INDEX;
                }
            }
        }
        out.loss_mask = out.labels.iter().map(|&x| x != IGNORE_INDEX).collect();
        if self.position_mode == PositionMode::Sequence {
            for (t, p) in out.position_ids.iter_mut().enumerate() {
                *p = (t % l.max(1)) as i64;
            }
        }
        Ok(out)
    }
}

/// Collates each [`Batch`] of token rows into a [`TrainingBatch`].
///
/// Created by [`TextPipelineExt::to_training`](crate::TextPipelineExt::to_training).
///
/// ```
/// use zephon_core::{PipelineExt, Record, Runner, Value};
/// use zephon_ops::{TextPipelineExt, TrainingConfig};
/// let rows = (0..4u32).map(|i| Ok(Record::new().with("input_ids", Value::Tokens(vec![i; 3]))));
/// let out: Vec<_> = futures::stream::iter(rows).batch(2).to_training(TrainingConfig::new(4))
///     .into_blocking_iter(Runner::Inline).unwrap().map(Result::unwrap).collect();
/// assert_eq!(out.len(), 2);
/// assert_eq!(out[1].input_ids.as_u32().unwrap(), &[2, 2, 2, 0, 3, 3, 3, 0]);
/// assert_eq!(out[1].shape(), [2, 4]);
/// ```
#[pin_project::pin_project]
#[must_use = "streams do nothing unless polled"]
#[derive(Debug)]
pub struct ToTraining<S> {
    #[pin]
    inner: S,
    config: TrainingConfig,
    probe: Probe,
    /// It returned `None`: the end, for `FusedStream`.
    terminated: bool,
    // An out-of-range option, reported by the first poll (a chain method
    // cannot return it); then the stream ends.
    invalid: Option<Error>,
    failed: bool,
}

impl<S> ToTraining<S> {
    zephon_core::adapter_accessors!(inner);
}

impl<S> ToTraining<S> {
    /// Wraps `inner`. A `config` that [`TrainingConfig::validate`] refuses
    /// makes the first poll return that error, and the stream end.
    pub fn new(inner: S, config: TrainingConfig) -> Self {
        ToTraining {
            invalid: config.validate().err(),
            failed: false,
            inner,
            config,
            probe: Probe::default(),
            terminated: false,
        }
    }
}

impl<S> ToTraining<S>
where
    S: futures::Stream<Item = zephon_core::Result<Batch<Record>>>,
{
    // The operator's step; `poll_next` notes the end.
    fn poll_body(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<<Self as futures::Stream>::Item>> {
        let this = self.project();
        if let Some(e) = this.invalid.take() {
            *this.failed = true;
            return std::task::Poll::Ready(Some(Err(e.into())));
        }
        if *this.failed {
            return std::task::Poll::Ready(None);
        }
        this.probe.attach("to_training", 1, None);
        let out = this.inner.poll_next(cx).map(|o| {
            o.map(|r| {
                this.probe.input();
                let t = this.probe.sample();
                let b = r.and_then(|b| this.config.collate(&b).map_err(Into::into));
                this.probe.sampled(t);
                this.probe.output();
                b
            })
        });
        match &out {
            std::task::Poll::Pending => this.probe.input_pending(),
            std::task::Poll::Ready(None) => this.probe.finish(),
            _ => {}
        }
        out
    }
}

impl<S> futures::Stream for ToTraining<S>
where
    S: futures::Stream<Item = zephon_core::Result<Batch<Record>>>,
{
    type Item = zephon_core::Result<TrainingBatch>;

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let out = self.as_mut().poll_body(cx);
        if matches!(out, std::task::Poll::Ready(None)) {
            *self.project().terminated = true;
        }
        out
    }
}

// Ended once it returned `None`.
impl<S> futures::stream::FusedStream for ToTraining<S>
where
    S: futures::Stream<Item = zephon_core::Result<Batch<Record>>>,
{
    fn is_terminated(&self) -> bool {
        self.terminated
    }
}

impl<S: Explain> Explain for ToTraining<S> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        out.push(
            StageDescription::new(
                "to_training",
                1,
                None,
                zephon_core::settings::explain_detail(
                    self.invalid.as_ref(),
                    format!("rows of {}", self.config.seq_len),
                ),
            )
            .with_data(self.config),
        );
    }
}

// Collation of rows given directly, beside the operator's own: the batch
// type stays free of the operator.
impl TrainingBatch {
    /// Collates rows given as `(input_ids, segment_ids)` pairs, where segment
    /// 0 marks padding and any change of segment id starts a new document.
    /// Rows shorter than `seq_len` are padded with id 0; a row longer than
    /// `seq_len` is an error naming the row, and so is a batch of more than
    /// 2^31 - 1 positions (rows times `seq_len`), before anything is
    /// allocated.
    ///
    /// ```
    /// use zephon_ops::{IdType, TrainingBatch};
    /// let e = TrainingBatch::from_rows(&[(&[1, 2][..], &[1, 1][..])], 1 << 40, IdType::U32, 0, 0)
    ///     .unwrap_err();
    /// assert!(e.to_string().contains("to_training.seq_len"), "{e}");
    /// ```
    pub fn from_rows(
        rows: &[(&[u32], &[u32])],
        seq_len: usize,
        id_type: IdType,
        lane: LaneId,
        index: u64,
    ) -> crate::Result<Self> {
        collate(rows, seq_len, 0, id_type, lane, index)
    }
}
