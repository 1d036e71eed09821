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

/// The opposite case: a blocking iterator used on a tokio runtime's
/// thread. One whose items are all ready runs there, and dropping it no
/// longer panics ("cannot drop a runtime in a context where blocking is not
/// allowed"); one that has to wait says tokio will not block there, as an
/// error item, not a panic out of the caller.
#[test]
fn into_blocking_iter_on_a_runtime_thread_ends_without_a_panic() {
    use zephon_core::Runner;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ready = std::panic::catch_unwind(|| {
        rt.block_on(async {
            records(8)
                .into_blocking_iter(Runner::Inline)
                .unwrap()
                .count()
        })
    })
    .expect("no panic");
    assert_eq!(ready, 8);
    let waiting = std::panic::catch_unwind(|| {
        rt.block_on(async {
            let s = futures::stream::iter(0..4u32).then(|i| async move {
                tokio::task::yield_now().await;
                Ok::<u32, Error>(i)
            });
            s.into_blocking_iter(Runner::Inline)
                .unwrap()
                .map(|r| r.map_err(|e| e.to_string()))
                .collect::<Vec<_>>()
        })
    })
    .expect("no panic");
    let e = waiting.last().unwrap().as_ref().unwrap_err();
    assert!(e.contains("within a runtime"), "{e}");
    // From a blocking thread of that runtime it runs through.
    let n = rt
        .block_on(rt.spawn_blocking(|| {
            let s = futures::stream::iter(0..4u32).then(|i| async move {
                tokio::task::yield_now().await;
                Ok::<u32, Error>(i)
            });
            s.into_blocking_iter(Runner::Inline).unwrap().count()
        }))
        .unwrap();
    assert_eq!(n, 4);
}
