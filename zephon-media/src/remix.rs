//! `remix`: sounds to mono or stereo.

use crate::audio::{AudioOp, AudioSample};
use crate::error::{MediaError, Result};

/// Gives every sound one channel or two, so that a batch's sounds share a
/// shape:
///
/// - [`Remix::mono`]: the mean of all channels (a stereo pair `(l, r)`
///   becomes `(l + r) / 2`, which keeps a centred source at its level);
/// - [`Remix::stereo`]: a mono sound duplicated into both channels, a
///   stereo one left as it is; a sound of more than two channels is an
///   error naming the sample (channel layouts beyond stereo have no single
///   down-mix: remix to mono, or pick channels in a [`map_audio`](crate::AudioPipelineExt::map_audio) step).
///
/// ```
/// use zephon_media::{Audio, AudioOp, AudioSample, Remix};
/// let stereo = AudioSample::new(Audio::new(8, 2, vec![1.0, 0.5, 0.0, 0.5])?, Default::default());
/// assert_eq!(Remix::mono().apply(stereo)?.audio.samples, [0.5, 0.5]);
/// let mono = AudioSample::new(Audio::new(8, 1, vec![0.25, -0.25])?, Default::default());
/// assert_eq!(Remix::stereo().apply(mono)?.audio.samples, [0.25, -0.25, 0.25, -0.25]);
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remix {
    channels: u16,
}

impl Remix {
    /// One channel, the mean of all.
    pub fn mono() -> Self {
        Remix { channels: 1 }
    }

    /// Two channels: mono duplicated, stereo kept.
    pub fn stereo() -> Self {
        Remix { channels: 2 }
    }

    /// The channel count this remix gives.
    pub fn channels(&self) -> u16 {
        self.channels
    }
}

impl AudioOp for Remix {
    fn name(&self) -> &'static str {
        "remix"
    }

    fn apply(&self, mut s: AudioSample) -> Result<AudioSample> {
        let a = &mut s.audio;
        let (c, n) = (a.channels as usize, a.frames);
        if c == self.channels as usize {
            return Ok(s);
        }
        match self.channels {
            1 => {
                let scale = 1.0 / c as f32;
                let mut mono = a.channel(0).to_vec();
                for k in 1..c {
                    for (m, x) in mono.iter_mut().zip(&a.samples[k * n..(k + 1) * n]) {
                        *m += x;
                    }
                }
                mono.iter_mut().for_each(|m| *m *= scale);
                a.samples = mono;
            }
            _ if c == 1 => a.samples.extend_from_within(..),
            _ => {
                return Err(MediaError::Unsupported {
                    op: "remix",
                    ptr: s.ptr(),
                    message: format!(
                        "{c} channels have no single stereo down-mix: remix to mono, or pick two channels first"
                    ),
                }
                .into());
            }
        }
        a.channels = self.channels;
        Ok(s)
    }
}
