//! # dedup-window
//!
//! A stateful operator written outside the zephon crates that takes part in
//! checkpoint cuts, through zephon-core's public lane-cut protocol only (see
//! [`zephon_core::checkpoint::cut`]): a checkpoint taken on one rank count
//! restores on another from the operator's cut, replaying nothing.
//!
//! [`DedupWindow`] drops near-duplicates per lane: a record whose text,
//! normalised ([`near_key`]: lower case, words of letters and digits only),
//! matches one of the last `capacity` records it kept on the same lane is
//! dropped. The window is the operator's state; in its cut it is:
//!
//! - the preamble: the pointers of the records in the window, oldest first,
//!   so a restore gets the records back (re-read like any data) and
//!   recomputes their keys, preceded by the pointers of records it emitted
//!   that the next stateful operator had not consumed yet (in flight in a
//!   map between them), which the restore emits again (an
//!   [`InFlightJournal`] per lane keeps them);
//! - the state ([`OpState`], layout [`STATE_VERSION`]): the capacity and the
//!   field it reads, to refuse a pipeline that differs, and the wrapping sum
//!   of the window's keys, to check the re-read records normalise as they
//!   did;
//! - the counts: consumed, emitted, and the identity of the last record
//!   consumed, which the work source checks where the operator is the most
//!   upstream stateful one.
//!
//! Its name is [`NAME`]; [`check_state`], registered on construction, has
//! checkpoints check its cuts on load too.
//!
//! ```
//! use dedup_window::DedupWindowExt;
//! use zephon_core::{PipelineExt, Record, Runner};
//! let texts = ["Hello, world", "hello world!", "other", "more", "HELLO   WORLD"];
//! let recs = texts.map(|t| Ok(Record::new().with("text", t)));
//! let kept: Vec<String> = futures::stream::iter(recs)
//!     .dedup_window("text", 2)
//!     .into_blocking_iter(Runner::Inline)?
//!     .map(|r| r.map(|r| r.text("text").unwrap().to_owned()))
//!     .collect::<Result<_, _>>()?;
//! // The second is a near-duplicate of the first; the third comes two kept
//! // records later, when the first has left the window.
//! assert_eq!(kept, ["Hello, world", "other", "more", "HELLO   WORLD"]);
//! # Ok::<(), zephon_core::Error>(())
//! ```
#![warn(missing_docs)]

use futures::Stream;
use pin_project::pin_project;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use zephon_core::checkpoint::PtrList;
use zephon_core::checkpoint::cut::{
    Arrival, CutContext, CutSource, InFlightJournal, OpLaneCut, OpState, Preamble, Restoring,
    element_pointer, register_state_check,
};
use zephon_core::context::Probe;
use zephon_core::context::{CutRole, Joined};
use zephon_core::obs::{Explain, StageDescription};
use zephon_core::{Error, Identity, LaneId, Record, Result, SamplePtr};

/// The name the operator registers under, and its cuts carry.
pub const NAME: &str = "dedup_window";

/// Layout version of the operator's cut state.
pub const STATE_VERSION: u32 = 1;

/// The key two near-duplicates share: the text's words (runs of letters
/// and digits), lower-cased, hashed.
///
/// ```
/// use dedup_window::near_key;
/// assert_eq!(near_key("Hello,  World!"), near_key("hello world"));
/// assert_ne!(near_key("hello world"), near_key("hello there"));
/// ```
pub fn near_key(text: &str) -> u64 {
    let mut norm = String::with_capacity(text.len());
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        if word.is_empty() {
            continue;
        }
        if !norm.is_empty() {
            norm.push(' ');
        }
        norm.extend(word.chars().flat_map(char::to_lowercase));
    }
    zephon_core::hash::bytes(norm.as_bytes())
}

/// The operator's state in a cut, besides its preamble.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct State {
    /// The window's capacity.
    capacity: u64,
    /// The field it reads.
    field: String,
    /// Wrapping sum of the keys in the window.
    key_sum: u64,
}

fn decode(lane: LaneId, cut: &OpLaneCut) -> Result<State> {
    cut.decode_state(lane, NAME, STATE_VERSION)
}

