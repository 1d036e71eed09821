//! `decode_audio`: an audio field of each record (bytes, or a path) to
//! planar `f32` samples, on worker threads, output order = input order.

use crate::audio::AudioSample;
use crate::audio_decode_config::AudioDecodeConfig;
use crate::error::Result;
use crate::map_images::MapImages;
use crate::stats::MediaStats;
use futures::Stream;
use pin_project::pin_project;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use zephon_core::Record;
use zephon_core::obs::{Explain, StageDescription};

/// Decodes an audio field of every record into an [`AudioSample`], with up
/// to `parallelism` micro-batches decoding at once on worker threads (in
/// place under the inline runner); the output order equals the input order
/// for every parallelism and runner. Steps added with
/// [`AudioDecodeConfig::then`] run in the same task. A sample that does not
/// decode, or breaks a limit, is an error naming it (operator, sample,
/// member key), or, under [`OnError::Skip`](crate::OnError::Skip), dropped and counted in
/// [`MediaStats::skipped`].
///
/// Created by [`AudioPipelineExt::decode_audio`](crate::AudioPipelineExt::decode_audio).
///
/// ```
/// use zephon_core::{PipelineExt, Record, Runner, Value};
/// use zephon_media::{AudioDecodeConfig, AudioPipelineExt, AudioSample, OnError};
/// // 4 frames of 8 kHz mono 16-bit PCM.
/// let mut wav = b"RIFF\x2c\0\0\0WAVEfmt \x10\0\0\0\x01\0\x01\0".to_vec();
/// wav.extend(8000u32.to_le_bytes());
/// wav.extend(16000u32.to_le_bytes());
/// wav.extend(b"\x02\0\x10\0data\x08\0\0\0\0\0\0\x40\0\xc0\xff\x7f");
/// let recs = vec![
///     Record::new().with("wav", Value::Bytes(wav.into())).with("cls", 3i64),
///     Record::new().with("wav", Value::Bytes(b"garbage".to_vec().into())),
/// ];
/// let decoded = futures::stream::iter(recs.into_iter().map(Ok))
///     .decode_audio(AudioDecodeConfig::new("wav").on_error(OnError::Skip), 2);
/// let stats = decoded.stats();
/// let out: Vec<AudioSample> = decoded.into_blocking_iter(Runner::threads())?.collect::<Result<_, _>>()?;
/// assert_eq!(out.len(), 1);
/// assert_eq!((out[0].audio.sample_rate, out[0].audio.channels, out[0].audio.frames), (8000, 1, 4));
/// assert_eq!(out[0].audio.samples, [0.0, 0.5, -0.5, 32767.0 / 32768.0]);
/// assert_eq!(stats.skipped.get(), 1);
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct DecodeAudio<S> {
    #[pin]
    inner: MapImages<S, Record, Option<AudioSample>>,
    stats: Arc<MediaStats>,
    field: String,
}

impl<S> DecodeAudio<S> {
    /// Wraps `inner` with `config` and `parallelism` (1 to 4096; otherwise,
    /// or for an invalid option of `config`, the first item is an error
    /// naming it).
    pub fn new(inner: S, config: AudioDecodeConfig, parallelism: usize) -> Self {
        let stats = Arc::new(MediaStats::default());
        let invalid = config.check().err();
        let field = config.field.clone();
        let l = &config.limits;
        let detail = format!(
            "`{}` -> f32 planar, max_samples {}, max_seconds {}, rates {}..={} Hz, max_channels {}, on_error {:?}{}",
            config.field,
            l.max_samples,
            l.max_seconds,
            l.sample_rates.start(),
            l.sample_rates.end(),
            l.max_channels,
            config.on_error,
            if config.then.is_empty() {
                String::new()
            } else {
                format!(", then {}", config.then.names().join(", "))
            }
        );
        let s = stats.clone();
        let map = MapImages::new(
            inner,
            "decode_audio",
            detail,
            move |r| config.decode_record(r, &s),
            parallelism,
        )
        .invalid(invalid);
        DecodeAudio {
            inner: map,
            stats,
            field,
        }
    }

    /// The statistics this operator counts into (decoded, frames, skipped).
    pub fn stats(&self) -> Arc<MediaStats> {
        self.stats.clone()
    }

    /// The stream this adapter reads from.
    pub fn get_ref(&self) -> &S {
        self.inner.get_ref()
    }

    /// The stream this adapter reads from, mutably. Taking items from it
    /// directly bypasses this adapter.
    pub fn get_mut(&mut self) -> &mut S {
        self.inner.get_mut()
    }

    /// The stream this adapter reads from; what the adapter holds
    /// (buffered or in-flight elements) is dropped.
    pub fn into_inner(self) -> S {
        self.inner.into_inner()
    }
}

impl<S: fmt::Debug> fmt::Debug for DecodeAudio<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecodeAudio")
            .field("inner", self.inner.get_ref())
            .field("field", &self.field)
            .field("parallelism", &self.inner.parallelism())
            .finish_non_exhaustive()
    }
}

impl<S> Stream for DecodeAudio<S>
where
    S: Stream<Item = Result<Record>>,
{
    type Item = Result<AudioSample>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        loop {
            match futures::ready!(this.inner.as_mut().poll_next(cx)) {
                Some(Ok(Some(s))) => return Poll::Ready(Some(Ok(s))),
                Some(Ok(None)) => continue,
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => return Poll::Ready(None),
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        // Skipped samples may make any of them vanish.
        (0, self.inner.size_hint().1)
    }
}

impl<S: Explain> Explain for DecodeAudio<S> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
    }
}
