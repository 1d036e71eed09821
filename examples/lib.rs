//! Runnable examples for Zephon: see the `[[example]]` entries in this folder's Cargo.toml.

// The README's Rust code runs as doctests of this crate (its data paths are
// relative to this folder), so the README cannot drift from the API.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

// The guide's chapters with Rust code run the same way (guide/src/*.md). The
// tuning chapter is not among them: it includes the programs of
// examples/guide/ verbatim, which the test command builds and runs.
#[doc = include_str!("../guide/src/getting-started.md")]
#[cfg(doctest)]
pub struct GuideGettingStarted;

#[doc = include_str!("../guide/src/work-source.md")]
#[cfg(doctest)]
pub struct GuideWorkSource;

#[doc = include_str!("../guide/src/operators.md")]
#[cfg(doctest)]
pub struct GuideOperators;

#[doc = include_str!("../guide/src/text.md")]
#[cfg(doctest)]
pub struct GuideText;

#[doc = include_str!("../guide/src/checkpoints.md")]
#[cfg(doctest)]
pub struct GuideCheckpoints;
