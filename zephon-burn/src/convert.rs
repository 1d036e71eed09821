//! Zephon batches to Burn tensors.
//!
//! Every conversion builds one host buffer, already in the element type the
//! device wants (the device's default int type, the requested float type), and
//! hands it to Burn by move: the batch is copied once, into that buffer.

use crate::error::{Error, Result};
use burn::tensor::{
    Bool, Device, Element, FloatDType, Int, IntDType, Tensor, TensorData, bf16, f16,
};
use zephon_core::Record;
use zephon_ops::{TokenIds, TrainingBatch};

/// A [`TrainingBatch`] on a device. Shapes are `[batch_size, seq_len]`
/// except `cu_seqlens` (`[segments + 1]`).
#[derive(Clone, Debug)]
pub struct TrainingTensors {
    /// Token ids.
    pub input_ids: Tensor<2, Int>,
    /// Next-token targets, [`zephon_ops::IGNORE_INDEX`] where no loss is taken.
    pub labels: Tensor<2, Int>,
    /// True where a loss is taken.
    pub loss_mask: Tensor<2, Bool>,
    /// Position of each token within its document.
    pub position_ids: Tensor<2, Int>,
    /// True for real tokens, false for padding.
    pub attention_mask: Tensor<2, Bool>,
    /// Document number of each token within its row, from 1; 0 for padding.
    pub segment_ids: Tensor<2, Int>,
    /// Cumulative segment boundaries over the flattened batch.
    pub cu_seqlens: Tensor<1, Int>,
}

impl TrainingTensors {
    /// Moves `batch` to `device`. A token id past the device's int type
    /// (2^31 and up on an `i32` device) is an error, not wrapped.
    ///
    /// ```
    /// use burn::tensor::Device;
    /// use zephon_burn::TrainingTensors;
    /// use zephon_ops::{IdType, TrainingBatch};
    /// let b = TrainingBatch::from_rows(&[(&[5, 6, 7][..], &[1, 1, 1][..])], 4, IdType::U32, 0, 0).unwrap();
    /// let t = TrainingTensors::from_batch(&b, &Device::flex()).unwrap();
    /// assert_eq!(t.input_ids.dims(), [1, 4]);
    /// assert_eq!(t.labels.into_data().convert::<i64>().to_vec::<i64>().unwrap(), vec![6, 7, -100, -100]);
    /// // Ids past the device's int type (i32 on this one) are refused, not wrapped.
    /// let big = TrainingBatch::from_rows(&[(&[5, 1 << 31][..], &[1, 1][..])], 2, IdType::U32, 0, 0).unwrap();
    /// assert!(TrainingTensors::from_batch(&big, &Device::flex()).is_err());
    /// ```
    pub fn from_batch(batch: &TrainingBatch, device: &Device) -> Result<Self> {
        let shape = [batch.batch_size, batch.seq_len];
        let n = shape[0] * shape[1];
        let check = |name: &str, len: usize| {
            if len == n {
                Ok(())
            } else {
                Err(Error::Shape(format!(
                    "`{name}` has {len} elements, batch is {}x{}",
                    shape[0], shape[1]
                )))
            }
        };
        check("input_ids", batch.input_ids.len())?;
        check("labels", batch.labels.len())?;
        check("loss_mask", batch.loss_mask.len())?;
        check("position_ids", batch.position_ids.len())?;
        check("attention_mask", batch.attention_mask.len())?;
        check("segment_ids", batch.segment_ids.len())?;
        // Ids past the device's int type would wrap (on an i32 device
        // 2^31 turns negative, its label clamped to token 0): refused,
        // naming the first.
        let most = match device.settings().int_dtype {
            IntDType::I32 => i32::MAX as i64,
            IntDType::U32 => u32::MAX as i64,
            _ => i64::MAX,
        };
        let too_large = match &batch.input_ids {
            TokenIds::U32(v) => v.iter().map(|&x| x as i64).find(|&x| x > most),
            TokenIds::I64(v) => v.iter().copied().find(|&x| x > most),
        };
        if let Some(id) = too_large {
            return Err(Error::Shape(format!(
                "`input_ids` holds token id {id}, past the largest int ({most}) of the \
                 device's int type: the tokens are not of a vocabulary this device can index"
            )));
        }
        let input_ids = match &batch.input_ids {
            TokenIds::U32(v) => int_tensor(v.iter().map(|&x| x as i64), shape, device),
            TokenIds::I64(v) => int_tensor(v.iter().copied(), shape, device),
        };
        Ok(TrainingTensors {
            input_ids,
            labels: int_tensor(batch.labels.iter().copied(), shape, device),
            loss_mask: bool_tensor(&batch.loss_mask, shape, device),
            position_ids: int_tensor(batch.position_ids.iter().copied(), shape, device),
            attention_mask: bool_tensor(&batch.attention_mask, shape, device),
            segment_ids: int_tensor(batch.segment_ids.iter().map(|&x| x as i64), shape, device),
            cu_seqlens: int_tensor(
                batch.cu_seqlens.iter().map(|&x| x as i64),
                [batch.cu_seqlens.len()],
                device,
            ),
        })
    }
}

