//! Exhaustion policies and the piecewise mixture schedule they give.
//!
//! A dataset that leaves the mixture (`redistribute`) changes the weights of
//! the rest from the global index where it first asks for a sample it no
//! longer has. The schedule is therefore a list of *segments*, each a static
//! [`Mixture`] over the datasets still in, starting at a known global index
//! with known dataset positions. All of it is computed from the
//! configuration when the work source is built, so the pointer at a global
//! index stays a pure function of that index (and of nothing a rank,
//! a lane layout or a restore could change).

use super::Mixture;
use super::phases::Phase;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// What one dataset does when its pass has been read completely, under
/// [`Exhaustion::PerDataset`](super::Exhaustion::PerDataset).
///
/// ```
/// use zephon_core::work::ExhaustedPolicy;
/// let p: ExhaustedPolicy = "redistribute".parse()?;
/// assert_eq!(p, ExhaustedPolicy::Redistribute);
/// assert_eq!("repeat".parse::<ExhaustedPolicy>()?, ExhaustedPolicy::Repeat { max_repeats: None });
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExhaustedPolicy {
    /// The stream ends where this dataset asks for a sample past its one pass.
    Stop,
    /// Start another pass, reshuffled (the pass number keys the shuffles).
    Repeat {
        /// Repeats after the first pass: the dataset is read `1 + max_repeats`
        /// times, then the stream ends where it asks for more. `None`: no cap.
        max_repeats: Option<u64>,
    },
    /// After one pass the dataset leaves the mixture and its weight goes to
    /// the datasets still in, in proportion to their weights. The stream
    /// ends when every dataset has left (or another one stops it).
    Redistribute,
}

impl std::str::FromStr for ExhaustedPolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "stop" => Ok(ExhaustedPolicy::Stop),
            "repeat" => Ok(ExhaustedPolicy::Repeat { max_repeats: None }),
            "redistribute" => Ok(ExhaustedPolicy::Redistribute),
            o => Err(Error::config(
                "exhausted_policy",
                format!("`{o}` is not one of stop, repeat, redistribute"),
            )),
        }
    }
}

/// Slots of all segments' chunk schedules together (about 16 bytes each).
const MAX_SCHEDULE_SLOTS: u64 = 1 << 26;

/// How far a dataset may go, in positions of its own stream.
#[derive(Clone, Copy, Debug)]
pub(super) enum Limit {
    /// Repeats forever.
    Endless,
    /// The stream ends where the dataset asks for this position; the key
    /// names the setting that set it, for errors.
    Stop(u64, &'static str),
    /// The dataset leaves the mixture where it asks for this position.
    Leave(u64),
    /// The stream ends once every `Complete` dataset has been given this
    /// many positions (the others repeat meanwhile).
    Complete(u64),
}

/// A stretch of global indices with one static mixture.
#[derive(Clone, Debug)]
pub struct Segment {
    /// First global index of the segment.
    pub start: u64,
    /// The dataset of each of the mixture's entries.
    pub active: Vec<u32>,
    /// Position of every dataset (all of them) at the segment's start.
    pub base: Vec<u64>,
    /// The mixture over `active`.
    pub mixture: Mixture,
    /// The mixture schedule's phase the segment lies in (0 without a
    /// schedule).
    pub phase: usize,
}

/// The whole schedule: segments in global order and where the stream ends.
#[derive(Clone, Debug)]
pub(super) struct Schedule {
    pub segments: Vec<Segment>,
    pub end: Option<u64>,
}

impl Schedule {
    /// The dataset and its position in its own stream for global index `g`.
    pub fn locate(&self, g: u64) -> (u32, u64) {
        let i = self.segments.partition_point(|s| s.start <= g) - 1;
        let s = &self.segments[i];
        let (k, lp) = s.mixture.locate(g - s.start);
        let d = s.active[k as usize];
        (d, s.base[d as usize] + lp)
    }

    /// Computes the segments. `weights`, `names` and `limits` are per dataset.
    pub fn new(weights: &[f64], names: &[&str], chunk: u64, limits: &[Limit]) -> Result<Self> {
        // Without a schedule every dataset is in from the start: a weight
        // of 0 is a mistake, not a dataset waiting for its phase.
        if let Some((w, name)) = weights
            .iter()
            .zip(names)
            .find(|(w, _)| !(w.is_finite() && **w > 0.0))
        {
            return Err(Error::config(
                "weight",
                format!("dataset `{name}` has weight {w}; weights must be finite and positive"),
            ));
        }
        let phases = [Phase {
            start: 0,
            weights: weights.to_vec(),
            lenient: false,
        }];
        Self::phased(&phases, None, names, chunk, limits)
    }

