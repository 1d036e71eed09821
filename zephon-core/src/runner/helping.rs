//! [`Helping`]: the caller polls the pipeline itself, from the start (the
//! opening) or after taking it over from the task (a trial), and hands it
//! back to a task when the pipeline's work would better overlap with its
//! own (see [`handoff`](super::handoff)).

use super::blocking::BoxedPipeline;
use super::handoff::Driven;
use super::here::Here;
use crate::context::PipelineContext;
use crate::error::Result;
use std::time::{Duration, Instant};

/// How long a caller that took the pipeline over is timed against the
/// pace it had while the task ran the pipeline ...
const TRIAL: Duration = Duration::from_millis(2);
/// ... and how much slower (in twentieths) it may be before the pipeline
/// goes back to the task: a trial on a noisy machine is a rough measure.
const TRIAL_SLACK_20THS: u32 = 23;
/// A caller polling the pipeline itself that spends longer than this on an
/// item (sampled) is doing work of its own the pipeline could overlap.
/// (Compared with what the pipeline took for the same item instead, it
/// flapped: a batch cut from a chunk read earlier costs next to nothing.)
const SLOW_ITEM: Duration = Duration::from_micros(200);
/// Sampled items in a row that slow before the pipeline goes back to a task.
const SLOW_SAMPLES: u32 = 2;
/// The caller polling the pipeline times one item in this many.
const SAMPLE_EVERY: u64 = 8;
/// How long the opening lasts: the caller polls the pipeline from the
/// first item, and its own work between items is timed meanwhile.
const OPENING: Duration = Duration::from_millis(2);
/// The opening times each of this many first items (one slow item among
/// them hands the pipeline to a task at once: a training step should not
/// wait for a sample taken every few items to see it).
const OPENING_EACH: u64 = 4;
/// A caller whose own work took more than this share (in twentieths) of
/// the opening's time hands the pipeline to a task. A task running ahead
/// can save at most that work, overlapping it; below the trial's slack
/// ([`TRIAL_SLACK_20THS`]) it could not win by enough to be told apart ...
const OPENING_WORK_20THS: u32 = 3;
/// ... if that work is at least this much an item: moving an item to
/// another core and freeing it there costs a few microseconds a batch
/// (compare a task running the pipeline ahead with the caller polling it:
/// `zephon-bench engine --only off`, threads runner against inline), more
/// than overlapping less work than this could save.
const OPENING_WORK_LEAST: Duration = Duration::from_micros(5);

/// The caller polls the pipeline itself, in the runtime's context (CPU
/// work still goes to the pool, I/O to the runtime's drivers).
pub(super) struct Helping<T> {
    here: Here<T>,
    ctx: Option<PipelineContext>,
    calls: u64,
    /// When the last timed item was handed out.
    sampled: Option<Instant>,
    /// Timed items in a row the caller spent long on.
    slow: u32,
    /// The caller's time per item while the task ran the pipeline, until
    /// the trial against it is over.
    against: Option<Duration>,
    /// When the trial's timing began, and the items handed out by then.
    trial_from: Option<(Instant, u64)>,
    /// The trial found polling here slower than the task.
    lost: bool,
    /// The opening, while it lasts (a pipeline polled here from the start).
    opening: Option<Opening>,
}

/// The opening of a pipeline the caller polls from the start: the caller's
/// own work between items (sampled) against the time it has run. A caller
/// that spends long on one item ([`SLOW_ITEM`]), or whose work comes to
/// more than [`OPENING_WORK_20THS`] of the time and
/// [`OPENING_WORK_LEAST`] an item, hands the pipeline to a task; the
/// task's pace is then what a later take-over is tried against.
#[derive(Debug, Default)]
struct Opening {
    /// When the first item was handed out.
    from: Option<Instant>,
    /// The caller's time on the sampled items, and how many there were.
    work: Duration,
    sampled: u32,
}

