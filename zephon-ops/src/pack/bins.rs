//! `first_fit` and `best_fit`: whole sequences placed into bins, window by
//! window.
//!
//! Both algorithms cut the input into the same windows (a window closes
//! once it holds `num_bins * max_length` tokens) and pack each window on its
//! own. Because the windows do not depend on the algorithm, and `best_fit`
//! keeps the first-fit packing of any window where best fit decreasing would
//! use more bins, `best_fit` never pads more than `first_fit` on the same input.

use super::{Masks, PackAlgorithm, PackConfig, Row, Seq, align};

/// The per-lane window.
#[derive(Debug, Default)]
pub struct BinPacker {
    pub(crate) window: Vec<Seq>,
    pub(crate) tokens: usize,
}

impl BinPacker {
    pub(crate) fn push(
        &mut self,
        seq: Seq,
        mask: Option<Vec<u32>>,
        masks: &mut Masks,
        c: &PackConfig,
        out: &mut Vec<Row>,
    ) {
        align(masks, self.window.len());
        masks.push_back(mask);
        self.tokens += seq.ids.len();
        self.window.push(seq);
        if self.tokens >= c.num_bins.saturating_mul(c.max_length) {
            self.flush(masks, c, out);
        }
    }

    pub(crate) fn flush(&mut self, masks: &mut Masks, c: &PackConfig, out: &mut Vec<Row>) {
        align(masks, self.window.len());
        let lens: Vec<usize> = self.window.iter().map(|s| s.ids.len()).collect();
        let assignment = match c.algorithm {
            PackAlgorithm::BestFit => {
                let ff = first_fit(&lens, c.max_length, c.seq_limit());
                let bf = best_fit_decreasing(&lens, c.max_length, c.seq_limit());
                if bf.len() <= ff.len() { bf } else { ff }
            }
            _ => first_fit(&lens, c.max_length, c.seq_limit()),
        };
        for bin in assignment {
            let mut row = Row::with_capacity(c.max_length);
            for i in bin {
                let s = &self.window[i];
                row.push_masked(&s.ids, masks[i].as_deref(), &s.lineage, s.offset);
            }
            out.push(row);
        }
        masks.clear();
        self.window.clear();
        self.tokens = 0;
    }
}

/// First fit in arrival order: bins of item indices. Every length must be
/// at most `cap`.
pub fn first_fit(lens: &[usize], cap: usize, max_items: usize) -> Vec<Vec<usize>> {
    let mut bins: Vec<(usize, Vec<usize>)> = Vec::new();
    for (i, &len) in lens.iter().enumerate() {
        match bins
            .iter_mut()
            .find(|(used, items)| used + len <= cap && items.len() < max_items)
        {
            Some((used, items)) => {
                *used += len;
                items.push(i);
            }
            None => bins.push((len, vec![i])),
        }
    }
    bins.into_iter().map(|b| b.1).collect()
}

/// Best fit decreasing: items longest first (ties in arrival order), each
/// into the bin it leaves the least room in (ties: the earliest bin).
pub fn best_fit_decreasing(lens: &[usize], cap: usize, max_items: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lens.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(lens[i]));
    let mut bins: Vec<(usize, Vec<usize>)> = Vec::new();
    for i in order {
        let len = lens[i];
        let best = bins
            .iter_mut()
            .filter(|(used, items)| used + len <= cap && items.len() < max_items)
            .min_by_key(|(used, _)| cap - *used - len);
        match best {
            Some((used, items)) => {
                *used += len;
                items.push(i);
            }
            None => bins.push((len, vec![i])),
        }
    }
    // Within a bin, documents keep their arrival order.
    bins.into_iter()
        .map(|(_, mut items)| {
            items.sort_unstable();
            items
        })
        .collect()
}
