//! Operators that need a tokio runtime say so when polled outside one,
//! instead of quietly running sequentially.

use futures::StreamExt;
use futures::executor::block_on;
use zephon_core::{Error, PipelineExt, Record};

fn records(n: usize) -> impl futures::Stream<Item = Result<Record, Error>> + Send {
    futures::stream::iter((0..n).map(|_| Ok(Record::new())))
}

#[test]
fn prefetch_batches_outside_a_runtime_is_an_error_naming_it() {
    let out: Vec<_> = block_on(records(8).batch(2).prefetch_batches(2).collect());
    assert_eq!(out.len(), 1, "the error, then the end");
    let msg = out[0].as_ref().unwrap_err().to_string();
    assert!(
        msg.contains("prefetch_batches") && msg.contains("outside a tokio runtime"),
        "{msg}"
    );
}

#[test]
fn prefetch_batches_of_depth_zero_needs_no_runtime() {
    let out: Vec<_> = block_on(records(8).batch(2).prefetch_batches(0).collect());
    assert_eq!(out.len(), 4);
    assert!(out.iter().all(Result::is_ok));
}

#[test]
fn map_par_outside_a_runtime_is_an_error_naming_it() {
    let out: Vec<_> = block_on(records(8).map_par(Ok, 2).collect());
    let msg = out[0].as_ref().unwrap_err().to_string();
    assert!(
        msg.contains("map_par") && msg.contains("outside a tokio runtime"),
        "{msg}"
    );
}
