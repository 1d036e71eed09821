//! The harness of the hostile-input properties: byte mutations, a bound on
//! each case's time, and a tally of outcomes printed as a table row.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

/// How one case ended.
#[derive(Debug)]
pub enum Outcome {
    /// Accepted.
    Valid,
    /// Refused with an error that names what it should.
    Clean,
    /// Accepted or refused wrongly; says how.
    Silent(String),
}

/// The longest one case may take, debug build included: past it, a case
/// counts as a hang.
pub const CASE_LIMIT: Duration = Duration::from_secs(20);

/// `bytes`, and the same with up to three random edits: a byte replaced,
/// inserted or removed, a bit flipped, or the tail cut off.
pub fn mutated(bytes: impl Strategy<Value = Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let edit = (any::<prop::sample::Index>(), any::<u8>(), 0..5u8);
    (bytes, prop::collection::vec(edit, 0..4)).prop_map(|(mut data, edits)| {
        for (at, byte, op) in edits {
            let i = at.index(data.len() + 1);
            match op {
                0 if i < data.len() => data[i] = byte,
                1 => data.insert(i, byte),
                2 if i < data.len() => {
                    data.remove(i);
                }
                3 if i < data.len() => data[i] ^= 1 << (byte % 8),
                _ => data.truncate(i),
            }
        }
        data
    })
}

/// Counts of one class of input.
pub struct Tally {
    class: &'static str,
    counts: RefCell<[u64; 6]>,
}

impl Tally {
    pub fn new(class: &'static str) -> Self {
        Tally {
            class,
            counts: RefCell::new([0; 6]),
        }
    }

    /// Runs `cases` inputs of `strategy` through `judge`; a panic, a case
    /// past [`CASE_LIMIT`] or a silent change fails the property, so
    /// proptest shrinks it to a minimal input.
    pub fn run<S>(&self, cases: u32, strategy: S, judge: impl Fn(&S::Value) -> Outcome)
    where
        S: Strategy,
        S::Value: std::fmt::Debug,
    {
        let config = Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        };
        let result = TestRunner::new(config).run(&strategy, |input| {
            let start = Instant::now();
            let outcome = catch_unwind(AssertUnwindSafe(|| judge(&input)));
            let took = start.elapsed();
            let mut c = self.counts.borrow_mut();
            c[0] += 1;
            if took > CASE_LIMIT {
                c[4] += 1;
                return Err(TestCaseError::fail(format!("took {took:?}")));
            }
            match outcome {
                Ok(Outcome::Valid) => c[1] += 1,
                Ok(Outcome::Clean) => c[2] += 1,
                Err(_) => {
                    c[3] += 1;
                    return Err(TestCaseError::fail("panicked"));
                }
                Ok(Outcome::Silent(why)) => {
                    c[5] += 1;
                    return Err(TestCaseError::fail(why));
                }
            }
            Ok(())
        });
        if let Err(e) = result {
            panic!("{}: {e}", self.class);
        }
    }

    /// Prints the row: class, cases, valid, clean errors, panics, hangs,
    /// silent changes.
    pub fn finish(self) {
        let c = self.counts.into_inner();
        eprintln!("| class | cases | valid | clean errors | panics | hangs | silent changes |");
        eprintln!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            self.class, c[0], c[1], c[2], c[3], c[4], c[5]
        );
        assert!(c[0] > 0, "{}: no case ran", self.class);
    }
}
