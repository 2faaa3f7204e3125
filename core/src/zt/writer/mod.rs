//! Writing `.zt` v2 files (spec `zt.md` §2, §3, §4, §10–§12, §14).
//!
//! A [`Writer`] writes into any [`Sink`] (a `Vec<u8>` here; files in the native crate): the magic,
//! blobs at aligned offsets, the manifest as deterministic CBOR ([`super::cbor::encode`]), then the
//! 40-byte footer with the manifest's XXH3-64.
//!
//! **Canonical by default** (§10), byte-identical to the reference writer (`ztensor` 2.1.2):
//! blobs at successive 64 KiB boundaries starting at 65536, zero gap bytes, an `xxh3` digest on every
//! part, byte-identical parts sharing one blob (hash match confirmed byte for byte), the manifest at
//! the next 64 KiB boundary after the last blob and the footer right after it. Like the reference,
//! a canonical writer places blobs as objects arrive, so objects must be added in ascending bytewise
//! name order (a [`Rule::Order`](crate::zt::rule::Rule::Order) error says so otherwise); the parts of one object are sorted
//! by the writer. Names must already be in Unicode NFC: a canonical writer **refuses** non-NFC object
//! and part names rather than normalising them (as the reference does), so a name is never silently
//! changed; normalise before calling when you want that.
//!
//! [`Options::non_canonical`] unlocks: any insertion order, alignment down to 4096
//! ([`Options::alignment`]), `sha256` part digests, parts that live in other files (shards, §12),
//! [`Writer::put_blob`] for data shards, and appending to an existing file ([`Writer::append`]).
//!
//! Tensors larger than memory are streamed: [`Writer::begin_object`] declares the object and its
//! parts (with lengths, so everything is validated before a byte is written), then per part
//! [`Writer::begin_part`], any number of [`Writer::write_chunk`], [`Writer::end_part`], and finally
//! [`Writer::end_object`]. Digests are computed incrementally.
//!
//! [`content_digest`] computes the §11 model identity from a manifest.
//!
//! ```
//! use tensorlane_core::{DType, zt::writer::{Writer, Options}};
//!
//! let mut w = Writer::new(Vec::new(), Options::default()).unwrap();
//! let x: Vec<u8> = [1.0f32, 2.0, 3.0].iter().flat_map(|v| v.to_le_bytes()).collect();
//! w.add("x", DType::F32, &[3], &x).unwrap();
//! let done = w.finish().unwrap();
//! assert_eq!(done.size, 65536 + 65536 + done.manifest_length + 40);
//! ```

mod append;
mod base;
mod blobs;
mod checks;
mod digest;
mod layouts;
mod manifest;
mod objects;
mod sink;
mod spec;
mod stream;
#[cfg(test)]
mod tests;

pub use base::Writer;
pub use checks::storage_of;
pub use digest::{DigestAlgo, DigestHasher};
pub use manifest::content_digest;
pub use sink::Sink;
pub use spec::{BlobRef, Finished, ObjectSpec, Options, PartData, PartDecl, PartSpec, QuantGroup, ZeroPoint};

/// The `zt.zstd-seekable/1` encoding id (§8.1).
pub use super::format::ENCODING_ZSTD_SEEKABLE;
/// Layout ids, re-exported from [`super::layout`] under the writer's names.
pub use super::layout::{
    DENSE as LAYOUT_DENSE, QUANT_GROUP as LAYOUT_QUANT_GROUP, SPARSE_COO as LAYOUT_SPARSE_COO,
    SPARSE_CSR as LAYOUT_SPARSE_CSR,
};
