//! The timing configuration's values checked against their documented
//! ranges ([`limits`](crate::limits)), and where inside a section a parse
//! error sits.

use super::{DataConfig, ModelConfig, TimingConfig};
use crate::error::{Error, Result};
use crate::limits::{LAYERS, MODEL_DIM, VOCAB_SIZE, in_range};
use crate::models::autoencoder::{AutoencoderConfig, DummyData};
use crate::models::lm::{LmConfig, TextData};
use zephon_core::settings::SEQ_LEN;

impl TimingConfig {
    /// Sizes, dimensions, dropout and the loss scaler against their
    /// documented ranges, so Burn never sees a value it panics on.
    pub(super) fn check_ranges(&self) -> Result<()> {
        match &self.model {
            ModelConfig::Autoencoder(m) => {
                in_range("model.input_dim", m.input_dim, MODEL_DIM)?;
                in_range("model.hidden_dim", m.hidden_dim, MODEL_DIM)?;
                in_range("model.latent_dim", m.latent_dim, MODEL_DIM)?;
            }
            ModelConfig::TransformerLm(m) => {
                in_range("model.vocab_size", m.vocab_size, VOCAB_SIZE)?;
                in_range("model.d_model", m.d_model, MODEL_DIM)?;
                in_range("model.n_heads", m.n_heads, MODEL_DIM)?;
                in_range("model.n_layers", m.n_layers, LAYERS)?;
                in_range("model.d_ff", m.d_ff, MODEL_DIM)?;
                in_range("model.max_seq_len", m.max_seq_len, SEQ_LEN)?;
                if !(0.0..1.0).contains(&m.dropout) {
                    return Err(Error::config(
                        "model.dropout",
                        format!("{} is outside [0, 1)", m.dropout),
                    ));
                }
            }
            #[cfg(feature = "media")]
            ModelConfig::ImageClassifier(m) => {
                in_range("model.in_channels", m.in_channels, MODEL_DIM)?;
                in_range("model.conv_channels", m.conv_channels[0], MODEL_DIM)?;
                in_range("model.conv_channels", m.conv_channels[1], MODEL_DIM)?;
                in_range("model.num_classes", m.num_classes, MODEL_DIM)?;
            }
        }
        match &self.data {
            DataConfig::Dummy(d) => d.validate()?,
            DataConfig::SyntheticText(d) => d.validate()?,
            #[cfg(feature = "media")]
            DataConfig::WebdatasetImages(d) => d.validate()?,
        }
        let t = &self.timing;
        if t.max_batches_per_epoch == Some(0) {
            return Err(Error::config(
                "timing.max_batches_per_epoch",
                "0 batches; use at least 1, or leave it out for whole epochs",
            ));
        }
        let sc = &t.scaler;
        let scaler = |key: &str, v: f32, ok: bool, want: &str| -> Result<()> {
            if v.is_finite() && ok {
                Ok(())
            } else {
                Err(Error::config(key, format!("{v} must be finite and {want}")))
            }
        };
        scaler(
            "timing.scaler.init_scale",
            sc.init_scale,
            sc.init_scale > 0.0,
            "positive",
        )?;
        scaler(
            "timing.scaler.growth_factor",
            sc.growth_factor,
            sc.growth_factor >= 1.0,
            "at least 1",
        )?;
        scaler(
            "timing.scaler.backoff_factor",
            sc.backoff_factor,
            sc.backoff_factor > 0.0 && sc.backoff_factor < 1.0,
            "in (0, 1)",
        )?;
        if sc.growth_interval == 0 {
            return Err(Error::config(
                "timing.scaler.growth_interval",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

/// The full key of an error inside the `model` or `data` section, found by
/// reading that section again as the struct its `name` selects.
pub(super) fn key_inside_section(text: &str, section: &str) -> Option<String> {
    use serde_yaml_ng::Value;
    fn path_of<T: serde::de::DeserializeOwned>(v: Value) -> Option<String> {
        serde_path_to_error::deserialize::<_, T>(v)
            .err()
            .map(|e| e.path().to_string())
    }
    let doc: Value = serde_yaml_ng::from_str(text).ok()?;
    let mut fields = doc.get(section)?.as_mapping()?.clone();
    let name = fields.remove("name")?;
    let fields = Value::Mapping(fields);
    let inner = match (section, name.as_str()?) {
        ("model", "autoencoder") => path_of::<AutoencoderConfig>(fields),
        ("model", "transformer_lm") => path_of::<LmConfig>(fields),
        ("data", "dummy") => path_of::<DummyData>(fields),
        ("data", "synthetic_text") => path_of::<TextData>(fields),
        #[cfg(feature = "media")]
        ("model", "image_classifier") => {
            path_of::<crate::models::image_classifier::ImageClassifierConfig>(fields)
        }
        #[cfg(feature = "media")]
        ("data", "webdataset_images") => {
            path_of::<crate::models::image_classifier::ImageData>(fields)
        }
        _ => None,
    }?;
    Some(format!("{section}.{inner}"))
}
