//! [`prefetch`]: asking the processor for bytes a reader will decode soon.

/// Bytes of a cache line.
const LINE: usize = 64;

/// Asks the processor to bring `bytes` (a sample a reader decodes a few
/// samples from now) into its cache, without waiting for them. Shuffled
/// samples lie anywhere in a shard, each a few cache misses: a load that
/// misses holds every later instruction back, so touching the samples
/// first waited for all their misses before decoding any, while a
/// prefetch a few samples ahead lets the misses of the next samples
/// overlap the decoding of this one. Elsewhere than on x86-64 it does
/// nothing.
#[inline]
pub(crate) fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for at in (0..bytes.len()).step_by(LINE) {
        // SAFETY: SSE, which the instruction needs, is part of every
        // x86-64 processor; a prefetch reads nothing into the program and
        // never faults, and the address lies in `bytes` anyway.
        unsafe {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            _mm_prefetch::<_MM_HINT_T0>(bytes.as_ptr().add(at).cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}