/// An int tensor of `shape` from `values`, built directly in the device's
/// default int type.
///
/// ```
/// use burn::tensor::Device;
/// let t = zephon_burn::convert::int_tensor([1i64, 2, 3, 4].into_iter(), [2, 2], &Device::flex());
/// assert_eq!(t.dims(), [2, 2]);
/// ```
pub fn int_tensor<const D: usize>(
    values: impl Iterator<Item = i64>,
    shape: [usize; D],
    device: &Device,
) -> Tensor<D, Int> {
    fn build<E: Element, const D: usize>(
        values: impl Iterator<Item = i64>,
        shape: [usize; D],
        device: &Device,
        cast: impl Fn(i64) -> E,
    ) -> Tensor<D, Int> {
        let data = TensorData::new(values.map(cast).collect::<Vec<E>>(), shape);
        // Without an explicit dtype Burn would convert to the device default.
        let dtype = data.dtype();
        Tensor::from_data(data, (device, dtype))
    }
    match device.settings().int_dtype {
        IntDType::I32 => build(values, shape, device, |x| x as i32),
        IntDType::U32 => build(values, shape, device, |x| x as u32),
        // i64 is the default of most backends; anything else converts from it.
        _ => build(values, shape, device, |x| x),
    }
}

/// A bool tensor of `shape` from `values`.
pub fn bool_tensor<const D: usize>(
    values: &[bool],
    shape: [usize; D],
    device: &Device,
) -> Tensor<D, Bool> {
    Tensor::from_data(TensorData::new(values.to_vec(), shape), device)
}

/// A float tensor of `shape` from `values`, built directly in `dtype`.
///
/// ```
/// use burn::tensor::{Device, FloatDType};
/// let t = zephon_burn::convert::float_tensor([1.0f32, 2.0].into_iter(), [1, 2], &Device::flex(), FloatDType::BF16);
/// assert_eq!(t.dtype(), burn::tensor::DType::BF16);
/// ```
pub fn float_tensor<const D: usize>(
    values: impl Iterator<Item = f32>,
    shape: [usize; D],
    device: &Device,
    dtype: FloatDType,
) -> Tensor<D> {
    fn build<E: Element, const D: usize>(
        values: impl Iterator<Item = f32>,
        shape: [usize; D],
        device: &Device,
        cast: impl Fn(f32) -> E,
    ) -> Tensor<D> {
        let data = TensorData::new(values.map(cast).collect::<Vec<E>>(), shape);
        // Without an explicit dtype Burn would convert to the device default.
        let dtype = data.dtype();
        Tensor::from_data(data, (device, dtype))
    }
    match dtype {
        FloatDType::F16 => build(values, shape, device, f16::from_f32),
        FloatDType::BF16 => build(values, shape, device, bf16::from_f32),
        FloatDType::F64 => build(values, shape, device, f64::from),
        _ => build(values, shape, device, |x| x),
    }
}

/// Stacks one fixed-length f32 vector per record into a `[records, dim]`
/// tensor. The field holds `dim` little-endian f32s as
/// [`Value::Bytes`](zephon_core::Value::Bytes) (see [`f32_bytes`]).
///
/// ```
/// use burn::tensor::{Device, FloatDType};
/// use zephon_burn::convert::{f32_bytes, float_rows};
/// use zephon_core::Record;
/// let recs = vec![Record::new().with("x", f32_bytes(&[1.0, 2.0])), Record::new().with("x", f32_bytes(&[3.0, 4.0]))];
/// let t = float_rows(&recs, "x", 2, &Device::flex(), FloatDType::F32).unwrap();
/// assert_eq!(t.into_data().to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
/// ```
pub fn float_rows(
    records: &[Record],
    field: &str,
    dim: usize,
    device: &Device,
    dtype: FloatDType,
) -> Result<Tensor<2>> {
    let mut rows = Vec::with_capacity(records.len());
    for (i, r) in records.iter().enumerate() {
        let bytes = match r.get(field) {
            Some(zephon_core::Value::Bytes(b)) => b,
            Some(other) => {
                return Err(Error::Shape(format!(
                    "record {i}: field `{field}` is {}, expected f32 bytes",
                    other.kind()
                )));
            }
            None => return Err(Error::Shape(format!("record {i}: no field `{field}`"))),
        };
        if bytes.len() != dim * 4 {
            return Err(Error::Shape(format!(
                "record {i}: field `{field}` has {} bytes, expected {dim} f32s ({} bytes)",
                bytes.len(),
                dim * 4
            )));
        }
        rows.push(bytes);
    }
    let values = rows.iter().flat_map(|b| {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    });
    Ok(float_tensor(values, [records.len(), dim], device, dtype))
}

/// `values` as little-endian bytes, the layout [`float_rows`] reads.
pub fn f32_bytes(values: &[f32]) -> zephon_core::Value {
    let mut out = Vec::with_capacity(values.len() * 4);
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
    zephon_core::Value::Bytes(out.into())
}
