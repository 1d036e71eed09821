//! The audio fixtures (tests/fixtures/audio, made by its make.py) and
//! sounds made in the test.

pub const WAV: &[u8] = include_bytes!("../fixtures/audio/sine_stereo_8k.wav");
pub const FLAC: &[u8] = include_bytes!("../fixtures/audio/sine_stereo_8k.flac");
pub const MP3: &[u8] = include_bytes!("../fixtures/audio/sine_mono_16k.mp3");
pub const OGG: &[u8] = include_bytes!("../fixtures/audio/sine_mono_16k.ogg");

/// The four fixtures, by name.
pub fn fixtures() -> [(&'static str, &'static [u8]); 4] {
    [("wav", WAV), ("flac", FLAC), ("mp3", MP3), ("ogg", OGG)]
}

/// `a · sin(2π f n / rate)` for `n` in `0..len`.
pub fn sine(rate: u32, len: usize, freq: f64, amp: f64) -> Vec<f64> {
    (0..len)
        .map(|n| amp * (std::f64::consts::TAU * freq * n as f64 / rate as f64).sin())
        .collect()
}

/// A 16-bit PCM WAV of `channels` interleaved channels at `rate` Hz.
pub fn wav(rate: u32, channels: u16, interleaved: &[i16]) -> Vec<u8> {
    let data: Vec<u8> = interleaved.iter().flat_map(|s| s.to_le_bytes()).collect();
    wav_of(rate, channels, 1, 16, &data)
}

/// A WAV of format `tag` (1 PCM, 3 IEEE float) and `bits` per sample
/// holding `data`, interleaved.
pub fn wav_of(rate: u32, channels: u16, tag: u16, bits: u16, data: &[u8]) -> Vec<u8> {
    let block = channels * bits / 8;
    let mut w = b"RIFF".to_vec();
    w.extend((36 + data.len() as u32).to_le_bytes());
    w.extend(b"WAVEfmt ");
    w.extend(16u32.to_le_bytes());
    w.extend(tag.to_le_bytes());
    w.extend(channels.to_le_bytes());
    w.extend(rate.to_le_bytes());
    w.extend((rate * block as u32).to_le_bytes());
    w.extend(block.to_le_bytes());
    w.extend(bits.to_le_bytes());
    w.extend(b"data");
    w.extend((data.len() as u32).to_le_bytes());
    w.extend(data);
    w
}

/// The WAV of sample `i` of a varied set: 1 or 2 channels, 8, 16 or
/// 22.05 kHz, 0.05 to 0.3 s of a sine whose pitch depends on `i` and `salt`.
pub fn varied_wav(i: u64, salt: u64) -> Vec<u8> {
    let h = zephon_core::hash::key(&[i, salt]);
    let rate = [8000, 16_000, 22_050][(h % 3) as usize];
    let channels = 1 + (h >> 8) as u16 % 2;
    let len = rate as usize * (5 + (h >> 16) as usize % 26) / 100;
    let freq = 100.0 + ((h >> 24) % 2000) as f64;
    let s = sine(rate, len, freq, 0.6);
    let pcm: Vec<i16> = s
        .iter()
        .flat_map(|x| {
            let v = (x * 32767.0).round() as i16;
            [v, v / 2].into_iter().take(channels as usize)
        })
        .collect();
    wav(rate, channels, &pcm)
}

/// The amplitude of the `freq` Hz component of `x` (a single-bin DFT).
pub fn tone(x: &[f32], rate: u32, freq: f64) -> f64 {
    let (mut re, mut im) = (0.0, 0.0);
    for (n, &v) in x.iter().enumerate() {
        let p = std::f64::consts::TAU * freq * n as f64 / rate as f64;
        re += v as f64 * p.cos();
        im -= v as f64 * p.sin();
    }
    2.0 * (re * re + im * im).sqrt() / x.len() as f64
}
