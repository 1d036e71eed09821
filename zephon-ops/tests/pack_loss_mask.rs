//! `tokenize_chat` -> `pack_sequences` -> `to_training`: each packed row
//! keeps its pieces' loss masks, so assistant-only loss survives packing
//! under every algorithm.

use serde_json::json;
use zephon_core::{Lineage, PipelineExt, Record, Runner, SamplePtr, Value};
use zephon_ops::{
    ChatTokenizeConfig, IGNORE_INDEX, PackAlgorithm, PackConfig, TextPipelineExt, TrainingConfig,
};

const CHATML: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n\
    {% if m.role == 'assistant' %}{% generation %}{{ m.content }}<|im_end|>{% endgeneration %}\
    {% else %}{{ m.content }}<|im_end|>{% endif %}\n{% endfor %}";
const ROW: usize = 192;

fn config() -> ChatTokenizeConfig {
    ChatTokenizeConfig::from_bytes(include_bytes!("fixtures/tokenizer.json"))
        .unwrap()
        .chat_template(CHATML)
        .eos_token("<|endoftext|>")
}

/// Conversation `i`, with a pointer of its own: 1 to 3 exchanges.
fn chat(i: u64) -> Record {
    let mut m = vec![json!({"role": "system", "content": format!("you answer question {i}")})];
    for t in 0..1 + i % 3 {
        m.push(json!({"role": "user", "content": format!("what is {t} plus {i}?")}));
        m.push(json!({"role": "assistant", "content": format!("it is {}", t + i)}));
    }
    let mut r = Record::new().with("messages", Value::Json(json!(m)));
    r.lineage = Lineage::from_elem(
        SamplePtr {
            dataset: 0,
            shard: 0,
            sample: i,
            lane: 0,
        },
        1,
    );
    r
}

fn chats() -> impl futures::Stream<Item = zephon_core::Result<Record>> {
    futures::stream::iter((0..12).map(|i| Ok(chat(i)))).tokenize_chat(config(), 2)
}

#[test]
fn packed_rows_take_loss_only_on_assistant_tokens() {
    // The documents as tokenize_chat gives them: ids and mask per pointer.
    let docs: Vec<(Vec<u32>, Vec<u32>)> = chats()
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            let t = |k| r.tokens(k).unwrap().to_vec();
            (t("input_ids"), t("loss_mask"))
        })
        .collect();
    assert!(
        docs.iter().any(|(ids, _)| ids.len() > ROW),
        "a document spans rows"
    );
    for algorithm in [
        PackAlgorithm::FirstFit,
        PackAlgorithm::BestFit,
        PackAlgorithm::Wrap,
        PackAlgorithm::BestFitWrap,
    ] {
        let pack = PackConfig::new(ROW, algorithm).num_bins(3);
        let rows: Vec<Record> = chats()
            .pack_sequences(pack)
            .into_blocking_iter(Runner::Inline)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        // Each row's mask, piece by piece, is its documents' mask.
        let mut pieces: Vec<(Vec<u32>, Vec<u32>)> = vec![Default::default(); docs.len()];
        for r in &rows {
            let (ids, mask, segs) = (
                r.tokens("input_ids").unwrap(),
                r.tokens("loss_mask").unwrap(),
                r.tokens("segment_ids").unwrap(),
            );
            for (k, ptr) in r.lineage.iter().enumerate() {
                let d = &mut pieces[ptr.sample as usize];
                for t in (0..ids.len()).filter(|&t| segs[t] == k as u32 + 1) {
                    d.0.push(ids[t]);
                    d.1.push(mask[t]);
                }
            }
        }
        let kept = |i: usize| {
            algorithm.ne(&PackAlgorithm::FirstFit) && algorithm.ne(&PackAlgorithm::BestFit)
                || docs[i].0.len() <= ROW
        };
        for (i, doc) in docs.iter().enumerate() {
            if kept(i) {
                assert_eq!(&pieces[i], doc, "{algorithm:?}: document {i}");
            }
        }
        let unmasked: Vec<Record> = rows
            .iter()
            .cloned()
            .map(|mut r| {
                r.take("loss_mask");
                r
            })
            .collect();
        let collate = |rows: Vec<Record>| {
            futures::stream::iter(rows.into_iter().map(Ok))
                .batch(4)
                .to_training(TrainingConfig::new(ROW))
                .into_blocking_iter(Runner::Inline)
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap()
        };
        let (masked, plain) = (collate(rows.clone()), collate(unmasked));
        let mut dropped = 0;
        for (b, p) in masked.iter().zip(&plain) {
            let ids = b.input_ids.to_i64();
            for t in 0..b.labels.len() {
                let (row, col) = (t / ROW, t % ROW);
                let r = &rows[(b.index as usize) * 4 + row];
                let mask = r.tokens("loss_mask").unwrap();
                let next_supervised = col + 1 < mask.len() && mask[col + 1] == 1;
                // A label survives only where the plain one does and the next
                // token is an assistant token.
                let want = if next_supervised {
                    p.labels[t]
                } else {
                    IGNORE_INDEX
                };
                assert_eq!(
                    b.labels[t], want,
                    "{algorithm:?}: batch {}, position {t}",
                    b.index
                );
                if b.labels[t] != IGNORE_INDEX {
                    assert_eq!(b.labels[t], ids[t + 1]);
                }
                dropped += usize::from(p.labels[t] != IGNORE_INDEX && !next_supervised);
            }
            assert!(b.num_valid_tokens() < p.num_valid_tokens(), "{algorithm:?}");
        }
        assert!(dropped > 100, "{algorithm:?}: {dropped} labels masked");
    }
}

