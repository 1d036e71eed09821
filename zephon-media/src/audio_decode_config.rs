//! [`AudioDecodeConfig`]: how `decode_audio` decodes, its limits, and the
//! decoding of one record.

use crate::audio::{AudioCompose, AudioOp, AudioSample};
use crate::audio_codec::{AudioFailure, AudioLimits};
use crate::decode::OnError;
use crate::error::{KeyDisplay, MediaError, PtrDisplay, Result};
use crate::stats::MediaStats;
use zephon_core::{Record, Value};

/// How [`DecodeAudio`](crate::DecodeAudio) decodes.
///
/// WAV (PCM 8 to 32-bit, float), FLAC, MP3 and Ogg Vorbis, through
/// `symphonia`, are recognised by their bytes, not by the member's name.
/// The output is [`Audio`](crate::Audio): `f32` samples in `[-1, 1]`,
/// planar (one plane per channel), at the stream's own rate and channel
/// count; MP3 encoder delay and padding are trimmed where the file records
/// them. Before any sample buffer is allocated, the header's sample rate,
/// channel count and declared length are checked against the
/// [`AudioLimits`]; a stream whose header does not declare its length is
/// checked packet by packet, so memory stays within the limit either way.
/// A truncated stream, an undecodable packet, or a stream that changes
/// rate or channels midway is an error (or a skip under [`OnError::Skip`]).
/// A chained Ogg file (several streams one after another) decodes to its
/// first stream.
///
/// ```
/// use zephon_media::{AudioDecodeConfig, AudioFailure, OnError};
/// let c = AudioDecodeConfig::new("wav").max_seconds(30.0).on_error(OnError::Skip);
/// assert!(matches!(c.decode(b"not audio"), Err(AudioFailure::Corrupt(_))));
/// ```
#[derive(Clone, Debug)]
pub struct AudioDecodeConfig {
    pub(crate) field: String,
    pub(crate) limits: AudioLimits,
    pub(crate) on_error: OnError,
    pub(crate) then: AudioCompose,
}

impl AudioDecodeConfig {
    /// Decodes the field `field`: [`Value::Bytes`] holds the encoded audio,
    /// a text value is the path of a local file holding it.
    pub fn new(field: impl Into<String>) -> Self {
        AudioDecodeConfig {
            field: field.into(),
            limits: AudioLimits::default(),
            on_error: OnError::Fail,
            then: AudioCompose::new(),
        }
    }

    /// The most samples, all channels together, one stream may decode to
    /// (default [`DEFAULT_MAX_SAMPLES`](crate::DEFAULT_MAX_SAMPLES); 1 or more).
    pub fn max_samples(mut self, n: u64) -> Self {
        self.limits.max_samples = n;
        self
    }

    /// The longest stream in seconds (default
    /// [`DEFAULT_MAX_SECONDS`](crate::DEFAULT_MAX_SECONDS); above 0).
    pub fn max_seconds(mut self, s: f64) -> Self {
        self.limits.max_seconds = s;
        self
    }

    /// The sample rates accepted, in Hz (default
    /// [`DEFAULT_SAMPLE_RATES`](crate::DEFAULT_SAMPLE_RATES)).
    pub fn sample_rates(mut self, r: std::ops::RangeInclusive<u32>) -> Self {
        self.limits.sample_rates = r;
        self
    }

    /// The most channels (default
    /// [`DEFAULT_MAX_CHANNELS`](crate::DEFAULT_MAX_CHANNELS); 1 or more).
    pub fn max_channels(mut self, n: u16) -> Self {
        self.limits.max_channels = n;
        self
    }

    /// What to do with bytes that do not decode or break a limit (default
    /// [`OnError::Fail`]). A missing field is an error under either policy.
    pub fn on_error(mut self, p: OnError) -> Self {
        self.on_error = p;
        self
    }

    /// Steps run on each sound right after it is decoded, in the same task
    /// (resample, mix and crop then cost no further hand-off).
    pub fn then(mut self, op: impl AudioOp) -> Self {
        self.then = self.then.then(op);
        self
    }

    /// The decoded field.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// The limits in force.
    pub fn limits(&self) -> &AudioLimits {
        &self.limits
    }

