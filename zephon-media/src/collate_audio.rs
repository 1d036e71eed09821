//! `collate_audio`: batches of audio samples to one contiguous N×C×T array
//! ([`AudioBatch`]), the lengths before padding, labels and the records'
//! other fields.

use crate::audio::AudioSample;
use crate::audio_batch::AudioBatch;
use crate::collate::read_label;
use crate::error::{MediaError, Result};
use futures::Stream;
use pin_project::pin_project;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use zephon_core::Batch;
use zephon_core::context::Probe;
use zephon_core::obs::{Explain, StageDescription};

/// How [`CollateAudio`] builds batches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AudioCollateConfig {
    frames: Option<usize>,
    label: Option<String>,
}

impl AudioCollateConfig {
    /// Batches padded to their longest sound, without labels.
    pub fn new() -> Self {
        Self::default()
    }

    /// Pads every batch to `frames` rather than to its longest sound (a
    /// fixed T for every batch); a longer sound is an error naming it:
    /// crop before batching.
    pub fn frames(mut self, frames: usize) -> Self {
        self.frames = Some(frames);
        self
    }

    /// Reads each record's label from `field`: an integer, or text or
    /// bytes holding one. The field is taken out of the records.
    pub fn label(mut self, field: impl Into<String>) -> Self {
        self.label = Some(field.into());
        self
    }

    /// Collates one batch; an error names the sample that does not fit
    /// (another rate or channel count, longer than a fixed `frames`, a
    /// missing or unreadable label).
    ///
    /// ```
    /// use zephon_core::{Batch, Record};
    /// use zephon_media::{Audio, AudioCollateConfig, AudioSample};
    /// let s = |n: usize, cls: i64| AudioSample::new(Audio::new(8000, 2, vec![1.0; 2 * n]).unwrap(), Record::new().with("cls", cls));
    /// let batch = Batch { lane: 0, index: 0, items: vec![s(3, 0), s(1, 7)], cut: None };
    /// let b = AudioCollateConfig::new().label("cls").collate(batch)?;
    /// assert_eq!(b.shape(), [2, 2, 3]);
    /// assert_eq!(b.samples, [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0]);
    /// assert_eq!((b.lengths, b.labels), (vec![3, 1], vec![0, 7]));
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn collate(&self, batch: Batch<AudioSample>) -> Result<AudioBatch> {
        let op = "collate_audio";
        let Batch {
            lane,
            index,
            items,
            cut,
        } = batch;
        let (rate, channels) = items
            .first()
            .map_or((0, 0), |s| (s.audio.sample_rate, s.audio.channels));
        let longest = items.iter().map(|s| s.audio.frames).max().unwrap_or(0);
        let t = self.frames.unwrap_or(longest);
        let n = items.len();
        let mut samples = Vec::with_capacity(n * channels as usize * t);
        let mut lengths = Vec::with_capacity(n);
        let mut labels = Vec::with_capacity(if self.label.is_some() { n } else { 0 });
        let mut records = Vec::with_capacity(n);
        for (row, s) in items.into_iter().enumerate() {
            let ptr = s.ptr();
            let a = &s.audio;
            if (a.sample_rate, a.channels) != (rate, channels) || a.frames > t {
                return Err(MediaError::Unsupported {
                    op,
                    ptr,
                    message: format!(
                        "row {row} of batch (lane {lane}, index {index}) is {} channels of {} frames at {} Hz, the batch {channels} channels of at most {t} frames at {rate} Hz: resample, remix or crop before batching",
                        a.channels, a.frames, a.sample_rate
                    ),
                }
                .into());
            }
            for c in 0..channels as usize {
                samples.extend_from_slice(a.channel(c));
                samples.resize(samples.len() + (t - a.frames), 0.0);
            }
            lengths.push(s.length.min(a.frames));
            let mut record = s.record;
            if let Some(field) = &self.label {
                labels.push(read_label(op, &mut record, field, ptr)?);
            }
            records.push(record);
        }
        Ok(AudioBatch {
            lane,
            index,
            batch_size: n,
            sample_rate: rate,
            channels,
            frames: t,
            samples,
            lengths,
            labels,
            records,
            cut,
        })
    }
}

/// Collates each [`Batch`] of [`AudioSample`]s into an [`AudioBatch`]: one
/// contiguous N×C×T array, lengths, labels, records; lane, index and
/// checkpoint cut carried over. Runs in the pipeline's task (a copy per
/// value).
///
/// Created by [`AudioPipelineExt::collate_audio`](crate::AudioPipelineExt::collate_audio).
///
/// ```
/// use zephon_core::{PipelineExt, Record, Runner};
/// use zephon_media::{Audio, AudioCollateConfig, AudioPipelineExt, AudioSample};
/// let samples = (0..5usize).map(|i| Ok(AudioSample::new(Audio::new(8000, 1, vec![0.5; i + 1]).unwrap(), Record::new())));
/// let batches: Vec<_> = futures::stream::iter(samples).batch(2)
///     .collate_audio(AudioCollateConfig::new())
///     .into_blocking_iter(Runner::Inline)?.collect::<Result<_, _>>()?;
/// assert_eq!(batches.iter().map(|b| b.shape()).collect::<Vec<_>>(), [[2, 1, 2], [2, 1, 4], [1, 1, 5]]);
/// assert_eq!(batches[1].lengths, [3, 4]);
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct CollateAudio<S> {
    #[pin]
    inner: S,
    config: AudioCollateConfig,
    probe: Probe,
}

impl<S> CollateAudio<S> {
    /// Wraps `inner` with `config`.
    pub fn new(inner: S, config: AudioCollateConfig) -> Self {
        CollateAudio {
            inner,
            config,
            probe: Probe::default(),
        }
    }

    /// The stream this adapter reads from.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The stream this adapter reads from, mutably. Taking items from it
    /// directly bypasses this adapter.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The stream this adapter reads from.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: fmt::Debug> fmt::Debug for CollateAudio<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CollateAudio")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<S> Stream for CollateAudio<S>
where
    S: Stream<Item = Result<Batch<AudioSample>>>,
{
    type Item = Result<AudioBatch>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.project();
        this.probe.attach("collate_audio", 1, None);
        match this.inner.poll_next(cx) {
            Poll::Ready(Some(r)) => {
                this.probe.input();
                let start = this.probe.sample();
                let out = r.and_then(|b| this.config.collate(b));
                this.probe.sampled(start);
                this.probe.output();
                Poll::Ready(Some(out))
            }
            Poll::Ready(None) => {
                this.probe.finish();
                Poll::Ready(None)
            }
            Poll::Pending => {
                this.probe.input_pending();
                Poll::Pending
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl<S: Explain> Explain for CollateAudio<S> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        out.push(
            StageDescription::new(
                "collate_audio",
                1,
                None,
                format!(
                    "N×C×T f32, padded to {}{}",
                    match self.config.frames {
                        Some(t) => format!("{t} frames"),
                        None => "the longest".into(),
                    },
                    match &self.config.label {
                        Some(l) => format!(", labels from `{l}`"),
                        None => String::new(),
                    }
                ),
            )
            .with_data(&self.config),
        );
    }
}
