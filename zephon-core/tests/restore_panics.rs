//! An operator of another crate whose restore hook panics: the restore
//! replays every lane instead, and the resumed run gives the batches the
//! uninterrupted one did. Before, the panic was swallowed with the lanes
//! its thread computed, which then started again from their first element
//! beside operators restored to the cut.

use futures::{Stream, StreamExt, ready};
use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use zephon_core::checkpoint::cut::{
    Arrival, Board, CutContext, CutSource, LaneInput, OpLaneCut, OpState, Restoring,
};
use zephon_core::checkpoint::{Checkpoint, CheckpointedExt, Recipe, ResumeExt};
use zephon_core::{
    Dataset, Identity, LaneId, PipelineExt, Record, Result, Runner, SamplePtr, ShuffleMode,
    Tracking, Value, WorkSource,
};

/// Per lane: elements consumed, the last one's identity, the running total
/// of their `i` fields (as in the cut module's example).
#[derive(Default)]
struct Lanes(Mutex<BTreeMap<LaneId, LaneTotal>>);

/// Consumed, the last identity, the running total.
type LaneTotal = (u64, Option<u64>, i64);

const NAME: &str = "running_total_panicking";
const VERSION: u32 = 1;

impl CutSource for Lanes {
    fn cut(&self, lane: LaneId, _: CutContext) -> Option<OpLaneCut> {
        let (consumed, last, total) = self
            .0
            .lock()
            .unwrap()
            .get(&lane)
            .copied()
            .unwrap_or_default();
        Some(
            OpLaneCut::new(NAME, consumed)
                .with_emitted(consumed)
                .with_last_identity(last)
                .with_state(OpState::new(VERSION, &total).ok()?),
        )
    }

    fn restore_preamble(
        &self,
        _: &OpLaneCut,
        _: &mut LaneInput<'_>,
    ) -> std::result::Result<Vec<SamplePtr>, String> {
        panic!("this operator's restore hook has a bug");
    }
}

struct RunningTotal<S> {
    inner: S,
    lanes: Arc<Lanes>,
    looked: bool,
    restoring: Option<Restoring>,
}

impl<S: Stream<Item = Result<Record>> + Unpin> Stream for RunningTotal<S> {
    type Item = Result<Record>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Record>>> {
        let this = &mut *self;
        if !this.looked {
            this.looked = true;
            if let Some(board) = Board::current() {
                let weak: Weak<dyn CutSource> = Arc::downgrade(&this.lanes) as _;
                match board.register(NAME, Some(weak)) {
                    Ok(plan) => this.restoring = Some(Restoring::new(plan, board)),
                    Err(e) => return Poll::Ready(Some(Err(e))),
                }
            }
        }
        let Some(mut r) = ready!(this.inner.poll_next_unpin(cx)?) else {
            return Poll::Ready(None);
        };
        let lane = r.lane;
        if let Some(rs) = &mut this.restoring {
            match rs.arrive(lane) {
                Arrival::Pass => return Poll::Ready(Some(Ok(r))),
                Arrival::Own(cut) => {
                    let total: i64 = cut.decode_state(lane, NAME, VERSION)?;
                    let entry = (cut.consumed, cut.last_identity, total);
                    rs.done(lane);
                    this.lanes.0.lock().unwrap().insert(lane, entry);
                }
                Arrival::Normal => {}
            }
        }
        let mut lanes = this.lanes.0.lock().unwrap();
        let (consumed, last, total) = lanes.entry(lane).or_default();
        *consumed += 1;
        *last = Some(r.identity());
        *total += r.get("i").and_then(Value::as_int).unwrap_or(0);
        r.set("total", *total);
        Poll::Ready(Some(Ok(r)))
    }
}

#[test]
fn a_panicking_restore_hook_replays_and_resumes_exactly() -> Result<()> {
    let ds = Dataset::in_memory(
        "toy",
        vec![(0..40).map(|i| Record::new().with("i", i as i64)).collect()],
    )?;
    let ws = WorkSource::builder()
        .dataset(ds, 1.0)
        .canonical_lanes(4)
        .seed(3)
        .build()?;
    let recipe = Recipe::new(&ws);
    let run = |progress: zephon_core::checkpoint::Progress| -> Result<_> {
        let shuffled = ws
            .stream()
            .fetch(2)
            .shuffle(4, ShuffleMode::Reservoir, 3)
            .boxed();
        let totals = RunningTotal {
            inner: shuffled,
            lanes: Arc::default(),
            looked: false,
            restoring: None,
        };
        let mut it = totals
            .batch(3)
            .resume_from(&progress)
            .lane_mux_from(&progress)
            .into_blocking_iter(Runner::Inline)?;
        let observer = it.enable_observability(Tracking::Operator);
        Ok((it.checkpointed(progress), observer))
    };
    let all: Vec<_> = run(recipe.start(&ws))?.0.map(Result::unwrap).collect();
    let (mut first, _) = run(recipe.start(&ws))?;
    let head: Vec<_> = first.by_ref().take(5).map(Result::unwrap).collect();
    let ckpt = Checkpoint::from_bytes(&first.checkpoint().to_bytes())?;
    let (resumed, observer) = run(recipe.resume(&ws, &ckpt)?)?;
    let rest: Vec<_> = resumed.map(Result::unwrap).collect();
    assert_eq!([head, rest].concat(), all);
    // Replayed, not restored from the cuts: `resume_from` dropped the
    // batches delivered before the checkpoint.
    let m = observer.metrics_snapshot();
    let resume = m
        .operators
        .iter()
        .find(|o| o.name == "resume_from")
        .unwrap();
    assert!(resume.elements_in > resume.elements_out);
    Ok(())
}
