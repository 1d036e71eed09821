//! Encoded audio to [`Audio`] through `symphonia`, with every limit checked
//! from the header before the sample buffers are allocated.

use crate::audio::Audio;
use std::io::Cursor;
use std::ops::RangeInclusive;
use symphonia::core::codecs::audio::AudioDecoderOptions;
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::probe::Hint;
use symphonia::core::formats::{FormatOptions, TrackType};
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;

/// The default [`AudioLimits::max_samples`]: 64 Mi samples (all channels
/// together), 256 MiB as `f32`: over ten minutes of 48 kHz stereo, small
/// enough that a header claiming more is refused before its buffer exists.
pub const DEFAULT_MAX_SAMPLES: u64 = 64 << 20;

/// The default [`AudioLimits::max_seconds`]: one hour.
pub const DEFAULT_MAX_SECONDS: f64 = 3600.0;

/// The default [`AudioLimits::sample_rates`]: 1 kHz to 384 kHz.
pub const DEFAULT_SAMPLE_RATES: RangeInclusive<u32> = 1_000..=384_000;

/// The default [`AudioLimits::max_channels`]: 8 (7.1 surround).
pub const DEFAULT_MAX_CHANNELS: u16 = 8;

/// The most frames a decoder may declare for one packet: above any real
/// codec's block (FLAC's largest is 65,535), so a crafted header cannot size
/// the decoder's own buffer.
const MAX_PACKET_FRAMES: u64 = 1 << 20;

/// Why bytes did not decode as audio: what
/// [`AudioDecodeConfig::decode`](crate::AudioDecodeConfig::decode) returns.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AudioFailure {
    /// Truncated, corrupt, or not audio of a supported format.
    #[error("{0}")]
    Corrupt(String),
    /// The stream is beyond a limit (duration, sample count, sample rate,
    /// channel count); when the header declares it, refused before any
    /// sample buffer is allocated.
    #[error("{0}")]
    Limit(String),
}

/// What a decoded stream may be: anything else is an [`AudioFailure::Limit`].
#[derive(Clone, Debug, PartialEq)]
pub struct AudioLimits {
    /// The most samples (frames × channels) of one stream.
    pub max_samples: u64,
    /// The longest stream, in seconds.
    pub max_seconds: f64,
    /// The sample rates accepted, in Hz.
    pub sample_rates: RangeInclusive<u32>,
    /// The most channels.
    pub max_channels: u16,
}

impl Default for AudioLimits {
    fn default() -> Self {
        AudioLimits {
            max_samples: DEFAULT_MAX_SAMPLES,
            max_seconds: DEFAULT_MAX_SECONDS,
            sample_rates: DEFAULT_SAMPLE_RATES,
            max_channels: DEFAULT_MAX_CHANNELS,
        }
    }
}

impl AudioLimits {
    /// The most frames a stream of `rate` Hz and `channels` channels may have.
    fn max_frames(&self, rate: u32, channels: usize) -> u64 {
        let by_samples = self.max_samples / channels.max(1) as u64;
        let by_seconds = (self.max_seconds * rate as f64).floor();
        by_samples.min(if by_seconds >= u64::MAX as f64 {
            u64::MAX
        } else {
            by_seconds as u64
        })
    }

    fn too_long(&self, frames: u64, rate: u32, channels: usize, declared: bool) -> AudioFailure {
        AudioFailure::Limit(format!(
            "{} {frames} frames of {channels} channels at {rate} Hz, more than max_samples {} or max_seconds {}",
            if declared { "declares" } else { "holds over" },
            self.max_samples,
            self.max_seconds
        ))
    }
}

/// The first bytes, for messages about what the bytes are not.
fn head(bytes: &[u8]) -> String {
    let h: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("{} bytes starting {}", bytes.len(), h.join(" "))
}

