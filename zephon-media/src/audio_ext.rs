//! [`AudioPipelineExt`]: the chain methods of the audio operators.

use crate::audio::{AudioOp, AudioSample};
use crate::audio_batch::AudioBatch;
use crate::audio_decode_config::AudioDecodeConfig;
use crate::collate_audio::{AudioCollateConfig, CollateAudio};
use crate::crop_audio::CropAudio;
use crate::decode_audio::DecodeAudio;
use crate::error::Result;
use crate::log_mel::{LogMel, Plan};
use crate::map_images::MapImages;
use crate::mel_batch::MelBatch;
use crate::remix::Remix;
use crate::resample::Resample;
use futures::Stream;
use zephon_core::{Batch, Record};

/// Chain methods for audio pipelines, on any `Stream<Item = Result<..>>`:
/// records to [`AudioSample`]s with [`decode_audio`](Self::decode_audio),
/// audio steps on worker threads, batches to [`AudioBatch`]es with
/// [`collate_audio`](Self::collate_audio), and those to log-mel
/// spectrograms with [`log_mel`](Self::log_mel). Every step's output order
/// equals its input order, and every random choice is seeded by the
/// sample's identity, so parallelism never changes the batches.
///
/// ```
/// use zephon_core::{PipelineExt, Record, Runner, Value};
/// use zephon_media::{AudioCollateConfig, AudioDecodeConfig, AudioPipelineExt, CropAudio, LogMel, Remix, Resample};
/// // 0.1 s of 22.05 kHz stereo 16-bit PCM silence.
/// let mut wav = b"RIFF".to_vec();
/// wav.extend((36 + 2205u32 * 4).to_le_bytes());
/// wav.extend(b"WAVEfmt \x10\0\0\0\x01\0\x02\0");
/// wav.extend(22_050u32.to_le_bytes());
/// wav.extend((22_050u32 * 4).to_le_bytes());
/// wav.extend(b"\x04\0\x10\0data");
/// wav.extend((2205u32 * 4).to_le_bytes());
/// wav.resize(wav.len() + 2205 * 4, 0);
/// let recs = (0..6i64).map(move |i| Ok(Record::new().with("wav", Value::Bytes(wav.clone().into())).with("cls", i)));
/// let batches: Vec<_> = futures::stream::iter(recs)
///     .decode_audio(AudioDecodeConfig::new("wav"), 2)
///     .resample(Resample::new(16_000), 2)
///     .remix(Remix::mono(), 1)
///     .crop_audio(CropAudio::random(1200, 7), 1)
///     .batch(4)
///     .collate_audio(AudioCollateConfig::new().label("cls"))
///     .log_mel(LogMel::new(16_000, 400, 160, 64), 2)
///     .into_blocking_iter(Runner::threads())?
///     .collect::<Result<_, _>>()?;
/// assert_eq!(batches[0].shape(), [4, 1, 64, 8]);
/// assert_eq!(batches[1].labels, [4, 5]);
/// # Ok::<(), zephon_core::Error>(())
/// ```
pub trait AudioPipelineExt: Stream + Sized {
    /// Decodes an audio field of each record, up to `parallelism`
    /// micro-batches at once (1 to 4096; otherwise the first item is an
    /// error naming it). See [`DecodeAudio`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner, Value};
    /// use zephon_media::{AudioDecodeConfig, AudioPipelineExt, AudioSample};
    /// // 8 kHz mono 16-bit PCM: 0, half scale, minus half scale.
    /// # let mut wav = b"RIFF".to_vec();
    /// # wav.extend((36 + 6u32).to_le_bytes());
    /// # wav.extend(b"WAVEfmt \x10\0\0\0\x01\0\x01\0");
    /// # wav.extend(8000u32.to_le_bytes());
    /// # wav.extend(16_000u32.to_le_bytes());
    /// # wav.extend(b"\x02\0\x10\0data");
    /// # wav.extend(6u32.to_le_bytes());
    /// # wav.extend([0i16, 16_384, -16_384].iter().flat_map(|v| v.to_le_bytes()));
    /// let rec = Record::new().with("wav", Value::Bytes(wav.into())).with("cls", 3i64);
    /// let out: Vec<AudioSample> = futures::stream::iter([Ok(rec)])
    ///     .decode_audio(AudioDecodeConfig::new("wav"), 1)
    ///     .into_blocking_iter(Runner::Inline)?.collect::<Result<_, _>>()?;
    /// let a = &out[0].audio;
    /// assert_eq!((a.sample_rate, a.channels, a.frames, out[0].length), (8000, 1, 3, 3));
    /// assert_eq!(a.samples, [0.0, 0.5, -0.5]);
    /// // The bytes are taken out of the record; the label stays.
    /// assert!(out[0].record.get("wav").is_none());
    /// assert_eq!(out[0].record.get("cls").and_then(Value::as_int), Some(3));
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn decode_audio(self, config: AudioDecodeConfig, parallelism: usize) -> DecodeAudio<Self>
    where
        Self: Stream<Item = Result<Record>>,
    {
        DecodeAudio::new(self, config, parallelism)
    }

