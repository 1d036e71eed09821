//! A setting that may change while a pipeline runs: a [`Knob`] holds an
//! operator's parallelism, which a [`Tuner`](crate::tune::Tuner) (or any
//! code of the user's) moves, and every change is recorded.
//!
//! Only settings that cannot change the data are knobs: an operator that
//! reads one delivers the same elements in the same order whatever the
//! knob says and whenever it moves, only sooner or later.

use crate::error::{Error, Result};
use crate::settings::PARALLELISM;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One change of a knob.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// Seconds since the knob was made.
    pub at_s: f64,
    /// The value before.
    pub from: usize,
    /// The value after.
    pub to: usize,
    /// Why, in words (what the tuner saw).
    pub reason: String,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} -> {} at {:.1} s: {}",
            self.from, self.to, self.at_s, self.reason
        )
    }
}

#[derive(Debug)]
struct Inner {
    name: String,
    value: AtomicUsize,
    max: usize,
    born: Instant,
    changes: Mutex<Vec<Change>>,
}

/// An operator's parallelism that may change while it runs; clones share
/// it.
///
/// ```
/// use zephon_core::knob::Knob;
/// use zephon_core::{PipelineExt, Runner};
/// let knob = Knob::parallelism("square", 1, 4)?;
/// let s = futures::stream::iter((0..100u64).map(Ok::<_, zephon_core::Error>));
/// let mut it = s.map_par(|x| Ok(x * x), 1).tuned(&knob).into_blocking_iter(Runner::threads())?;
/// let first: Vec<u64> = it.by_ref().take(10).map(Result::unwrap).collect();
/// knob.set(3, "more work than workers");
/// let rest: Vec<u64> = it.map(Result::unwrap).collect();
/// assert_eq!([first, rest].concat(), (0..100).map(|x| x * x).collect::<Vec<_>>());
/// assert_eq!(knob.changes()[0].to_string().split(" at ").next(), Some("1 -> 3"));
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Knob(Arc<Inner>);

impl Knob {
    /// A parallelism knob named `name` (the operator's name in reports),
    /// starting at `initial`, never above `max`; both in 1 to 4096, and
    /// `initial <= max`, or an error naming the knob.
    pub fn parallelism(name: impl Into<String>, initial: usize, max: usize) -> Result<Self> {
        let name = name.into();
        let key = format!("{name}.parallelism");
        PARALLELISM.check_usize(&key, initial)?;
        PARALLELISM.check_usize(&format!("{name}.max_parallelism"), max)?;
        if initial > max {
            return Err(Error::config(
                key,
                format!("starts at {initial}, above its largest value {max}"),
            ));
        }
        Ok(Knob(Arc::new(Inner {
            name,
            value: AtomicUsize::new(initial),
            max,
            born: Instant::now(),
            changes: Mutex::new(Vec::new()),
        })))
    }

    /// The knob's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The value now.
    pub fn get(&self) -> usize {
        self.0.value.load(Ordering::Relaxed)
    }

    /// The largest value it takes.
    pub fn max(&self) -> usize {
        self.0.max
    }

    /// Moves the knob to `to` (kept within 1 and [`max`](Self::max)) and
    /// records the change with `reason`; returns the value set. Setting
    /// the value it has records nothing.
    pub fn set(&self, to: usize, reason: impl Into<String>) -> usize {
        let to = to.clamp(1, self.0.max);
        let from = self.0.value.swap(to, Ordering::Relaxed);
        if from != to {
            let change = Change {
                at_s: self.0.born.elapsed().as_secs_f64(),
                from,
                to,
                reason: reason.into(),
            };
            self.0
                .changes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(change);
        }
        to
    }

    /// How `explain()` names a tuned operator's knob: `, tuned by knob
    /// `NAME` (1 to MAX): 2 changes, last 1 -> 2 at 0.8 s: ...`.
    ///
    /// ```
    /// use zephon_core::knob::Knob;
    /// let knob = Knob::parallelism("map_par", 1, 4)?;
    /// assert_eq!(knob.explain(), ", tuned by knob `map_par` (1 to 4): no change yet");
    /// knob.set(2, "busy 99% of 1 worker");
    /// assert!(knob.explain().contains("1 change, last 1 -> 2 at "));
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn explain(&self) -> String {
        let changes = self.changes();
        let head = format!(", tuned by knob `{}` (1 to {})", self.name(), self.max());
        match changes.last() {
            None => format!("{head}: no change yet"),
            Some(last) => format!(
                "{head}: {} change{}, last {last}",
                changes.len(),
                if changes.len() == 1 { "" } else { "s" }
            ),
        }
    }

    /// Every change so far, oldest first.
    pub fn changes(&self) -> Vec<Change> {
        self.0
            .changes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
