//! `explain()`: the compiled plan in words.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One stage of a plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageDescription {
    /// Operator name.
    pub name: String,
    /// Its parallelism (1 for sequential operators).
    pub parallelism: usize,
    /// Its queue capacity (elements in flight or buffered), if bounded.
    pub queue_capacity: Option<u64>,
    /// Other settings, in words.
    pub detail: String,
    /// An adapter of another crate (or a boxed stream): named, but its
    /// settings are not known.
    #[serde(default)]
    pub opaque: bool,
    /// What of this stage shapes the data (which samples arrive in which
    /// order), in words: `Some("")` for a stage whose presence and place
    /// count but whose settings are not known (a user's function),
    /// `None` for a stage that only changes how the pipeline runs
    /// (prefetch, lane interleaving, the restore step). The data-shaping
    /// stages in order are the chain a checkpoint is bound to
    /// ([`ResumeExt::resume`](crate::checkpoint::ResumeExt::resume)), so
    /// execution settings such as parallelism, queue sizes and micro-batch
    /// sizes stay out of it.
    #[serde(default = "presence")]
    pub data: Option<String>,
}

fn presence() -> Option<String> {
    Some(String::new())
}

/// A pipeline's stages from source to consumer, and how it runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanDescription {
    /// Stages from the source.
    pub stages: Vec<StageDescription>,
    /// The runner, in words.
    pub runner: String,
    /// Elements buffered ahead of the consumer by `prefetch_batches` (0 without).
    pub output_prefetch: usize,
}

impl PlanDescription {
    /// The plan of `stages` (source first) under `runner`; the output
    /// prefetch depth is that of the last `prefetch_batches` stage.
    pub fn new(stages: Vec<StageDescription>, runner: crate::Runner) -> Self {
        let output_prefetch = stages
            .iter()
            .rev()
            .find(|s| s.name == "prefetch_batches")
            .and_then(|s| s.queue_capacity)
            .unwrap_or(0) as usize;
        PlanDescription {
            stages,
            runner: runner.to_string(),
            output_prefetch,
        }
    }
}

impl fmt::Display for PlanDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "plan ({} runner, output prefetch {}):",
            self.runner, self.output_prefetch
        )?;
        for (i, s) in self.stages.iter().enumerate() {
            write!(f, "  {i}. {:<18} parallelism {:<3}", s.name, s.parallelism)?;
            if let Some(c) = s.queue_capacity {
                write!(f, " queue {c:<6}")?;
            } else {
                write!(f, " {:<12}", "")?;
            }
            if s.opaque {
                writeln!(f, " (opaque) {}", s.detail)?;
            } else {
                writeln!(f, " {}", s.detail)?;
            }
        }
        Ok(())
    }
}

/// Stages that can describe themselves and what feeds them. Every Zephon
/// operator implements it, and so do the common adapters of `futures` and
/// boxed streams, as opaque stages; a pipeline whose stages all do has
/// `explain()`.
///
/// A pipeline returned from a function as `impl Stream` keeps
/// `explain()` when the return type names this trait too (it is exported
/// at the crate root):
///
/// ```
/// use zephon_core::{Dataset, Explain, PipelineExt, Record, Runner, WorkSource};
/// fn pipeline(ws: &WorkSource) -> impl futures::Stream<Item = zephon_core::Result<Record>> + Explain {
///     ws.stream().fetch(2).map_par(Ok, 2)
/// }
/// let ds = Dataset::in_memory("toy", vec![vec![Record::new(); 4]])?;
/// let ws = WorkSource::builder().dataset(ds, 1.0).build()?;
/// let plan = pipeline(&ws).explain(Runner::Inline);
/// assert_eq!(plan.stages.len(), 3);
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot describe itself for `explain()`",
    note = "a pipeline returned as `impl Stream` needs `+ zephon_core::Explain` in its return type; \
            a stream of another crate can be boxed with `boxed_pipeline()` or described by implementing `zephon_core::Explain`"
)]
pub trait Explain {
    /// Appends the stages, source first.
    fn describe(&self, out: &mut Vec<StageDescription>);
}

impl StageDescription {
    /// A stage description.
    pub fn new(
        name: &str,
        parallelism: usize,
        queue_capacity: Option<u64>,
        detail: impl Into<String>,
    ) -> Self {
        StageDescription {
            name: name.into(),
            parallelism,
            queue_capacity,
            detail: detail.into(),
            opaque: false,
            data: presence(),
        }
    }

    /// The stage's data-shaping settings (see [`data`](Self::data)), from
    /// their `Debug` form.
    ///
    /// ```
    /// use zephon_core::obs::StageDescription;
    /// let s = StageDescription::new("shuffle", 1, Some(64), "reservoir").with_data((64, 7));
    /// assert_eq!(s.data.as_deref(), Some("(64, 7)"));
    /// ```
    #[must_use]
    pub fn with_data(mut self, data: impl fmt::Debug) -> Self {
        self.data = Some(format!("{data:?}"));
        self
    }

    /// Marks a stage that only changes how the pipeline runs, never the
    /// data (see [`data`](Self::data)).
    ///
    /// ```
    /// use zephon_core::obs::StageDescription;
    /// let s = StageDescription::new("prefetch_batches", 1, Some(4), "").execution_only();
    /// assert_eq!(s.data, None);
    /// ```
    #[must_use]
    pub fn execution_only(mut self) -> Self {
        self.data = None;
        self
    }

    /// An opaque stage: an adapter of another crate, or a boxed stream.
    pub fn opaque(name: &str, detail: impl Into<String>) -> Self {
        StageDescription {
            opaque: true,
            ..StageDescription::new(name, 1, None, detail)
        }
    }
}