impl Opening {
    /// Counts a sampled item the caller spent `work` on; at `now`, once the
    /// opening has run its time over `calls` items, whether the caller's
    /// work is too large a share (`Some(hand over)`), `None` before then.
    fn judge(&mut self, work: Duration, now: Instant, calls: u64) -> Option<bool> {
        self.work += work;
        self.sampled += 1;
        if work > SLOW_ITEM {
            return Some(true);
        }
        let from = self.from?;
        let ran = now.saturating_duration_since(from);
        if ran < OPENING {
            return None;
        }
        // Mean work of a sampled item, times the items: the caller's share.
        let per_item = self.work / self.sampled.max(1);
        let items = u32::try_from(calls).unwrap_or(u32::MAX);
        let work = per_item.saturating_mul(items).saturating_mul(20);
        Some(per_item >= OPENING_WORK_LEAST && work > ran.saturating_mul(OPENING_WORK_20THS))
    }
}

impl<T> Helping<T> {
    /// The caller polls `stream`; `against`, the pace it had with the task
    /// running it ([`Driven::pace_per_item`]), is what it is timed against
    /// for [`TRIAL`].
    pub(super) fn new(
        stream: BoxedPipeline<T>,
        ctx: Option<PipelineContext>,
        against: Option<Duration>,
    ) -> Self {
        Helping {
            here: Here::new(stream),
            ctx,
            calls: 0,
            sampled: None,
            slow: 0,
            against,
            trial_from: None,
            lost: false,
            opening: None,
        }
    }

    /// The caller polls `stream` from its first item, for an opening that
    /// decides whether a task should run it instead ([`Opening`]).
    pub(super) fn opening(stream: BoxedPipeline<T>, ctx: Option<PipelineContext>) -> Self {
        Helping {
            opening: Some(Opening::default()),
            ..Helping::new(stream, ctx, None)
        }
    }

    /// Whether the trial found the caller slower polling the pipeline
    /// itself than with the task running it.
    pub(super) fn lost_trial(&self) -> bool {
        self.lost
    }

    /// Whether the pipeline should run ahead on a task again: the caller
    /// has become slow, or the trial found it slower this way; call as an
    /// item is asked for. Items already polled ahead are handed out first,
    /// so while there are any the answer is no (what was found is kept for
    /// the ask after).
    pub(super) fn caller_slow(&mut self) -> bool {
        if let Some(at) = self.sampled.take() {
            let now = Instant::now();
            let work = now.saturating_duration_since(at);
            match &mut self.opening {
                Some(o) => {
                    if let Some(hand_over) = o.judge(work, now, self.calls) {
                        // Decided: the slow-caller rule takes over from
                        // here. Handing over counts as a slow caller, not
                        // a lost trial: the next take-over is not delayed.
                        if hand_over {
                            self.slow = SLOW_SAMPLES;
                        }
                        self.opening = None;
                    }
                }
                None => {
                    self.slow = if work > SLOW_ITEM { self.slow + 1 } else { 0 };
                }
            }
        }
        (self.slow >= SLOW_SAMPLES || self.lost) && !self.here.has_ahead()
    }

    /// Whether the next item will be polled from the pipeline (rather than
    /// handed out from those polled ahead).
    pub(super) fn will_poll(&self) -> bool {
        self.here.will_poll()
    }

    /// The pipeline back on a task, spawned by `spawn` ([`Driven::spawn`]).
    pub(super) fn into_driven(
        self,
        runtime: &tokio::runtime::Runtime,
        spawn: fn(&tokio::runtime::Runtime, BoxedPipeline<T>, Option<PipelineContext>) -> Driven<T>,
    ) -> Driven<T> {
        spawn(runtime, self.here.into_stream(), self.ctx)
    }

    /// The next item, polled here with the runner's CPU pool `pool` (or
    /// polled ahead earlier); a panic is an error item.
    pub(super) fn next(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        pool: &mut Option<super::CpuPool>,
    ) -> Option<Result<T>> {
        let item = self.here.next(runtime, self.ctx.as_ref(), pool);
        self.calls += 1;
        let opening = self.opening.as_mut();
        let early = opening.is_some() && self.calls <= OPENING_EACH;
        if early || self.calls.is_multiple_of(SAMPLE_EVERY) {
            let now = Instant::now();
            self.sampled = Some(now);
            match opening {
                Some(o) => {
                    o.from.get_or_insert(now);
                }
                None => self.judge(now),
            }
        }
        item
    }

