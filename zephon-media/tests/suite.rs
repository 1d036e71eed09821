//! The crate's integration tests, in one binary.

mod suite {
    pub mod audio_common;
    mod audio_determinism;
    mod audio_formats;
    mod audio_fuzz;
    mod audio_hostile;
    mod audio_log_mel;
    mod audio_ops;
    pub mod common;
    mod determinism;
    mod formats;
    mod hostile;
}