    /// Computes the segments under a mixture schedule: `phases` in global
    /// order from 0, each with a weight per dataset (0: out of the mixture
    /// in that phase). A segment ends where a dataset leaves or a phase
    /// begins; the stream ends where a dataset stops it, where the
    /// datasets to complete are complete, or where no dataset of a phase
    /// has data left.
    ///
    /// With `tokens` (tokens per sample, per dataset), phase starts are
    /// token positions: a phase begins at the first global index where the
    /// tokens of the indices before it reach its start.
    pub(super) fn phased(
        phases: &[Phase],
        tokens: Option<&[f64]>,
        names: &[&str],
        chunk: u64,
        limits: &[Limit],
    ) -> Result<Self> {
        let n = names.len();
        let mut active: Vec<usize> = (0..n).collect();
        let mut base = vec![0u64; n];
        let mut start = 0u64;
        let mut segments = Vec::new();
        // Tokens of the global indices before `start`, for a schedule by
        // tokens.
        let mut tokens_before = 0.0f64;
        let overflow = |key: &str, d: usize| {
            Error::config(
                key,
                format!(
                    "the stream's length overflows 64 bits at dataset `{}`; use an endless policy instead",
                    names[d]
                ),
            )
        };
        loop {
            active.retain(|&d| !matches!(limits[d], Limit::Leave(l) if base[d] >= l));
            if active.is_empty() {
                return Ok(Schedule {
                    segments,
                    end: Some(start),
                });
            }
            // Each segment holds a chunk's schedule: many leaving datasets
            // with a large chunk would hold gigabytes before the first pointer.
            let slots = (segments.len() as u64 + 1).saturating_mul(chunk);
            if slots > MAX_SCHEDULE_SLOTS && phases.len() > 1 {
                return Err(Error::config(
                    super::phases::KEY,
                    format!(
                        "{} segments (phases, and datasets leaving) with chunk_size {chunk} hold over {MAX_SCHEDULE_SLOTS} schedule slots; use fewer phases (a larger linear step) or a lower chunk_size",
                        segments.len()
                    ),
                ));
            }
            if slots > MAX_SCHEDULE_SLOTS {
                return Err(Error::config(
                    "exhausted_policy",
                    format!(
                        "{} datasets leaving the mixture one by one with chunk_size {chunk} hold over {MAX_SCHEDULE_SLOTS} schedule slots; lower chunk_size",
                        segments.len()
                    ),
                ));
            }
            let at = match tokens {
                None => start as f64,
                Some(_) => tokens_before,
            };
            let phase = phases.partition_point(|p| p.start as f64 <= at) - 1;
            let weights = &phases[phase].weights;
            let mut in_phase: Vec<usize> = active
                .iter()
                .copied()
                .filter(|&d| weights[d] > 0.0)
                .collect();
            if in_phase.is_empty() {
                // Every dataset of this phase has left.
                return Ok(Schedule {
                    segments,
                    end: Some(start),
                });
            }
            let mixture = loop {
                let w: Vec<f64> = in_phase.iter().map(|&d| weights[d]).collect();
                let nm: Vec<&str> = in_phase.iter().map(|&d| names[d]).collect();
                match Mixture::new(&w, &nm, chunk) {
                    Ok(m) => break m,
                    // A linear step's smallest weight may round to no slot:
                    // that dataset sits the step out.
                    Err(_) if phases[phase].lenient && in_phase.len() > 1 => {
                        let smallest = (0..in_phase.len())
                            .min_by(|&a, &b| w[a].total_cmp(&w[b]))
                            .expect("not empty");
                        in_phase.remove(smallest);
                    }
                    Err(e) if phases.len() > 1 => {
                        return Err(Error::config(
                            super::phases::KEY,
                            format!("the phase from global index {}: {e}", phases[phase].start),
                        ));
                    }
                    Err(e) => return Err(e),
                }
            };
            let next_phase = phases.get(phase + 1).map(|p| match tokens {
                None => p.start - start,
                // The first index where the tokens reach the phase's start:
                // each index holds at least the fewest tokens per sample.
                Some(t) => {
                    let fewest = in_phase.iter().map(|&d| t[d]).fold(f64::INFINITY, f64::min);
                    let left = p.start as f64 - tokens_before;
                    let (mut lo, mut hi) = (1u64, ((left / fewest).ceil() as u64).max(1));
                    while lo < hi {
                        let mid = lo + (hi - lo) / 2;
                        if tokens_before + tokens_of(&mixture, &in_phase, t, mid) >= p.start as f64
                        {
                            hi = mid;
                        } else {
                            lo = mid + 1;
                        }
                    }
                    lo
                }
            });
            // The first event: where a dataset asks past its limit (each
            // index is one dataset's, so two events never share one).
            let mut event: Option<(u64, bool)> = None;
            // Where every dataset to complete is complete; `None` inside
            // the option: one of them is out of this phase and not yet
            // complete, so the stream does not end in it.
            let mut complete: Option<Option<u64>> = None;
            for &d in &active {
                if let Limit::Complete(l) = limits[d]
                    && base[d] < l
                    && !in_phase.contains(&d)
                {
                    complete = Some(None);
                }
            }
            for (k, &d) in in_phase.iter().enumerate() {
                let (at, stops) = match limits[d] {
                    Limit::Endless => continue,
                    Limit::Complete(l) => {
                        let last = match l.checked_sub(base[d] + 1) {
                            None => 0,
                            Some(left) => mixture
                                .checked_global_index(k, left)
                                .and_then(|g| g.checked_add(1))
                                .ok_or_else(|| overflow("passes", d))?,
                        };
                        complete = Some(match complete {
                            None => Some(last),
                            Some(None) => None,
                            Some(Some(c)) => Some(c.max(last)),
                        });
                        continue;
                    }
                    Limit::Stop(l, key) => (
                        mixture
                            .checked_global_index(k, l.saturating_sub(base[d]))
                            .ok_or_else(|| overflow(key, d))?,
                        true,
                    ),
                    Limit::Leave(l) => (
                        mixture
                            .checked_global_index(k, l - base[d])
                            .ok_or_else(|| overflow("exhausted_policy", d))?,
                        false,
                    ),
                };
                event = Some(match event {
                    Some((e, s)) if e < at => (e, s),
                    _ => (at, stops),
                });
            }
            let seg_base = base.clone();
            let active_ids: Vec<u32> = in_phase.iter().map(|&d| d as u32).collect();
            let end_at = |h: u64| start.checked_add(h).ok_or_else(|| overflow("passes", 0));
            // The stream ends at the first stop or completion; a segment
            // ends earlier where a dataset leaves or the next phase begins.
            let stop = event.filter(|(_, stops)| *stops).map(|(h, _)| h);
            let end = match (stop, complete.flatten()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let leave = event.filter(|(_, stops)| !*stops).map(|(h, _)| h);
            let switch = match (leave, next_phase) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let segment = Segment {
                start,
                active: active_ids,
                base: seg_base,
                mixture,
                phase,
            };
            match (end, switch) {
                (Some(e), s) if s.is_none_or(|s| e <= s) => {
                    let end = end_at(e)?;
                    segments.push(segment);
                    return Ok(Schedule {
                        segments,
                        end: Some(end),
                    });
                }
                (_, Some(h)) => {
                    if let Some(t) = tokens {
                        tokens_before += tokens_of(&segment.mixture, &in_phase, t, h);
                    }
                    for (k, &d) in in_phase.iter().enumerate() {
                        base[d] += segment.mixture.count_before(k, h);
                    }
                    let next = end_at(h)?;
                    segments.push(segment);
                    start = next;
                }
                (_, None) => {
                    segments.push(segment);
                    return Ok(Schedule {
                        segments,
                        end: None,
                    });
                }
            }
        }
    }
}

/// Tokens of the first `h` global indices of a segment whose mixture is
/// `m` over the datasets `in_phase`, at `t` tokens per sample.
fn tokens_of(m: &Mixture, in_phase: &[usize], t: &[f64], h: u64) -> f64 {
    in_phase
        .iter()
        .enumerate()
        .map(|(k, &d)| m.count_before(k, h) as f64 * t[d])
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leaving_dataset_gives_its_weight_to_the_others_in_proportion() {
        let limits = [Limit::Leave(10), Limit::Endless, Limit::Endless];
        let s = Schedule::new(&[2.0, 1.0, 3.0], &["a", "b", "c"], 6, &limits).unwrap();
        assert_eq!(s.end, None);
        assert_eq!(s.segments.len(), 2);
        assert_eq!(s.segments[0].mixture.quotas, vec![2, 1, 3]);
        // `a` asks for its 11th sample at chunk 5, slot 0: its 10 are taken.
        let second = &s.segments[1];
        assert_eq!(second.start, s.segments[0].mixture.global_index(0, 10));
        assert_eq!(second.active, vec![1, 2]);
        assert_eq!(second.base[0], 10);
        assert_eq!(second.base.iter().sum::<u64>(), second.start);
        // Weights 1 and 3 over a chunk of 6: 1.5 and 4.5, the tie to `b`.
        assert_eq!(second.mixture.quotas, vec![2, 4]);
        let a = (0..100).filter(|&g| s.locate(g).0 == 0).count();
        assert_eq!(a, 10);
    }

    #[test]
    fn every_dataset_leaving_ends_the_stream_after_each_sample_once() {
        let limits = [Limit::Leave(7), Limit::Leave(3), Limit::Leave(20)];
        let s = Schedule::new(&[1.0, 1.0, 1.0], &["a", "b", "c"], 3, &limits).unwrap();
        assert_eq!(s.end, Some(30));
        let mut seen = vec![Vec::new(); 3];
        for g in 0..30 {
            let (d, pos) = s.locate(g);
            seen[d as usize].push(pos);
        }
        for (d, n) in [7, 3, 20].into_iter().enumerate() {
            assert_eq!(seen[d], (0..n).collect::<Vec<u64>>(), "dataset {d}");
        }
    }

    #[test]
    fn a_stop_ends_where_it_asks_and_complete_waits_for_the_slowest() {
        let s = Schedule::new(
            &[1.0, 1.0],
            &["a", "b"],
            2,
            &[Limit::Stop(4, "passes"), Limit::Leave(4)],
        )
        .unwrap();
        assert_eq!((s.end, s.segments.len()), (Some(8), 1));
        let s = Schedule::new(
            &[1.0, 1.0],
            &["a", "b"],
            2,
            &[Limit::Complete(3), Limit::Complete(9)],
        )
        .unwrap();
        assert_eq!(s.end, Some(18));
    }
}
