//! Whole text pipelines: determinism across parallelism and runners, the
//! token-level mixture, error reporting.

use zephon_core::{
    Dataset, Lineage, PipelineExt, Record, Runner, SamplePtr, ShuffleMode, Value, WorkSource,
};
use zephon_ops::{
    IdType, MixtureConfig, OnMissing, PackAlgorithm, PackConfig, SpecialTokens, TextPipelineExt,
    TokenizeConfig, TrainingBatch, TrainingConfig,
};

const WORDS: &[&str] = &[
    "the",
    "loader",
    "streams",
    "shards",
    "of",
    "text",
    "into",
    "packed",
    "rows",
    "and",
    "tokens",
    "model",
    "data",
    "a",
    "batch",
    "training",
    "never",
    "changes",
    "order",
    "with",
    "parallelism",
    "café",
    "日本",
];

/// A deterministic document of 5..120 words.
fn doc(i: u64) -> String {
    let mut h = zephon_core::hash::mix64(i);
    let n = 5 + (h % 116) as usize;
    (0..n)
        .map(|_| {
            h = zephon_core::hash::mix64(h);
            WORDS[(h % WORDS.len() as u64) as usize]
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn config() -> TokenizeConfig {
    TokenizeConfig::from_bytes(include_bytes!("fixtures/tokenizer.json")).unwrap()
}

fn work_source() -> WorkSource {
    let shards = (0..3u64)
        .map(|s| {
            (0..120)
                .map(|i| Record::new().with("text", doc(s * 1000 + i)))
                .collect()
        })
        .collect();
    let ds = Dataset::in_memory("docs", shards).unwrap();
    WorkSource::builder()
        .dataset(ds, 1.0)
        .seed(7)
        .canonical_lanes(3)
        .build()
        .unwrap()
}

fn tokenize_config() -> TokenizeConfig {
    config()
        .special_tokens(SpecialTokens::BosEos)
        .max_length(64, zephon_ops::Overflow::Split)
        .micro_batch(7)
}

/// The corpus's token sequences as tokenize makes them, straight from the
/// documents (no work source, no fetch): what the pipeline may reorder and
/// pack into rows, never lose or repeat.
fn pieces() -> Vec<Vec<i64>> {
    let docs = (0..3u64)
        .flat_map(|s| (0..120).map(move |i| Ok(Record::new().with("text", doc(s * 1000 + i)))));
    futures::stream::iter(docs.collect::<Vec<zephon_core::Result<Record>>>())
        .tokenize(tokenize_config(), 1)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            let ids = r.tokens("input_ids").unwrap();
            ids.iter().map(|&t| i64::from(t)).collect()
        })
        .collect()
}

/// The documents of a batch's rows: runs of one non-zero segment id.
fn segments(b: &TrainingBatch) -> Vec<Vec<i64>> {
    let ids = b.input_ids.to_i64();
    let mut out = Vec::new();
    for (row, segs) in ids.chunks(b.seq_len).zip(b.segment_ids.chunks(b.seq_len)) {
        let mut prev = 0;
        for (&t, &s) in row.iter().zip(segs) {
            if s != 0 && s != prev {
                out.push(Vec::new());
            }
            if s != 0 {
                out.last_mut().unwrap().push(t);
            }
            prev = s;
        }
    }
    out
}

/// Every training batch of tokenize -> shuffle -> pack -> batch.
fn run(p: usize, runner: Runner, algorithm: PackAlgorithm) -> Vec<TrainingBatch> {
    let ws = work_source();
    let lanes = ws.owned_lanes();
    ws.stream()
        .fetch(p)
        .tokenize(tokenize_config(), p)
        .shuffle(32, ShuffleMode::Reservoir, 3)
        .pack_sequences(PackConfig::new(96, algorithm).num_bins(4))
        .batch(3)
        .lane_mux(lanes)
        .to_training(TrainingConfig::new(96).id_type(IdType::I64))
        .into_blocking_iter(runner)
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn output_is_identical_for_parallelism_1_and_8() {
    let mut pieces = pieces();
    let mut tokens: Vec<i64> = pieces.concat();
    pieces.sort_unstable();
    tokens.sort_unstable();
    for algorithm in [
        PackAlgorithm::FirstFit,
        PackAlgorithm::Wrap,
        PackAlgorithm::BestFit,
        PackAlgorithm::BestFitWrap,
    ] {
        let one = run(1, Runner::Inline, algorithm);
        assert!(one.len() > 10, "{algorithm:?}: {} batches", one.len());
        // Equal runs could agree on losing a document and repeating
        // another: every token sequence of the corpus arrives exactly once.
        // Wrapping algorithms split documents over rows, so for them the
        // tokens, not the documents, are compared.
        if matches!(algorithm, PackAlgorithm::FirstFit | PackAlgorithm::BestFit) {
            let mut docs: Vec<Vec<i64>> = one.iter().flat_map(segments).collect();
            docs.sort_unstable();
            assert!(
                docs == pieces,
                "{algorithm:?}: the documents packed are not the corpus's"
            );
        } else {
            let mut seen: Vec<i64> = one.iter().flat_map(segments).flatten().collect();
            seen.sort_unstable();
            assert!(
                seen == tokens,
                "{algorithm:?}: the tokens packed are not the corpus's"
            );
        }
        assert_eq!(
            one,
            run(8, Runner::Threads { workers: 4 }, algorithm),
            "{algorithm:?}"
        );
    }
}

fn ptr(dataset: u32, sample: u64) -> Lineage {
    Lineage::from_elem(
        SamplePtr {
            dataset,
            shard: 0,
            sample,
            lane: 0,
        },
        1,
    )
}

/// Short documents from dataset 0 (~100 tokens), long ones from dataset 1
/// (~400), arriving in the order `pattern` gives.
fn mixed(n: u64, pattern: impl Fn(u64) -> u32) -> Vec<zephon_core::Result<Record>> {
    (0..n)
        .map(|i| {
            let d = pattern(i);
            let len = if d == 0 {
                80 + (i % 41)
            } else {
                350 + (i % 101)
            } as usize;
            let mut r = Record::new().with("input_ids", Value::Tokens(vec![d; len]));
            r.lineage = ptr(d, i);
            Ok(r)
        })
        .collect()
}

/// Token share of dataset 0 after each batch of 8, cumulative.
fn shares(records: impl Iterator<Item = Record>) -> Vec<f64> {
    let (mut t0, mut all) = (0usize, 0usize);
    let mut out = Vec::new();
    for (i, r) in records.enumerate() {
        let n = r.tokens("input_ids").unwrap().len();
        all += n;
        if r.lineage[0].dataset == 0 {
            t0 += n;
        }
        if (i + 1) % 8 == 0 {
            out.push(t0 as f64 / all as f64);
        }
    }
    out
}

fn mix(input: Vec<zephon_core::Result<Record>>, config: MixtureConfig) -> Vec<Record> {
    futures::stream::iter(input)
        .ensure_mixture(config)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn assert_within_2pp(shares: &[f64], target: f64) {
    assert!(shares.len() > 100, "{} batches", shares.len());
    for (b, s) in shares.iter().enumerate().skip(50) {
        assert!(
            (s - target).abs() <= 0.02,
            "batch {b}: share {s:.4}, target {target}"
        );
    }
}

#[test]
fn mixture_holds_token_shares_within_2_points_bounded() {
    // Bursts of 60 short then 15 long documents: about 50/50 tokens over a
    // cycle, far from it within one; the buffer smooths the bursts out.
    let input = mixed(8000, |i| u32::from(i % 75 >= 60));
    let raw = shares(input.iter().map(|r| r.as_ref().unwrap().clone()));
    assert!(
        raw.iter().skip(50).any(|s| (s - 0.5).abs() > 0.02),
        "the input alone drifts"
    );
    let out = mix(
        input,
        MixtureConfig::new([(0, 1.0), (1, 1.0)]).max_buffer_size(128),
    );
    assert_eq!(out.len(), 8000, "bounded mode reorders, never drops");
    assert_within_2pp(&shares(out.into_iter()), 0.5);
}

#[test]
fn mixture_holds_token_shares_within_2_points_exact() {
    // Seven short documents for three long ones: 37% of tokens from dataset 0
    // against a 30% target; the surplus is dropped.
    let input = mixed(6000, |i| u32::from(zephon_core::hash::mix64(i) % 10 >= 7));
    let out = mix(
        input,
        MixtureConfig::new([(0, 0.3), (1, 0.7)])
            .max_buffer_size(64)
            .drop_surplus(true),
    );
    assert!(out.len() < 6000);
    assert_within_2pp(&shares(out.into_iter()), 0.3);
}

#[test]
fn tokenize_errors_name_field_and_pointer_or_skip() {
    let mut r = Record::new().with("body", "no text field");
    r.lineage = ptr(1, 42);
    let err = futures::stream::iter(vec![Ok(r.clone())])
        .tokenize(config(), 2)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .next()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`text`") && err.contains("dataset 1, shard 0, sample 42"),
        "{err}"
    );
    let t = futures::stream::iter(vec![Ok(r), Ok(Record::new().with("text", "kept"))])
        .tokenize(config().on_missing(OnMissing::Skip), 2);
    let stats = t.stats();
    assert_eq!(t.into_blocking_iter(Runner::Inline).unwrap().count(), 1);
    assert_eq!(stats.snapshot().skipped_missing, 1);
}

#[test]
fn tokenize_truncates_and_splits_with_special_tokens() {
    let text = doc(3);
    let full = config()
        .tokenizer()
        .encode(text.as_str(), false)
        .unwrap()
        .get_ids()
        .to_vec();
    let run = |c: TokenizeConfig| -> Vec<Vec<u32>> {
        futures::stream::iter(vec![Ok(Record::new().with("text", text.as_str()))])
            .tokenize(c, 1)
            .into_blocking_iter(Runner::Inline)
            .unwrap()
            .map(|r| r.unwrap().tokens("input_ids").unwrap().to_vec())
            .collect()
    };
    let c = config()
        .special_tokens(SpecialTokens::BosEos)
        .bos_id(1)
        .eos_id(0);
    let t = run(c.clone().max_length(10, zephon_ops::Overflow::Truncate));
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].len(), 10);
    assert_eq!((t[0][0], t[0][9]), (1, 0));
    assert_eq!(&t[0][1..9], &full[..8]);
    let s = run(c.max_length(10, zephon_ops::Overflow::Split));
    assert!(s.len() > 1 && s.iter().all(|p| p.len() <= 10));
    let joined: Vec<u32> = s.concat();
    assert_eq!(joined.len(), full.len() + 2);
    assert_eq!(&joined[1..joined.len() - 1], &full[..]);
}

