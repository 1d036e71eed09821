//! Packing invariants, as property tests.

use proptest::prelude::*;
use std::collections::BTreeMap;
use zephon_core::{Lineage, Record, SamplePtr, Value};
use zephon_ops::{PackAlgorithm, PackConfig, Packer};

/// Documents with distinct, recognisable ids: token `j` of document `i` is
/// `i * 10_000 + j`.
fn docs(lens: &[usize]) -> Vec<Record> {
    lens.iter()
        .enumerate()
        .map(|(i, &n)| {
            let mut r = Record::new().with(
                "input_ids",
                Value::Tokens((0..n as u32).map(|j| i as u32 * 10_000 + j).collect()),
            );
            r.lineage = Lineage::from_elem(
                SamplePtr {
                    dataset: 0,
                    shard: 0,
                    sample: i as u64,
                    lane: 0,
                },
                1,
            );
            r
        })
        .collect()
}

fn pack(lens: &[usize], config: PackConfig) -> Vec<Record> {
    let mut p = Packer::new(config);
    for r in docs(lens) {
        p.push(r).unwrap();
    }
    p.finish();
    std::iter::from_fn(|| p.pop()).collect()
}

fn ids(r: &Record) -> &[u32] {
    r.tokens("input_ids").unwrap()
}

/// Pieces of each source document, in output order, keyed by document.
fn pieces(rows: &[Record]) -> BTreeMap<u64, Vec<u32>> {
    let mut by_doc: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for r in rows {
        let segs = r.tokens("segment_ids").unwrap();
        let pos = r.tokens("position_ids").unwrap();
        assert_eq!(segs.len(), ids(r).len());
        let mut start = 0;
        for (k, ptr) in r.lineage.iter().enumerate() {
            let len = segs.iter().filter(|&&s| s == k as u32 + 1).count();
            let piece = &ids(r)[start..start + len];
            assert_eq!(
                &pos[start..start + len],
                (0..len as u32).collect::<Vec<_>>().as_slice()
            );
            by_doc
                .entry(ptr.sample)
                .or_default()
                .extend_from_slice(piece);
            start += len;
        }
        assert_eq!(start, ids(r).len(), "segments cover the row");
    }
    by_doc
}

fn padding(rows: &[Record], max_length: usize) -> usize {
    rows.iter().map(|r| max_length - ids(r).len()).sum()
}

