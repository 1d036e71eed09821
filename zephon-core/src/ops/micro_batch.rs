//! Gathering a micro-batch for operators that hand work to worker threads
//! (`map_par` here, `tokenize` in zephon-ops).

use crate::context::Probe;
use futures::Stream;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Moves the items `inner` has ready now into `pending`, up to `micro` of
/// them, without waiting to fill it: a micro-batch leaves as soon as
/// upstream has nothing more at once. Sets `done` at the end of the stream;
/// returns whether upstream was pending.
///
/// ```
/// use futures::stream;
/// use std::task::Context;
/// use zephon_core::context::Probe;
/// use zephon_core::ops::micro_batch::take_ready;
/// let mut s = stream::iter(0..5);
/// let (mut pending, mut done, mut probe) = (Vec::new(), false, Probe::default());
/// let mut cx = Context::from_waker(futures::task::noop_waker_ref());
/// let waiting = take_ready(std::pin::Pin::new(&mut s), &mut cx, &mut pending, 3, &mut probe, &mut done);
/// assert_eq!((pending, waiting, done), (vec![0, 1, 2], false, false));
/// ```
pub fn take_ready<S: Stream + ?Sized>(
    mut inner: Pin<&mut S>,
    cx: &mut Context<'_>,
    pending: &mut Vec<S::Item>,
    micro: usize,
    probe: &mut Probe,
    done: &mut bool,
) -> bool {
    while pending.len() < micro {
        match inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(item)) => {
                probe.input();
                pending.push(item);
            }
            Poll::Ready(None) => {
                *done = true;
                return false;
            }
            Poll::Pending => return true,
        }
    }
    false
}
