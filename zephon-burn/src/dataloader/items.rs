//! How a loader knows the items of an epoch before serving it.

/// How a [`ZephonDataLoader`](super::ZephonDataLoader) knows the items
/// ([`HostBatch::num_items`](super::HostBatch::num_items)) of an epoch: the
/// count it reports as Burn's [`num_items`](burn::data::dataloader::DataLoader::num_items)
/// (the total of the epoch's progress) and checks the served items against
/// at the epoch's end. Chosen with
/// [`ZephonDataLoader::items`](super::ZephonDataLoader::items).
///
/// | policy | `num_items` | cost | fits |
/// |---|---|---|---|
/// | [`PerSample`](Self::PerSample) | the work source's pointers | none | one item per sample |
/// | [`Counted`](Self::Counted) | counted on a pass over the pipeline | one extra pass per epoch and slice, without the tensor conversion | packing, filtering, any deterministic pipeline |
/// | [`CountedOnce`](Self::CountedOnce) | counted on a pass over the first epoch | one extra pass in all | a count that does not depend on the order: filters, one-to-one maps |
/// | [`Declared`](Self::Declared) | as declared | none | a count known beforehand, on one device |
///
/// Whatever the policy, an epoch that serves another count ends with an
/// error naming the epoch, the lanes and both counts, never with a
/// truncated epoch or progress left incomplete.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ItemCount {
    /// One item per pointer the loader's lanes hold in the epoch
    /// ([`WorkSource::len`](zephon_core::WorkSource::len) of the epoch). A
    /// pipeline that drops, adds or packs samples serves another count, an
    /// error.
    #[default]
    PerSample,
    /// The loader runs the epoch's pipeline once before serving it, with
    /// the same `build` but without the tensor conversion, and counts the
    /// items it yields. The count is taken lazily, at the epoch's first
    /// `num_items()` or `iter()`, once per epoch and slice (then cached),
    /// since the pipeline is deterministic. A served count that differs
    /// from it means the pipeline is not deterministic, and is an error.
    ///
    /// Cost: one extra pass of the data pipeline per epoch (fetch,
    /// tokenize, pack...), without the model, the conversion or the
    /// device; a multi-device split also counts the whole loader once, at
    /// the split. On the small LM's packed text pipeline (debug build) the
    /// pass takes about a thousandth of a training epoch. Side effects of
    /// `build`'s closures run on both passes.
    ///
    /// Burn's `Learner` reads `num_items` once, before the first epoch, so
    /// the total it shows for a later epoch is the first epoch's; each
    /// epoch's own [`progress`](burn::data::dataloader::DataLoaderIterator::progress)
    /// is exact.
    Counted,
    /// Like [`Counted`](Self::Counted), but the first whole epoch is
    /// counted once and its count kept for every later epoch: no second
    /// pass (no second tokenization) after the first. It fits pipelines
    /// whose count does not depend on the order the epoch takes, such as
    /// filters and one-to-one maps, whose every epoch holds the same
    /// items; packing's count changes with the order. An epoch that serves
    /// another count ends with an error naming both counts, so a pipeline
    /// it does not fit is found at the end of its second epoch, never
    /// truncated. A resumed epoch counts what it has left.
    CountedOnce,
    /// `n` items every epoch, as the caller knows them (a count from an
    /// earlier run, say); any `n` is accepted and checked against what
    /// each epoch serves. A declared count cannot be shared out over the
    /// lanes of a multi-device split: such a slice serves an error asking
    /// for [`Counted`](Self::Counted).
    Declared(usize),
}

impl ItemCount {
    /// What the loader expected of an epoch that served another count, and
    /// what that means, for the epoch's error.
    pub(super) fn expected(self, expected: usize) -> String {
        match self {
            ItemCount::PerSample => format!(
                "the work source holds {expected}; a pipeline that drops, adds or packs samples does not fit a per-sample loader, count its items with `ItemCount::Counted`"
            ),
            ItemCount::Counted => format!(
                "counting the same epoch before serving it gave {expected}; the pipeline is not deterministic"
            ),
            ItemCount::CountedOnce => format!(
                "the first epoch counted {expected}; this one holds another count, so the count depends on the order the epoch takes (packing): count every epoch with `ItemCount::Counted`"
            ),
            ItemCount::Declared(_) => {
                format!("{expected} were declared (`ItemCount::Declared`)")
            }
        }
    }
}
