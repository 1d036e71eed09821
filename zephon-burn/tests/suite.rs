//! The integration tests that can share a process, in one test binary.
//!
//! Each integration test file is a binary of its own unless it is a module
//! of one: every binary links the whole dependency tree, and one per file
//! filled gigabytes of disk and minutes of linking. A file here is a module;
//! `cargo test -p zephon-burn --test suite NAME::` runs one of them.
//!
//! `learner` and `wgpu` need features of their own, so each keeps its binary;
//! `media` and `image_timing` join this one when the `media` feature is on.

mod common;

mod config_errors;
mod dataloader;
#[cfg(feature = "media")]
mod image_timing;
mod item_count;
mod lm;
#[cfg(feature = "media")]
mod media;
mod precision;
mod resume;
mod resume_errors;
mod stall_attribution;
mod timing_outputs;
