//! `map_images`: an image operator (or any per-sample function) over each
//! element on worker threads, `k` micro-batches at work at once, output
//! order = input order, registered in the pipeline under the operator's
//! own name.

use crate::error::Result;
use crate::image::ImageSample;
use futures::Stream;
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use pin_project::pin_project;
use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use zephon_core::context::Probe;
use zephon_core::obs::{Explain, StageDescription};
use zephon_core::ops::micro_batch::take_ready;
use zephon_core::runner::{OffloadGroup, in_flight_per_worker, offload};
use zephon_core::settings::PARALLELISM;

/// Samples per micro-batch handed to a worker: an image costs
/// milliseconds, so a few keep the hand-off negligible and all workers busy.
pub const DEFAULT_MICRO_BATCH: usize = 4;

/// One step over an image: a pure function of its input (random choices
/// seeded from the sample's identity), so it may run on any thread.
///
/// ```
/// use zephon_media::{CenterCrop, ImageOp, ImageSample, Image};
/// let s = ImageSample { image: Image::new_u8(4, 4, 1, (0..16).collect())?, record: Default::default() };
/// let out = CenterCrop::new(2, 2).apply(s)?;
/// assert_eq!(out.image.pixels.as_u8(), Some(&[5, 6, 9, 10][..]));
/// # Ok::<(), zephon_core::Error>(())
/// ```
pub trait ImageOp: fmt::Debug + Send + Sync + 'static {
    /// The operator's name, for metrics, `explain()` and errors.
    fn name(&self) -> &'static str;
    /// Applies the step to one sample.
    fn apply(&self, sample: ImageSample) -> Result<ImageSample>;
}

/// Several steps applied one after another inside one task: decode, crop
/// and resize of a sample then cost one hand-off to a worker.
///
/// ```
/// use zephon_media::{Compose, CenterCrop, Flip, ImageOp, ImageSample, Image};
/// let ops = Compose::new().then(CenterCrop::new(2, 2)).then(Flip::new(1.0, 0));
/// let s = ImageSample { image: Image::new_u8(4, 4, 1, (0..16).collect())?, record: Default::default() };
/// assert_eq!(ops.apply(s)?.image.pixels.as_u8(), Some(&[6, 5, 10, 9][..]));
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Compose {
    ops: Vec<Arc<dyn ImageOp>>,
}

impl Compose {
    /// No steps (the identity).
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a step.
    pub fn then(mut self, op: impl ImageOp) -> Self {
        self.ops.push(Arc::new(op));
        self
    }

    /// Whether there are no steps.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The steps' names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.ops.iter().map(|o| o.name()).collect()
    }
}

impl ImageOp for Compose {
    fn name(&self) -> &'static str {
        "augment"
    }
    fn apply(&self, sample: ImageSample) -> Result<ImageSample> {
        self.ops.iter().try_fold(sample, |s, op| op.apply(s))
    }
}

type Chunk<U> = BoxFuture<'static, Result<Vec<Result<U>>>>;
type Work<T, U> = Arc<dyn Fn(T) -> Result<U> + Send + Sync>;

