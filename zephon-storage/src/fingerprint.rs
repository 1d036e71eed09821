//! A cheap fingerprint of a shard's bytes, recorded in checkpoints (see
//! [`Shard::fingerprint`](zephon_core::Shard::fingerprint)): the size, and
//! the bytes themselves for a small shard, or for a large one its first and
//! last 64 KiB and 32 windows of 4 KiB spread evenly between. A change of
//! size, of a small shard anywhere, or of a large one in those places
//! changes it; an edit elsewhere in a large shard that keeps its size is
//! caught only by a full checksum (a manifest's).

/// Shards up to this size are hashed whole.
pub const WHOLE_UP_TO: usize = 1 << 20;

const EDGE: usize = 64 << 10;
const WINDOW: usize = 4 << 10;
const WINDOWS: usize = 32;

/// A hash of all of `data` and its size: the full check
/// ([`Shard::content_checksum`](zephon_core::Shard::content_checksum)).
pub fn whole(data: &[u8]) -> u64 {
    zephon_core::hash::combine(
        zephon_core::hash::key(&[data.len() as u64]),
        zephon_core::hash::bytes(data),
    )
}

/// The fingerprint of `data`.
pub fn of(data: &[u8]) -> u64 {
    let len = data.len();
    let size = zephon_core::hash::key(&[len as u64]);
    if len <= WHOLE_UP_TO {
        return zephon_core::hash::combine(size, zephon_core::hash::bytes(data));
    }
    let mut h = size;
    h = zephon_core::hash::combine(h, zephon_core::hash::bytes(&data[..EDGE]));
    h = zephon_core::hash::combine(h, zephon_core::hash::bytes(&data[len - EDGE..]));
    let span = len - 2 * EDGE - WINDOW;
    for w in 0..WINDOWS {
        let at = EDGE + span * w / (WINDOWS - 1);
        h = zephon_core::hash::combine(h, zephon_core::hash::bytes(&data[at..at + WINDOW]));
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_of_size_or_of_sampled_bytes_changes_it() {
        let small = b"{\"id\": 1}\n{\"id\": 2}\n".to_vec();
        let mut edited = small.clone();
        edited[7] = b'3';
        assert_ne!(of(&small), of(&edited));
        assert_ne!(of(&small), of(&small[..small.len() - 1]));
        let big: Vec<u8> = (0..3 * WHOLE_UP_TO).map(|i| (i % 251) as u8).collect();
        let span = big.len() - 2 * EDGE - WINDOW;
        for at in [0, big.len() - 1, EDGE + span * 15 / (WINDOWS - 1)] {
            let mut b = big.clone();
            b[at] ^= 1;
            assert_ne!(of(&big), of(&b), "byte {at}");
        }
        assert_eq!(of(&big), of(&big.clone()));
    }
}
