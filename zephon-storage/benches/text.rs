//! The UTF-8 check of text fields read from a shard: the standard
//! library's (`ByteString::try_from`) against `format::text::text_view`,
//! over 20,000 fields: short ASCII ones of 57 to 233 bytes (the text of
//! `zephon-bench formats`), the same with one two-byte character each, and
//! documents of 2-4 KB mixing Latin, Cyrillic and CJK text. Run with
//! `cargo bench -p zephon-storage --bench text`. Every sample checks both
//! accept every field.

use bytes::Bytes;
use zephon_core::record::ByteString;
use zephon_storage::format::text::text_view;

fn main() {
    divan::main();
}

const N: usize = 20_000;

#[derive(Debug, Clone, Copy)]
enum Fields {
    Ascii,
    OneAccent,
    LongMixed,
}

const KINDS: [Fields; 3] = [Fields::Ascii, Fields::OneAccent, Fields::LongMixed];

/// The fields laid end to end in one buffer, as a shard holds them, and
/// where each lies.
fn shard(kind: Fields) -> (Bytes, Vec<(usize, usize)>) {
    let mut buf = String::new();
    let mut spans = Vec::with_capacity(N);
    for i in 0..N {
        let from = buf.len();
        buf.push_str(&format!("document {i}: "));
        match kind {
            Fields::Ascii => {}
            Fields::OneAccent => buf.push('\u{e9}'),
            Fields::LongMixed => {
                let part = "Der schnelle braune Fuchs springt \u{fc}ber den faulen Hund. \
                            \u{421}\u{44a}\u{435}\u{448}\u{44c} \u{436}\u{435} \u{435}\u{449}\u{451}. \
                            \u{6e2c}\u{8a66}\u{6587}\u{5b57}\u{3067}\u{3059}\u{3002} ";
                buf.push_str(&part.repeat(20 + i % 20));
            }
        }
        buf.push_str(&"the quick brown fox jumps over the lazy dog ".repeat(1 + i % 5));
        spans.push((from, buf.len()));
    }
    (Bytes::from(buf), spans)
}

fn run(b: divan::Bencher, kind: Fields, check: impl Fn(Bytes) -> bool) {
    let (data, spans) = shard(kind);
    b.counter(divan::counter::ItemsCount::new(N))
        .bench_local(|| {
            let ok = spans
                .iter()
                .filter(|&&(from, to)| check(data.slice(from..to)))
                .count();
            assert_eq!(ok, N);
        });
}

#[divan::bench(args = KINDS, sample_count = 30)]
fn std_check(b: divan::Bencher, kind: Fields) {
    run(b, kind, |s| ByteString::try_from(s).is_ok());
}

#[divan::bench(args = KINDS, sample_count = 30)]
fn text_view_check(b: divan::Bencher, kind: Fields) {
    run(b, kind, |s| text_view(s).is_ok());
}
