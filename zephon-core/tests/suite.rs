//! The integration tests that can share a process, in one test binary.
//!
//! Each integration test file is a binary of its own unless it is a module
//! of one: every binary links the whole dependency tree, and one per file
//! filled gigabytes of disk and minutes of linking. A file here is a module;
//! `cargo test -p zephon-core --test suite NAME::` runs one of them.
//!
//! `record_fields` installs a counting global allocator, so it keeps a binary
//! of its own.

mod adapter_api;
mod checkpoint;
mod context;
mod cpu_pool;
mod determinism;
mod exhaustion;
mod fetch_batch;
mod fetch_window;
mod foreign_adapters;
mod handoff;
mod hostile_checkpoints;
mod idle_runtime;
mod map_par_group;
mod observability;
mod observability_tracing;
mod outside_runtime;
mod panics;
mod restore_panics;
mod resume_chain;
mod schedules;
mod size_hint;
mod skips;
mod test_files;
mod text_view;
mod token_mixture;
mod tuning;
mod work_source;
