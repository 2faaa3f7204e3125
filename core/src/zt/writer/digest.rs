//! Part and file digests (§4): [`DigestAlgo`] and the incremental hashers.

use alloc::format;
use alloc::string::String;
use core::fmt;

use sha2::Digest as _;
use crate::hash::Xxh3;

/// A part digest algorithm (§4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DigestAlgo {
    /// XXH3-64, seed 0, written as 16 lowercase hex digits (canonical form requires it).
    Xxh3,
    /// SHA-256, 64 lowercase hex digits.
    Sha256,
}

impl DigestAlgo {
    /// The algorithm's name in a digest string (`"xxh3"`, `"sha256"`).
    pub const fn name(self) -> &'static str {
        match self {
            DigestAlgo::Xxh3 => "xxh3",
            DigestAlgo::Sha256 => "sha256",
        }
    }

    /// `"<algo>:<hex>"` of `bytes`.
    pub fn digest(self, bytes: &[u8]) -> String {
        let mut h = Hasher::new(self);
        h.update(bytes);
        h.finish()
    }
}

/// An incremental digest (`algo:hex`), for parts or whole files.
pub struct DigestHasher(Hasher);

impl DigestHasher {
    /// A fresh hasher.
    pub fn new(algo: DigestAlgo) -> Self {
        DigestHasher(Hasher::new(algo))
    }
    /// Feeds bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes)
    }
    /// `"<algo>:<hex>"` of everything fed.
    pub fn finish(mut self) -> String {
        self.0.finish()
    }
}

impl fmt::Debug for DigestHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DigestHasher")
    }
}

/// An incremental part digest.
pub(super) enum Hasher {
    Xxh3(alloc::boxed::Box<Xxh3>),
    Sha256(sha2::Sha256),
}

impl Hasher {
    pub(super) fn new(algo: DigestAlgo) -> Self {
        match algo {
            DigestAlgo::Xxh3 => Hasher::Xxh3(alloc::boxed::Box::default()),
            DigestAlgo::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
        }
    }
    pub(super) fn update(&mut self, b: &[u8]) {
        match self {
            Hasher::Xxh3(h) => h.update(b),
            Hasher::Sha256(h) => h.update(b),
        }
    }
    /// The xxh3-64 value when this is an xxh3 hasher (doubles as the dedup key).
    pub(super) fn finish_u64(&self) -> Option<u64> {
        match self {
            Hasher::Xxh3(h) => Some(h.digest()),
            Hasher::Sha256(_) => None,
        }
    }
    pub(super) fn finish(&mut self) -> String {
        match self {
            Hasher::Xxh3(h) => format!("xxh3:{:016x}", h.digest()),
            Hasher::Sha256(h) => {
                let out = core::mem::take(h).finalize();
                let mut s = String::from("sha256:");
                for b in out {
                    s.push_str(&format!("{b:02x}"));
                }
                s
            }
        }
    }
}
