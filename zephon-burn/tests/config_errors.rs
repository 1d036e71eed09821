//! Bad configurations give errors that name the key, or list the valid choices.

use zephon_burn::{DeviceChoice, Precision, TimingConfig};

const GOOD: &str = "\
model: { name: autoencoder, input_dim: 16, hidden_dim: 8, latent_dim: 4 }
data: { name: dummy, num_samples: 64, batch_size: 8, input_dim: 16 }
";

fn err(yaml: &str) -> String {
    TimingConfig::from_yaml_str(yaml).unwrap_err().to_string()
}

#[test]
fn the_good_config_parses() {
    let cfg = TimingConfig::from_yaml_str(GOOD).unwrap();
    assert_eq!(cfg.model_name(), "autoencoder");
    assert_eq!(cfg.timing.warmup_batches, 5);
}

#[test]
fn a_missing_key_is_named() {
    let e = err(&GOOD.replace(", latent_dim: 4", ""));
    assert!(e.contains("latent_dim"), "{e}");
    let e = err(&GOOD.replace("batch_size: 8, ", ""));
    assert!(e.contains("batch_size"), "{e}");
}

#[test]
fn a_mistyped_key_is_named() {
    let e = err(&GOOD.replace("hidden_dim", "hiden_dim"));
    assert!(e.contains("hiden_dim") && e.contains("hidden_dim"), "{e}");
    let e = err(&format!("{GOOD}timing: {{ warmup: 3 }}\n"));
    assert!(e.contains("warmup"), "{e}");
    let e = err(&format!("{GOOD}optimiser: {{ lr: 0.1 }}\n"));
    assert!(e.contains("optimiser"), "{e}");
}

#[test]
fn a_wrong_type_or_value_is_named() {
    let e = err(&GOOD.replace("hidden_dim: 8", "hidden_dim: eight"));
    assert!(
        e.contains("`model.hidden_dim`") && e.contains("invalid type"),
        "{e}"
    );
    let e = err(&GOOD.replace("batch_size: 8", "batch_size: -8"));
    assert!(e.contains("`data.batch_size`"), "{e}");
    let e = err(&GOOD.replace("name: autoencoder", "name: autoenc"));
    assert!(e.contains("autoenc") && e.contains("transformer_lm"), "{e}");
    let e = err(&GOOD.replace("input_dim: 16 }\n", "input_dim: 15 }\n"));
    assert!(e.contains("data.input_dim"), "{e}");
    let e = err(&format!("{GOOD}optimizer: {{ name: lamb }}\n"));
    assert!(
        e.contains("optimizer.name") && e.contains("adam, adamw, sgd"),
        "{e}"
    );
}

#[test]
fn unknown_device_or_precision_lists_the_valid_ones() {
    let e = "tpu".parse::<DeviceChoice>().unwrap_err().to_string();
    assert!(e.contains("cpu, cuda, wgpu, auto"), "{e}");
    let e = "fp8".parse::<Precision>().unwrap_err().to_string();
    assert!(e.contains("32, 16, bf16, 16-mixed"), "{e}");
}

const LM: &str = "\
model: { name: transformer_lm, vocab_size: 256, d_model: 32, n_heads: 4, n_layers: 1, d_ff: 64, max_seq_len: 32, dropout: 0.1 }
data: { name: synthetic_text, num_docs: 16, seq_len: 32, batch_size: 4 }
";

#[test]
fn the_good_lm_config_parses() {
    TimingConfig::from_yaml_str(LM).unwrap();
}

#[test]
fn a_learning_rate_that_is_not_finite_and_positive_is_named() {
    for lr in [".nan", ".inf", "-.inf", "0", "-0.1"] {
        let e = err(&format!("{GOOD}optimizer: {{ lr: {lr} }}\n"));
        assert!(e.contains("optimizer.lr"), "lr {lr}: {e}");
    }
    let e = err(&format!(
        "{GOOD}optimizer: {{ name: adam, epsilon: .nan }}\n"
    ));
    assert!(e.contains("optimizer.epsilon"), "{e}");
    let e = err(&format!(
        "{GOOD}optimizer: {{ name: adamw, weight_decay: -1.0 }}\n"
    ));
    assert!(e.contains("optimizer.weight_decay"), "{e}");
}

