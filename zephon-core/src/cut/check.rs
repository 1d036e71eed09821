//! Checks of a cut on load: the registered per-operator state checks, and
//! the names filters register under.

use super::OpLaneCut;
use crate::pointer::LaneId;
use std::collections::BTreeMap;
use std::sync::RwLock;

/// A check of one operator's state that needs no operator, run on every
/// cut of that operator a checkpoint holds when it is loaded or restored
/// (see [`register_state_check`]). The error says what is wrong.
pub type StateCheck = fn(LaneId, &OpLaneCut) -> std::result::Result<(), String>;

static STATE_CHECKS: RwLock<BTreeMap<String, StateCheck>> = RwLock::new(BTreeMap::new());

/// Has checkpoints check every cut of operator `op` with `check` when they
/// are loaded (and restored), besides the checks of the layout every cut
/// shares. The operator still checks its state when it takes it back; this
/// refuses a contradicting file earlier, naming it. It checks the files
/// read after it is registered: an operator's constructor registers it
/// (as `pack_sequences` does), or an application before it loads. A later
/// registration for the same name replaces the earlier one.
pub fn register_state_check(op: &str, check: StateCheck) {
    STATE_CHECKS
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(op.to_owned(), check);
}

/// The check registered for `op` with [`register_state_check`].
pub(crate) fn registered_state_check(op: &str) -> Option<StateCheck> {
    STATE_CHECKS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(op)
        .copied()
}

/// Names under which filters register: a cut may have them upstream of
/// every other stateful operator, nowhere else.
pub const FILTER_OPS: [&str; 2] = ["filter", "filter_map"];

pub(super) fn is_filter(name: &str) -> bool {
    FILTER_OPS.contains(&name)
}
