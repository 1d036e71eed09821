//! What every stream adapter of the Zephon crates offers about the stream it
//! wraps.

/// Emits `get_ref`, `get_mut` and `into_inner` for the stream an adapter
/// keeps in field `$field`, inside the adapter's `impl` block. Exported for
/// the adapters of zephon-ops and zephon-storage; not meant for users.
#[doc(hidden)]
#[macro_export]
macro_rules! adapter_accessors {
    ($field:ident) => {
        /// The stream this adapter reads from.
        pub fn get_ref(&self) -> &S {
            &self.$field
        }

        /// The stream this adapter reads from, mutably. Taking items from it
        /// directly bypasses this adapter.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.$field
        }

        /// The stream this adapter reads from; what the adapter holds
        /// (buffered or in-flight elements) is dropped.
        pub fn into_inner(self) -> S {
            self.$field
        }
    };
}
