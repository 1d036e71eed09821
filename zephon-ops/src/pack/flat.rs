//! `pack_flat`: packed rows padded to exactly `max_length`.

use crate::fields;
use futures::Stream;
use pin_project::pin_project;
use std::pin::Pin;
use std::task::{Context, Poll};
use zephon_core::context::Probe;
use zephon_core::obs::{Explain, StageDescription};
use zephon_core::settings::SEQ_LEN;
use zephon_core::{Record, Result, Value};

/// Pads every row to `max_length`: `input_ids` with `pad_token_id`,
/// `segment_ids`, `position_ids` and a `loss_mask` (if any) with 0, and adds an
/// [`fields::ATTENTION_MASK`] (1 for real tokens, 0 for padding). A row
/// without segment ids is one document. A row longer than `max_length`, or
/// whose `segment_ids` or `position_ids` are not token ids as many as its
/// `input_ids`, is an error naming its source.
///
/// One row in, one row out, nothing held: a lane cut passes through it.
///
/// Created by [`TextPipelineExt::pack_flat`](crate::TextPipelineExt::pack_flat).
///
/// ```
/// use zephon_core::{PipelineExt, Record, Runner, Value};
/// use zephon_ops::{PackAlgorithm, PackConfig, TextPipelineExt};
/// let docs = [3usize, 2].map(|n| Ok(Record::new().with("input_ids", Value::Tokens(vec![7; n]))));
/// let rows: Vec<Record> = futures::stream::iter(docs)
///     .pack_sequences(PackConfig::new(4, PackAlgorithm::FirstFit))
///     .pack_flat(4, 0)
///     .into_blocking_iter(Runner::Inline)?
///     .collect::<Result<_, _>>()?;
/// assert_eq!(rows[0].tokens("input_ids").unwrap(), &[7, 7, 7, 0]);
/// assert_eq!(rows[1].tokens("attention_mask").unwrap(), &[1, 1, 0, 0]);
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
#[derive(Debug)]
pub struct PackFlat<S> {
    #[pin]
    inner: S,
    max_length: usize,
    pad_token_id: u32,
    probe: Probe,
    /// It returned `None`: the end, for `FusedStream`.
    terminated: bool,
    // An out-of-range `max_length`, reported by the first poll (a chain
    // method cannot return it); then the stream ends.
    invalid: Option<crate::Error>,
    failed: bool,
}

impl<S> PackFlat<S> {
    zephon_core::adapter_accessors!(inner);
}

impl<S> PackFlat<S> {
    /// Wraps `inner`. `max_length` must lie in [`SEQ_LEN`] (1 to 16 Mi
    /// tokens): any other value makes the first poll return an error naming
    /// `pack_flat.max_length`, and the stream end.
    pub fn new(inner: S, max_length: usize, pad_token_id: u32) -> Self {
        PackFlat {
            invalid: crate::Error::in_range(SEQ_LEN, "pack_flat.max_length", max_length).err(),
            failed: false,
            inner,
            max_length,
            pad_token_id,
            probe: Probe::default(),
            terminated: false,
        }
    }
}

/// Pads one row in place; see [`PackFlat`]. `max_length` outside
/// [`SEQ_LEN`] is an error naming `pack_flat.max_length`.
pub fn pad_row(r: &mut Record, max_length: usize, pad_token_id: u32) -> crate::Result<()> {
    crate::Error::in_range(SEQ_LEN, "pack_flat.max_length", max_length)?;
    let ids = match r.token_ids(fields::INPUT_IDS) {
        Some(t) => t.len(),
        None => {
            return Err(crate::Error::missing(
                "pack_flat",
                fields::INPUT_IDS,
                "tokens",
                r,
            ));
        }
    };
    if ids > max_length {
        return Err(crate::Error::Oversized {
            ptr: crate::error::PtrDisplay(r.source().copied()),
            len: ids,
            max_length,
        });
    }
    // A field that is there is the row's own: one of another length or
    // kind is an error, not replaced (segment ids of one document would
    // let attention cross the row's documents).
    for name in [fields::SEGMENT_IDS, fields::POSITION_IDS] {
        match r.token_ids(name).map(|t| t.len()) {
            Some(len) if len != ids => {
                return Err(crate::Error::Misaligned {
                    op: "pack_flat",
                    field: name.to_owned(),
                    ptr: crate::error::PtrDisplay(r.source().copied()),
                    len,
                    ids,
                });
            }
            None if r.get(name).is_some() => {
                return Err(crate::Error::missing("pack_flat", name, "tokens", r));
            }
            _ => {}
        }
    }
    let pad = |r: &mut Record, name: &str, fill: u32, default: u32| {
        let mut v = match r.take(name).map(Value::into_token_vec) {
            Some(Ok(t)) if t.len() == ids => t,
            _ => vec![default; ids],
        };
        v.resize(max_length, fill);
        r.set(name, Value::Tokens(v));
    };
    pad(r, fields::INPUT_IDS, pad_token_id, 0);
    pad(r, fields::SEGMENT_IDS, 0, 1);
    if r.token_ids(fields::POSITION_IDS).is_none() {
        r.set(
            fields::POSITION_IDS,
            Value::Tokens((0..ids as u32).collect()),
        );
    }
    pad(r, fields::POSITION_IDS, 0, 0);
    // A loss mask of another length is left for `to_training` to refuse.
    if r.token_ids(fields::LOSS_MASK)
        .is_some_and(|m| m.len() == ids)
    {
        pad(r, fields::LOSS_MASK, 0, 0);
    }
    let mut mask = vec![1u32; ids];
    mask.resize(max_length, 0);
    r.set(fields::ATTENTION_MASK, Value::Tokens(mask));
    Ok(())
}

impl<S> PackFlat<S>
where
    S: Stream<Item = Result<Record>>,
{
    // The operator's step; `poll_next` notes the end.
    fn poll_body(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<<Self as futures::Stream>::Item>> {
        let this = self.project();
        if let Some(e) = this.invalid.take() {
            *this.failed = true;
            return Poll::Ready(Some(Err(e.into())));
        }
        if *this.failed {
            return Poll::Ready(None);
        }
        this.probe.attach("pack_flat", 1, None);
        let (max, pad) = (*this.max_length, *this.pad_token_id);
        let out = this.inner.poll_next(cx).map(|o| {
            o.map(|r| {
                this.probe.input();
                let t = this.probe.sample();
                let r = r.and_then(|mut r| {
                    pad_row(&mut r, max, pad)?;
                    Ok(r)
                });
                this.probe.sampled(t);
                this.probe.output();
                r
            })
        });
        match &out {
            Poll::Pending => this.probe.input_pending(),
            Poll::Ready(None) => this.probe.finish(),
            _ => {}
        }
        out
    }
}

impl<S> Stream for PackFlat<S>
where
    S: Stream<Item = Result<Record>>,
{
    type Item = Result<Record>;

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
impl<S> futures::stream::FusedStream for PackFlat<S>
where
    S: Stream<Item = Result<Record>>,
{
    fn is_terminated(&self) -> bool {
        self.terminated
    }
}

impl<S: Explain> Explain for PackFlat<S> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        out.push(
            StageDescription::new(
                "pack_flat",
                1,
                None,
                zephon_core::settings::explain_detail(
                    self.invalid.as_ref(),
                    format!(
                        "rows padded to {} with {}",
                        self.max_length, self.pad_token_id
                    ),
                ),
            )
            .with_data((self.max_length, self.pad_token_id)),
        );
    }
}
