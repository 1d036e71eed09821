//! Stream operators, one adapter per file.

pub mod batch;
pub mod fetch;
pub mod filter;
pub mod lane_mux;
pub mod map_par;
pub mod micro_batch;
pub mod prefetch_batches;
pub mod shuffle;

/// The checks of zephon-core's own operators' cut states that need no
/// operator (see [`StateCheck`](crate::cut::StateCheck)): run on
/// every checkpoint loaded.
pub(crate) const STATE_CHECKS: &[(&str, crate::cut::StateCheck)] =
    &[(shuffle::NAME, shuffle::check_state)];
