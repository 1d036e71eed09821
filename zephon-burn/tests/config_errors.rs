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
        e.contains("model") && e.contains("hidden_dim") || e.contains("invalid type"),
        "{e}"
    );
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
