//! Token-share weights at the work source: on a corpus whose datasets have
//! very different document lengths, weights given in tokens hold in tokens
//! (within a stated tolerance) where the same weights as sample shares do
//! not; the estimate is deterministic and kept in the work state.

use futures::executor::block_on;
use zephon_core::{Dataset, Record, SamplePtr, WorkSource, WorkSourceBuilder};

/// Allowed gap between delivered and target token shares.
const TOLERANCE: f64 = 0.01;
/// Pointers delivered per check.
const DELIVERED: usize = 200_000;

/// Words of document `i` of shard `s`: spread between `lo` and `hi`.
fn words(s: u32, i: u64, lo: u64, hi: u64) -> u64 {
    let h = zephon_core::hash::key(&[s as u64, i, lo]);
    lo + h % (hi - lo + 1)
}

/// (name, shards, shortest, longest document in words)
const CORPUS: [(&str, u32, u64, u64, u64); 2] = [
    // name, shards, documents per shard, shortest, longest
    ("chat", 3, 200, 4, 36),
    ("books", 2, 150, 400, 2600),
];

fn corpus() -> Vec<Dataset> {
    CORPUS
        .iter()
        .map(|&(name, shards, docs, lo, hi)| {
            let shards = (0..shards)
                .map(|s| {
                    (0..docs)
                        .map(|i| {
                            Record::new().with("text", "w ".repeat(words(s, i, lo, hi) as usize))
                        })
                        .collect()
                })
                .collect();
            Dataset::in_memory(name, shards).unwrap()
        })
        .collect()
}

fn builder(weights: [f64; 2]) -> WorkSourceBuilder {
    // A chunk holds whole samples: a long-document dataset with a few
    // samples per chunk would round its token share coarsely, so the chunk
    // is large enough to give it tens.
    let mut b = WorkSource::builder()
        .seed(11)
        .repeat()
        .canonical_lanes(4)
        .chunk_size(8192);
    for (ds, w) in corpus().into_iter().zip(weights) {
        b = b.dataset(ds, w);
    }
    b
}

fn count_words(r: &Record) -> zephon_core::Result<u64> {
    Ok(r.text("text").unwrap_or("").split_whitespace().count() as u64)
}

fn estimated(b: WorkSourceBuilder) -> WorkSource {
    block_on(b.estimate_tokens(128, count_words))
        .unwrap()
        .build()
        .unwrap()
}

/// Tokens delivered per dataset by the first `DELIVERED` pointers.
fn delivered(ws: &WorkSource) -> Vec<u64> {
    let mut t = vec![0u64; 2];
    for p in ws.stream().pointers().take(DELIVERED) {
        let (_, _, _, lo, hi) = CORPUS[p.dataset as usize];
        t[p.dataset as usize] += words(p.shard, p.sample, lo, hi);
    }
    t
}

#[test]
fn token_weights_hold_token_shares_where_sample_weights_do_not() {
    for target in [[0.5, 0.5], [0.8, 0.2], [0.2, 0.8]] {
        let by_samples = builder(target).build().unwrap();
        let r = by_samples
            .token_share_error(&delivered(&by_samples))
            .unwrap();
        assert!(
            r.max_abs_error > 0.1,
            "sample weights {target:?} happen to hold tokens: {r:?}"
        );
        let by_tokens = estimated(builder(target));
        let r = by_tokens.token_share_error(&delivered(&by_tokens)).unwrap();
        assert!(
            r.max_abs_error < TOLERANCE,
            "token weights {target:?}: {r:?} (estimate {:?})",
            by_tokens.tokens_per_sample()
        );
    }
}

#[test]
fn the_estimate_is_deterministic_and_kept_in_the_state() {
    let a = estimated(builder([0.5, 0.5]));
    let b = estimated(builder([0.5, 0.5]).world_size(4).rank(3));
    assert_eq!(a.tokens_per_sample(), b.tokens_per_sample());
    let t = a.tokens_per_sample().unwrap().to_vec();
    // Rough, not exact: a sample of 128 documents of each.
    assert!(
        (10.0..30.0).contains(&t[0]) && (1000.0..2000.0).contains(&t[1]),
        "{t:?}"
    );
    let mut st = a.state();
    assert_eq!(st.tokens_per_sample, t);
    st.next_global = 1000;
    // A rank of another world size, given the same estimate, continues.
    let mut c = builder([0.5, 0.5])
        .tokens_per_sample("chat", t[0])
        .tokens_per_sample("books", t[1])
        .world_size(2)
        .rank(1)
        .build()
        .unwrap();
    c.restore(&st).unwrap();
    let want: Vec<SamplePtr> = (1000..1100)
        .map(|g| a.pointer_at(g))
        .filter(|p| p.lane >= 2)
        .collect();
    let got: Vec<SamplePtr> = c.stream().pointers().take(want.len()).collect();
    assert_eq!(got, want);
    // Another estimate is refused, naming it.
    let mut d = builder([0.5, 0.5])
        .tokens_per_sample("chat", t[0] + 1.0)
        .tokens_per_sample("books", t[1])
        .build()
        .unwrap();
    let e = d.restore(&st).unwrap_err().to_string();
    assert!(e.contains("tokens_per_sample"), "{e}");
}

#[test]
fn estimation_errors_name_the_dataset() {
    let e = block_on(builder([1.0, 1.0]).estimate_tokens(8, |r| {
        if r.text("text").is_some_and(|t| t.len() > 100) {
            Err(zephon_core::Error::config("tokenizer", "refused"))
        } else {
            Ok(1)
        }
    }))
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("books") && e.contains("refused"), "{e}");
    let e = block_on(builder([1.0, 1.0]).estimate_tokens(8, |_| Ok(0)))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("chat") && e.contains("no tokens"), "{e}");
    let e = block_on(builder([1.0, 1.0]).estimate_tokens(0, count_words))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("token_samples"), "{e}");
}
