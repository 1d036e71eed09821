//! The slowest response body accepted. `io_timeout` bounds each wait for
//! the next chunk, so a server that drips a body (a byte every few
//! seconds: broken, overloaded past use, or hostile) would hold a read for
//! hours without ever tripping it. Every `io_timeout` of waiting on a body
//! must instead bring at least `min_rate` bytes a second, or the read
//! fails, naming the rate. Only time spent waiting on the server counts: a
//! reader that is slow to ask for the next chunk is not the server's fault;
//! and the wait for the first chunk does not (a server's time to answer is
//! bounded by the timeouts, and counting it would hold a small body that
//! came late to a rate it has too few bytes to show).

use futures::Stream;
use opendal::Buffer;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The slowest body a backend accepts: `min_rate` bytes a second over each
/// `window` of waiting (`StorageOptions::min_rate` over `io_timeout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pacing {
    pub(crate) min_rate: u64,
    pub(crate) window: Duration,
}

/// One body's progress against its [`Pacing`].
#[derive(Debug)]
pub(crate) struct Pace {
    pacing: Pacing,
    waited: Duration,
    got: u64,
    started: bool,
}

impl Pace {
    pub(crate) fn new(pacing: Pacing) -> Self {
        Pace {
            pacing,
            waited: Duration::ZERO,
            got: 0,
            started: false,
        }
    }

    /// Counts a chunk of `n` bytes that came after `waited` of waiting (the
    /// first chunk's wait does not count); an error once a window of
    /// waiting brought fewer than the rate asks.
    pub(crate) fn add(&mut self, n: u64, waited: Duration) -> Result<(), String> {
        let Pacing { min_rate, window } = self.pacing;
        if min_rate == 0 {
            return Ok(());
        }
        self.got += n;
        if std::mem::replace(&mut self.started, true) {
            self.waited += waited;
        }
        if self.waited < window {
            return Ok(());
        }
        let secs = self.waited.as_secs_f64();
        if (self.got as f64) < min_rate as f64 * secs {
            return Err(format!(
                "the server sent {} bytes in {secs:.1} s of waiting, slower than min_rate \
                 ({min_rate} bytes/s)",
                self.got
            ));
        }
        (self.waited, self.got) = (Duration::ZERO, 0);
        Ok(())
    }
}

/// A response body held to a [`Pace`]: the chunk that shows it too slow
/// comes out as an error instead. The error is permanent: the retry layer
/// resumes a read that made progress with a fresh count of retries, so a
/// drip that sends a little each window would be retried without end.
pub(crate) struct Paced<S> {
    inner: S,
    pace: Pace,
    waiting_since: Option<Instant>,
}

impl<S> Paced<S> {
    pub(crate) fn new(inner: S, pacing: Pacing) -> Self {
        Paced {
            inner,
            pace: Pace::new(pacing),
            waiting_since: None,
        }
    }
}

impl<S> Stream for Paced<S>
where
    S: Stream<Item = opendal::Result<Buffer>> + Unpin,
{
    type Item = opendal::Result<Buffer>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let since = *this.waiting_since.get_or_insert_with(Instant::now);
        let item = std::task::ready!(Pin::new(&mut this.inner).poll_next(cx));
        this.waiting_since = None;
        Poll::Ready(match item {
            Some(Ok(b)) => Some(
                this.pace
                    .add(b.len() as u64, since.elapsed())
                    .map(|()| b)
                    .map_err(|m| opendal::Error::new(opendal::ErrorKind::Unexpected, m)),
            ),
            other => other,
        })
    }
}

impl crate::options::StorageOptions {
    /// The slowest body accepted: `min_rate` over each `io_timeout`.
    pub(crate) fn pacing(&self) -> Pacing {
        Pacing {
            min_rate: self.min_rate,
            window: self.io_timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN_S: Pacing = Pacing {
        min_rate: 1024,
        window: Duration::from_secs(10),
    };

    #[test]
    fn a_window_of_waiting_must_bring_the_rate() {
        let mut p = Pace::new(TEN_S);
        // Fast chunks never fill a window of waiting.
        for _ in 0..1000 {
            p.add(1, Duration::from_micros(10)).unwrap();
        }
        // A drip: a byte every 4 s fails once 10 s of waiting brought 3
        // (the wait for the first, the server's time to answer, is not
        // counted).
        let mut p = Pace::new(TEN_S);
        p.add(1, Duration::from_secs(60)).unwrap();
        p.add(1, Duration::from_secs(4)).unwrap();
        p.add(1, Duration::from_secs(4)).unwrap();
        let e = p.add(1, Duration::from_secs(4)).unwrap_err();
        assert!(
            e.contains("4 bytes in 12.0 s") && e.contains("min_rate"),
            "{e}"
        );
    }

    #[test]
    fn a_slow_but_steady_body_passes_window_after_window() {
        let mut p = Pace::new(TEN_S);
        for _ in 0..100 {
            // 2 KiB a second.
            p.add(2048, Duration::from_secs(1)).unwrap();
        }
        // Off: nothing is too slow.
        let mut p = Pace::new(Pacing {
            min_rate: 0,
            ..TEN_S
        });
        p.add(0, Duration::from_secs(3600)).unwrap();
    }
}