    /// The trial, at a sampled item handed out at `now`: begun at the
    /// first, decided once it has run for [`TRIAL`].
    fn judge(&mut self, now: Instant) {
        let Some(against) = self.against else {
            return;
        };
        match self.trial_from {
            None => self.trial_from = Some((now, self.calls)),
            Some((from, calls)) if now.saturating_duration_since(from) >= TRIAL => {
                let items = (self.calls - calls).clamp(1, u32::MAX as u64) as u32;
                let here = now.saturating_duration_since(from) / items;
                self.lost = here * 20 > against * TRIAL_SLACK_20THS;
                self.against = None;
            }
            Some(_) => {}
        }
    }

    pub(super) fn size_hint(&self) -> (usize, Option<usize>) {
        self.here.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn helping(against: Option<Duration>) -> Helping<u32> {
        let s = futures::stream::iter((0..4u32).map(Ok::<u32, Error>));
        Helping::new(Box::pin(s), None, against)
    }

    #[test]
    fn a_trial_slower_than_the_task_is_lost_and_a_faster_one_kept() {
        let t0 = Instant::now();
        // 2 ms for 100 items: 20 us an item against 10 us with the task.
        let mut slower = helping(Some(Duration::from_micros(10)));
        slower.judge(t0);
        slower.calls = 100;
        slower.judge(t0 + TRIAL / 2);
        assert!(!slower.lost_trial(), "not decided before the trial's time");
        slower.judge(t0 + TRIAL);
        assert!(slower.lost_trial());
        assert!(slower.caller_slow(), "a lost trial hands the pipeline back");
        // 2 ms for 190 items: 10.5 us an item, within the slack.
        let mut close = helping(Some(Duration::from_micros(10)));
        close.judge(t0);
        close.calls = 190;
        close.judge(t0 + TRIAL);
        assert!(!close.lost_trial() && !close.caller_slow());
        // Decided once: a slow stretch later is the slow-caller rule's.
        close.calls = 191;
        close.judge(t0 + TRIAL * 10);
        assert!(!close.lost_trial());
        // Nothing to be timed against (taken over at once): no trial.
        let mut none = helping(None);
        none.judge(t0);
        none.calls = 1;
        none.judge(t0 + TRIAL * 10);
        assert!(!none.lost_trial());
    }

    /// Feeds an opening items the caller spent `work_us` on, out of
    /// `item_us` each, sampled every one; the call at which it decided and
    /// what, if it did within `calls`.
    fn opened(work_us: u64, item_us: u64, calls: u64) -> Option<(u64, bool)> {
        let mut o = Opening::default();
        let t0 = Instant::now();
        o.from = Some(t0);
        (1..=calls).find_map(|c| {
            let now = t0 + Duration::from_micros(item_us * c);
            o.judge(Duration::from_micros(work_us), now, c)
                .map(|d| (c, d))
        })
    }

    #[test]
    fn the_opening_keeps_a_waiting_caller_and_hands_a_working_one_to_a_task() {
        let ms = OPENING.as_micros() as u64;
        // Little work of its own: kept, decided once the opening has run.
        assert_eq!(opened(1, 10, 10_000), Some((ms / 10, false)));
        // A third of its time on its own work, 10 us an item: handed over.
        assert_eq!(opened(10, 30, 10_000), Some((ms / 30 + 1, true)));
        // Most of the time its own, but under OPENING_WORK_LEAST an item:
        // moving the items would cost more than overlapping could save.
        assert_eq!(opened(4, 5, 10_000), Some((ms / 5, false)));
        // Just under the share: kept.
        assert_eq!(opened(14, 100, 10_000), Some((ms / 100, false)));
        // One slow item (a training step) hands it over at once.
        assert_eq!(opened(300, 400, 10_000), Some((1, true)));
        // No time yet to judge by: undecided.
        let mut o = Opening::default();
        assert_eq!(o.judge(Duration::from_micros(1), Instant::now(), 1), None);
    }
}