fn doc(ids: Vec<u32>, mask: Option<Vec<u32>>) -> Record {
    let r = Record::new().with("input_ids", Value::Tokens(ids));
    match mask {
        Some(m) => r.with("loss_mask", Value::Tokens(m)),
        None => r,
    }
}

#[test]
fn a_piece_without_a_mask_is_all_supervised_and_a_misaligned_mask_is_refused() {
    let rows: Vec<Record> = futures::stream::iter([
        Ok(doc(vec![5, 6, 7], None)),
        Ok(doc(vec![8, 9, 10, 11], Some(vec![0, 0, 1, 1]))),
        Ok(doc(vec![12, 13], None)),
    ])
    .pack_sequences(PackConfig::new(4, PackAlgorithm::Wrap))
    .into_blocking_iter(Runner::Inline)
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap();
    let masks: Vec<Option<&[u32]>> = rows.iter().map(|r| r.tokens("loss_mask")).collect();
    assert_eq!(
        masks,
        [Some(&[1, 1, 1, 0][..]), Some(&[0, 1, 1, 1][..]), None]
    );
    let out: Vec<_> = futures::stream::iter([Ok(doc(vec![1, 2, 3], Some(vec![1, 1])))])
        .pack_sequences(PackConfig::new(4, PackAlgorithm::FirstFit))
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .collect();
    let e = out[0].as_ref().unwrap_err().to_string();
    assert!(e.contains("2 values in `loss_mask` for 3 input ids"), "{e}");
}