#[test]
fn unknown_special_token_is_a_config_error() {
    let tok = tokenizers_without_specials();
    let err = futures::stream::iter(vec![Ok(Record::new().with("text", "x"))])
        .tokenize(tok.special_tokens(SpecialTokens::Bos), 1)
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .next()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(err.contains("bos_id"), "{err}");
}

fn tokenizers_without_specials() -> TokenizeConfig {
    use zephon_ops::tokenizers::models::wordlevel::WordLevel;
    let vocab = [("x".to_string(), 0u32), ("[UNK]".to_string(), 1)]
        .into_iter()
        .collect();
    let model = WordLevel::builder()
        .vocab(vocab)
        .unk_token("[UNK]".into())
        .build()
        .unwrap();
    TokenizeConfig::from_tokenizer(zephon_ops::tokenizers::Tokenizer::new(model))
}

/// Every operator of the text pipeline is a `FusedStream` whose end is the
/// `None` it returned: not terminated while it has elements, terminated
/// right after.
#[test]
fn the_text_operators_are_fused_streams_that_end_exactly() {
    use futures::StreamExt;
    use futures::stream::FusedStream;
    async fn drain<S: FusedStream + Unpin>(mut s: S) -> usize {
        let mut n = 0;
        assert!(!s.is_terminated());
        while s.next().await.is_some() {
            n += 1;
            assert!(!s.is_terminated(), "terminated with elements left");
        }
        assert!(s.is_terminated(), "not terminated after its end");
        n
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let docs = || {
        let ws = work_source();
        ws.stream().fetch(2)
    };
    rt.block_on(async {
        assert_eq!(
            drain(Box::pin(docs().tokenize(tokenize_config(), 2))).await,
            pieces().len()
        );
        let packed = docs()
            .tokenize(tokenize_config(), 2)
            .pack_sequences(PackConfig::new(96, PackAlgorithm::Wrap));
        assert!(drain(Box::pin(packed)).await > 0);
        let mixed = docs()
            .tokenize(tokenize_config(), 2)
            .ensure_mixture(MixtureConfig::new([(0, 1.0)]));
        assert!(drain(Box::pin(mixed)).await > 0);
        let flat = docs()
            .tokenize(
                tokenize_config().max_length(32, zephon_ops::Overflow::Truncate),
                2,
            )
            .pack_flat(32, 0);
        assert!(drain(Box::pin(flat)).await > 0);
        let ws = work_source();
        let lanes = ws.owned_lanes();
        let training = ws
            .stream()
            .fetch(2)
            .tokenize(tokenize_config(), 2)
            .pack_sequences(PackConfig::new(96, PackAlgorithm::Wrap))
            .batch(3)
            .lane_mux(lanes)
            .to_training(TrainingConfig::new(96));
        assert!(drain(Box::pin(training)).await > 0);
    });
}
