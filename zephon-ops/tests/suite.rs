//! The integration tests that can share a process, in one test binary.
//!
//! Each integration test file is a binary of its own unless it is a module
//! of one: every binary links the whole dependency tree, and one per file
//! filled gigabytes of disk and minutes of linking. A file here is a module;
//! `cargo test -p zephon-ops --test suite NAME::` runs one of them.
//!
//! `checkpoint` installs a counting global allocator, so it keeps a binary of
//! its own.

mod hostile;

mod adapter_api;
mod chat_parity;
mod hostile_templates;
mod hostile_tokenizers;
mod observe;
mod pack_loss_mask;
mod pack_props;
mod pipeline;
mod python_parity_pack;
mod to_training;
mod tokenize_chat;
mod tokenize_options;
mod tokenizer_panics;
mod tokenizer_parity;
mod tuned;
