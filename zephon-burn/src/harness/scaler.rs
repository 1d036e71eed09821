//! The dynamic loss scaler of `16-mixed` training.

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{FloatDType, Tensor};
use serde::{Deserialize, Serialize};

/// Settings of the [`LossScaler`], with PyTorch's `GradScaler` defaults
/// except the initial scale: 2^16 overflows f16 (max 65504) on the very first
/// step of most models, so it starts one notch lower.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScalerConfig {
    /// The scale the loss is multiplied by at first.
    pub init_scale: f32,
    /// Factor the scale grows by after `growth_interval` steps without overflow.
    pub growth_factor: f32,
    /// Factor the scale shrinks by on an overflow.
    pub backoff_factor: f32,
    /// Steps without overflow before the scale grows.
    pub growth_interval: usize,
}

impl Default for ScalerConfig {
    fn default() -> Self {
        ScalerConfig {
            init_scale: 32768.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
        }
    }
}

/// A dynamic loss scaler: multiplies the loss before the backward pass so
/// small f16 gradients do not flush to zero, then unscales the gradients,
/// skips the optimizer step if any is inf or NaN, and adapts the scale.
///
/// ```
/// use zephon_burn::harness::{LossScaler, ScalerConfig};
/// let mut s = LossScaler::new(ScalerConfig { growth_interval: 2, ..Default::default() });
/// let start = s.scale();
/// s.update(true);
/// assert_eq!(s.scale(), start / 2.0);
/// s.update(false);
/// s.update(false);
/// assert_eq!(s.scale(), start);
/// ```
#[derive(Clone, Debug)]
pub struct LossScaler {
    config: ScalerConfig,
    scale: f32,
    good_steps: usize,
    skipped: usize,
}

impl LossScaler {
    /// A scaler at `config.init_scale`.
    pub fn new(config: ScalerConfig) -> Self {
        LossScaler {
            scale: config.init_scale,
            config,
            good_steps: 0,
            skipped: 0,
        }
    }

    /// The current scale.
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// Forces the scale (to test overflow handling, or to resume).
    pub fn set_scale(&mut self, scale: f32) {
        self.scale = scale;
    }

    /// Optimizer steps skipped so far because of an overflow.
    pub fn skipped_steps(&self) -> usize {
        self.skipped
    }

    /// The loss in f32, multiplied by the scale: what to call `backward` on.
    pub fn scale_loss(&self, loss: Tensor<1>) -> Tensor<1> {
        loss.cast(FloatDType::F32).mul_scalar(self.scale)
    }

    /// Divides every gradient of `module` by the scale. Returns `None`, and
    /// updates the scale, when any gradient is inf or NaN: the step must be
    /// skipped. Reads one scalar back from the device.
    pub fn unscale<M: Module>(
        &mut self,
        mut grads: GradientsParams,
        module: &M,
    ) -> Option<GradientsParams> {
        let mut visitor = Unscale {
            grads: &mut grads,
            inv: 1.0 / self.scale,
            sums: Vec::new(),
        };
        module.visit(&mut visitor);
        // One sum over all gradients: inf and NaN propagate into it, and it is
        // a single read-back instead of one per parameter.
        let finite = match visitor.sums.len() {
            0 => true,
            _ => {
                let total: f32 = Tensor::cat(visitor.sums, 0).sum().into_scalar();
                total.is_finite()
            }
        };
        self.update(!finite);
        finite.then_some(grads)
    }

    /// Adapts the scale after a step: shrink on overflow, grow after
    /// `growth_interval` clean steps.
    pub fn update(&mut self, overflow: bool) {
        if overflow {
            self.scale *= self.config.backoff_factor;
            self.good_steps = 0;
            self.skipped += 1;
        } else {
            self.good_steps += 1;
            if self.good_steps >= self.config.growth_interval {
                self.scale *= self.config.growth_factor;
                self.good_steps = 0;
            }
        }
    }
}

struct Unscale<'a> {
    grads: &'a mut GradientsParams,
    inv: f32,
    sums: Vec<Tensor<1>>,
}

impl ModuleVisitor for Unscale<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.remove::<D>(param.id) {
            let g = g.cast(FloatDType::F32).mul_scalar(self.inv);
            self.sums.push(g.clone().sum());
            self.grads.register::<D>(param.id, g);
        }
    }
}
