//! Choosing the device and the precision the model runs in.

use crate::error::{Error, Result};
use burn::tensor::{Device, FloatDType};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Which device to run on, as the command line names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceChoice {
    /// The best device compiled in and present: CUDA, then wgpu, then the CPU.
    #[default]
    Auto,
    /// The pure-Rust CPU backend (Burn's `flex`).
    Cpu,
    /// An NVIDIA GPU through CUDA (cargo feature `cuda`).
    Cuda,
    /// A GPU through wgpu (cargo feature `wgpu`).
    Wgpu,
}

impl DeviceChoice {
    /// The names accepted by [`FromStr`].
    pub const NAMES: [&'static str; 4] = ["cpu", "cuda", "wgpu", "auto"];

    /// The Burn device for this choice, with autodiff enabled.
    ///
    /// `auto` picks CUDA, then wgpu, then the CPU, skipping those not
    /// compiled in or not present. Naming a device that is not compiled in,
    /// or whose hardware is missing, is an error that says which.
    ///
    /// ```
    /// use zephon_burn::DeviceChoice;
    /// let (device, name) = DeviceChoice::Cpu.resolve().unwrap();
    /// assert_eq!(name, "cpu");
    /// assert!(device.is_autodiff());
    /// ```
    pub fn resolve(self) -> Result<(Device, &'static str)> {
        let device = match self {
            DeviceChoice::Cpu => return Ok((Device::flex().autodiff(), "cpu")),
            DeviceChoice::Cuda => cuda()?,
            DeviceChoice::Wgpu => wgpu()?,
            DeviceChoice::Auto => {
                if let Ok(d) = cuda() {
                    return Ok((d.autodiff(), "cuda"));
                }
                if let Ok(d) = wgpu() {
                    return Ok((d.autodiff(), "wgpu"));
                }
                return Ok((Device::flex().autodiff(), "cpu"));
            }
        };
        Ok((device.autodiff(), self.name()))
    }

    /// The name of the choice (`cpu`, `cuda`, `wgpu`, `auto`).
    pub fn name(self) -> &'static str {
        match self {
            DeviceChoice::Auto => "auto",
            DeviceChoice::Cpu => "cpu",
            DeviceChoice::Cuda => "cuda",
            DeviceChoice::Wgpu => "wgpu",
        }
    }
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DeviceChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(DeviceChoice::Auto),
            "cpu" => Ok(DeviceChoice::Cpu),
            "cuda" | "gpu" => Ok(DeviceChoice::Cuda),
            "wgpu" => Ok(DeviceChoice::Wgpu),
            _ => Err(Error::Device {
                device: s.to_string(),
                message: format!(
                    "unknown device; valid choices: {}",
                    DeviceChoice::NAMES.join(", ")
                ),
            }),
        }
    }
}

/// Runs a tiny computation so that a missing GPU shows up here, as an error,
/// rather than as a panic in the middle of the first batch.
#[allow(dead_code)]
fn probe(name: &str, make: impl FnOnce() -> Device + std::panic::UnwindSafe) -> Result<Device> {
    let outcome = std::panic::catch_unwind(|| {
        let device = make();
        let t = burn::tensor::Tensor::<1>::from_floats([1.0, 2.0], &device);
        let sum: f32 = t.sum().into_scalar();
        device.sync().map(|_| (device, sum))
    });
    match outcome {
        Ok(Ok((device, sum))) if (sum - 3.0).abs() < 1e-6 => Ok(device),
        Ok(Ok(_)) => Err(Error::Device {
            device: name.into(),
            message: "present but computes wrong results".into(),
        }),
        Ok(Err(e)) => Err(Error::Device {
            device: name.into(),
            message: format!("not usable: {e:?}"),
        }),
        Err(_) => Err(Error::Device {
            device: name.into(),
            message: "compiled in but no such device is present".into(),
        }),
    }
}

#[cfg(feature = "cuda")]
fn cuda() -> Result<Device> {
    probe("cuda", || Device::cuda(0))
}

#[cfg(not(feature = "cuda"))]
fn cuda() -> Result<Device> {
    Err(Error::Device {
        device: "cuda".into(),
        message: "not compiled in; rebuild with `--features cuda`".into(),
    })
}