#[test]
fn zero_or_huge_dimensions_are_named() {
    for (from, to, key) in [
        ("hidden_dim: 8", "hidden_dim: 0", "model.hidden_dim"),
        ("latent_dim: 4", "latent_dim: 0", "model.latent_dim"),
        (
            "latent_dim: 4",
            "latent_dim: 4294967295",
            "model.latent_dim",
        ),
        (
            "input_dim: 16, hidden",
            "input_dim: 0, hidden",
            "model.input_dim",
        ),
        ("num_samples: 64", "num_samples: 0", "data.num_samples"),
        ("batch_size: 8", "batch_size: 100000000", "data.batch_size"),
    ] {
        let e = err(&GOOD.replace(from, to));
        assert!(e.contains(key), "{to}: {e}");
    }
    for (from, to, key) in [
        ("d_model: 32", "d_model: 0", "model.d_model"),
        ("n_layers: 1", "n_layers: 0", "model.n_layers"),
        ("d_ff: 64", "d_ff: 0", "model.d_ff"),
        ("n_layers: 1", "n_layers: 100000", "model.n_layers"),
        ("num_docs: 16", "num_docs: 0", "data.num_docs"),
    ] {
        let e = err(&LM.replace(from, to));
        assert!(e.contains(key), "{to}: {e}");
    }
}

#[test]
fn dropout_outside_zero_to_one_is_named() {
    for d in ["1.0", "1.5", "-0.1", ".nan"] {
        let e = err(&LM.replace("dropout: 0.1", &format!("dropout: {d}")));
        assert!(e.contains("model.dropout"), "dropout {d}: {e}");
    }
    TimingConfig::from_yaml_str(&LM.replace("dropout: 0.1", "dropout: 0.0")).unwrap();
}

#[test]
fn scaler_and_timing_values_are_checked() {
    for (section, key) in [
        ("scaler: { init_scale: .nan }", "timing.scaler.init_scale"),
        (
            "scaler: { growth_factor: 0.5 }",
            "timing.scaler.growth_factor",
        ),
        (
            "scaler: { backoff_factor: 1.0 }",
            "timing.scaler.backoff_factor",
        ),
        (
            "scaler: { growth_interval: 0 }",
            "timing.scaler.growth_interval",
        ),
        ("max_batches_per_epoch: 0", "timing.max_batches_per_epoch"),
    ] {
        let e = err(&format!("{GOOD}timing: {{ {section} }}\n"));
        assert!(e.contains(key), "{section}: {e}");
    }
}

/// The synthetic data built in code (for a Burn `Learner`, not from a
/// timing config) is held to the same ranges: 2^32 samples were generated
/// in memory, past what any test of a loop needs.
#[test]
fn data_built_in_code_is_held_to_the_config_ranges() {
    use zephon_burn::models::autoencoder::DummyData;
    use zephon_burn::models::lm::TextData;
    let dummy = DummyData {
        num_samples: 1 << 32,
        batch_size: 4,
        input_dim: 8,
        seed: 0,
        workers: 1,
    };
    let e = dummy.validate().unwrap_err().to_string();
    assert!(e.contains("data.num_samples"), "{e}");
    let ok = DummyData {
        num_samples: 16,
        ..dummy.clone()
    };
    assert!(ok.validate().is_ok());
    let text = TextData {
        num_docs: 8,
        seq_len: 1 << 30,
        batch_size: 2,
        seed: 0,
        workers: 1,
    };
    let e = text.validate().unwrap_err().to_string();
    assert!(e.contains("data.seq_len"), "{e}");
}