/// Checks a cut of this operator without the operator: its preamble holds
/// only listed pointers, and no more of them in the window than it has
/// room for. Registered with
/// [`register_state_check`] when a [`DedupWindow`] is built, so
/// checkpoints run it on load.
pub fn check_state(lane: LaneId, cut: &OpLaneCut) -> std::result::Result<(), String> {
    let s: State = cut.check_decode(lane, NAME, STATE_VERSION)?;
    let p = &cut.preamble;
    let window = (p.listed.len() as u64).saturating_sub(p.in_flight);
    if p.computed != 0 {
        return Err(format!("{} computed preamble pointers", p.computed));
    }
    if window > s.capacity {
        return Err(format!(
            "a window of {window} records in a capacity of {}",
            s.capacity
        ));
    }
    Ok(())
}

/// A lane being restored.
#[derive(Debug)]
struct Restore {
    cut: OpLaneCut,
    state: Option<State>,
    /// Preamble records taken back so far.
    seen: u64,
}

/// One lane's window and counts.
#[derive(Debug, Default)]
struct Lane {
    consumed: u64,
    last: Option<u64>,
    /// Kept records, oldest first: key and pointer (`None` outside a
    /// checkpointed pipeline).
    window: VecDeque<(u64, Option<SamplePtr>)>,
    /// How many window entries hold each key.
    keys: HashMap<u64, u32>,
    key_sum: u64,
    /// Records emitted, and those the next stateful operator may not have
    /// consumed yet.
    sent: InFlightJournal,
    /// A record without a single source pointer went through: the lane
    /// cannot be cut any more.
    unlisted: bool,
    restoring: Option<Restore>,
}

impl Lane {
    fn contains(&self, key: u64) -> bool {
        self.keys.contains_key(&key)
    }

    fn remember(&mut self, key: u64, ptr: Option<SamplePtr>, capacity: usize) {
        self.window.push_back((key, ptr));
        *self.keys.entry(key).or_default() += 1;
        self.key_sum = self.key_sum.wrapping_add(key);
        while self.window.len() > capacity {
            let Some((old, _)) = self.window.pop_front() else {
                break;
            };
            self.key_sum = self.key_sum.wrapping_sub(old);
            if let Some(n) = self.keys.get_mut(&old) {
                *n -= 1;
                if *n == 0 {
                    self.keys.remove(&old);
                }
            }
        }
    }
}