/// Applies a per-element function with up to `k` micro-batches at work at
/// once on worker threads (in place under the inline runner) and as many
/// queued, re-sequenced so the output order equals the input order for
/// every `k` and runner. It is `map_par`'s machinery (the core's offload
/// group and micro-batching) under the operator's own name, so metrics and
/// stall attribution name `decode_image` or `random_resized_crop` rather
/// than a generic stage. Errors in the input pass through in place; a panic
/// in the function is an error naming the operator, and the stream ends
/// after it.
///
/// Created by [`MediaPipelineExt::map_images`](crate::MediaPipelineExt::map_images)
/// and the other chain methods.
///
/// ```
/// use zephon_core::{PipelineExt, Runner};
/// use zephon_media::{CenterCrop, Image, ImageSample, MediaPipelineExt};
/// let samples = (0..6u8).map(|i| Ok(ImageSample {
///     image: Image::new_u8(4, 4, 1, vec![i; 16]).unwrap(), record: Default::default() }));
/// let out: Vec<ImageSample> = futures::stream::iter(samples)
///     .map_images(CenterCrop::new(2, 2), 2)
///     .into_blocking_iter(Runner::threads())?
///     .collect::<Result<_, _>>()?;
/// assert_eq!(out.iter().map(|s| s.image.pixels.as_u8().unwrap()[0]).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[pin_project]
#[must_use = "streams do nothing unless polled"]
pub struct MapImages<S, T, U> {
    #[pin]
    inner: S,
    name: &'static str,
    detail: String,
    f: Work<T, U>,
    k: usize,
    micro: usize,
    pending: Vec<Result<T>>,
    in_flight: FuturesOrdered<Chunk<U>>,
    group: OffloadGroup,
    queued: usize,
    ready: VecDeque<Result<U>>,
    done: bool,
    failed: bool,
    probe: Probe,
    invalid: Option<zephon_core::Error>,
}

impl<S, T, U> MapImages<S, T, U> {
    /// Wraps `inner` with `f` under the operator name `name`, `k`
    /// micro-batches at work at once, `k` in 1 to 4096 (otherwise the first
    /// item is an error naming `<name>.parallelism`, and the stream ends).
    pub fn new(
        inner: S,
        name: &'static str,
        detail: String,
        f: impl Fn(T) -> Result<U> + Send + Sync + 'static,
        k: usize,
    ) -> Self {
        let invalid = crate::error::check(
            PARALLELISM.contains(k as u64),
            leak_key(name),
            PARALLELISM.message(k),
        )
        .err();
        let k = k.clamp(1, PARALLELISM.max as usize);
        MapImages {
            inner,
            name,
            detail,
            f: Arc::new(f),
            k,
            micro: DEFAULT_MICRO_BATCH,
            pending: Vec::new(),
            in_flight: FuturesOrdered::new(),
            group: OffloadGroup::new(k),
            queued: 0,
            ready: VecDeque::new(),
            done: false,
            failed: false,
            probe: Probe::default(),
            invalid,
        }
    }

    /// Fails the first poll with `e` (a configuration error found when the
    /// operator was built).
    pub(crate) fn invalid(mut self, e: Option<zephon_core::Error>) -> Self {
        if let Some(e) = e {
            self.invalid.get_or_insert(e);
        }
        self
    }

    /// Sets the micro-batch size (samples handed to a worker at once), 1 to
    /// 65,536 (otherwise the first item is an error naming it).
    pub fn micro_batch(mut self, n: usize) -> Self {
        let range = zephon_core::settings::MICRO_BATCH;
        if let Err(e) = crate::error::check(
            range.contains(n as u64),
            "map_images.micro_batch",
            range.message(n),
        ) {
            self.invalid.get_or_insert(e);
        }
        self.micro = n.clamp(1, range.max as usize);
        self
    }

    /// The parallelism.
    pub fn parallelism(&self) -> usize {
        self.k
    }

    /// The operator's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The stream this adapter reads from.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The stream this adapter reads from, mutably. Taking items from it
    /// directly bypasses this adapter.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The stream this adapter reads from; what the adapter holds
    /// (buffered or in-flight elements) is dropped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// The `<op>.parallelism` key of an operator's name (the names are a fixed
/// set, so each is made once).
fn leak_key(name: &'static str) -> &'static str {
    match name {
        "decode_image" => "decode_image.parallelism",
        "random_resized_crop" => "random_resized_crop.parallelism",
        "resize" => "resize.parallelism",
        "center_crop" => "center_crop.parallelism",
        "flip" => "flip.parallelism",
        "normalize" => "normalize.parallelism",
        "augment" => "augment.parallelism",
        "decode_audio" => "decode_audio.parallelism",
        "resample" => "resample.parallelism",
        "remix" => "remix.parallelism",
        "crop_audio" => "crop_audio.parallelism",
        "log_mel" => "log_mel.parallelism",
        "augment_audio" => "augment_audio.parallelism",
        _ => "map_images.parallelism",
    }
}

impl<S: fmt::Debug, T, U> fmt::Debug for MapImages<S, T, U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapImages")
            .field("inner", &self.inner)
            .field("name", &self.name)
            .field("detail", &self.detail)
            .field("parallelism", &self.k)
            .field("micro_batch", &self.micro)
            .field("in_flight", &self.in_flight.len())
            .finish_non_exhaustive()
    }
}

