//! Apache Parquet shards (Hugging Face datasets, FineWeb): rows are samples.
//!
//! The footer is parsed once per shard. A read decodes only the row groups
//! its samples fall in (a few recently decoded groups are kept, so shuffled
//! reads within a group decode it once), and only the projected columns
//! ([`FormatOptions::columns`](super::FormatOptions::columns)); a local
//! shard is memory-mapped, so only those groups' column chunks are read
//! from disk.
//!
//! Arrow types map to values: strings -> text, integers -> int, floats ->
//! float, booleans, binary -> bytes, lists of integers -> token ids
//! (pre-tokenized `input_ids`), anything else -> its display text.

use super::{FormatResult, ShardIndex};

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use bytes::Bytes;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use std::sync::{Arc, Mutex};
use zephon_core::{Record, Value};
/// The crates this format is read with, re-exported so callers (fixtures,
/// benchmarks) write files with the very versions Zephon reads them with.
pub use {arrow_array, parquet};

/// A Parquet shard's footer, projection and row-group boundaries.
#[derive(Debug)]
pub struct ParquetIndex {
    meta: ArrowReaderMetadata,
    projection: Option<Vec<usize>>,
    /// `starts[g]` is the first row of row group `g`; the last entry is the row count.
    starts: Vec<u64>,
    recent: Mutex<Vec<(usize, Arc<RecordBatch>)>>,
}

impl ParquetIndex {
    /// Parses the footer of a shard held in memory; `columns` (when given)
    /// must all exist.
    pub fn open(data: &Bytes, columns: Option<&[String]>) -> FormatResult<Self> {
        let meta = ArrowReaderMetadata::load(data, ArrowReaderOptions::default())
            .map_err(|e| format!("not a readable Parquet file: {e}"))?;
        let projection = match columns {
            Some(cols) => {
                let schema = meta.schema();
                let idx = cols
                    .iter()
                    .map(|c| {
                        schema.index_of(c).map_err(|_| {
                            let have: Vec<&str> =
                                schema.fields().iter().map(|f| f.name().as_str()).collect();
                            format!("no column `{c}` (columns: {})", have.join(", "))
                        })
                    })
                    .collect::<FormatResult<Vec<usize>>>()?;
                Some(idx)
            }
            None => None,
        };
        let mut starts = vec![0u64];
        for g in meta.metadata().row_groups() {
            starts.push(starts.last().expect("non-empty") + g.num_rows() as u64);
        }
        Ok(ParquetIndex {
            meta,
            projection,
            starts,
            recent: Mutex::new(Vec::new()),
        })
    }

    /// Number of row groups.
    pub fn row_groups(&self) -> usize {
        self.starts.len() - 1
    }

    /// Row group `g`, decoded (projected columns only), from the small
    /// cache of recent groups or read now. Shuffled reads touch a few rows of
    /// a group at a time; decoding the group once for all of them, rather
    /// than its pages once per read, is what keeps them fast.
    fn group(&self, data: &Bytes, g: usize) -> FormatResult<Arc<RecordBatch>> {
        if let Some((_, b)) = self
            .recent
            .lock()
            .expect("poisoned")
            .iter()
            .find(|(k, _)| *k == g)
        {
            return Ok(b.clone());
        }
        let mut builder =
            ParquetRecordBatchReaderBuilder::new_with_metadata(data.clone(), self.meta.clone())
                .with_row_groups(vec![g])
                .with_batch_size((self.starts[g + 1] - self.starts[g]).max(1) as usize);
        if let Some(p) = &self.projection {
            let mask = ProjectionMask::roots(self.meta.parquet_schema(), p.iter().copied());
            builder = builder.with_projection(mask);
        }
        let reader = builder.build().map_err(|e| format!("row group {g}: {e}"))?;
        let schema = arrow_array::RecordBatchReader::schema(&reader);
        let batches = reader
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("row group {g}: {e}"))?;
        let batch = Arc::new(
            arrow_select::concat::concat_batches(&schema, &batches)
                .map_err(|e| format!("row group {g}: {e}"))?,
        );
        let rows = (self.starts[g + 1] - self.starts[g]) as usize;
        if batch.num_rows() != rows {
            return Err(format!(
                "row group {g} gave {} rows, the footer says {rows}",
                batch.num_rows()
            ));
        }
        let mut recent = self.recent.lock().expect("poisoned");
        if recent.len() >= RECENT_GROUPS {
            recent.remove(0);
        }
        recent.push((g, batch.clone()));
        Ok(batch)
    }
}

/// Decoded row groups kept per shard.
const RECENT_GROUPS: usize = 4;

fn record(batch: &RecordBatch, r: usize) -> Record {
    Record::from_fields(
        batch
            .schema_ref()
            .fields()
            .iter()
            .zip(batch.columns())
            .map(|(f, col)| (f.name().clone(), value(col.as_ref(), r))),
    )
}

