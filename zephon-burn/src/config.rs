//! The YAML configuration of `zephon timing`, and the run it describes.

mod check;

use crate::device::{DeviceChoice, Precision};
use crate::error::{Error, Result};
use crate::harness::{self, HarnessConfig, ScalerConfig, SummaryFile, TimingRun};
pub use crate::limits::{LAYERS, MODEL_DIM, SAMPLES, VOCAB_SIZE};
use crate::models::autoencoder::{Autoencoder, AutoencoderConfig, DummyData};
#[cfg(feature = "media")]
use crate::models::image_classifier::{
    ImageClassifier, ImageClassifierConfig, ImageData, ShardStore,
};
use crate::models::lm::{LmConfig, TextData, TransformerLm};
use burn::optim::{AdamConfig, AdamWConfig, ModuleOptimizer, SgdConfig};
use check::key_inside_section;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The Burn version this crate is built against (recorded in `benchmark_config.yaml`).
pub const BURN_VERSION: &str = "0.22.1";

/// Longest timing config read, as a recipe's.
const CONFIG_LIMIT: u64 = 16 << 20;

/// A timing configuration file.
///
/// ```
/// use zephon_burn::TimingConfig;
/// let cfg = TimingConfig::from_yaml_str(r#"
/// model: { name: autoencoder, input_dim: 16, hidden_dim: 8, latent_dim: 4 }
/// data: { name: dummy, num_samples: 64, batch_size: 8, input_dim: 16 }
/// "#).unwrap();
/// assert_eq!(cfg.optimizer.lr, 1e-3);
/// let err = TimingConfig::from_yaml_str("model: { name: autoencoder, input_dim: 16, hiden_dim: 8, latent_dim: 4 }\ndata: { name: dummy, num_samples: 64, batch_size: 8, input_dim: 16 }").unwrap_err();
/// assert!(err.to_string().contains("hiden_dim"));
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimingConfig {
    /// The model to time.
    pub model: ModelConfig,
    /// The data that feeds it.
    pub data: DataConfig,
    /// The optimizer.
    #[serde(default)]
    pub optimizer: OptimizerConfig,
    /// Harness settings.
    #[serde(default)]
    pub timing: TimingSection,
}

/// The built-in models, chosen by `name`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case")]
pub enum ModelConfig {
    /// The chapter's autoencoder.
    Autoencoder(AutoencoderConfig),
    /// A small transformer language model.
    TransformerLm(LmConfig),
    /// A small image classifier (feature `media`).
    #[cfg(feature = "media")]
    ImageClassifier(ImageClassifierConfig),
}

/// The built-in data modules, chosen by `name`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case")]
pub enum DataConfig {
    /// Random feature vectors (for the autoencoder).
    Dummy(DummyData),
    /// Synthetic documents through a tokenize -> batch -> collate pipeline (for the LM).
    SyntheticText(TextData),
    /// WebDataset shards of JPEGs and labels through decode -> crop -> flip
    /// -> collate (for the image classifier; feature `media`).
    #[cfg(feature = "media")]
    WebdatasetImages(ImageData),
}

/// The optimizer and its learning rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimizerConfig {
    /// `adam`, `adamw` or `sgd`.
    #[serde(default = "default_optimizer")]
    pub name: String,
    /// Learning rate.
    #[serde(default = "default_lr")]
    pub lr: f64,
    /// Adam's epsilon (raise it, e.g. to 1e-4, for pure f16 training).
    #[serde(default)]
    pub epsilon: Option<f32>,
    /// AdamW's weight decay.
    #[serde(default)]
    pub weight_decay: Option<f32>,
}

fn default_optimizer() -> String {
    "adam".into()
}

fn default_lr() -> f64 {
    1e-3
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        OptimizerConfig {
            name: default_optimizer(),
            lr: default_lr(),
            epsilon: None,
            weight_decay: None,
        }
    }
}