/// One run over the chat dataset, from `checkpoint` or fresh: up to `take`
/// training batches (labels included), and the checkpoint after them.
fn chat_run(
    algorithm: PackAlgorithm,
    checkpoint: Option<&zephon_core::checkpoint::Checkpoint>,
    take: usize,
) -> (
    Vec<zephon_ops::TrainingBatch>,
    zephon_core::checkpoint::Checkpoint,
) {
    use zephon_core::checkpoint::{Recipe, ResumeExt};
    use zephon_core::{Dataset, WorkSource};
    let records = (0..16).map(|i| {
        let mut r = chat(i);
        // Fetching gives each record its pointer.
        r.lineage = Lineage::new();
        r
    });
    let ws = WorkSource::builder()
        .dataset(
            Dataset::in_memory("chat", vec![records.collect()]).unwrap(),
            1.0,
        )
        .seed(3)
        .canonical_lanes(2)
        .build()
        .unwrap();
    let recipe = Recipe::new(&ws).setting("pack", PackConfig::new(ROW, algorithm).num_bins(3));
    let mut progress = match checkpoint {
        Some(c) => recipe.resume(&ws, c).unwrap(),
        None => recipe.start(&ws),
    };
    let mut out = Vec::new();
    for b in ws
        .stream()
        .fetch(1)
        .tokenize_chat(config(), 2)
        .pack_sequences(PackConfig::new(ROW, algorithm).num_bins(3))
        .batch(2)
        .resume_from(&progress)
        .lane_mux_from(&progress)
        .to_training(TrainingConfig::new(ROW))
        .into_blocking_iter(Runner::Inline)
        .unwrap()
        .take(take)
    {
        let b = b.unwrap();
        progress.record_delivered(&b);
        out.push(b);
    }
    (out, progress.checkpoint())
}

#[test]
fn a_resumed_run_takes_the_loss_on_the_same_tokens() {
    for algorithm in [
        PackAlgorithm::FirstFit,
        PackAlgorithm::BestFit,
        PackAlgorithm::Wrap,
        PackAlgorithm::BestFitWrap,
    ] {
        let (whole, _) = chat_run(algorithm, None, usize::MAX);
        assert!(whole.len() >= 4, "{algorithm:?}: {} batches", whole.len());
        for k in [1, whole.len() / 2] {
            let (mut resumed, checkpoint) = chat_run(algorithm, None, k);
            resumed.extend(chat_run(algorithm, Some(&checkpoint), usize::MAX).0);
            let labels = |b: &[zephon_ops::TrainingBatch]| {
                b.iter()
                    .map(|b| (b.lane, b.index, b.input_ids.to_i64(), b.labels.clone()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                labels(&resumed),
                labels(&whole),
                "{algorithm:?}, cut after {k}"
            );
        }
    }
}

/// A pre-packed row whose `segment_ids` or `position_ids` are of another
/// length or kind is refused by `pack_flat`, naming the field: they were
/// replaced (segments by one document, so attention crossed the row's
/// documents; positions by zeros).
#[test]
fn pack_flat_refuses_segment_and_position_ids_that_do_not_fit_the_row() {
    let row = |field: &str, v: Value| doc(vec![1, 2, 3, 4, 5, 6, 7, 8], None).with(field, v);
    for (r, says) in [
        (
            row("segment_ids", Value::Tokens(vec![1, 1, 2])),
            "3 values in `segment_ids` for 8 input ids",
        ),
        (
            row("position_ids", Value::Tokens(vec![0; 9])),
            "9 values in `position_ids` for 8 input ids",
        ),
        (row("segment_ids", Value::from("1,1,2")), "`segment_ids`"),
    ] {
        let out: Vec<_> = futures::stream::iter([Ok(r)])
            .pack_flat(16, 0)
            .into_blocking_iter(Runner::Inline)
            .unwrap()
            .collect();
        let e = out[0].as_ref().unwrap_err().to_string();
        assert!(e.contains("pack_flat") && e.contains(says), "{e}");
    }
    // Fitting ones are kept and padded.
    let out: Vec<Record> = futures::stream::iter([Ok(row(
        "segment_ids",
        Value::Tokens(vec![1, 1, 1, 2, 2, 2, 2, 2]),
    ))])
    .pack_flat(10, 0)
    .into_blocking_iter(Runner::Inline)
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap();
    assert_eq!(
        out[0].tokens("segment_ids"),
        Some(&[1, 1, 1, 2, 2, 2, 2, 2, 0, 0][..])
    );
}
