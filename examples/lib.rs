//! Runnable examples for Zephon: see the `[[example]]` entries in this folder's Cargo.toml.

// The README's Rust code runs as doctests of this crate (its data paths are
// relative to this folder), so the README cannot drift from the API.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
