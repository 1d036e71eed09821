//! The integration tests that can share a process, in one test binary.
//!
//! Each integration test file is a binary of its own unless it is a module
//! of one: every binary links the whole dependency tree, and one per file
//! filled gigabytes of disk and minutes of linking. A file here is a module;
//! `cargo test -p zephon-burn --test suite NAME::` runs one of them.
//!
//! `learner` and `wgpu` need features of their own, so each keeps its binary.

mod common;

mod config_errors;
mod dataloader;
mod item_count;
mod lm;
mod precision;
mod resume;
mod resume_errors;
mod stall_attribution;
mod timing_outputs;
