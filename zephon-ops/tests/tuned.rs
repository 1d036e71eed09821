//! A tokenizer whose parallelism a random tuner moves at random moments
//! delivers what a fixed one does, on both runners.

use proptest::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use zephon_core::knob::Knob;
use zephon_core::{PipelineExt, Record, Runner};
use zephon_ops::{TextPipelineExt, TokenizeConfig};

fn config() -> TokenizeConfig {
    TokenizeConfig::from_bytes(include_bytes!("fixtures/tokenizer.json"))
        .unwrap()
        .micro_batch(2)
}

fn docs() -> Vec<zephon_core::Result<Record>> {
    (0..300)
        .map(|i| {
            Ok(Record::new().with(
                "text",
                format!("document {i} {}", "streams shards ".repeat(i % 9)),
            ))
        })
        .collect()
}

fn ids(out: Vec<zephon_core::Result<Record>>) -> Vec<Vec<u32>> {
    out.into_iter()
        .map(|r| r.unwrap().tokens("input_ids").unwrap().to_vec())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn a_randomly_tuned_tokenizer_delivers_what_a_fixed_one_does(seed in any::<u64>(), threads in any::<bool>()) {
        let fixed = ids(futures::stream::iter(docs())
            .tokenize(config(), 1)
            .into_blocking_iter(Runner::Inline)
            .unwrap()
            .collect());
        let knob = Knob::parallelism("tokenize", 1, 6).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (turn, halt) = (knob.clone(), stop.clone());
        let tuner = std::thread::spawn(move || {
            let mut x = seed | 1;
            while !halt.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                turn.set((x % 6) as usize + 1, "random");
                std::thread::sleep(std::time::Duration::from_micros(x % 500));
            }
        });
        let runner = if threads { Runner::threads() } else { Runner::Inline };
        let tuned = ids(futures::stream::iter(docs())
            .tokenize(config(), 1)
            .tuned(&knob)
            .into_blocking_iter(runner)
            .unwrap()
            .collect());
        stop.store(true, Ordering::Relaxed);
        tuner.join().unwrap();
        prop_assert_eq!(tuned, fixed);
    }
}
