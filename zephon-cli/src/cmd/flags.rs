//! Value parsers that hold command-line flags to the documented ranges of
//! `zephon_core::settings`, so a bad flag is refused by name before anything
//! runs.

use clap::builder::RangedU64ValueParser;
use zephon_core::settings::Range;

/// A parser for an integer flag within `range`.
pub fn ranged<T>(range: Range) -> RangedU64ValueParser<T>
where
    T: TryFrom<u64> + Clone + Send + Sync + 'static,
    <T as TryFrom<u64>>::Error: std::error::Error + Send + Sync + 'static,
{
    RangedU64ValueParser::new().range(range.min..=range.max)
}

/// A count that must be at least 1 (steps, batches, rounds, samples).
pub const AT_LEAST_ONE: Range = Range::new(1, u64::MAX, "at least one");

/// Shards the demo and the benchmarks generate.
pub const GENERATED_SHARDS: Range = Range::new(1, 4096, "files written");

/// Records the demo and the benchmarks generate (per shard, or in all).
pub const GENERATED_RECORDS: Range = Range::new(1, 1 << 24, "records generated");

/// Samples `inspect` prints: it keeps each one (shortened) for its report,
/// so a mistyped count must not turn into the whole dataset in memory.
pub const PRINTED_SAMPLES: Range = Range::new(0, 100_000, "samples printed");

/// Characters (or a quarter as many token ids, so at least one) `inspect`
/// prints of a field.
pub const PRINTED_WIDTH: Range = Range::new(4, 1 << 20, "characters printed per field");

/// A period in seconds: finite, from 0.1 s (snapshots cost a little) to a day.
pub fn seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|e| format!("`{s}` is not a number: {e}"))?;
    if !(0.1..=86_400.0).contains(&v) {
        return Err(format!("{v} is out of range 0.1..=86400 seconds"));
    }
    Ok(v)
}