#[cfg(feature = "wgpu")]
fn wgpu() -> Result<Device> {
    probe("wgpu", || {
        Device::wgpu(burn::tensor::DeviceKind::DefaultDevice)
    })
}

#[cfg(not(feature = "wgpu"))]
fn wgpu() -> Result<Device> {
    Err(Error::Device {
        device: "wgpu".into(),
        message: "not compiled in; rebuild with `--features wgpu`".into(),
    })
}

/// The numeric precision of a training run, named as PyTorch Lightning names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Precision {
    /// Everything in f32.
    #[default]
    #[serde(rename = "32")]
    F32,
    /// Weights, activations and gradients in f16.
    #[serde(rename = "16")]
    F16,
    /// Weights, activations and gradients in bf16.
    #[serde(rename = "bf16")]
    Bf16,
    /// f32 master weights; forward and backward in f16, with a dynamic loss scaler.
    #[serde(rename = "16-mixed")]
    Mixed16,
}

impl Precision {
    /// The names accepted by [`FromStr`].
    pub const NAMES: [&'static str; 4] = ["32", "16", "bf16", "16-mixed"];

    /// The name (`32`, `16`, `bf16`, `16-mixed`).
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "32",
            Precision::F16 => "16",
            Precision::Bf16 => "bf16",
            Precision::Mixed16 => "16-mixed",
        }
    }

    /// The float type forward and backward run in.
    ///
    /// ```
    /// use burn::tensor::FloatDType;
    /// use zephon_burn::Precision;
    /// assert_eq!("16-mixed".parse::<Precision>().unwrap().compute_dtype(), FloatDType::F16);
    /// ```
    pub fn compute_dtype(self) -> FloatDType {
        match self {
            Precision::F32 => FloatDType::F32,
            Precision::F16 | Precision::Mixed16 => FloatDType::F16,
            Precision::Bf16 => FloatDType::BF16,
        }
    }

    /// The float type the weights the optimizer updates are kept in.
    pub fn master_dtype(self) -> FloatDType {
        match self {
            Precision::Mixed16 => FloatDType::F32,
            p => p.compute_dtype(),
        }
    }

    /// Checks that `device` can compute in this precision.
    pub fn check(self, device: &Device) -> Result<()> {
        let dtype = self.compute_dtype();
        if device.supports_dtype(dtype) {
            Ok(())
        } else {
            Err(Error::Precision {
                precision: self.name().into(),
                message: format!("the device {device:?} cannot compute in {dtype:?}"),
            })
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Precision {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "32" | "32-true" | "f32" => Ok(Precision::F32),
            "16" | "16-true" | "f16" => Ok(Precision::F16),
            "bf16" | "bf16-true" => Ok(Precision::Bf16),
            "16-mixed" => Ok(Precision::Mixed16),
            _ => Err(Error::Precision {
                precision: s.to_string(),
                message: format!(
                    "unknown precision; valid choices: {}",
                    Precision::NAMES.join(", ")
                ),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_list_the_valid_ones() {
        let e = "tpu".parse::<DeviceChoice>().unwrap_err().to_string();
        assert!(
            e.contains("tpu") && e.contains("cpu, cuda, wgpu, auto"),
            "{e}"
        );
        let e = "8".parse::<Precision>().unwrap_err().to_string();
        assert!(
            e.contains("`8`") && e.contains("32, 16, bf16, 16-mixed"),
            "{e}"
        );
    }

    #[test]
    fn names_round_trip() {
        for n in Precision::NAMES {
            assert_eq!(n.parse::<Precision>().unwrap().name(), n);
        }
        for n in DeviceChoice::NAMES {
            assert_eq!(n.parse::<DeviceChoice>().unwrap().name(), n);
        }
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn missing_device_is_a_clear_error() {
        let e = DeviceChoice::Cuda.resolve().unwrap_err().to_string();
        assert!(e.contains("not compiled in"), "{e}");
        // Without CUDA, auto falls back to wgpu (if built and present) or the CPU.
        assert_ne!(DeviceChoice::Auto.resolve().unwrap().1, "cuda");
    }
}