/// The operator's lanes, shared with the checkpoint board.
#[derive(Debug)]
struct Shared {
    capacity: usize,
    field: &'static str,
    lanes: Mutex<BTreeMap<LaneId, Lane>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<LaneId, Lane>> {
        self.lanes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn state(&self, key_sum: u64) -> Option<OpState> {
        let s = State {
            capacity: self.capacity as u64,
            field: self.field.to_owned(),
            key_sum,
        };
        OpState::new(STATE_VERSION, &s).ok()
    }
}

impl CutSource for Shared {
    fn cut(&self, lane: LaneId, ctx: CutContext) -> Option<OpLaneCut> {
        let mut lanes = self.lock();
        let Some(l) = lanes.get_mut(&lane) else {
            return Some(
                OpLaneCut::new(NAME, 0)
                    .with_emitted(0)
                    .with_state(self.state(0)?),
            );
        };
        if let Some(r) = &l.restoring {
            return Some(r.cut.clone());
        }
        if l.unlisted {
            return None;
        }
        let in_flight = l.sent.in_flight(ctx.downstream_consumed)?;
        let n = in_flight.len() as u64;
        let mut listed = in_flight;
        for (_, p) in &l.window {
            listed.push((*p)?);
        }
        Some(
            OpLaneCut::new(NAME, l.consumed)
                .with_emitted(l.sent.emitted())
                .with_last_identity(l.last)
                .with_preamble(Preamble {
                    listed: PtrList::new(listed),
                    computed: 0,
                    in_flight: n,
                })
                .with_state(self.state(l.key_sum)?),
        )
    }
    // The preamble is listed: the default `restore_preamble` emits it.
}

fn restore_error(lane: LaneId, message: impl Into<String>) -> Error {
    Error::Checkpoint {
        origin: "restore".into(),
        message: format!("{NAME}, lane {lane}: {}", message.into()),
    }
}

/// What a restoring lane does with a record of its own preamble.
enum Restored {
    /// Emit it again (it was in flight at the cut).
    Emit(Record),
    /// Taken back into the window.
    Absorbed,
    /// The preamble was empty: process it as usual.
    Normal(Record),
}

impl Shared {
    /// Takes back one record of `lane`'s preamble; whether it was the last.
    fn restore_one(&self, lane: LaneId, r: Record) -> Result<(Restored, bool)> {
        let mut lanes = self.lock();
        let l = lanes.entry(lane).or_default();
        let Some(rs) = l.restoring.as_mut() else {
            return Ok((Restored::Normal(r), true));
        };
        if rs.state.is_none() {
            let s = decode(lane, &rs.cut)?;
            check_state(lane, &rs.cut).map_err(|m| restore_error(lane, m))?;
            if (s.capacity, s.field.as_str()) != (self.capacity as u64, self.field) {
                return Err(restore_error(
                    lane,
                    format!(
                        "the checkpoint's window of {} on `{}`, this pipeline's of {} on `{}`",
                        s.capacity, s.field, self.capacity, self.field
                    ),
                ));
            }
            // Records in flight at the cut leave again, counted as they do.
            l.sent.restore(&rs.cut);
            rs.state = Some(s);
        }
        let (in_flight, section) = (rs.cut.preamble.in_flight, rs.cut.preamble_len());
        let k = rs.seen;
        let out = if section == 0 {
            Restored::Normal(r)
        } else {
            rs.seen += 1;
            let want = rs.cut.preamble.listed.get(k as usize);
            let got = element_pointer(&r);
            let at = |p: Option<SamplePtr>| p.map(|p| (p.dataset, p.shard, p.sample));
            if at(got) != at(want) {
                return Err(restore_error(
                    lane,
                    format!("record {k} of the preamble is not the one the checkpoint listed"),
                ));
            }
            if k < in_flight {
                Restored::Emit(r)
            } else {
                let key = near_key(r.text(self.field).unwrap_or_default());
                l.remember(key, got, self.capacity);
                Restored::Absorbed
            }
        };
        if let Restored::Emit(r) = &out {
            l.sent.note_sent(r, true);
        }
        let finished = section == 0 || k + 1 == section;
        if finished && let Some(rs) = l.restoring.take() {
            let s = rs.state.unwrap_or_else(|| unreachable!("decoded above"));
            if l.key_sum != s.key_sum {
                return Err(restore_error(
                    lane,
                    "the window's records do not normalise to the keys the checkpoint held: \
                     the text or the stretch between the work source and this operator changed",
                ));
            }
            l.consumed = rs.cut.consumed;
            l.last = rs.cut.last_identity;
        }
        Ok((out, finished))
    }
}

/// Drops, per lane, records whose text nearly duplicates (same
/// [`near_key`]) one of the last `capacity` records it kept. Takes part in
/// checkpoint cuts (see the [crate documentation](crate)).
///
/// Created by [`DedupWindowExt::dedup_window`].
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct DedupWindow<S> {
    #[pin]
    inner: S,
    shared: Arc<Shared>,
    /// Attaches the operator for metrics and `explain()`, and puts it on
    /// the checkpoint board, in one call on the first poll.
    probe: Probe,
    /// Registered on a checkpoint board: windows keep pointers.
    cutting: bool,
    restoring: Option<Restoring>,
    invalid: Option<Error>,
}

impl<S> DedupWindow<S> {
    /// Dedups `inner` on `field` with a window of `capacity` (at least 1;
    /// 0 makes the first poll an error naming `dedup_window.capacity`).
    pub fn new(inner: S, field: &'static str, capacity: usize) -> Self {
        static REGISTER: std::sync::Once = std::sync::Once::new();
        REGISTER.call_once(|| register_state_check(NAME, check_state));
        DedupWindow {
            inner,
            shared: Arc::new(Shared {
                capacity: capacity.max(1),
                field,
                lanes: Mutex::new(BTreeMap::new()),
            }),
            probe: Probe::default(),
            cutting: false,
            restoring: None,
            invalid: (capacity == 0)
                .then(|| Error::config("dedup_window.capacity", "must be at least 1")),
        }
    }

    /// Records dropped so far, over all lanes.
    pub fn dropped(&self) -> u64 {
        self.shared
            .lock()
            .values()
            .map(|l| l.consumed - l.sent.emitted().min(l.consumed))
            .sum()
    }
}

impl<S> std::fmt::Debug for DedupWindow<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DedupWindow")
            .field("field", &self.shared.field)
            .field("capacity", &self.shared.capacity)
            .finish_non_exhaustive()
    }
}

