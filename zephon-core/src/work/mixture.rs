//! The static mixture: largest-remainder quotas per chunk, ordered by smooth
//! weighted round robin.

use crate::error::{Error, Result};

/// The per-chunk schedule of a static mixture. Every chunk of `chunk_size`
/// pointers holds exactly `quotas[d]` pointers of dataset `d`, in the same
/// interleaved order; so the dataset and its position for any global index are
/// a pure function of that index.
#[derive(Clone, Debug)]
pub struct Mixture {
    /// Pointers per dataset per chunk (largest-remainder rounding of the weights).
    pub quotas: Vec<u64>,
    /// Dataset of each slot of a chunk.
    pub slots: Vec<u32>,
    /// For each slot, how many earlier slots of the chunk belong to the same dataset.
    pub occurrence: Vec<u64>,
    /// For each dataset, the slots it occupies, in order.
    pub slots_of: Vec<Vec<u32>>,
}

/// What to divide finite weights by before summing them: 1 while their sum
/// is finite (the weights are used as they are, bit for bit), else the
/// largest (1e308 twice overflows the sum; taken relative to the largest,
/// their proportions stay). The work source's mixture and `ensure_mixture`
/// both normalise this way.
///
/// ```
/// use zephon_core::work::weight_scale;
/// assert_eq!(weight_scale([0.7, 0.3].into_iter()), 1.0);
/// assert_eq!(weight_scale([1e308, 1e308, 1.0].into_iter()), 1e308);
/// ```
pub fn weight_scale(weights: impl Iterator<Item = f64> + Clone) -> f64 {
    match weights.clone().sum::<f64>() {
        t if t.is_finite() => 1.0,
        _ => weights.fold(0.0, f64::max),
    }
}

impl Mixture {
    /// Builds the schedule; `names` are used in errors.
    pub fn new(weights: &[f64], names: &[&str], chunk_size: u64) -> Result<Self> {
        if chunk_size == 0 {
            return Err(Error::config("chunk_size", "must be at least 1"));
        }
        for (w, name) in weights.iter().zip(names) {
            if !(w.is_finite() && *w > 0.0) {
                return Err(Error::config(
                    "weight",
                    format!("dataset `{name}` has weight {w}; weights must be finite and positive"),
                ));
            }
        }
        // With an infinite total every share was 0, and the quotas came
        // out equal whatever the weights said.
        let scale = weight_scale(weights.iter().copied());
        let total: f64 = weights.iter().map(|w| w / scale).sum();
        let exact: Vec<f64> = weights
            .iter()
            .map(|w| w / scale / total * chunk_size as f64)
            .collect();
        let mut quotas: Vec<u64> = exact.iter().map(|e| e.floor() as u64).collect();
        let mut rest = chunk_size - quotas.iter().sum::<u64>();
        let mut by_remainder: Vec<usize> = (0..weights.len()).collect();
        // Largest remainder first; ties go to the earlier dataset, so the
        // rounding is the same on every machine.
        by_remainder.sort_by(|&a, &b| {
            let (ra, rb) = (exact[a] - exact[a].floor(), exact[b] - exact[b].floor());
            rb.total_cmp(&ra).then(a.cmp(&b))
        });
        for &d in by_remainder.iter().cycle() {
            if rest == 0 {
                break;
            }
            quotas[d] += 1;
            rest -= 1;
        }
        for (q, name) in quotas.iter().zip(names) {
            if *q == 0 {
                return Err(Error::config(
                    "chunk_size",
                    format!(
                        "dataset `{name}` gets no sample in a chunk of {chunk_size}; raise chunk_size or its weight"
                    ),
                ));
            }
        }
        // Smooth weighted round robin with the quotas as weights: spreads each
        // dataset evenly over the chunk.
        let mut current = vec![0i64; quotas.len()];
        let mut seen = vec![0u64; quotas.len()];
        let mut slots = Vec::with_capacity(chunk_size as usize);
        let mut occurrence = Vec::with_capacity(chunk_size as usize);
        let mut slots_of = vec![Vec::new(); quotas.len()];
        for k in 0..chunk_size {
            for (c, q) in current.iter_mut().zip(&quotas) {
                *c += *q as i64;
            }
            let mut best = 0;
            for d in 1..current.len() {
                if current[d] > current[best] {
                    best = d;
                }
            }
            current[best] -= chunk_size as i64;
            slots.push(best as u32);
            occurrence.push(seen[best]);
            seen[best] += 1;
            slots_of[best].push(k as u32);
        }
        Ok(Mixture {
            quotas,
            slots,
            occurrence,
            slots_of,
        })
    }

    /// Chunk size.
    pub fn chunk_size(&self) -> u64 {
        self.slots.len() as u64
    }

    /// The dataset and its position in its own stream for global index `g`.
    pub fn locate(&self, g: u64) -> (u32, u64) {
        let c = self.chunk_size();
        let (chunk, k) = (g / c, (g % c) as usize);
        let d = self.slots[k];
        (d, chunk * self.quotas[d as usize] + self.occurrence[k])
    }

    /// The global index at which dataset `d` asks for its position `pos`.
    pub fn global_index(&self, d: usize, pos: u64) -> u64 {
        let q = self.quotas[d];
        (pos / q) * self.chunk_size() + self.slots_of[d][(pos % q) as usize] as u64
    }

    /// How many of the first `g` global indices belong to dataset `d`.
    pub fn count_before(&self, d: usize, g: u64) -> u64 {
        let c = self.chunk_size();
        let within = self.slots_of[d].partition_point(|&s| (s as u64) < g % c) as u64;
        (g / c) * self.quotas[d] + within
    }

    /// [`global_index`](Mixture::global_index), or `None` where it does not
    /// fit in 64 bits.
    pub fn checked_global_index(&self, d: usize, pos: u64) -> Option<u64> {
        let q = self.quotas[d];
        (pos / q)
            .checked_mul(self.chunk_size())?
            .checked_add(self.slots_of[d][(pos % q) as usize] as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_are_largest_remainder() {
        let m = Mixture::new(&[0.7, 0.3], &["a", "b"], 10).unwrap();
        assert_eq!(m.quotas, vec![7, 3]);
        let m = Mixture::new(&[1.0, 1.0, 1.0], &["a", "b", "c"], 10).unwrap();
        assert_eq!(m.quotas, vec![4, 3, 3]);
        assert_eq!(m.slots.len(), 10);
    }

    #[test]
    fn locate_and_global_index_agree() {
        let m = Mixture::new(&[0.5, 0.3, 0.2], &["a", "b", "c"], 17).unwrap();
        for g in 0..200 {
            let (d, pos) = m.locate(g);
            assert_eq!(m.global_index(d as usize, pos), g);
            assert_eq!(m.count_before(d as usize, g), pos);
        }
    }

    #[test]
    fn bad_weights_name_the_dataset() {
        let e = Mixture::new(&[1.0, 0.0], &["web", "code"], 10)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`code`"), "{e}");
        let e = Mixture::new(&[1.0, 0.001], &["web", "code"], 10)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`code`") && e.contains("chunk_size"), "{e}");
        // A sum that overflows: the weights still say `code` gets nothing
        // in a chunk of 1024 (they gave three equal shares).
        let e = Mixture::new(&[1e308, 1e308, 1.0], &["web", "books", "code"], 1024)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`code`") && e.contains("chunk_size"), "{e}");
        let m = Mixture::new(&[1e308, 1e308, 5e307], &["web", "books", "code"], 10).unwrap();
        assert_eq!(m.quotas, [4, 4, 2]);
    }
}
