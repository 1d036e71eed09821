//! The crate's integration tests, in one binary.

mod suite {
    pub mod common;
    mod determinism;
    mod formats;
    mod hostile;
}