    /// Applies any [`AudioOp`] (or an [`AudioCompose`](crate::AudioCompose)
    /// of them) with up to `parallelism` micro-batches at once, output in
    /// input order. See [`MapImages`], whose machinery it shares.
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner};
    /// use zephon_media::{Audio, AudioPipelineExt, AudioSample, CropAudio};
    /// let samples = (0..4).map(|i| Ok(AudioSample::new(Audio::new(8000, 1, vec![i as f32; 10]).unwrap(), Record::new())));
    /// let out: Vec<AudioSample> = futures::stream::iter(samples)
    ///     .map_audio(CropAudio::center(4), 2)
    ///     .into_blocking_iter(Runner::threads())?.collect::<Result<_, _>>()?;
    /// assert_eq!(out.iter().map(|s| s.audio.samples[0]).collect::<Vec<_>>(), [0.0, 1.0, 2.0, 3.0]);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn map_audio<O: AudioOp>(
        self,
        op: O,
        parallelism: usize,
    ) -> MapImages<Self, AudioSample, AudioSample>
    where
        Self: Stream<Item = Result<AudioSample>>,
    {
        let name = op.name();
        let detail = format!("{op:?}");
        MapImages::new(self, name, detail, move |s| op.apply(s), parallelism)
    }

    /// Resamples every sound to one rate. See [`Resample`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner};
    /// use zephon_media::{Audio, AudioPipelineExt, AudioSample, Resample};
    /// let s = AudioSample::new(Audio::new(48_000, 1, vec![0.0; 4800])?, Record::new());
    /// let out: Vec<AudioSample> = futures::stream::iter([Ok(s)])
    ///     .resample(Resample::new(16_000), 1)
    ///     .into_blocking_iter(Runner::Inline)?.collect::<Result<_, _>>()?;
    /// assert_eq!((out[0].audio.sample_rate, out[0].audio.frames), (16_000, 1600));
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn resample(self, op: Resample, parallelism: usize) -> MapImages<Self, AudioSample, AudioSample>
    where
        Self: Stream<Item = Result<AudioSample>>,
    {
        let invalid = op.check().err();
        self.map_audio(op, parallelism).invalid(invalid)
    }

    /// Gives every sound one or two channels. See [`Remix`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner};
    /// use zephon_media::{Audio, AudioPipelineExt, AudioSample, Remix};
    /// let s = AudioSample::new(Audio::new(8000, 2, vec![1.0, 1.0, 0.0, 0.0])?, Record::new());
    /// let out: Vec<AudioSample> = futures::stream::iter([Ok(s)])
    ///     .remix(Remix::mono(), 1)
    ///     .into_blocking_iter(Runner::Inline)?.collect::<Result<_, _>>()?;
    /// assert_eq!(out[0].audio.samples, [0.5, 0.5]);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn remix(self, op: Remix, parallelism: usize) -> MapImages<Self, AudioSample, AudioSample>
    where
        Self: Stream<Item = Result<AudioSample>>,
    {
        self.map_audio(op, parallelism)
    }

    /// Crops or pads every sound to a fixed number of frames, at a random
    /// offset seeded by the sample's identity, at the centre or at the
    /// start. See [`CropAudio`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner};
    /// use zephon_media::{Audio, AudioPipelineExt, AudioSample, CropAudio};
    /// let s = AudioSample::new(Audio::new(8000, 1, vec![1.0; 3])?, Record::new());
    /// let out: Vec<AudioSample> = futures::stream::iter([Ok(s)])
    ///     .crop_audio(CropAudio::random(5, 1), 1)
    ///     .into_blocking_iter(Runner::Inline)?.collect::<Result<_, _>>()?;
    /// assert_eq!((out[0].audio.samples.as_slice(), out[0].length), (&[1.0, 1.0, 1.0, 0.0, 0.0][..], 3));
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn crop_audio(
        self,
        op: CropAudio,
        parallelism: usize,
    ) -> MapImages<Self, AudioSample, AudioSample>
    where
        Self: Stream<Item = Result<AudioSample>>,
    {
        let invalid = op.check().err();
        self.map_audio(op, parallelism).invalid(invalid)
    }

    /// Batches of audio samples to [`AudioBatch`]es. See [`CollateAudio`].
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner};
    /// use zephon_media::{Audio, AudioBatch, AudioCollateConfig, AudioPipelineExt, AudioSample};
    /// let samples = (1..=3usize).map(|n| Ok(AudioSample::new(Audio::new(8000, 1, vec![1.0; n])?, Record::new().with("cls", n as i64))));
    /// let batches: Vec<AudioBatch> = futures::stream::iter(samples)
    ///     .batch(2)
    ///     .collate_audio(AudioCollateConfig::new().frames(4).label("cls"))
    ///     .into_blocking_iter(Runner::Inline)?.collect::<Result<_, _>>()?;
    /// assert_eq!((batches[0].shape(), batches[1].shape()), ([2, 1, 4], [1, 1, 4]));
    /// assert_eq!(batches[0].samples, [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]);
    /// assert_eq!((batches[0].lengths.as_slice(), batches[1].labels.as_slice()), (&[1, 2][..], &[3][..]));
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn collate_audio(self, config: AudioCollateConfig) -> CollateAudio<Self>
    where
        Self: Stream<Item = Result<Batch<AudioSample>>>,
    {
        CollateAudio::new(self, config)
    }

    /// Audio batches to log-mel spectrogram batches, up to `parallelism`
    /// batches at once on worker threads, output in input order; the FFT
    /// plan and the filters are made once. See [`LogMel`] for the formula.
    ///
    /// ```
    /// use zephon_core::{PipelineExt, Record, Runner};
    /// use zephon_media::{Audio, AudioCollateConfig, AudioPipelineExt, AudioSample, LogMel};
    /// let s = AudioSample::new(Audio::new(16_000, 1, vec![0.0; 1600])?, Record::new());
    /// let out: Vec<_> = futures::stream::iter([Ok(s)]).batch(1)
    ///     .collate_audio(AudioCollateConfig::new())
    ///     .log_mel(LogMel::new(16_000, 400, 160, 80).floor(1e-5), 1)
    ///     .into_blocking_iter(Runner::Inline)?.collect::<Result<_, _>>()?;
    /// assert_eq!(out[0].shape(), [1, 1, 80, 11]);
    /// assert!(out[0].values.iter().all(|&v| v == 1e-5f32.ln()));
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    fn log_mel(self, op: LogMel, parallelism: usize) -> MapImages<Self, AudioBatch, MelBatch>
    where
        Self: Stream<Item = Result<AudioBatch>>,
    {
        let invalid = op.check().err();
        let plan = invalid.is_none().then(|| Plan::new(op));
        let detail = format!("{op:?}");
        MapImages::new(
            self,
            "log_mel",
            detail,
            move |b| match &plan {
                Some(p) => p.batch(b),
                None => op.batch(b),
            },
            parallelism,
        )
        .micro_batch(1)
        .invalid(invalid)
    }
}

impl<S: Stream> AudioPipelineExt for S {}
