//! Every adapter of this crate shows its inner stream in `Debug` and hands it
//! out through `get_ref`, `get_mut` and `into_inner`. Listed one by one, so a
//! missing method is a compile error here.

use futures::StreamExt;
use std::fmt::Debug;
use zephon_core::{Error, PipelineExt, Record};
use zephon_ops::{
    ChatTokenizeConfig, MixtureConfig, PackAlgorithm, PackConfig, TextPipelineExt, TokenizeConfig,
    TrainingConfig,
};

type Records =
    futures::stream::Fuse<futures::stream::Iter<std::vec::IntoIter<Result<Record, Error>>>>;

/// A recognisable inner stream: its `Debug` names it.
fn records() -> Records {
    futures::stream::iter((0..4).map(|_| Ok(Record::new())).collect::<Vec<_>>()).fuse()
}

fn shows_inner<A: Debug>(a: &A, inner: &str) {
    let shown = format!("{a:?}");
    assert!(shown.contains(inner), "{shown}");
}

macro_rules! accessors {
    ($a:expr, $inner:literal) => {{
        let mut a = $a;
        shows_inner(&a, $inner);
        let _ = a.get_ref();
        let _ = a.get_mut();
        let _ = a.into_inner();
    }};
}

#[test]
fn every_adapter_shows_and_hands_out_its_inner_stream() {
    let tok = TokenizeConfig::from_bytes(include_bytes!("fixtures/tokenizer.json")).unwrap();
    accessors!(records().tokenize(tok, 2), "Fuse");
    let chat = ChatTokenizeConfig::from_bytes(include_bytes!("fixtures/tokenizer.json")).unwrap();
    accessors!(records().tokenize_chat(chat, 2), "Fuse");
    accessors!(
        records().pack_sequences(PackConfig::new(16, PackAlgorithm::FirstFit)),
        "Fuse"
    );
    accessors!(records().pack_flat(16, 0), "Fuse");
    accessors!(
        records().ensure_mixture(MixtureConfig::new([(0, 1.0)])),
        "Fuse"
    );
    accessors!(
        records().batch(2).to_training(TrainingConfig::new(16)),
        "Batcher"
    );
}