fn token_ids(a: &dyn Array) -> Option<Vec<u32>> {
    fn conv<T: Copy>(v: &[T], f: impl Fn(T) -> Option<u32>) -> Option<Vec<u32>> {
        v.iter().map(|&x| f(x)).collect()
    }
    if a.null_count() > 0 {
        return None;
    }
    match a.data_type() {
        DataType::UInt8 => conv(a.as_primitive::<UInt8Type>().values(), |x| Some(x as u32)),
        DataType::UInt16 => conv(a.as_primitive::<UInt16Type>().values(), |x| Some(x as u32)),
        DataType::UInt32 => Some(a.as_primitive::<UInt32Type>().values().to_vec()),
        DataType::UInt64 => conv(a.as_primitive::<UInt64Type>().values(), |x| {
            u32::try_from(x).ok()
        }),
        DataType::Int16 => conv(a.as_primitive::<Int16Type>().values(), |x| {
            u32::try_from(x).ok()
        }),
        DataType::Int32 => conv(a.as_primitive::<Int32Type>().values(), |x| {
            u32::try_from(x).ok()
        }),
        DataType::Int64 => conv(a.as_primitive::<Int64Type>().values(), |x| {
            u32::try_from(x).ok()
        }),
        _ => None,
    }
}

fn display(a: &dyn Array, r: usize) -> Value {
    let opts = arrow_cast::display::FormatOptions::default();
    match arrow_cast::display::ArrayFormatter::try_new(a, &opts) {
        Ok(f) => Value::Text(f.value(r).to_string()),
        Err(_) => Value::Null,
    }
}

fn value(a: &dyn Array, r: usize) -> Value {
    if a.is_null(r) {
        return Value::Null;
    }
    match a.data_type() {
        DataType::Boolean => Value::Bool(a.as_boolean().value(r)),
        DataType::Int8 => Value::Int(a.as_primitive::<Int8Type>().value(r) as i64),
        DataType::Int16 => Value::Int(a.as_primitive::<Int16Type>().value(r) as i64),
        DataType::Int32 => Value::Int(a.as_primitive::<Int32Type>().value(r) as i64),
        DataType::Int64 => Value::Int(a.as_primitive::<Int64Type>().value(r)),
        DataType::UInt8 => Value::Int(a.as_primitive::<UInt8Type>().value(r) as i64),
        DataType::UInt16 => Value::Int(a.as_primitive::<UInt16Type>().value(r) as i64),
        DataType::UInt32 => Value::Int(a.as_primitive::<UInt32Type>().value(r) as i64),
        DataType::UInt64 => match i64::try_from(a.as_primitive::<UInt64Type>().value(r)) {
            Ok(v) => Value::Int(v),
            Err(_) => display(a, r),
        },
        DataType::Float32 => Value::Float(a.as_primitive::<Float32Type>().value(r) as f64),
        DataType::Float64 => Value::Float(a.as_primitive::<Float64Type>().value(r)),
        DataType::Utf8 => Value::Text(a.as_string::<i32>().value(r).to_owned()),
        DataType::LargeUtf8 => Value::Text(a.as_string::<i64>().value(r).to_owned()),
        DataType::Utf8View => Value::Text(a.as_string_view().value(r).to_owned()),
        DataType::Binary => Value::Bytes(Bytes::copy_from_slice(a.as_binary::<i32>().value(r))),
        DataType::LargeBinary => {
            Value::Bytes(Bytes::copy_from_slice(a.as_binary::<i64>().value(r)))
        }
        DataType::BinaryView => Value::Bytes(Bytes::copy_from_slice(a.as_binary_view().value(r))),
        DataType::List(_) => match token_ids(a.as_list::<i32>().value(r).as_ref()) {
            Some(t) => Value::Tokens(t),
            None => display(a, r),
        },
        DataType::LargeList(_) => match token_ids(a.as_list::<i64>().value(r).as_ref()) {
            Some(t) => Value::Tokens(t),
            None => display(a, r),
        },
        _ => display(a, r),
    }
}

impl ShardIndex for ParquetIndex {
    fn len(&self) -> u64 {
        *self.starts.last().expect("non-empty")
    }

    fn decode(&self, data: &Bytes, indices: &[u64]) -> FormatResult<Vec<Record>> {
        let mut out = Vec::with_capacity(indices.len());
        let mut current: Option<(usize, Arc<RecordBatch>)> = None;
        for &i in indices {
            let g = self.starts.partition_point(|&s| s <= i) - 1;
            let batch = match &current {
                Some((k, b)) if *k == g => b.clone(),
                _ => {
                    let b = self.group(data, g)?;
                    current = Some((g, b.clone()));
                    b
                }
            };
            out.push(record(&batch, (i - self.starts[g]) as usize));
        }
        Ok(out)
    }
}