impl OptimizerConfig {
    /// The optimizers accepted in `optimizer.name`.
    pub const NAMES: [&'static str; 3] = ["adam", "adamw", "sgd"];

    /// Builds the optimizer.
    pub fn build(&self) -> Result<ModuleOptimizer> {
        Ok(match self.name.as_str() {
            "adam" => {
                let c = AdamConfig::new();
                match self.epsilon {
                    Some(e) => c.with_epsilon(e),
                    None => c,
                }
                .init()
            }
            "adamw" => {
                let mut c = AdamWConfig::new();
                if let Some(e) = self.epsilon {
                    c = c.with_epsilon(e);
                }
                if let Some(w) = self.weight_decay {
                    c = c.with_weight_decay(w);
                }
                c.init()
            }
            "sgd" => SgdConfig::new().init(),
            other => {
                return Err(Error::config(
                    "optimizer.name",
                    format!(
                        "unknown optimizer `{other}`; valid choices: {}",
                        Self::NAMES.join(", ")
                    ),
                ));
            }
        })
    }
}

/// Harness settings of the configuration file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimingSection {
    /// Batches at the start kept out of the summary.
    pub warmup_batches: usize,
    /// Stop each epoch after this many batches.
    pub max_batches_per_epoch: Option<usize>,
    /// The `16-mixed` loss scaler.
    pub scaler: ScalerConfig,
}

impl Default for TimingSection {
    fn default() -> Self {
        TimingSection {
            warmup_batches: 5,
            max_batches_per_epoch: None,
            scaler: ScalerConfig::default(),
        }
    }
}

/// The most `[` and `{` a configuration may hold, wherever they stand:
/// the YAML parser's time grows with the square of the depth its flow
/// collections nest to (a file of a few hundred thousand `[` takes it
/// minutes), and the depth can be no more than their count, quoted or not. A configuration holds a few.
pub const MAX_BRACKETS: usize = 10_000;

impl TimingConfig {
    /// Parses and checks YAML. Errors name the offending key; a text of
    /// more than [`MAX_BRACKETS`] brackets is refused before it is parsed.
    ///
    /// ```
    /// use zephon_burn::config::TimingConfig;
    /// let deep = format!("model: {}{}", "[".repeat(20_000), "]".repeat(20_000));
    /// let e = TimingConfig::from_yaml_str(&deep).unwrap_err().to_string();
    /// assert!(e.contains("20000 `[` and `{`"), "{e}");
    /// ```
    pub fn from_yaml_str(text: &str) -> Result<Self> {
        let brackets = text.bytes().filter(|b| matches!(b, b'[' | b'{')).count();
        if brackets > MAX_BRACKETS {
            return Err(Error::config(
                ".",
                format!(
                    "the configuration holds {brackets} `[` and `{{`, more than the \
                     {MAX_BRACKETS} allowed: the YAML parser's time grows with the square \
                     of their nesting"
                ),
            ));
        }
        let de = serde_yaml_ng::Deserializer::from_str(text);
        let cfg: TimingConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner().to_string();
            // The message names the key (`missing field `x``, `unknown field
            // `x``); the path says where it sits.
            let key = if path == "." {
                key_from_message(&inner)
            } else {
                // A model or data section is chosen by its `name`, and serde
                // reads it through a buffer that loses the path inside it.
                key_inside_section(text, &path).unwrap_or(path)
            };
            Error::config(key, inner)
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads and checks a YAML file of at most 16 MiB (a config is a few
    /// hundred bytes; a longer file is an error naming it, not read whole).
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = zephon_core::input::read_file(path, CONFIG_LIMIT)
            .and_then(|b| {
                String::from_utf8(b)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
            })
            .map_err(|source| Error::ConfigFile {
                path: path.to_path_buf(),
                source,
            })?;
        Self::from_yaml_str(&text)
    }

    /// Cross-checks the sections.
    pub fn validate(&self) -> Result<()> {
        match (&self.model, &self.data) {
            (ModelConfig::Autoencoder(m), DataConfig::Dummy(d)) => {
                d.validate()?;
                if m.input_dim != d.input_dim {
                    return Err(Error::config(
                        "data.input_dim",
                        format!(
                            "{} differs from model.input_dim {}",
                            d.input_dim, m.input_dim
                        ),
                    ));
                }
            }
            (ModelConfig::TransformerLm(m), DataConfig::SyntheticText(d)) => {
                d.validate()?;
                if d.seq_len > m.max_seq_len {
                    return Err(Error::config(
                        "data.seq_len",
                        format!("{} exceeds model.max_seq_len {}", d.seq_len, m.max_seq_len),
                    ));
                }
                if m.vocab_size < 256 {
                    return Err(Error::config(
                        "model.vocab_size",
                        "the byte-level tokenizer needs at least 256",
                    ));
                }
                if m.n_heads == 0 || m.d_model % m.n_heads != 0 {
                    return Err(Error::config("model.n_heads", "must divide model.d_model"));
                }
            }
            #[cfg(feature = "media")]
            (ModelConfig::ImageClassifier(m), DataConfig::WebdatasetImages(d)) => {
                d.validate()?;
                if m.num_classes != d.num_classes {
                    return Err(Error::config(
                        "data.num_classes",
                        format!(
                            "{} differs from model.num_classes {}",
                            d.num_classes, m.num_classes
                        ),
                    ));
                }
                if m.in_channels != 3 {
                    return Err(Error::config(
                        "model.in_channels",
                        format!("{}: the pipeline decodes RGB, 3 channels", m.in_channels),
                    ));
                }
            }
            _ => {
                return Err(Error::config(
                    "data.name",
                    "model `autoencoder` takes data `dummy`; `transformer_lm` takes `synthetic_text`; \
                     `image_classifier` (feature `media`) takes `webdataset_images`",
                ));
            }
        }
        self.check_ranges()?;
        if !OptimizerConfig::NAMES.contains(&self.optimizer.name.as_str()) {
            return Err(Error::config(
                "optimizer.name",
                format!(
                    "unknown optimizer `{}`; valid choices: {}",
                    self.optimizer.name,
                    OptimizerConfig::NAMES.join(", ")
                ),
            ));
        }
        let o = &self.optimizer;
        // `!(x > 0)` also catches NaN, which would train on garbage.
        if !(o.lr.is_finite() && o.lr > 0.0) {
            return Err(Error::config(
                "optimizer.lr",
                format!("{} must be finite and positive", o.lr),
            ));
        }
        if let Some(e) = o.epsilon
            && !(e.is_finite() && e > 0.0)
        {
            return Err(Error::config(
                "optimizer.epsilon",
                format!("{e} must be finite and positive"),
            ));
        }
        if let Some(w) = o.weight_decay
            && !(w.is_finite() && w >= 0.0)
        {
            return Err(Error::config(
                "optimizer.weight_decay",
                format!("{w} must be finite and not negative"),
            ));
        }
        Ok(())
    }

    /// The model's name.
    pub fn model_name(&self) -> &'static str {
        match self.model {
            ModelConfig::Autoencoder(_) => "autoencoder",
            ModelConfig::TransformerLm(_) => "transformer_lm",
            #[cfg(feature = "media")]
            ModelConfig::ImageClassifier(_) => "image_classifier",
        }
    }
}

