//! `wrap` and `best_fit_wrap`: rows filled to exactly `max_length`, cutting
//! sequences where needed.

use super::{Masks, PackConfig, Row, Seq, align};
use crate::stats::TextStats;
use std::collections::VecDeque;

/// `wrap`: the lane's sequences concatenated and cut into rows of
/// `max_length`. Pieces of one sequence in two rows are two segments.
#[derive(Debug, Default)]
pub struct WrapPacker {
    pub(crate) row: Row,
}

impl WrapPacker {
    pub(crate) fn push(
        &mut self,
        seq: Seq,
        mask: Option<&[u32]>,
        c: &PackConfig,
        st: &TextStats,
        out: &mut Vec<Row>,
    ) {
        let mut rest = seq.ids.as_slice();
        if rest.len() > c.max_length - self.row.ids.len() {
            st.split_sequences.inc();
        }
        while !rest.is_empty() {
            if self.row.ids.capacity() == 0 {
                self.row = Row::with_capacity(c.max_length);
            }
            let take = rest.len().min(c.max_length - self.row.ids.len());
            let done = seq.ids.len() - rest.len();
            let piece_mask = mask.map(|m| &m[done..done + take]);
            let start = seq.offset + done as u32;
            self.row
                .push_masked(&rest[..take], piece_mask, &seq.lineage, start);
            rest = &rest[take..];
            if self.row.ids.len() == c.max_length {
                out.push(std::mem::take(&mut self.row));
            }
        }
    }

    pub(crate) fn finish(self, c: &PackConfig, st: &TextStats, out: &mut Vec<Row>) {
        finish_row(self.row, c, st, out);
    }
}

fn finish_row(row: Row, c: &PackConfig, st: &TextStats, out: &mut Vec<Row>) {
    if row.ids.is_empty() {
        return;
    }
    if c.drop_remainder && row.ids.len() < c.max_length {
        st.dropped_tokens.add(row.ids.len() as u64);
    } else {
        out.push(row);
    }
}

/// `best_fit_wrap`: a pool of up to `num_bins` candidates; each row takes
/// the largest candidate that fits until none does, then fills what is left
/// with the head of the oldest candidate (its tail stays in the pool, first
/// in line). At most one split per row, rows full except at the end or when
/// `max_sequences_per_bin` stops them.
///
/// With `max_candidate_age` set, a candidate that has waited more than that
/// many incoming documents is placed first in the next row, which is built
/// at once even if the pool is not over `num_bins` (and closed even if not
/// full); a candidate longer than the row fills it and its tail stays, as
/// old as it was.
#[derive(Debug, Default)]
pub struct BestFitWrapPacker {
    pub(crate) pool: VecDeque<Seq>,
    /// Per candidate, in pool order: documents that arrived after it.
    pub(crate) ages: VecDeque<u64>,
}

impl BestFitWrapPacker {
    pub(crate) fn push(
        &mut self,
        seq: Seq,
        mask: Option<Vec<u32>>,
        masks: &mut Masks,
        c: &PackConfig,
        st: &TextStats,
        out: &mut Vec<Row>,
    ) {
        align(masks, self.pool.len());
        self.align_ages();
        for a in &mut self.ages {
            *a += 1;
        }
        masks.push_back(mask);
        self.pool.push_back(seq);
        self.ages.push_back(0);
        while self.pool.len() > c.num_bins || self.overdue(c) {
            let row = self.fill(masks, c, st);
            out.push(row);
        }
    }

    /// Lines the ages up with the pool (a pool put back without them is
    /// of candidates that have just arrived).
    fn align_ages(&mut self) {
        while self.ages.len() < self.pool.len() {
            self.ages.push_back(0);
        }
        self.ages.truncate(self.pool.len());
    }

    /// The oldest candidate (the front) waited longer than allowed.
    fn overdue(&self, c: &PackConfig) -> bool {
        match (c.max_candidate_age, self.ages.front()) {
            (Some(max), Some(&age)) => age > max,
            _ => false,
        }
    }

    pub(crate) fn finish(
        mut self,
        masks: &mut Masks,
        c: &PackConfig,
        st: &TextStats,
        out: &mut Vec<Row>,
    ) {
        align(masks, self.pool.len());
        self.align_ages();
        while !self.pool.is_empty() {
            let row = self.fill(masks, c, st);
            if self.pool.is_empty() {
                finish_row(row, c, st, out);
            } else {
                out.push(row);
            }
        }
    }

    fn fill(&mut self, masks: &mut Masks, c: &PackConfig, st: &TextStats) -> Row {
        let mut row = Row::with_capacity(c.max_length);
        while row.seg_lens.len() < c.seq_limit() && !self.pool.is_empty() {
            let room = c.max_length - row.ids.len();
            if room == 0 {
                break;
            }
            // An overdue candidate goes first, split if it does not fit;
            // otherwise the largest candidate that fits, ties to the oldest.
            let best = if self.overdue(c) {
                (self.pool[0].ids.len() <= room).then_some(0)
            } else {
                self.pool
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.ids.len() <= room)
                    .max_by_key(|&(i, s)| (s.ids.len(), std::cmp::Reverse(i)))
                    .map(|(i, _)| i)
            };
            let taken = best.and_then(|i| {
                self.ages.remove(i);
                Some((self.pool.remove(i)?, masks.remove(i)?))
            });
            match taken {
                Some((s, m)) => row.push_masked(&s.ids, m.as_deref(), &s.lineage, s.offset),
                None => {
                    // Nothing fits: the oldest candidate fills the row and
                    // its tail waits at the front of the pool.
                    let Some(head) = self.pool.front_mut() else {
                        break;
                    };
                    st.split_sequences.inc();
                    let mask = masks.front_mut().and_then(Option::as_mut);
                    let head_mask = mask.as_ref().map(|m| &m[..room]);
                    row.push_masked(&head.ids[..room], head_mask, &head.lineage, head.offset);
                    if let Some(m) = mask {
                        m.drain(..room);
                    }
                    head.ids.drain(..room);
                    head.offset += room as u32;
                    break;
                }
            }
        }
        row
    }
}
