//! [`Explain`] for streams and adapters of other crates (`futures`,
//! `tokio-stream`) and for boxed pipelines: each shows as an opaque stage, so
//! `explain()` compiles on a chain that mixes them with Zephon's operators.
//! `tokio-stream`'s adapters do not hand out the stream they wrap, so a plan
//! shows nothing before the last of them; `futures`' adapters of the same
//! names keep the stages before them.
//!
//! Stable Rust has no specialization, so there is no blanket "anything else
//! is opaque": these are the adapters a pipeline meets in practice. A
//! `futures` `.boxed()` stream cannot show what it wraps (its type is
//! erased to `dyn Stream`); [`PipelineExt::boxed_pipeline`] boxes a chain
//! and keeps its description.
//!
//! [`PipelineExt::boxed_pipeline`]: crate::PipelineExt::boxed_pipeline

use super::{Explain, StageDescription};
use futures::Stream;
use futures::stream as fs;
use std::pin::Pin;

/// A chain that can describe itself: what [`BoxPipeline`] erases to.
/// Implemented for every stream that implements [`Explain`].
pub trait ExplainStream: Stream + Explain {}

impl<S: Stream + Explain + ?Sized> ExplainStream for S {}

/// A boxed pipeline that keeps its description: built by
/// [`PipelineExt::boxed_pipeline`](crate::PipelineExt::boxed_pipeline), for
/// pipelines assembled at run time (a recipe's list of stages).
pub type BoxPipeline<'a, T> = Pin<Box<dyn ExplainStream<Item = T> + Send + 'a>>;

impl<T> Explain for Pin<Box<dyn ExplainStream<Item = T> + Send + '_>> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        self.as_ref().get_ref().describe(out);
    }
}

impl<T> Explain for Pin<Box<dyn Stream<Item = T> + Send + '_>> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        out.push(StageDescription::opaque(
            "boxed",
            "a boxed stream: what it wraps is not visible (boxed_pipeline keeps it)",
        ));
    }
}

impl<T> Explain for Pin<Box<dyn Stream<Item = T> + '_>> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        out.push(StageDescription::opaque(
            "boxed",
            "a boxed stream: what it wraps is not visible (boxed_pipeline keeps it)",
        ));
    }
}

impl<I> Explain for fs::Iter<I> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        out.push(StageDescription::opaque(
            "iter",
            "a stream over an iterator",
        ));
    }
}

impl<T> Explain for fs::Empty<T> {
    fn describe(&self, out: &mut Vec<StageDescription>) {
        out.push(StageDescription::opaque("empty", "an empty stream"));
    }
}

/// An adapter with one upstream it can hand out: the upstream's stages,
/// then the adapter as an opaque stage.
macro_rules! opaque_adapter {
    ($name:literal, $detail:literal, [$($g:ident),*], $ty:ty $(, where $($bound:tt)*)?) => {
        impl<St: Explain, $($g),*> Explain for $ty $(where $($bound)*)? {
            fn describe(&self, out: &mut Vec<StageDescription>) {
                self.get_ref().describe(out);
                out.push(StageDescription::opaque($name, $detail));
            }
        }
    };
}

opaque_adapter!("map", "futures map", [F], fs::Map<St, F>);
opaque_adapter!("inspect", "futures inspect", [F], fs::Inspect<St, F>);
opaque_adapter!("fuse", "futures fuse", [], fs::Fuse<St>);
opaque_adapter!("take", "futures take", [], fs::Take<St>, where St: Stream);
opaque_adapter!("skip", "futures skip", [], fs::Skip<St>, where St: Stream);
opaque_adapter!("enumerate", "futures enumerate", [], fs::Enumerate<St>, where St: Stream);
opaque_adapter!("peekable", "futures peekable", [], fs::Peekable<St>, where St: Stream);
opaque_adapter!("chunks", "futures chunks", [], fs::Chunks<St>, where St: Stream);
opaque_adapter!("ready_chunks", "futures ready_chunks", [], fs::ReadyChunks<St>, where St: Stream);
opaque_adapter!("flat_map", "futures flat_map: inner streams made as it goes", [U, F], fs::FlatMap<St, U, F>);
opaque_adapter!("then", "futures then", [Fut, F], fs::Then<St, Fut, F>,
    where St: Stream, F: FnMut(St::Item) -> Fut);
opaque_adapter!("filter", "futures filter", [Fut, F], fs::Filter<St, Fut, F>,
    where St: Stream, F: FnMut(&St::Item) -> Fut, Fut: Future<Output = bool>);
opaque_adapter!("filter_map", "futures filter_map", [Fut, F], fs::FilterMap<St, Fut, F>,
    where St: Stream, F: FnMut(St::Item) -> Fut, Fut: Future);
opaque_adapter!("take_while", "futures take_while", [Fut, F], fs::TakeWhile<St, Fut, F>,
    where St: Stream, F: FnMut(&St::Item) -> Fut, Fut: Future<Output = bool>);
opaque_adapter!("skip_while", "futures skip_while", [Fut, F], fs::SkipWhile<St, Fut, F>,
    where St: Stream, F: FnMut(&St::Item) -> Fut, Fut: Future<Output = bool>);

/// A `tokio-stream` adapter: one opaque stage. Unlike `futures`' adapters,
/// those of `tokio-stream` do not hand out the stream they wrap, so what
/// feeds them cannot be described: the plan starts at the adapter (the
/// adapter of the same name from `futures::StreamExt` keeps the stages
/// before it).
macro_rules! tokio_adapter {
    ($name:literal, [$($g:ident),*], $ty:ty $(, where $($bound:tt)*)?) => {
        impl<$($g),*> Explain for $ty $(where $($bound)*)? {
            fn describe(&self, out: &mut Vec<StageDescription>) {
                out.push(StageDescription::opaque(
                    concat!("tokio_stream ", $name),
                    "tokio-stream adapter: the stages before it are hidden (it does not hand out its upstream); \
                     futures' adapter of the same name keeps them",
                ));
            }
        }
    };
}

use tokio_stream::adapters as ts;
tokio_adapter!("map", [St, F], ts::Map<St, F>);
tokio_adapter!("map_while", [St, F], ts::MapWhile<St, F>);
tokio_adapter!("filter", [St, F], ts::Filter<St, F>);
tokio_adapter!("filter_map", [St, F], ts::FilterMap<St, F>);
tokio_adapter!("fuse", [St], ts::Fuse<St>);
tokio_adapter!("take", [St], ts::Take<St>);
tokio_adapter!("take_while", [St, F], ts::TakeWhile<St, F>);
tokio_adapter!("skip", [St], ts::Skip<St>);
tokio_adapter!("skip_while", [St, F], ts::SkipWhile<St, F>);
tokio_adapter!("then", [St, Fut, F], ts::Then<St, Fut, F>);
tokio_adapter!("chain", [A, B], ts::Chain<A, B>);
tokio_adapter!("merge", [A, B], ts::Merge<A, B>);
tokio_adapter!("peekable", [St], ts::Peekable<St>, where St: Stream);
