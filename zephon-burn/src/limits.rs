//! The documented ranges of the timing harness's values (model sizes,
//! synthetic data), which the configuration and the models check alike.

use crate::error::{Error, Result};
use zephon_core::settings::Range;

/// Model widths (input, hidden, latent, `d_model`, `d_ff`, heads): a weight
/// matrix is width by width, so 65,536 is already 16 GiB of f32.
pub const MODEL_DIM: Range = Range::new(1, 65_536, "a weight matrix is width by width");

/// Vocabulary size: the embedding and output layers are `vocab_size` rows.
pub const VOCAB_SIZE: Range = Range::new(1, 1 << 24, "the embedding has a row per id");

/// Transformer layers.
pub const LAYERS: Range = Range::new(1, 1024, "every layer holds its weights");

/// `Ok` if `v` lies in `r`, else a config error naming `key` and the range.
pub(crate) fn in_range(key: &str, v: usize, r: Range) -> Result<()> {
    if r.contains(v as u64) {
        Ok(())
    } else {
        Err(Error::config(key, r.message(v)))
    }
}

/// Samples or documents of the synthetic data, generated in memory.
pub const SAMPLES: Range = Range::new(1, 1 << 24, "the data is generated in memory");
