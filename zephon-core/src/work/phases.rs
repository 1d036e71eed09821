//! [`MixtureSchedule`]: mixture weights that change during a run, as a
//! function of the global position.
//!
//! A schedule is a list of points, each a global position and the weights
//! from there on. The work source turns it into segments of static
//! mixtures when it is built (see the `policy` module), so the pointer at
//! every global index stays a pure function of that index: a restore at any
//! step, on any rank count, continues exactly.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The setting errors of a schedule name.
pub const KEY: &str = "mixture_schedule";

/// Most phases a schedule may hold once expanded (a linear schedule gives
/// one per step): each holds a chunk's slots when the work source is built.
pub const MAX_PHASES: usize = 1 << 16;

/// What a schedule's positions count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleUnit {
    /// Global indices: pointers of the work source over all lanes.
    Samples,
    /// Global batches of this many samples (pointers) over all lanes:
    /// position `s` is global index `s * size`. For pipelines whose batches
    /// are made of a fixed number of the work source's pointers (no
    /// filtering or packing before the batch).
    GlobalBatches {
        /// Samples per global batch (at least 1).
        size: u64,
    },
    /// Tokens delivered over all lanes, as the work source estimates them
    /// (each sample counts its dataset's tokens per sample): position `t`
    /// begins at the first global index where the estimate reaches `t`.
    /// Needs tokens per sample for every dataset.
    Tokens,
}

/// How weights go from one point to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleForm {
    /// Piecewise constant: a point's weights hold until the next point.
    Phases,
    /// Linear interpolation between consecutive points, in steps of `step`
    /// positions (each step a static mixture with the weights at its
    /// start); the last point's weights hold from there on. A weight that
    /// would get no slot of a chunk in a step is absent from that step.
    Linear {
        /// Positions per step (at least 1).
        step: u64,
    },
}

/// Mixture weights as a function of the global position: phases, linear
/// interpolation between points, or an anneal (the end of a run on another
/// mixture).
///
/// Before the first point the datasets' own weights (those given to
/// [`WorkSourceBuilder::dataset`](super::WorkSourceBuilder::dataset)) hold.
/// A point names the weight of each dataset in it; a dataset it does not
/// name is out of the mixture in that phase (weight 0), so datasets enter
/// and leave at phase boundaries. Weights are sample shares, or token
/// shares where the work source has tokens per sample for every dataset
/// (each weight divided by its dataset's tokens per sample, as the
/// datasets' own weights are). Where every dataset of a phase has left
/// (exhaustion policy `redistribute`), the stream ends.
///
/// Checked when the work source is built: positions strictly increasing,
/// every name a dataset of the work source, weights finite and not negative,
/// each point with a positive sum, at most [`MAX_PHASES`] phases; an error
/// names `mixture_schedule` and the point.
///
/// ```
/// use zephon_core::work::{MixtureSchedule, ScheduleUnit};
/// use zephon_core::{Dataset, Record, WorkSource};
/// let web = Dataset::in_memory("web", vec![vec![Record::new(); 1000]])?;
/// let code = Dataset::in_memory("code", vec![vec![Record::new(); 1000]])?;
/// // Global batches of 10: 30 batches on web alone, then half and half.
/// let schedule = MixtureSchedule::phases(ScheduleUnit::GlobalBatches { size: 10 })
///     .at(30, &[("web", 1.0), ("code", 1.0)]);
/// let ws = WorkSource::builder().dataset(web, 1.0).dataset(code, 0.0)
///     .chunk_size(10).repeat().mixture_schedule(schedule).build()?;
/// let datasets: Vec<u32> = (0..400).map(|g| ws.pointer_at(g).dataset).collect();
/// assert!(datasets[..300].iter().all(|&d| d == 0));
/// assert_eq!(datasets[300..].iter().filter(|&&d| d == 1).count(), 50);
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MixtureSchedule {
    unit: ScheduleUnit,
    form: ScheduleForm,
    points: Vec<(u64, BTreeMap<String, f64>)>,
}

/// One phase, resolved against the work source: its first global index (or
/// token position, for a schedule by tokens) and the sample weight of every
/// dataset (0: out of the mixture).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Phase {
    pub start: u64,
    pub weights: Vec<f64>,
    /// A step of a linear schedule: a dataset whose weight gets no slot of
    /// a chunk is out of it, rather than an error.
    pub lenient: bool,
}