fn key_from_message(msg: &str) -> String {
    msg.split('`').nth(1).unwrap_or("<root>").to_string()
}

/// What `zephon timing` takes from its command line.
#[derive(Clone, Debug, PartialEq)]
pub struct TimingOptions {
    /// The YAML configuration file.
    pub config: PathBuf,
    /// Epochs to run.
    pub epochs: usize,
    /// Where the outputs go (made and checked before the run);
    /// `results/benchmark/<timestamp>` when `None`, with `_2`, `_3`, ...
    /// when another run of that second has it.
    pub save_dir: Option<PathBuf>,
    /// Precision.
    pub precision: Precision,
    /// Device.
    pub device: DeviceChoice,
    /// Write a Chrome trace here.
    pub trace: Option<PathBuf>,
    /// Show a progress bar.
    pub progress: bool,
}

/// The outcome of [`run_timing`].
#[derive(Clone, Debug)]
pub struct TimingReport {
    /// Where the outputs went.
    pub save_dir: PathBuf,
    /// The written summary.
    pub summary: SummaryFile,
    /// The printed table.
    pub table: String,
    /// The raw timings.
    pub run: TimingRun,
}

#[derive(Serialize)]
struct ResolvedConfig<'a> {
    config_file: &'a Path,
    config: &'a TimingConfig,
    overrides: Overrides<'a>,
    resolved_device: &'a str,
    versions: Versions,
}

#[derive(Serialize)]
struct Overrides<'a> {
    epochs: usize,
    precision: &'a str,
    device: &'a str,
    save_dir: &'a Path,
    trace: Option<&'a Path>,
}

#[derive(Serialize)]
struct Versions {
    zephon_burn: &'static str,
    burn: &'static str,
}

/// Runs `zephon timing`: reads the configuration, builds the model and its
/// data, times `epochs` epochs, and writes the seven output files (and the
/// trace, if asked).
///
/// This crate opens no storage, so data read from shards
/// (`webdataset_images`, feature `media`) needs `run_timing_with` and a
/// store; here it is an error naming `data.dir`.
pub fn run_timing(opts: &TimingOptions) -> Result<TimingReport> {
    run_timing_inner(
        opts,
        #[cfg(feature = "media")]
        None,
    )
}

