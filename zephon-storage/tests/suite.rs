//! The integration tests that can share a process, in one test binary.
//!
//! Each integration test file is a binary of its own unless it is a module
//! of one: every binary links the whole dependency tree, and one per file
//! filled gigabytes of disk and minutes of linking. A file here is a module;
//! `cargo test -p zephon-storage --test suite NAME::` runs one of them.
//!
//! The other files Cargo.toml names change what the whole process shares
//! (an environment variable, the global tracing subscriber or panic hook),
//! measure the process's memory, or map more files than the others may, so
//! each keeps a process of its own.

mod common;
mod hostile;

mod backends;
mod block_cache;
mod block_formats;
mod cache_node;
mod changed_object;
mod cloud;
mod dataset_root;
mod drip;
mod empty_lines;
mod fetch_chunks;
mod formats;
mod hostile_inputs;
mod http;
mod http_redirect;
mod input_messages;
mod listing;
mod local_bad_input;
mod local_in_place;
mod local_open;
mod local_special_files;
mod long_answer;
mod lying_block;
mod multi_range;
mod observe;
mod prefetch;
mod ranges;
mod s3;
mod shared_names;
mod shared_objects;
mod token_views;
mod trickle;
mod write;
mod wrong_range;
