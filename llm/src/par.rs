//! The executor's data parallelism: rayon's worker pool with feature `native`; without it (the
//! wasm32 build) the same calls run sequentially on the calling thread.
//!
//! Why the wasm build is single-threaded: wasm threads need the standard library rebuilt with
//! `-C target-feature=+atomics,+bulk-memory` (`cargo +nightly build -Z build-std=std,panic_abort`:
//! stable Rust's prebuilt wasm32-unknown-unknown `std` has no atomics; wasm-bindgen-rayon 1.3,
//! the adapter that would run this pool on Web Workers, says the same: "still only available in
//! nightly"), a shared memory imported by every worker, and pages served cross-origin isolated
//! (COOP/COEP) for `SharedArrayBuffer`. The project's wasm builds use stable Rust (1.95; the build
//! machines' nightly has neither the wasm32 target nor `rust-src` for `build-std`), so the wasm
//! CPU executor runs its products on one thread.

#[cfg(feature = "native")]
pub(crate) use rayon::ThreadPool;
#[cfg(feature = "native")]
pub(crate) mod prelude {
    pub(crate) use rayon::prelude::*;
}

/// The sequential stand-in for rayon's pool: one thread, `install` runs the closure here.
#[cfg(not(feature = "native"))]
#[derive(Debug, Default)]
pub(crate) struct ThreadPool;

#[cfg(not(feature = "native"))]
impl ThreadPool {
    /// Runs `f` on the calling thread.
    pub(crate) fn install<R>(&self, f: impl FnOnce() -> R) -> R {
        f()
    }

    /// Always 1.
    pub(crate) fn current_num_threads(&self) -> usize {
        1
    }
}

#[cfg(not(feature = "native"))]
pub(crate) mod prelude {
    /// `par_chunks_mut` as a sequential `chunks_mut`.
    pub(crate) trait ParChunksMut<T> {
        fn par_chunks_mut(&mut self, size: usize) -> std::slice::ChunksMut<'_, T>;
    }

    impl<T> ParChunksMut<T> for [T] {
        fn par_chunks_mut(&mut self, size: usize) -> std::slice::ChunksMut<'_, T> {
            self.chunks_mut(size)
        }
    }

    /// rayon's `for_each_init` on a sequential iterator: one state for the whole loop.
    pub(crate) trait ForEachInit: Iterator + Sized {
        fn for_each_init<S>(self, init: impl Fn() -> S, mut f: impl FnMut(&mut S, Self::Item)) {
            let mut state = init();
            for item in self {
                f(&mut state, item);
            }
        }
    }

    impl<I: Iterator> ForEachInit for I {}
}