impl<S: Stream<Item = Result<Record>>> Stream for DedupWindow<S> {
    type Item = Result<Record>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Record>>> {
        let mut this = self.project();
        if let Some(e) = this.invalid.take() {
            return Poll::Ready(Some(Err(e)));
        }
        // First poll: attach for metrics and `explain()` and, in a
        // checkpointed pipeline, register on its board and take the cuts
        // to restore, in one call.
        if !this.probe.attached() {
            let shared = this.shared.clone();
            let capacity = Some(this.shared.capacity as u64);
            let joined = this.probe.join(NAME, 1, capacity, move || {
                CutRole::Source(Arc::downgrade(&shared) as Weak<dyn CutSource>)
            });
            match joined {
                Ok(None) => {}
                Ok(Some(Joined { board, plan })) => {
                    let mut lanes = this.shared.lock();
                    // Until a restoring lane is back, its state is its
                    // cut (a batch may leave before that).
                    for (&lane, (_, cut)) in &plan {
                        lanes.entry(lane).or_default().restoring = Some(Restore {
                            cut: cut.clone(),
                            state: None,
                            seen: 0,
                        });
                    }
                    *this.cutting = true;
                    *this.restoring = Some(Restoring::new(plan, board));
                }
                Err(e) => return Poll::Ready(Some(Err(e))),
            }
        }
        loop {
            let r = match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(r))) => r,
                Poll::Ready(None) => {
                    this.probe.finish();
                    return Poll::Ready(None);
                }
                Poll::Pending => {
                    this.probe.input_pending();
                    return Poll::Pending;
                }
                other => return other,
            };
            this.probe.input();
            let lane = r.lane;
            let r = match this.restoring.as_mut().map(|rs| rs.arrive(lane)) {
                // A record of an operator downstream's preamble.
                Some(Arrival::Pass) => {
                    this.probe.output();
                    return Poll::Ready(Some(Ok(r)));
                }
                Some(Arrival::Own(_)) => {
                    let (restored, finished) = match this.shared.restore_one(lane, r) {
                        Ok(x) => x,
                        Err(e) => return Poll::Ready(Some(Err(e))),
                    };
                    if finished && let Some(rs) = this.restoring.as_mut() {
                        rs.done(lane);
                    }
                    match restored {
                        Restored::Emit(r) => {
                            this.probe.output();
                            return Poll::Ready(Some(Ok(r)));
                        }
                        Restored::Absorbed => continue,
                        Restored::Normal(r) => r,
                    }
                }
                _ => r,
            };
            let key = r.text(this.shared.field).map(near_key);
            let cutting = *this.cutting;
            let ptr = if cutting { element_pointer(&r) } else { None };
            let mut lanes = this.shared.lock();
            let l = lanes.entry(lane).or_default();
            // Left over only where the restore fell back to a replay.
            l.restoring = None;
            l.consumed += 1;
            if cutting {
                l.last = Some(r.identity());
            }
            match key {
                Some(k) if l.contains(k) => continue,
                Some(k) => l.remember(k, ptr, this.shared.capacity),
                // Nothing to compare: it passes, and is not remembered.
                None => {}
            }
            if cutting && ptr.is_none() {
                l.unlisted = true;
            }
            l.sent.note_pointer(ptr, cutting);
            drop(lanes);
            this.probe.output();
            return Poll::Ready(Some(Ok(r)));
        }
    }
}

impl<S: Explain> Explain for DedupWindow<S> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        out.push(
            StageDescription::new(
                NAME,
                1,
                Some(self.shared.capacity as u64),
                format!(
                    "near-duplicates of `{}` among the last {} kept, per lane",
                    self.shared.field, self.shared.capacity
                ),
            )
            .with_data((&self.shared.field, self.shared.capacity)),
        );
    }
}

/// Adds [`dedup_window`](DedupWindowExt::dedup_window) to streams of records.
pub trait DedupWindowExt: Stream<Item = Result<Record>> + Sized {
    /// Drops, per lane, records whose `field` nearly duplicates one of the
    /// last `capacity` records kept; see [`DedupWindow`].
    fn dedup_window(self, field: &'static str, capacity: usize) -> DedupWindow<Self> {
        DedupWindow::new(self, field, capacity)
    }
}

impl<S: Stream<Item = Result<Record>>> DedupWindowExt for S {}
