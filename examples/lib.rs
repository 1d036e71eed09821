//! Runnable examples for Zephon: see the `[[example]]` entries in this folder's Cargo.toml.
