//! The stack a chat template renders on. The engine's fuel bounds how deep
//! a structure a template can build (each level costs at least one
//! instruction), but not the stack that dropping, comparing or printing it
//! takes: the engine does each by recursion, so a list nested twenty
//! thousand deep by a loop overflowed a worker's stack when the rendering
//! ended, an abort no error could report. Rendering therefore runs on a
//! thread whose stack covers the deepest structure the fuel allows.

use std::cell::Cell;

/// Stack reserved per unit of fuel. The costliest walk of a structure (a
/// list printed through `~`, or two compared) takes a few hundred bytes of
/// stack per level in an optimised build, about five times that in a debug
/// build, and a level costs at least one and a half fuel; these leave a
/// margin of about half over that. Only the pages a rendering touches are
/// ever backed by memory.
const STACK_PER_FUEL: u64 = if cfg!(debug_assertions) { 1536 } else { 384 };

/// Stack for everything else a rendering and the tokenizer do.
const STACK_BASE: u64 = 16 << 20;

thread_local! {
    // The fuel the current thread's stack was sized for (0: an ordinary
    // thread), so nested calls render in place.
    static COVERED: Cell<u64> = const { Cell::new(0) };
}

/// The stack, in bytes, for a rendering of `fuel`.
pub(super) fn stack_for(fuel: u64) -> u64 {
    STACK_BASE.saturating_add(fuel.saturating_mul(STACK_PER_FUEL))
}

/// Runs `f` on a stack large enough for renderings of `fuel`: in place when
/// the current thread already is one, else on a new thread that ends with
/// `f` (one per micro-batch, not per rendering). A panic in `f` goes on in
/// the caller; a thread that cannot be started is an error naming the
/// stack and the setting.
pub(super) fn with_stack<R: Send>(fuel: u64, f: impl FnOnce() -> R + Send) -> Result<R, String> {
    if COVERED.get() >= fuel {
        return Ok(f());
    }
    let bytes = stack_for(fuel);
    std::thread::scope(|s| {
        let handle = std::thread::Builder::new()
            .name("zephon-chat-template".into())
            .stack_size(usize::try_from(bytes).unwrap_or(usize::MAX))
            .spawn_scoped(s, || {
                COVERED.set(fuel);
                f()
            })
            .map_err(|e| {
                format!(
                    "cannot start a thread with the {} MiB stack that a chat template's \
                     budget of {fuel} fuel needs (tokenize_chat.template_fuel): {e}",
                    bytes >> 20
                )
            })?;
        handle
            .join()
            .map_err(|panic| std::panic::resume_unwind(panic))
    })
}
