//! Stream operators, one adapter per file.

pub mod batch;
pub mod fetch;
pub mod filter;
pub mod lane_mux;
pub mod map_par;
pub mod micro_batch;
pub mod prefetch_batches;
pub mod shuffle;