    /// Decodes `bytes`: the entry point every sample goes through, safe on
    /// hostile input (an error, never a panic or an allocation beyond the
    /// limits).
    ///
    /// ```
    /// use zephon_media::{AudioDecodeConfig, AudioFailure};
    /// // A WAV header declaring 1 GiB of 8 kHz mono 16-bit samples, and nothing else.
    /// let mut wav = b"RIFF\xff\xff\xff\x7fWAVEfmt \x10\0\0\0\x01\0\x01\0".to_vec();
    /// wav.extend(8000u32.to_le_bytes());
    /// wav.extend(16000u32.to_le_bytes());
    /// wav.extend(b"\x02\0\x10\0data\0\0\0\x40");
    /// let e = AudioDecodeConfig::new("wav").decode(&wav).unwrap_err();
    /// assert!(matches!(e, AudioFailure::Limit(_)), "{e}");
    /// ```
    pub fn decode(&self, bytes: &[u8]) -> std::result::Result<crate::Audio, AudioFailure> {
        // A decoder's own bug on crafted bytes is this sample's error.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::audio_codec::decode(bytes, &self.limits)
        })) {
            Ok(r) => r,
            Err(p) => Err(AudioFailure::Corrupt(format!(
                "the decoder failed on these bytes ({})",
                zephon_core::error::panic_message(&*p)
            ))),
        }
    }

    pub(crate) fn check(&self) -> Result<()> {
        let l = &self.limits;
        crate::error::check(
            l.max_samples >= 1,
            "decode_audio.max_samples",
            "0 is out of range 1..",
        )?;
        crate::error::check(
            l.max_seconds > 0.0,
            "decode_audio.max_seconds",
            format!("{} is not above 0", l.max_seconds),
        )?;
        crate::error::check(
            l.max_channels >= 1,
            "decode_audio.max_channels",
            "0 is out of range 1..",
        )?;
        crate::error::check(
            !l.sample_rates.is_empty() && *l.sample_rates.start() >= 1,
            "decode_audio.sample_rates",
            format!("{:?} is empty or includes 0", l.sample_rates),
        )
    }

    /// One record to its sample: `Ok(None)` for a skipped one.
    pub(crate) fn decode_record(
        &self,
        mut record: Record,
        stats: &MediaStats,
    ) -> Result<Option<AudioSample>> {
        let op = "decode_audio";
        let ptr = PtrDisplay(record.source().copied());
        let decoded = match record.get(&self.field) {
            Some(Value::Bytes(b)) => self.decode(b).map_err(|e| (e, b.len())),
            Some(v) if v.as_text().is_some() => {
                let path = v.as_text().unwrap_or_default();
                match read_bounded(path, self.limits.max_samples) {
                    Ok(b) => self.decode(&b).map_err(|e| (e, b.len())),
                    Err(e) => Err((AudioFailure::Corrupt(format!("reading `{path}`: {e}")), 0)),
                }
            }
            other => {
                return Err(MediaError::MissingField {
                    op,
                    field: self.field.clone(),
                    expected: "bytes or path",
                    found: other
                        .map(|v| format!(" (found {})", v.kind()))
                        .unwrap_or_default(),
                    ptr,
                    key: KeyDisplay::of(&record),
                }
                .into());
            }
        };
        let audio = match decoded {
            Ok(a) => a,
            Err((e, len)) => {
                if self.on_error == OnError::Skip {
                    stats.skipped.inc();
                    return Ok(None);
                }
                let key = KeyDisplay::of(&record);
                return Err(match e {
                    AudioFailure::Limit(message) => MediaError::Limit {
                        op,
                        ptr,
                        key,
                        message,
                    },
                    AudioFailure::Corrupt(m) => MediaError::Decode {
                        op,
                        ptr,
                        key,
                        message: format!("{m} ({len} bytes)"),
                    },
                }
                .into());
            }
        };
        stats.decoded.inc();
        stats.frames.add(audio.frames as u64);
        record.take(&self.field);
        let sample = AudioSample::new(audio, record);
        if self.then.is_empty() {
            Ok(Some(sample))
        } else {
            self.then.apply(sample).map(Some)
        }
    }
}

/// The bytes of a local file, refused when larger than any stream within
/// `max_samples` could reasonably be (uncompressed 32-bit, plus 1 MiB).
fn read_bounded(path: &str, max_samples: u64) -> std::io::Result<Vec<u8>> {
    let limit = max_samples.saturating_mul(4).saturating_add(1 << 20);
    let len = std::fs::metadata(path)?.len();
    if len > limit {
        return Err(std::io::Error::other(format!(
            "{len} bytes, more than any stream of max_samples could need ({limit})"
        )));
    }
    std::fs::read(path)
}