fn lens_strategy() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..300, 0..120)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn bins_lose_nothing_but_oversized(lens in lens_strategy(), max_length in 16usize..256, bins in 1usize..8,
                                       max_seqs in prop::option::of(1usize..6), best in any::<bool>()) {
        let algo = if best { PackAlgorithm::BestFit } else { PackAlgorithm::FirstFit };
        let mut config = PackConfig::new(max_length, algo).num_bins(bins);
        if let Some(m) = max_seqs { config = config.max_sequences_per_bin(m); }
        let rows = pack(&lens, config);
        for r in &rows {
            prop_assert!(ids(r).len() <= max_length);
            prop_assert!(!ids(r).is_empty());
            if let Some(m) = max_seqs { prop_assert!(r.lineage.len() <= m); }
        }
        let got = pieces(&rows);
        let want: BTreeMap<u64, Vec<u32>> = docs(&lens).iter().enumerate()
            .filter(|(_, r)| !ids(r).is_empty() && ids(r).len() <= max_length)
            .map(|(i, r)| (i as u64, ids(r).to_vec())).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn best_fit_never_pads_more_than_first_fit(lens in lens_strategy(), max_length in 16usize..256,
                                               bins in 1usize..8, max_seqs in prop::option::of(1usize..6)) {
        let mut ff = PackConfig::new(max_length, PackAlgorithm::FirstFit).num_bins(bins);
        if let Some(m) = max_seqs { ff = ff.max_sequences_per_bin(m); }
        let bf = PackConfig { algorithm: PackAlgorithm::BestFit, ..ff.clone() };
        prop_assert!(padding(&pack(&lens, bf), max_length) <= padding(&pack(&lens, ff), max_length));
    }

    #[test]
    fn wrap_concatenation_is_the_input(lens in lens_strategy(), max_length in 1usize..256, drop in any::<bool>()) {
        let rows = pack(&lens, PackConfig::new(max_length, PackAlgorithm::Wrap).drop_remainder(drop));
        let input: Vec<u32> = docs(&lens).iter().flat_map(|r| ids(r).to_vec()).collect();
        let output: Vec<u32> = rows.iter().flat_map(|r| ids(r).to_vec()).collect();
        for r in &rows[..rows.len().saturating_sub(1)] {
            prop_assert_eq!(ids(r).len(), max_length);
        }
        if drop {
            prop_assert_eq!(output.len(), input.len() / max_length * max_length);
            prop_assert!(rows.iter().all(|r| ids(r).len() == max_length));
        }
        prop_assert_eq!(&output[..], &input[..output.len()]);
        if !drop { prop_assert_eq!(output.len(), input.len()); }
        pieces(&rows);
    }

    #[test]
    fn best_fit_wrap_loses_nothing_and_splits_once_per_row(lens in lens_strategy(), max_length in 8usize..256,
                                                           pool in 1usize..16, max_seqs in prop::option::of(1usize..6)) {
        let mut config = PackConfig::new(max_length, PackAlgorithm::BestFitWrap).num_bins(pool);
        if let Some(m) = max_seqs { config = config.max_sequences_per_bin(m); }
        let rows = pack(&lens, config);
        let got = pieces(&rows);
        let want: BTreeMap<u64, Vec<u32>> = docs(&lens).iter().enumerate()
            .filter(|(_, r)| !ids(r).is_empty())
            .map(|(i, r)| (i as u64, ids(r).to_vec())).collect();
        prop_assert_eq!(&got, &want);
        // A segment is a cut piece when its document continues in a later row.
        let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
        for r in &rows {
            prop_assert!(ids(r).len() <= max_length);
            if let Some(m) = max_seqs { prop_assert!(r.lineage.len() <= m); }
            let segs = r.tokens("segment_ids").unwrap();
            let mut cut = 0;
            for (k, p) in r.lineage.iter().enumerate() {
                let len = segs.iter().filter(|&&s| s == k as u32 + 1).count();
                let done = seen.entry(p.sample).or_default();
                *done += len;
                if *done < want[&p.sample].len() { cut += 1; }
            }
            prop_assert!(cut <= 1, "row cuts {} documents", cut);
        }
    }

    /// With `max_candidate_age = n`, a document is wholly emitted by the
    /// time `n + 1` more documents entered the pool, and nothing is lost.
    #[test]
    fn best_fit_wrap_candidates_wait_at_most_max_candidate_age(lens in prop::collection::vec(1usize..300, 0..120),
                                                              max_length in 8usize..256, pool in 1usize..16,
                                                              age in 1u64..8) {
        let config = PackConfig::new(max_length, PackAlgorithm::BestFitWrap).num_bins(pool)
            .max_candidate_age(age);
        let mut p = Packer::new(config);
        let mut rows = Vec::new();
        let mut done_at: BTreeMap<u64, usize> = BTreeMap::new();
        let mut emitted: BTreeMap<u64, usize> = BTreeMap::new();
        for (i, r) in docs(&lens).into_iter().enumerate() {
            p.push(r).unwrap();
            while let Some(row) = p.pop() {
                let segs = row.tokens("segment_ids").unwrap();
                for (k, ptr) in row.lineage.iter().enumerate() {
                    let len = segs.iter().filter(|&&s| s == k as u32 + 1).count();
                    let n = emitted.entry(ptr.sample).or_default();
                    *n += len;
                    if *n == lens[ptr.sample as usize] { done_at.insert(ptr.sample, i); }
                }
                rows.push(row);
            }
        }
        for (doc, &len) in lens.iter().enumerate() {
            if doc + age as usize + 1 < lens.len() {
                let at = done_at.get(&(doc as u64)).copied();
                prop_assert!(at.is_some_and(|at| at <= doc + age as usize + 1),
                             "document {} of {} tokens done at push {:?}", doc, len, at);
            }
        }
        p.finish();
        rows.extend(std::iter::from_fn(|| p.pop()));
        let want: BTreeMap<u64, Vec<u32>> = docs(&lens).iter().enumerate()
            .map(|(i, r)| (i as u64, ids(r).to_vec())).collect();
        prop_assert_eq!(&pieces(&rows), &want);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// With `group_field`, every row's documents share the group, and no
    /// token is lost or moved within its document.
    #[test]
    fn grouped_rows_never_mix_groups(lens in prop::collection::vec(1usize..300, 0..120),
                                     groups in prop::collection::vec(0i64..4, 120),
                                     max_length in 8usize..256, bins in 1usize..8,
                                     algorithm in prop_oneof![Just(PackAlgorithm::FirstFit), Just(PackAlgorithm::BestFit),
                                                              Just(PackAlgorithm::Wrap), Just(PackAlgorithm::BestFitWrap)]) {
        let config = PackConfig::new(max_length, algorithm).num_bins(bins)
            .oversized(zephon_ops::OversizedPolicy::Drop).group_field("group");
        let mut p = Packer::new(config);
        for (i, r) in docs(&lens).into_iter().enumerate() {
            p.push(r.with("group", groups[i])).unwrap();
        }
        p.finish();
        let rows: Vec<Record> = std::iter::from_fn(|| p.pop()).collect();
        for r in &rows {
            let g: Vec<i64> = r.lineage.iter().map(|ptr| groups[ptr.sample as usize]).collect();
            prop_assert!(g.windows(2).all(|w| w[0] == w[1]), "a row of groups {:?}", g);
        }
        let bins_drop = matches!(algorithm, PackAlgorithm::FirstFit | PackAlgorithm::BestFit);
        let want: BTreeMap<u64, Vec<u32>> = docs(&lens).iter().enumerate()
            .filter(|(_, r)| !bins_drop || ids(r).len() <= max_length)
            .map(|(i, r)| (i as u64, ids(r).to_vec())).collect();
        prop_assert_eq!(&pieces(&rows), &want);
    }
}

#[test]
fn group_field_is_checked_and_read() {
    let e = PackConfig::new(8, PackAlgorithm::Wrap)
        .group_field("")
        .validate()
        .unwrap_err();
    assert!(e.to_string().contains("pack.group_field"), "{e}");
    let mut p = Packer::new(PackConfig::new(8, PackAlgorithm::Wrap).group_field("group"));
    let e = p.push(docs(&[3]).remove(0)).unwrap_err();
    assert!(e.to_string().contains("group"), "{e}");
}

/// A field name known only at run time (read from a recipe) is taken as
/// it is, owned, and groups as a literal one does.
#[test]
fn group_field_takes_a_name_built_at_run_time() {
    let name: String = ["la", "ng"].concat();
    let config = PackConfig::new(4, PackAlgorithm::Wrap).group_field(name);
    assert_eq!(config.group_field.as_deref(), Some("lang"));
    let mut p = Packer::new(config);
    for (r, lang) in docs(&[2, 2, 2]).into_iter().zip(["en", "fr", "en"]) {
        p.push(r.with("lang", Value::Text(lang.into()))).unwrap();
    }
    p.finish();
    let rows: Vec<Vec<u32>> = std::iter::from_fn(|| p.pop())
        .map(|r| r.tokens("input_ids").unwrap().to_vec())
        .collect();
    assert_eq!(rows, vec![vec![0, 1, 20_000, 20_001], vec![10_000, 10_001]]);
}

#[test]
fn max_candidate_age_is_checked() {
    let e = PackConfig::new(8, PackAlgorithm::Wrap)
        .max_candidate_age(4)
        .validate()
        .unwrap_err();
    assert!(e.to_string().contains("pack.max_candidate_age"), "{e}");
    let e = PackConfig::new(8, PackAlgorithm::BestFitWrap)
        .max_candidate_age(0)
        .validate()
        .unwrap_err();
    assert!(e.to_string().contains("pack.max_candidate_age"), "{e}");
    assert!(
        PackConfig::new(8, PackAlgorithm::BestFitWrap)
            .max_candidate_age(1)
            .validate()
            .is_ok()
    );
}

#[test]
fn oversized_error_names_the_sample() {
    let mut p = Packer::new(
        PackConfig::new(4, PackAlgorithm::FirstFit).oversized(zephon_ops::OversizedPolicy::Error),
    );
    let err = p.push(docs(&[1, 9]).remove(1)).unwrap_err().to_string();
    assert!(
        err.contains("sample 1") && err.contains("9 tokens"),
        "{err}"
    );
}

#[test]
fn missing_field_names_field_and_pointer() {
    let mut p = Packer::new(PackConfig::new(4, PackAlgorithm::Wrap));
    let mut r = Record::new().with("input_ids", "not tokenized");
    r.lineage = Lineage::from_elem(
        SamplePtr {
            dataset: 2,
            shard: 3,
            sample: 4,
            lane: 0,
        },
        1,
    );
    let err = p.push(r).unwrap_err().to_string();
    assert!(
        err.contains("`input_ids`")
            && err.contains("shard 3, sample 4")
            && err.contains("found text"),
        "{err}"
    );
}

#[test]
fn stats_count_padding_and_drops() {
    let mut p = Packer::new(PackConfig::new(10, PackAlgorithm::FirstFit).min_sequence_length(2));
    for r in docs(&[6, 6, 1, 20, 4]) {
        p.push(r).unwrap();
    }
    p.finish();
    let s = p.stats().snapshot();
    assert_eq!((s.rows, s.row_tokens, s.padding_tokens), (2, 16, 4));
    assert_eq!(
        (s.dropped_short, s.dropped_oversized, s.dropped_tokens),
        (1, 1, 21)
    );
    assert!((s.padding_fraction - 0.2).abs() < 1e-9);
    assert!((s.sequences_per_row - 1.5).abs() < 1e-9);
}

/// A group field of distinct values (an id per document) opened a group
/// per document, each holding its rows until the end: the whole input in
/// memory. One group past [`zephon_ops::MAX_GROUPS`] on a lane is an error
/// naming the field, the sample and the value; closed groups' rows came out.
#[test]
fn a_lane_holds_at_most_max_groups_open() {
    let max = zephon_ops::MAX_GROUPS;
    let mut p = Packer::new(PackConfig::new(8, PackAlgorithm::Wrap).group_field("id"));
    let mut pushed = docs(&vec![2; max + 1]).into_iter().enumerate();
    for (i, r) in pushed.by_ref().take(max) {
        p.push(r.with("id", Value::Int(i as i64))).unwrap();
    }
    let (i, r) = pushed.next().unwrap();
    let e = p
        .push(r.with("id", Value::Int(i as i64)))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("pack.group_field")
            && e.contains(&format!("{max} groups open"))
            && e.contains(&format!("`{max}`")),
        "{e}"
    );
    // A document of a group already open is still taken.
    let again = docs(&[2]).remove(0).with("id", Value::Int(0));
    p.push(again).unwrap();
}
