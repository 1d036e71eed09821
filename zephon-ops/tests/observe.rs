//! The text operators report to observability and to `explain()`.

use zephon_core::{Dataset, PipelineExt, Record, Runner, Tracking, WorkSource};
use zephon_ops::{
    PackAlgorithm, PackConfig, SpecialTokens, TextPipelineExt, TokenizeConfig, TrainingConfig,
};

#[test]
fn text_operators_show_up_in_metrics_and_plan() {
    let json = include_bytes!("fixtures/tokenizer.json");
    let docs = (0..120)
        .map(|i| {
            Record::new().with(
                "text",
                format!(
                    "document {i} about the model and the data {}",
                    "x ".repeat(i % 13)
                ),
            )
        })
        .collect();
    let ws = WorkSource::builder()
        .dataset(Dataset::in_memory("web", vec![docs]).unwrap(), 1.0)
        .seed(2)
        .build()
        .unwrap();
    let tokenizer = TokenizeConfig::from_bytes(json)
        .unwrap()
        .special_tokens(SpecialTokens::Eos);
    let pipeline = ws
        .stream()
        .fetch(2)
        .tokenize(tokenizer, 2)
        .pack_sequences(PackConfig::new(64, PackAlgorithm::Wrap))
        .batch(4)
        .to_training(TrainingConfig::new(64));
    let plan = pipeline.explain(Runner::threads());
    let names: Vec<&str> = plan.stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "work_source",
            "fetch",
            "tokenize",
            "pack_sequences",
            "batch",
            "to_training"
        ]
    );

    let mut it = pipeline
        .into_blocking_iter(Runner::Threads { workers: 2 })
        .unwrap();
    let obs = it.enable_observability(Tracking::Operator);
    let mut batches = 0;
    for b in it.by_ref() {
        b.unwrap();
        batches += 1;
    }
    let m = obs.metrics_snapshot();
    let by = |n: &str| {
        m.operators
            .iter()
            .find(|o| o.name == n)
            .unwrap_or_else(|| panic!("{n} missing:\n{m}"))
            .clone()
    };
    assert_eq!(by("tokenize").elements_in, 120);
    assert_eq!(by("tokenize").elements_out, 120);
    assert!(by("tokenize").busy_s > 0.0);
    assert_eq!(by("pack_sequences").elements_in, 120);
    assert_eq!(by("to_training").elements_out, batches);
    assert_eq!(by("batch").elements_out, by("to_training").elements_in);
}
