//! XXH3-64 (seed 0), the one hash of Tenso footers and `.zt` `xxh3:` digests, with the fastest
//! implementation the build and the CPU allow.
//!
//! * With `std` on x86-64 and AArch64: [`twox-hash`](https://crates.io/crates/twox-hash) 2.x,
//!   which picks AVX2 (else SSE2) on x86-64 and NEON on AArch64 **at run time**. A binary built
//!   for baseline x86-64 (what `cargo build` and every distributed binary target) still hashes
//!   with AVX2 on a machine that has it; tenso's Rust core does the same.
//! * Everywhere else (`no_std`, wasm32, other architectures): `xxhash-rust`, whose SIMD path is
//!   chosen at compile time (SSE2 on x86-64; `simd128` on wasm32 when the build enables it, as
//!   `scripts/build-js.sh` does; NEON on AArch64).
//!
//! Both compute the same function (tested below and by every golden vector); only the speed
//! differs. Why not one crate: `xxhash-rust` has no run-time dispatch, and `twox-hash`'s
//! dispatch needs `std` (feature detection) and has no wasm `simd128` path.

/// XXH3-64 with seed 0 of `bytes`.
#[inline]
pub fn xxh3_64(bytes: &[u8]) -> u64 {
    imp::oneshot(bytes)
}

/// A streaming XXH3-64 (seed 0): [`Xxh3::update`] with the bytes in order, then
/// [`Xxh3::digest`]; equal to [`xxh3_64`] of their concatenation.
#[derive(Clone)]
pub struct Xxh3(imp::State);

impl Xxh3 {
    /// A hasher that has seen no bytes.
    pub fn new() -> Xxh3 {
        Xxh3(imp::new())
    }

    /// Feeds the next bytes.
    #[inline]
    pub fn update(&mut self, bytes: &[u8]) {
        imp::update(&mut self.0, bytes)
    }

    /// The hash of every byte fed so far (the hasher can go on being fed).
    pub fn digest(&self) -> u64 {
        imp::digest(&self.0)
    }
}

impl Default for Xxh3 {
    fn default() -> Xxh3 {
        Xxh3::new()
    }
}

impl core::fmt::Debug for Xxh3 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Xxh3")
    }
}

/// Which implementation this build hashes with (`"twox-hash (run-time AVX2/SSE2/NEON)"` or
/// `"xxhash-rust (compile-time SIMD)"`), for benchmark tables and diagnostics.
pub const IMPLEMENTATION: &str = imp::NAME;

#[cfg(all(feature = "std", any(target_arch = "x86_64", target_arch = "aarch64")))]
mod imp {
    use core::hash::Hasher as _;
    use twox_hash::XxHash3_64;

    pub(super) const NAME: &str = "twox-hash (run-time AVX2/SSE2/NEON)";
    pub(super) type State = XxHash3_64;

    pub(super) fn new() -> State {
        XxHash3_64::new()
    }

    #[inline]
    pub(super) fn oneshot(bytes: &[u8]) -> u64 {
        XxHash3_64::oneshot(bytes)
    }
    #[inline]
    pub(super) fn update(s: &mut State, bytes: &[u8]) {
        s.write(bytes)
    }
    pub(super) fn digest(s: &State) -> u64 {
        s.finish()
    }
}

#[cfg(not(all(feature = "std", any(target_arch = "x86_64", target_arch = "aarch64"))))]
mod imp {
    use xxhash_rust::xxh3::Xxh3;

    pub(super) const NAME: &str = "xxhash-rust (compile-time SIMD)";
    pub(super) type State = Xxh3;

    #[inline]
    pub(super) fn oneshot(bytes: &[u8]) -> u64 {
        xxhash_rust::xxh3::xxh3_64(bytes)
    }
    #[inline]
    pub(super) fn update(s: &mut State, bytes: &[u8]) {
        s.update(bytes)
    }
    pub(super) fn digest(s: &State) -> u64 {
        s.digest()
    }
    pub(super) fn new() -> State {
        Xxh3::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// Both implementations agree on every length class XXH3 treats apart (0, 1-3, 4-8, 9-16,
    /// 17-128, 129-240, one stripe, one block, many blocks) and for every split of a stream.
    #[test]
    fn both_implementations_agree_and_streaming_equals_oneshot() {
        let data: Vec<u8> = (0..70_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for len in [0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1024, 1025, 4096, 65_536, 70_000] {
            let want = xxhash_rust::xxh3::xxh3_64(&data[..len]);
            assert_eq!(xxh3_64(&data[..len]), want, "len {len}");
            for split in [0, 1, len / 3, len / 2, len.saturating_sub(1)] {
                let split = split.min(len);
                let mut h = Xxh3::new();
                h.update(&data[..split]);
                h.update(&data[split..len]);
                assert_eq!(h.digest(), want, "len {len} split {split}");
            }
        }
        assert_eq!(xxh3_64(b""), 0x2D06_8005_38D3_94C2);
    }
}