impl MixtureSchedule {
    /// A piecewise-constant schedule with no points yet.
    pub fn phases(unit: ScheduleUnit) -> Self {
        MixtureSchedule {
            unit,
            form: ScheduleForm::Phases,
            points: Vec::new(),
        }
    }

    /// A schedule interpolated linearly between its points, in steps of
    /// `step` positions (at least 1, checked when the work source is
    /// built).
    ///
    /// ```
    /// use zephon_core::work::{MixtureSchedule, ScheduleUnit};
    /// use zephon_core::{Dataset, Record, WorkSource};
    /// let a = Dataset::in_memory("a", vec![vec![Record::new(); 100]])?;
    /// let b = Dataset::in_memory("b", vec![vec![Record::new(); 100]])?;
    /// // From all `a` at 0 to all `b` at 1000, in steps of 100 samples.
    /// let s = MixtureSchedule::linear(ScheduleUnit::Samples, 100)
    ///     .at(0, &[("a", 1.0)])
    ///     .at(1000, &[("b", 1.0)]);
    /// let ws = WorkSource::builder().dataset(a, 1.0).dataset(b, 1.0)
    ///     .chunk_size(10).repeat().mixture_schedule(s).build()?;
    /// let b_in = |from: u64| (from..from + 100).filter(|&g| ws.pointer_at(g).dataset == 1).count();
    /// assert_eq!((b_in(0), b_in(500), b_in(900), b_in(1000)), (0, 50, 90, 100));
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn linear(unit: ScheduleUnit, step: u64) -> Self {
        MixtureSchedule {
            unit,
            form: ScheduleForm::Linear { step },
            points: Vec::new(),
        }
    }

    /// The end of a run of `total` positions on `weights`: the datasets'
    /// own weights until `total - total * fraction`, then `weights` (the
    /// usual "anneal" on a high-quality mixture). `fraction` in (0, 1].
    ///
    /// ```
    /// use zephon_core::work::{MixtureSchedule, ScheduleUnit};
    /// let s = MixtureSchedule::anneal(ScheduleUnit::Samples, 10_000, 0.1, &[("curated", 1.0)])?;
    /// assert_eq!(s.points()[0].0, 9_000);
    /// # Ok::<(), zephon_core::Error>(())
    /// ```
    pub fn anneal(
        unit: ScheduleUnit,
        total: u64,
        fraction: f64,
        weights: &[(&str, f64)],
    ) -> Result<Self> {
        if !(fraction > 0.0 && fraction <= 1.0) {
            return Err(Error::config(
                KEY,
                format!("anneal fraction {fraction}: must be in (0, 1]"),
            ));
        }
        let from = total - ((total as f64 * fraction).round() as u64).min(total);
        Ok(Self::phases(unit).at(from, weights))
    }

    /// Adds a point: from `position` on (in the schedule's unit), the
    /// weights of the datasets named; the others are out of the mixture.
    #[must_use]
    pub fn at(mut self, position: u64, weights: &[(&str, f64)]) -> Self {
        let w = weights.iter().map(|(n, w)| ((*n).to_owned(), *w)).collect();
        self.points.push((position, w));
        self
    }

    /// The points, in the order given.
    pub fn points(&self) -> &[(u64, BTreeMap<String, f64>)] {
        &self.points
    }

    /// What positions count.
    pub fn unit(&self) -> ScheduleUnit {
        self.unit
    }

    /// How weights go between points.
    pub fn form(&self) -> ScheduleForm {
        self.form
    }

    /// The global index of `position`, or an error naming point `i`.
    fn global(&self, i: usize, position: u64) -> Result<u64> {
        match self.unit {
            ScheduleUnit::Samples | ScheduleUnit::Tokens => Ok(position),
            ScheduleUnit::GlobalBatches { size } => position.checked_mul(size).ok_or_else(|| {
                point_error(
                    i,
                    format!("position {position} of batches of {size} overflows 64 bits"),
                )
            }),
        }
    }