/// [`run_timing`], with the WebDataset shards of `webdataset_images` read
/// (and, for its synthetic data, written) through `store`: `zephon timing`
/// passes one backed by `zephon-storage`.
#[cfg(feature = "media")]
pub fn run_timing_with(opts: &TimingOptions, store: &dyn ShardStore) -> Result<TimingReport> {
    run_timing_inner(opts, Some(store))
}

fn run_timing_inner(
    opts: &TimingOptions,
    #[cfg(feature = "media")] store: Option<&dyn ShardStore>,
) -> Result<TimingReport> {
    let cfg = TimingConfig::from_file(&opts.config)?;
    if opts.epochs == 0 {
        return Err(Error::config("epochs", "must be at least 1"));
    }
    let (device, device_name) = opts.device.resolve()?;
    opts.precision.check(&device)?;
    // Where the outputs go is settled before the run, not after it: a
    // folder that cannot be written used to fail once every epoch had run.
    let save_dir = match &opts.save_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| Error::output(dir, e))?;
            harness::check_writable(dir)?;
            dir.clone()
        }
        None => harness::fresh_folder(
            &PathBuf::from("results/benchmark")
                .join(chrono::Local::now().format("%Y%m%d_%H%M%S").to_string()),
        )?,
    };
    if let Some(trace) = &opts.trace {
        let folder = match trace.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if trace.is_dir() {
            return Err(Error::output(trace, "is a folder, not a trace file"));
        }
        // A FIFO or a device there would be met only once the run ended.
        if let Ok(m) = std::fs::metadata(trace)
            && !m.is_file()
        {
            let why = zephon_core::output::check_destination(trace).err();
            let why = why.map_or_else(|| "not a regular file".to_owned(), |e| e.to_string());
            return Err(Error::output(trace, format!("{why}, not a trace file")));
        }
        harness::check_writable(folder)
            .map_err(|_| Error::output(trace, "its folder is not there or cannot be written"))?;
    }
    let hcfg = HarnessConfig {
        epochs: opts.epochs,
        warmup_batches: cfg.timing.warmup_batches,
        max_batches_per_epoch: cfg.timing.max_batches_per_epoch,
        learning_rate: cfg.optimizer.lr,
        precision: opts.precision,
        scaler: cfg.timing.scaler.clone(),
        progress: opts.progress,
        ..HarnessConfig::default()
    };
    let optimizer = cfg.optimizer.build()?;
    let run = match (&cfg.model, &cfg.data) {
        (ModelConfig::Autoencoder(m), DataConfig::Dummy(d)) => {
            let model = Autoencoder::new(m, &device);
            harness::run(model, optimizer, &mut d.source()?, &device, &hcfg)?.1
        }
        (ModelConfig::TransformerLm(m), DataConfig::SyntheticText(d)) => {
            let model = TransformerLm::new(m, &device);
            harness::run(model, optimizer, &mut d.source()?, &device, &hcfg)?.1
        }
        #[cfg(feature = "media")]
        (ModelConfig::ImageClassifier(m), DataConfig::WebdatasetImages(d)) => {
            let store = store.ok_or_else(|| {
                Error::config(
                    "data.dir",
                    format!(
                        "{}: reading WebDataset shards needs a shard store (`run_timing_with`, as `zephon timing` calls it)",
                        d.dir.display()
                    ),
                )
            })?;
            let model = ImageClassifier::new(m, &device);
            harness::run(model, optimizer, &mut d.source(store)?, &device, &hcfg)?.1
        }
        _ => unreachable!("validate() pairs models with data"),
    };
    let resolved = ResolvedConfig {
        config_file: &opts.config,
        config: &cfg,
        overrides: Overrides {
            epochs: opts.epochs,
            precision: opts.precision.name(),
            device: opts.device.name(),
            save_dir: &save_dir,
            trace: opts.trace.as_deref(),
        },
        resolved_device: device_name,
        versions: Versions {
            zephon_burn: env!("CARGO_PKG_VERSION"),
            burn: BURN_VERSION,
        },
    };
    let (summary, _files) = harness::write_outputs(
        &save_dir,
        &run,
        cfg.model_name(),
        device_name,
        opts.epochs,
        &resolved,
    )?;
    if let Some(trace) = &opts.trace {
        harness::write_chrome_trace(&run.timings, trace)?;
    }
    let table = harness::print_table(&summary);
    Ok(TimingReport {
        save_dir,
        summary,
        table,
        run,
    })
}