/// Decodes `bytes` (WAV, FLAC, MP3, Ogg Vorbis, recognised by content) to
/// planar `f32` within `limits`.
pub(crate) fn decode(bytes: &[u8], limits: &AudioLimits) -> Result<Audio, AudioFailure> {
    let corrupt =
        |what: &str, e: &dyn std::fmt::Display| AudioFailure::Corrupt(format!("{what}: {e}"));
    let mss = MediaSourceStream::new(Box::new(Cursor::new(bytes)), Default::default());
    let mut format = symphonia::default::get_probe()
        .probe(
            &Hint::new(),
            mss,
            FormatOptions::default(),
            MetadataOptions::default(),
        )
        .map_err(|e| {
            AudioFailure::Corrupt(format!(
                "not a readable WAV, FLAC, MP3 or Ogg Vorbis stream ({}): {e}",
                head(bytes)
            ))
        })?;
    let track = format
        .default_track(TrackType::Audio)
        .ok_or_else(|| AudioFailure::Corrupt("no audio track".into()))?;
    let (track_id, declared) = (track.id, track.num_frames);
    let params = track
        .codec_params
        .as_ref()
        .and_then(|p| p.audio())
        .ok_or_else(|| AudioFailure::Corrupt("no audio codec parameters".into()))?
        .clone();
    let rate = params
        .sample_rate
        .ok_or_else(|| AudioFailure::Corrupt("no sample rate in the header".into()))?;
    if !limits.sample_rates.contains(&rate) {
        return Err(AudioFailure::Limit(format!(
            "sample rate {rate} Hz is outside {}..={} Hz",
            limits.sample_rates.start(),
            limits.sample_rates.end()
        )));
    }
    let channels = params.channels.as_ref().map_or(0, |c| c.count());
    if channels == 0 || channels > limits.max_channels as usize {
        return Err(AudioFailure::Limit(format!(
            "{channels} channels, outside 1..={}",
            limits.max_channels
        )));
    }
    let max_frames = limits.max_frames(rate, channels);
    if let Some(n) = declared.filter(|&n| n > max_frames) {
        return Err(limits.too_long(n, rate, channels, true));
    }
    if let Some(n) = params
        .max_frames_per_packet
        .filter(|&n| n > MAX_PACKET_FRAMES)
    {
        return Err(AudioFailure::Limit(format!(
            "declares packets of {n} frames, more than {MAX_PACKET_FRAMES}"
        )));
    }
    let mut decoder = symphonia::default::get_codecs()
        .make_audio_decoder(&params, &AudioDecoderOptions::default())
        .map_err(|e| corrupt("no decoder for this stream", &e))?;
    // A declared length is a hint, not a promise: what is reserved is also
    // bounded by what the bytes could hold, and growth past it is checked
    // against the limit at every packet.
    let reserve = declared
        .unwrap_or(0)
        .min(max_frames)
        .min(bytes.len() as u64) as usize;
    let mut planes: Vec<Vec<f32>> = (0..channels).map(|_| Vec::with_capacity(reserve)).collect();
    let mut scratch: Vec<Vec<f32>> = Vec::new();
    let mut frames = 0u64;
    loop {
        let packet = match format.next_packet() {
            Ok(Some(p)) => p,
            Ok(None) | Err(SymError::ResetRequired) => break,
            Err(e) => {
                return Err(corrupt(
                    &format!("truncated or corrupt after {frames} frames"),
                    &e,
                ));
            }
        };
        if packet.track_id != track_id {
            continue;
        }
        let buf = decoder
            .decode(&packet)
            .map_err(|e| corrupt(&format!("undecodable packet after {frames} frames"), &e))?;
        let spec = buf.spec();
        if spec.rate() != rate || spec.channels().count() != channels {
            return Err(AudioFailure::Corrupt(format!(
                "the stream changes from {channels} channels at {rate} Hz to {} at {} Hz after {frames} frames",
                spec.channels().count(),
                spec.rate()
            )));
        }
        let n = buf.frames() as u64;
        if frames + n > max_frames {
            return Err(limits.too_long(max_frames, rate, channels, false));
        }
        buf.copy_to_vecs_planar(&mut scratch);
        for (plane, s) in planes.iter_mut().zip(&scratch) {
            plane.extend_from_slice(s);
        }
        frames += n;
    }
    if frames == 0 {
        return Err(AudioFailure::Corrupt(format!(
            "no audio frames ({})",
            head(bytes)
        )));
    }
    // Readers stop quietly where the bytes end; a stream that ends before
    // the length its header declares was cut off.
    if let Some(n) = declared.filter(|&n| frames < n) {
        return Err(AudioFailure::Corrupt(format!(
            "truncated: the header declares {n} frames, the stream holds {frames}"
        )));
    }
    let mut samples = Vec::with_capacity(frames as usize * channels);
    // Each plane is freed once copied.
    for p in planes {
        samples.extend_from_slice(&p);
    }
    Ok(Audio {
        sample_rate: rate,
        channels: channels as u16,
        frames: frames as usize,
        samples,
    })
}
