//! The lane, identity and pointer of the pipeline elements a cut can
//! describe.

use crate::pointer::{LaneId, SamplePtr};

/// The lane, identity and pointer of a pipeline element, for the element
/// types a cut can describe: records whose lineage is one sample, and bare
/// pointers. `None` for any other type or lineage.
///
/// ```
/// use zephon_core::checkpoint::cut::element_key;
/// use zephon_core::{Record, SamplePtr};
/// let p = SamplePtr { dataset: 0, shard: 1, sample: 2, lane: 3 };
/// let mut r = Record::new();
/// r.lane = 3;
/// r.lineage.push(p);
/// assert_eq!(element_key(&r).map(|k| (k.0, k.2)), Some((3, p)));
/// assert_eq!(element_key(&7u32), None);
/// ```
pub fn element_key<T: 'static>(x: &T) -> Option<(LaneId, u64, SamplePtr)> {
    let any = x as &dyn std::any::Any;
    if let Some(r) = any.downcast_ref::<crate::Record>() {
        match r.lineage.as_slice() {
            [p] => Some((r.lane, crate::pointer::Identity::identity(r), *p)),
            _ => None,
        }
    } else {
        any.downcast_ref::<SamplePtr>()
            .map(|p| (p.lane, p.identity(), *p))
    }
}

/// The pointer of a pipeline element, as [`element_key`] finds it, without
/// computing its identity: for listing an operator's preamble.
#[inline]
pub fn element_pointer<T: 'static>(x: &T) -> Option<SamplePtr> {
    let any = x as &dyn std::any::Any;
    if let Some(r) = any.downcast_ref::<crate::Record>() {
        match r.lineage.as_slice() {
            [p] => Some(*p),
            _ => None,
        }
    } else {
        any.downcast_ref::<SamplePtr>().copied()
    }
}

/// Whether [`element_key`] can describe elements of type `T` at all.
pub fn keyed_type<T: 'static>() -> bool {
    let t = std::any::TypeId::of::<T>();
    t == std::any::TypeId::of::<crate::Record>() || t == std::any::TypeId::of::<SamplePtr>()
}
