//! # zephon-ops
//!
//! The CPU-heavy text operators of Zephon: tokenize, pack sequences, hold a
//! token-level mixture, and collate batches for training.
#![warn(missing_docs)]