    /// Checks the schedule against the datasets (`names`, with their own
    /// sample weights `own`) and resolves it into phases of sample weights;
    /// `per_sample` divides a weight into a sample weight for dataset `d`.
    pub(super) fn resolve(
        &self,
        names: &[&str],
        own: &[f64],
        per_sample: impl Fn(usize, f64) -> f64,
    ) -> Result<Vec<Phase>> {
        if let ScheduleUnit::GlobalBatches { size: 0 } = self.unit {
            return Err(Error::config(
                KEY,
                "global batches of 0 samples; use at least 1",
            ));
        }
        if let ScheduleForm::Linear { step: 0 } = self.form {
            return Err(Error::config(
                KEY,
                "a linear step of 0 positions; use at least 1",
            ));
        }
        if self.points.is_empty() {
            return Err(Error::config(KEY, "a schedule needs at least one point"));
        }
        let mut points = Vec::with_capacity(self.points.len());
        for (i, (pos, weights)) in self.points.iter().enumerate() {
            if let Some((prev, _)) = i.checked_sub(1).map(|j| &self.points[j])
                && pos <= prev
            {
                return Err(point_error(
                    i,
                    format!("position {pos} is not after the previous point's {prev}"),
                ));
            }
            let mut w = vec![0.0; names.len()];
            for (name, v) in weights {
                let Some(d) = names.iter().position(|n| n == name) else {
                    return Err(point_error(
                        i,
                        format!(
                            "names dataset `{name}`, which the work source does not have (it has {names:?})"
                        ),
                    ));
                };
                if !(v.is_finite() && *v >= 0.0) {
                    return Err(point_error(
                        i,
                        format!(
                            "dataset `{name}` has weight {v}; weights must be finite and not negative"
                        ),
                    ));
                }
                w[d] = per_sample(d, *v);
            }
            if !w.iter().any(|&v| v > 0.0) {
                return Err(point_error(
                    i,
                    "no dataset has a positive weight".to_owned(),
                ));
            }
            points.push((self.global(i, *pos)?, w));
        }
        let mut phases = Vec::new();
        if points[0].0 > 0 {
            phases.push(Phase {
                start: 0,
                weights: own.to_vec(),
                lenient: false,
            });
        }
        match self.form {
            ScheduleForm::Phases => {
                for (start, weights) in points {
                    phases.push(Phase {
                        start,
                        weights,
                        lenient: false,
                    });
                }
            }
            ScheduleForm::Linear { step } => {
                let step = self.global(0, step)?;
                for pair in points.windows(2) {
                    let ((a, wa), (b, wb)) = (&pair[0], &pair[1]);
                    let (sa, sb) = (total(wa), total(wb));
                    let mut g = *a;
                    while g < *b {
                        let t = (g - a) as f64 / (b - a) as f64;
                        // Blended as shares, so two points of different
                        // sums meet halfway in proportion.
                        let weights = wa
                            .iter()
                            .zip(wb)
                            .map(|(x, y)| (1.0 - t) * x / sa + t * y / sb)
                            .collect();
                        phases.push(Phase {
                            start: g,
                            weights,
                            lenient: true,
                        });
                        if phases.len() > MAX_PHASES {
                            return Err(Error::config(
                                KEY,
                                format!("more than {MAX_PHASES} linear steps; use a larger step"),
                            ));
                        }
                        g = g.saturating_add(step);
                    }
                }
                let (start, weights) = points.last().cloned().expect("checked not empty");
                phases.push(Phase {
                    start,
                    weights,
                    lenient: false,
                });
            }
        }
        if phases.len() > MAX_PHASES {
            return Err(Error::config(
                KEY,
                format!("{} phases, more than {MAX_PHASES}", phases.len()),
            ));
        }
        Ok(phases)
    }
}

fn total(w: &[f64]) -> f64 {
    let scale = super::weight_scale(w.iter().copied());
    w.iter().map(|v| v / scale).sum::<f64>() * scale
}

fn point_error(i: usize, message: String) -> Error {
    Error::config(KEY, format!("point {i}: {message}"))
}

impl fmt::Display for MixtureSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.unit {
            ScheduleUnit::Samples => "samples".to_owned(),
            ScheduleUnit::GlobalBatches { size } => format!("global batches of {size}"),
            ScheduleUnit::Tokens => "tokens".to_owned(),
        };
        let form = match self.form {
            ScheduleForm::Phases => "phases".to_owned(),
            ScheduleForm::Linear { step } => format!("linear in steps of {step}"),
        };
        write!(f, "{form} by {unit}:")?;
        for (i, (pos, w)) in self.points.iter().enumerate() {
            let w: Vec<String> = w.iter().map(|(n, v)| format!("{n} {v}")).collect();
            let then = if i == 0 { "" } else { " then" };
            write!(f, "{then} from {pos} {{{}}}", w.join(", "))?;
        }
        Ok(())
    }
}
