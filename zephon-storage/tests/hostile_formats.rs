//! The binary formats whose parsers `hostile_inputs.rs` does not cover,
//! fed mutated bytes: Megatron `.idx` sidecars (and `.bin` files cut
//! short), Parquet files, flat token files and compressed (zstd, gzip)
//! JSONL shards. Each shard is opened as a
//! local shard is and every sample read, whole and one at a time; each case
//! must end in records or a clean error naming the shard, never a panic.
//!
//! Each test prints its row of the outcome table (`--nocapture` shows it).

// The harness; its other inputs are `hostile_inputs.rs`'s.
#[allow(dead_code)]
mod hostile;

use bytes::Bytes;
use hostile::{Outcome, Tally, mutated};
use proptest::prelude::*;
use zephon_core::{Dataset, Shard};
use zephon_storage::DatasetExt;
use zephon_storage::FormatShard;
use zephon_storage::format::FormatSpec;
use zephon_storage::format::tokens::{TokenDtype, encode_megatron};

/// Opens `data` as a shard of `spec` and reads every sample, whole and one
/// at a time; an error must name the shard.
fn judge(spec: FormatSpec, data: &[u8], sidecar: Option<&[u8]>) -> Outcome {
    let shard = match FormatShard::from_bytes(
        "d",
        spec,
        "s.shard",
        Bytes::copy_from_slice(data),
        sidecar.map(Bytes::copy_from_slice),
    ) {
        Ok(s) => s,
        Err(e) => return named(&e.to_string()),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let n = shard.len();
    match rt.block_on(shard.read_run(0, n)) {
        Ok(all) if all.len() as u64 != n => {
            return Outcome::Silent(format!("{} records of {n}", all.len()));
        }
        Ok(_) => {}
        Err(e) => return named(&e.to_string()),
    }
    for i in 0..n {
        if let Err(e) = rt.block_on(shard.read_run(i, 1)) {
            return named(&e.to_string());
        }
    }
    Outcome::Valid
}

fn named(message: &str) -> Outcome {
    if message.contains("s.shard") {
        Outcome::error(message)
    } else {
        Outcome::Silent(format!("the error does not name the shard: {message}"))
    }
}

fn docs() -> impl Strategy<Value = Vec<Vec<u32>>> {
    prop::collection::vec(prop::collection::vec(0u32..60_000, 0..12), 1..6)
}

#[test]
fn megatron_index_and_bin() {
    let mut tally = Tally::new("Megatron .idx / .bin");
    let idx = docs().prop_map(|d| encode_megatron(&d, TokenDtype::U16).unwrap());
    let pair = idx.prop_flat_map(|(bin, idx)| (Just(bin), mutated(Just(idx))));
    tally.run(1500, pair, |(bin, idx)| {
        judge(FormatSpec::Megatron, bin, Some(idx))
    });
    let cut = docs()
        .prop_map(|d| encode_megatron(&d, TokenDtype::U32).unwrap())
        .prop_flat_map(|(bin, idx)| {
            let n = bin.len();
            (Just(bin), Just(idx), 0..=n)
        });
    tally.run(500, cut, |(bin, idx, at)| {
        match judge(FormatSpec::Megatron, &bin[..*at], Some(idx)) {
            Outcome::Valid if *at < bin.len() => {
                Outcome::Silent(format!("a .bin cut at {at} of {} was read", bin.len()))
            }
            o => o,
        }
    });
    tally.finish();
}

#[test]
fn flat_token_files() {
    let mut tally = Tally::new("flat token files");
    let file = prop::collection::vec(any::<u8>(), 0..200);
    tally.run(
        500,
        (file, 1u64..9, any::<bool>()),
        |(data, seq_len, wide)| {
            let dtype = if *wide {
                TokenDtype::U32
            } else {
                TokenDtype::U16
            };
            judge(
                FormatSpec::Tokens {
                    dtype,
                    seq_len: *seq_len,
                },
                data,
                None,
            )
        },
    );
    tally.finish();
}

#[cfg(feature = "parquet")]
fn parquet_file(rows: &[(i64, String)], group: usize) -> Vec<u8> {
    use std::sync::Arc;
    use zephon_storage::format::parquet::arrow_array::{
        ArrayRef, Int64Array, RecordBatch, StringArray,
    };
    use zephon_storage::format::parquet::parquet::arrow::ArrowWriter;
    use zephon_storage::format::parquet::parquet::file::properties::WriterProperties;
    let batch = RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))) as ArrayRef,
        ),
        (
            "text",
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r.1))) as ArrayRef,
        ),
    ])
    .unwrap();
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(group))
        .build();
    let mut out = Vec::new();
    let mut w = ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    out
}

