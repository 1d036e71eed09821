//! Small figures shared by the benchmarks.

/// The median of `values` (the mean of the middle two for an even count, so
/// two rounds give their average rather than the larger); NaN for none.
pub fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let m = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[m - 1] + values[m]) / 2.0
    } else {
        values[m]
    }
}

/// Ratios paired within rounds: their median, and the lowest and highest
/// of them. The spread is printed beside the median because on a shared
/// machine one round can stray by more than a change being measured: a
/// median is only as good as the rounds around it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ratios {
    /// The median over rounds (see [`median`]).
    pub median: f64,
    /// The lowest round's ratio.
    pub low: f64,
    /// The highest round's ratio.
    pub high: f64,
}

impl Ratios {
    /// The median and range of `values`; NaN throughout for none.
    pub fn of(values: Vec<f64>) -> Self {
        let low = values.iter().copied().reduce(f64::min).unwrap_or(f64::NAN);
        let high = values.iter().copied().reduce(f64::max).unwrap_or(f64::NAN);
        Ratios {
            median: median(values),
            low,
            high,
        }
    }

    /// `[low, high]`, rounded, for JSON output.
    pub fn range_json(&self) -> serde_json::Value {
        serde_json::json!([round3(self.low), round3(self.high)])
    }
}

/// Rounded to three decimals, for ratios and seconds in JSON output.
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::{Ratios, median};

    #[test]
    fn ratios_give_the_median_and_the_range_of_the_rounds() {
        let r = Ratios::of(vec![0.8, 0.7, 0.9, 0.75]);
        assert_eq!((r.low, r.high), (0.7, 0.9));
        assert!((r.median - 0.775).abs() < 1e-12, "{r:?}");
        assert_eq!(r.range_json(), serde_json::json!([0.7, 0.9]));
        let none = Ratios::of(Vec::new());
        assert!(none.median.is_nan() && none.low.is_nan() && none.high.is_nan());
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![0.9]), 0.9);
        assert!(median(Vec::new()).is_nan());
    }
}