impl<S, T, U> Stream for MapImages<S, T, U>
where
    S: Stream<Item = Result<T>>,
    T: Send + 'static,
    U: Send + 'static,
{
    type Item = Result<U>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        if *this.failed {
            return Poll::Ready(None);
        }
        if let Some(e) = this.invalid.take() {
            *this.failed = true;
            return Poll::Ready(Some(Err(e)));
        }
        if *this.queued == 0 {
            *this.queued = in_flight_per_worker();
        }
        this.probe.attach(
            this.name,
            *this.k,
            Some((*this.queued * *this.k * *this.micro) as u64),
        );
        loop {
            if let Some(r) = this.ready.pop_front() {
                this.probe.output();
                return Poll::Ready(Some(r));
            }
            while this.in_flight.len() < *this.queued * *this.k && !*this.done {
                let upstream_pending = take_ready(
                    this.inner.as_mut(),
                    cx,
                    this.pending,
                    *this.micro,
                    this.probe,
                    this.done,
                );
                if this.pending.is_empty() {
                    if upstream_pending && this.in_flight.is_empty() {
                        this.probe.input_pending();
                    }
                    break;
                }
                let items = std::mem::take(this.pending);
                let f = this.f.clone();
                let stats = this.probe.shared();
                this.in_flight.push_back(offload(this.name, move || {
                    let t = stats.as_ref().map(|_| std::time::Instant::now());
                    let n = items.len() as u64;
                    let out = items.into_iter().map(|x| x.and_then(|x| f(x))).collect();
                    if let (Some(s), Some(t)) = (&stats, t) {
                        s.busy.record_many(t.elapsed().as_nanos() as u64, n);
                    }
                    out
                }));
                if let Some(s) = this.probe.stats() {
                    s.max_queue
                        .observe((this.in_flight.len() * *this.micro) as u64);
                }
                if upstream_pending {
                    break;
                }
            }
            let in_flight = &mut *this.in_flight;
            match this
                .group
                .enter(|| futures::StreamExt::poll_next_unpin(in_flight, cx))
            {
                Poll::Ready(Some(Ok(out))) => this.ready.extend(out),
                Poll::Ready(Some(Err(e))) => {
                    *this.failed = true;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => {
                    if *this.done {
                        this.probe.finish();
                        return Poll::Ready(None);
                    }
                    return Poll::Pending;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.failed {
            return (0, Some(0));
        }
        let (lo, hi) = self.inner.size_hint();
        let extra = self.ready.len() + self.pending.len();
        let flying = self.in_flight.len().saturating_mul(self.micro);
        (
            lo.saturating_add(extra),
            hi.and_then(|h| h.checked_add(extra)?.checked_add(flying)),
        )
    }
}

impl<S: Explain, T, U> Explain for MapImages<S, T, U> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.inner.describe(out);
        out.push(
            StageDescription::new(
                self.name,
                self.k,
                Some(
                    (match self.queued {
                        0 => in_flight_per_worker(),
                        n => n,
                    } * self.k
                        * self.micro) as u64,
                ),
                zephon_core::settings::explain_detail(
                    self.invalid.as_ref(),
                    format!("{}, micro-batches of {}", self.detail, self.micro),
                ),
            )
            .with_data(&self.detail),
        );
    }
}