#[cfg(feature = "parquet")]
#[test]
fn parquet_files() {
    let mut tally = Tally::new("Parquet files");
    let rows = prop::collection::vec((any::<i64>(), "[a-z ]{0,12}"), 1..20);
    let file = (rows, 1usize..8).prop_map(|(rows, group)| parquet_file(&rows, group));
    tally.run(1500, mutated(file), |data| {
        judge(FormatSpec::Parquet { columns: None }, data, None)
    });
    tally.finish();
}

#[test]
fn compressed_shards() {
    let mut tally = Tally::new("compressed JSONL shards (zstd, gzip)");
    let text = prop::collection::vec("[a-z]{0,8}", 1..30).prop_map(|words| {
        words
            .iter()
            .map(|w| format!("{{\"t\":\"{w}\"}}\n"))
            .collect::<String>()
    });
    let packed = (text, any::<bool>()).prop_flat_map(|(text, gz)| {
        let bytes = if gz {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            std::io::Write::write_all(&mut e, text.as_bytes()).unwrap();
            e.finish().unwrap()
        } else {
            zstd::encode_all(text.as_bytes(), 3).unwrap()
        };
        (mutated(Just(bytes)), Just(gz))
    });
    tally.run(600, packed, |(bytes, gz)| {
        let dir = tempfile::tempdir().unwrap();
        let name = if *gz { "s.jsonl.gz" } else { "s.jsonl.zst" };
        std::fs::write(dir.path().join(name), bytes).unwrap();
        let named_here = |e: &str| {
            if e.contains(name) {
                Outcome::error(e)
            } else {
                Outcome::Silent(format!("the error does not name the shard: {e}"))
            }
        };
        let ds = match Dataset::from_path("d", dir.path()) {
            Ok(ds) => ds,
            Err(e) => return named_here(&e.to_string()),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for s in ds.shards() {
            if let Err(e) = rt.block_on(s.read_run(0, s.len())) {
                return named_here(&e.to_string());
            }
        }
        Outcome::Valid
    });
    tally.finish();
}

/// This process's peak virtual memory in bytes (Linux), `None` elsewhere.
#[cfg(feature = "parquet")]
fn vm_peak() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmPeak:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}

/// A footer of a few bytes whose schema list claims 100 million elements:
/// the `parquet` crate reserved room for them (9.6 GB) before reading one,
/// which killed the process wherever address space is limited (`ulimit
/// -v`, strict overcommit). Now refused naming the shard, reserving
/// nothing.
#[cfg(feature = "parquet")]
#[test]
fn a_footer_claiming_a_huge_list_is_refused_without_reserving_it() {
    // FileMetaData { version: 1, schema: list<struct> of 100,000,000 }.
    let mut footer = vec![0x15, 0x02, 0x19, 0xFC];
    let mut n = 100_000_000u32;
    while n >= 0x80 {
        footer.push((n as u8 & 0x7F) | 0x80);
        n >>= 7;
    }
    footer.push(n as u8);
    let mut file = b"PAR1".to_vec();
    file.extend_from_slice(&footer);
    file.extend_from_slice(&(footer.len() as u32).to_le_bytes());
    file.extend_from_slice(b"PAR1");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.parquet"), &file).unwrap();
    let before = vm_peak();
    let err = Dataset::from_path("d", dir.path()).unwrap_err().to_string();
    assert!(err.contains("a.parquet"), "{err}");
    if let (Some(before), Some(after)) = (before, vm_peak()) {
        assert!(
            after - before < 1 << 30,
            "the peak of virtual memory grew by {} MiB opening a file of {} bytes",
            (after - before) >> 20,
            file.len()
        );
    }
}
