//! # zephon-burn
//!
//! The bridge between Zephon pipelines and Burn training loops, and the
//! model-step timing harness.
#![warn(missing_docs)]
