//! The harness of `hostile_inputs.rs`: byte mutations, an independent
//! resolver that says where a path would land, and a tally of outcomes.

pub mod inputs;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// How one case ended.
#[derive(Debug)]
pub enum Outcome {
    /// Accepted, and what came out is right.
    Valid,
    /// Refused with a message fit to show.
    Clean,
    /// Accepted (or refused) wrongly; says how.
    Silent(String),
}

impl Outcome {
    /// A refusal: clean unless its message carries raw control characters
    /// (bytes of the input written to a terminal or log as they are).
    pub fn error(message: &str) -> Outcome {
        if message.is_empty() {
            Outcome::Silent("an empty error message".into())
        } else if message.chars().any(char::is_control) {
            Outcome::Silent(format!("raw control characters in {message:?}"))
        } else {
            Outcome::Clean
        }
    }
}

/// Where `path` lands, resolved as leniently as any backend might (opendal
/// trims whitespace and drops empty segments, URL clients fold `..`, some
/// servers take `\` for `/`): the normalized path when it stays under the
/// root, `None` when it leaves it or names the root itself.
pub fn inside(path: &str) -> Option<String> {
    if path.contains("://") || path.starts_with(['/', '\\']) || path.chars().any(char::is_control) {
        return None;
    }
    let mut names: Vec<&str> = Vec::new();
    for name in path.split(['/', '\\']).map(str::trim) {
        match name {
            "" | "." => {}
            ".." => {
                names.pop()?;
            }
            n => names.push(n),
        }
    }
    (!names.is_empty()).then(|| names.join("/"))
}

/// `bytes`, and the same with up to three random edits: a byte replaced,
/// inserted or removed, or the tail cut off.
pub fn mutated(bytes: impl Strategy<Value = Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let edit = (any::<prop::sample::Index>(), any::<u8>(), 0..4u8);
    (bytes, prop::collection::vec(edit, 0..4)).prop_map(|(mut data, edits)| {
        for (at, byte, op) in edits {
            let i = at.index(data.len() + 1);
            match op {
                0 if i < data.len() => data[i] = byte,
                1 => data.insert(i, byte),
                2 if i < data.len() => {
                    data.remove(i);
                }
                _ => data.truncate(i),
            }
        }
        data
    })
}

/// Counts of one class of input.
pub struct Tally {
    class: &'static str,
    cases: u64,
    valid: u64,
    clean: u64,
    panics: u64,
    silent: u64,
    failure: Option<String>,
}

impl Tally {
    pub fn new(class: &'static str) -> Self {
        Tally {
            class,
            cases: 0,
            valid: 0,
            clean: 0,
            panics: 0,
            silent: 0,
            failure: None,
        }
    }

    /// Runs `cases` inputs of `strategy` through `judge`; a panic or a
    /// silent change fails the case, so proptest shrinks it to a minimal input.
    pub fn run<S>(&mut self, cases: u32, strategy: S, judge: impl Fn(&S::Value) -> Outcome)
    where
        S: Strategy,
        S::Value: std::fmt::Debug,
    {
        let config = Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        };
        let counts = RefCell::new((0u64, 0u64, 0u64, 0u64, 0u64));
        let result = TestRunner::new(config).run(&strategy, |input| {
            let outcome = catch_unwind(AssertUnwindSafe(|| judge(&input)));
            let mut c = counts.borrow_mut();
            c.0 += 1;
            match outcome {
                Ok(Outcome::Valid) => c.1 += 1,
                Ok(Outcome::Clean) => c.2 += 1,
                Err(_) => {
                    c.3 += 1;
                    return Err(TestCaseError::fail("panicked"));
                }
                Ok(Outcome::Silent(why)) => {
                    c.4 += 1;
                    return Err(TestCaseError::fail(why));
                }
            }
            Ok(())
        });
        let c = counts.into_inner();
        self.cases += c.0;
        self.valid += c.1;
        self.clean += c.2;
        self.panics += c.3;
        self.silent += c.4;
        if let Err(e) = result {
            self.failure.get_or_insert(e.to_string());
        }
    }

    /// Prints the row and fails on any panic or silent change.
    pub fn finish(self) {
        eprintln!("| class | cases | valid | clean errors | panics | silent changes |");
        eprintln!(
            "| {} | {} | {} | {} | {} | {} |",
            self.class, self.cases, self.valid, self.clean, self.panics, self.silent
        );
        assert!(
            self.failure.is_none() && self.panics == 0 && self.silent == 0,
            "{}: {}",
            self.class,
            self.failure.unwrap_or_default()
        );
    }
}
