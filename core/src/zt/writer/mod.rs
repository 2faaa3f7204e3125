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
//! name order (a [`WriteRule::Order`] error says so otherwise); the parts of one object are sorted
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

use alloc::borrow::Cow;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use sha2::Digest as _;
use xxhash_rust::xxh3::{Xxh3, xxh3_64};

use super::cbor::{self, Value};
use crate::dtype::DType;
use crate::source::ReadAt;

use super::format::{
    ALIGNMENT as ALIGN_FLOOR, CANONICAL_ALIGNMENT as ALIGN_CANONICAL, FOOTER_LEN, MAGIC, MAX_MANIFEST_LEN, MAX_RANK,
    VERSION,
};
const MAX_DEPTH: usize = cbor::MAX_DEPTH;
/// Chunk size for padding and read-back comparisons.
const CHUNK: usize = 1 << 20;

/// The `zt.zstd-seekable/1` encoding id (§8.1).
pub use super::format::ENCODING_ZSTD_SEEKABLE;
/// Layout ids, re-exported from [`super::layout`] under the writer's names.
pub use super::layout::{
    DENSE as LAYOUT_DENSE, QUANT_GROUP as LAYOUT_QUANT_GROUP, SPARSE_COO as LAYOUT_SPARSE_COO,
    SPARSE_CSR as LAYOUT_SPARSE_CSR,
};

// ---------------------------------------------------------------------------------------------
// Sink

/// Why a [`Sink`] operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkError(pub String);

impl fmt::Display for SinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a [`Writer`] puts bytes: an append-only byte stream that knows its position.
///
/// `read_back` and `truncate` are optional; the writer uses them only to confirm a hash match
/// before two parts share a blob, and to take back a streamed part that turned out to duplicate an
/// earlier one. Without them a match is never trusted (the parts are stored twice), which a
/// canonical writer reports as an error because canonical form requires sharing.
pub trait Sink {
    /// Appends all of `buf`.
    fn write_all(&mut self, buf: &[u8]) -> core::result::Result<(), SinkError>;
    /// Absolute offset of the next byte written (the current file length).
    fn position(&self) -> u64;
    /// Reads bytes written earlier, at absolute `offset`.
    fn read_back(&mut self, offset: u64, buf: &mut [u8]) -> core::result::Result<(), SinkError> {
        let _ = (offset, buf);
        Err(SinkError("this sink cannot read back what it wrote".into()))
    }
    /// Drops everything from `len` on. The writer only ever truncates bytes it wrote itself in this
    /// session (never bytes that were there before an append).
    fn truncate(&mut self, len: u64) -> core::result::Result<(), SinkError> {
        let _ = len;
        Err(SinkError("this sink cannot truncate".into()))
    }
}

impl Sink for Vec<u8> {
    fn write_all(&mut self, buf: &[u8]) -> core::result::Result<(), SinkError> {
        self.extend_from_slice(buf);
        Ok(())
    }
    fn position(&self) -> u64 {
        self.len() as u64
    }
    fn read_back(&mut self, offset: u64, buf: &mut [u8]) -> core::result::Result<(), SinkError> {
        let end = offset.checked_add(buf.len() as u64).filter(|&e| e <= self.len() as u64);
        match end {
            Some(end) => {
                buf.copy_from_slice(&self[offset as usize..end as usize]);
                Ok(())
            }
            None => Err(SinkError(format!(
                "read back of {} bytes at {offset} is past the end ({})",
                buf.len(),
                self.len()
            ))),
        }
    }
    fn truncate(&mut self, len: u64) -> core::result::Result<(), SinkError> {
        Vec::truncate(self, len as usize);
        Ok(())
    }
}

impl<S: Sink + ?Sized> Sink for &mut S {
    fn write_all(&mut self, buf: &[u8]) -> core::result::Result<(), SinkError> {
        (**self).write_all(buf)
    }
    fn position(&self) -> u64 {
        (**self).position()
    }
    fn read_back(&mut self, offset: u64, buf: &mut [u8]) -> core::result::Result<(), SinkError> {
        (**self).read_back(offset, buf)
    }
    fn truncate(&mut self, len: u64) -> core::result::Result<(), SinkError> {
        (**self).truncate(len)
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

/// Which rule a refused write broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteRule {
    /// An object, part or attribute name breaks §5 (empty, > 1024 bytes, U+0000, not NFC when
    /// canonical), or repeats an existing name.
    Name,
    /// Rank > 64 or the element count overflows u64.
    Shape,
    /// The manifest would break the §4 schema (attributes not a map, a logical type on the wrong
    /// dtype, a malformed digest, ...).
    Schema,
    /// The object breaks its layout profile's metadata rules (§7).
    LayoutRule,
    /// A dense object's byte count does not match its shape and type.
    DenseSize,
    /// A shard name breaks §5, or a part names an unregistered shard.
    Shard,
    /// Canonical form forbids this (encodings, shards, sha256 digests, other alignments, append).
    Canonical,
    /// Canonical form places blobs as objects arrive, so names must ascend.
    Order,
    /// The API was used out of order (streaming state, wrong chunk sizes).
    Usage,
    /// The manifest would exceed 1 GiB.
    ManifestTooLarge,
    /// The file being appended to is not a `.zt` v2 file with a manifest.
    Existing,
    /// The sink failed.
    Io,
    /// A capability this build lacks.
    Unsupported,
}

/// A refused or failed write: which rule, where (object and part), and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteError {
    /// The rule.
    pub rule: WriteRule,
    /// The object concerned, if any.
    pub object: Option<String>,
    /// The part concerned, if any.
    pub part: Option<String>,
    /// What happened and, where it helps, what to do about it.
    pub message: String,
}

impl WriteError {
    fn new(rule: WriteRule, message: impl Into<String>) -> Self {
        WriteError {
            rule,
            object: None,
            part: None,
            message: message.into(),
        }
    }
    fn at(mut self, object: &str) -> Self {
        if self.object.is_none() {
            self.object = Some(object.to_string());
        }
        self
    }
    fn part(mut self, part: &str) -> Self {
        if self.part.is_none() {
            self.part = Some(part.to_string());
        }
        self
    }
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, ".zt write refused ({:?})", self.rule)?;
        if let Some(o) = &self.object {
            write!(f, " object {o:?}")?;
        }
        if let Some(p) = &self.part {
            write!(f, " part {p:?}")?;
        }
        write!(f, ": {}", self.message)
    }
}

#[cfg(feature = "std")]
impl std::error::Error for WriteError {}

impl From<SinkError> for WriteError {
    fn from(e: SinkError) -> Self {
        WriteError::new(WriteRule::Io, e.0)
    }
}

type Res<T> = core::result::Result<T, WriteError>;

// ---------------------------------------------------------------------------------------------
// Options and specs

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
enum Hasher {
    Xxh3(alloc::boxed::Box<Xxh3>),
    Sha256(sha2::Sha256),
}

impl Hasher {
    fn new(algo: DigestAlgo) -> Self {
        match algo {
            DigestAlgo::Xxh3 => Hasher::Xxh3(alloc::boxed::Box::new(Xxh3::new())),
            DigestAlgo::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
        }
    }
    fn update(&mut self, b: &[u8]) {
        match self {
            Hasher::Xxh3(h) => h.update(b),
            Hasher::Sha256(h) => h.update(b),
        }
    }
    /// The xxh3-64 value when this is an xxh3 hasher (doubles as the dedup key).
    fn finish_u64(&self) -> Option<u64> {
        match self {
            Hasher::Xxh3(h) => Some(h.digest()),
            Hasher::Sha256(_) => None,
        }
    }
    fn finish(&mut self) -> String {
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

/// How to write. `Options::default()` is canonical form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    canonical: bool,
    alignment: Option<u64>,
    digest: DigestAlgo,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            canonical: true,
            alignment: None,
            digest: DigestAlgo::Xxh3,
        }
    }
}

impl Options {
    /// Canonical form (§10), the default.
    pub fn canonical() -> Self {
        Options::default()
    }

    /// Not canonical: any insertion order, shards, sha256 digests, other alignments, append.
    /// Placement still defaults to 64 KiB, like the reference writer.
    pub fn non_canonical() -> Self {
        Options {
            canonical: false,
            ..Options::default()
        }
    }

    /// Blob alignment: a power of two ≥ 4096 (canonical form allows only 65536).
    pub fn alignment(mut self, align: u64) -> Self {
        self.alignment = Some(align);
        self
    }

    /// The digest written on every part (canonical form allows only [`DigestAlgo::Xxh3`]).
    pub fn digest(mut self, algo: DigestAlgo) -> Self {
        self.digest = algo;
        self
    }

    /// Whether these options describe canonical form.
    pub fn is_canonical(&self) -> bool {
        self.canonical
    }
}

/// Where one part's bytes come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PartData<'d> {
    /// The part's (decoded) bytes, written into this file.
    Bytes(&'d [u8]),
    /// A byte range of a registered shard (§12): nothing is written. Non-canonical only.
    External {
        /// Shard table key, registered with [`Writer::add_shard`].
        shard: String,
        /// Blob offset in the shard file.
        offset: u64,
        /// Blob length.
        length: u64,
        /// The part's digest (`algo:hex`) when known.
        digest: Option<String>,
    },
    /// Bytes already encoded with an encoding profile (§8), e.g. `zt.zstd-seekable/1` made by the
    /// native crate's `encode_seekable`. `stored` is written; the digest and `decoded_length` come
    /// from `decoded`. A `zt.zstd-seekable/1` seek table is checked against `decoded.len()`.
    /// Non-canonical only; encoded parts never share blobs.
    Encoded {
        /// Encoding profile id.
        encoding: String,
        /// The stored (encoded) bytes.
        stored: &'d [u8],
        /// The decoded bytes (hashed for the digest; not written).
        decoded: &'d [u8],
    },
}

/// One part of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartSpec<'d> {
    /// Part name (`data`, `values`, `scales`, ...).
    pub name: String,
    /// Storage dtype. [`DType::Bool`], [`DType::C64`] and [`DType::C128`] are written as `u8`,
    /// `f32`, `f64` with the logical type `bool`, `complex64`, `complex128`.
    pub dtype: DType,
    /// Logical type (§6.2), e.g. `"f8_e4m3fn"`, `"f4_e2m1"`, `"f8_e8m0"`.
    pub logical: Option<String>,
    /// The bytes.
    pub data: PartData<'d>,
}

impl<'d> PartSpec<'d> {
    /// A part with bytes in hand.
    pub fn new(name: impl Into<String>, dtype: DType, data: &'d [u8]) -> Self {
        PartSpec {
            name: name.into(),
            dtype,
            logical: None,
            data: PartData::Bytes(data),
        }
    }

    /// Sets the logical type.
    pub fn logical(mut self, logical: impl Into<String>) -> Self {
        self.logical = Some(logical.into());
        self
    }

    /// A part stored encoded (see [`PartData::Encoded`]).
    pub fn encoded(
        name: impl Into<String>,
        dtype: DType,
        encoding: impl Into<String>,
        stored: &'d [u8],
        decoded: &'d [u8],
    ) -> Self {
        PartSpec {
            name: name.into(),
            dtype,
            logical: None,
            data: PartData::Encoded {
                encoding: encoding.into(),
                stored,
                decoded,
            },
        }
    }

    /// A part stored in a registered shard at `[offset, offset + length)`.
    pub fn external(
        name: impl Into<String>,
        dtype: DType,
        shard: impl Into<String>,
        offset: u64,
        length: u64,
        digest: Option<String>,
    ) -> Self {
        PartSpec {
            name: name.into(),
            dtype,
            logical: None,
            data: PartData::External {
                shard: shard.into(),
                offset,
                length,
                digest,
            },
        }
    }
}

/// A part of a streamed object: like [`PartSpec`], with its byte count instead of its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartDecl {
    /// Part name.
    pub name: String,
    /// Storage dtype (see [`PartSpec::dtype`]).
    pub dtype: DType,
    /// Logical type.
    pub logical: Option<String>,
    /// Exact number of bytes that will be streamed.
    pub length: u64,
}

impl PartDecl {
    /// A declaration of `length` bytes.
    pub fn new(name: impl Into<String>, dtype: DType, length: u64) -> Self {
        PartDecl {
            name: name.into(),
            dtype,
            logical: None,
            length,
        }
    }
    /// Sets the logical type.
    pub fn logical(mut self, logical: impl Into<String>) -> Self {
        self.logical = Some(logical.into());
        self
    }
}

/// An object's metadata: shape, layout and attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectSpec {
    /// Logical shape (empty = scalar).
    pub shape: Vec<u64>,
    /// Layout id ([`LAYOUT_DENSE`], [`LAYOUT_SPARSE_CSR`], ...). Unknown layouts are written as
    /// they are (structural); the four above are validated.
    pub layout: String,
    /// Object attributes: a map with text keys. An empty map is omitted, like the reference.
    pub attributes: Option<Value<'static>>,
}

impl ObjectSpec {
    /// A dense object of `shape`.
    pub fn dense(shape: &[u64]) -> Self {
        ObjectSpec {
            shape: shape.to_vec(),
            layout: LAYOUT_DENSE.into(),
            attributes: None,
        }
    }
    /// An object of `shape` with `layout`.
    pub fn new(shape: &[u64], layout: impl Into<String>) -> Self {
        ObjectSpec {
            shape: shape.to_vec(),
            layout: layout.into(),
            attributes: None,
        }
    }
    /// Sets the attributes (a map with text keys).
    pub fn attributes(mut self, attributes: Value<'static>) -> Self {
        self.attributes = Some(attributes);
        self
    }
}

/// Parameters of a `zt.quant_group/1` object (§7.4), turned into its required attributes by
/// [`QuantGroup::attributes`].
#[derive(Clone, Debug, PartialEq)]
pub struct QuantGroup {
    /// Code width: 2, 3, 4, 5, 6 or 8.
    pub bits: u64,
    /// Codes per scale along `axis`; 0 = one scale per row of `axis`.
    pub group_size: u64,
    /// The axis groups run along.
    pub axis: u64,
    /// Packing word: `"u8"`, `"u16"`, `"u32"` or `"u64"`.
    pub word: String,
    /// `true` for `"msb_first"`, `false` for `"lsb_first"`.
    pub msb_first: bool,
    /// `"f32_factors"`, `"f16_factors"` or `"e8m0_exponent"`.
    pub scale_form: String,
    /// The zero point.
    pub zero_point: ZeroPoint,
}

/// `zero_point` of a [`QuantGroup`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZeroPoint {
    /// No zero point.
    None,
    /// One implied value for every group.
    Implied(i64),
    /// A `zeros` part, packed like the data (`true`) or plain (`false`).
    Tensor {
        /// `"same_as_data"` when true, `"plain"` when false.
        same_as_data: bool,
    },
}

impl QuantGroup {
    /// The attribute map the profile requires.
    pub fn attributes(&self) -> Value<'static> {
        let width = word_width(&self.word).unwrap_or(0);
        let per_word = (8 * width).checked_div(self.bits).unwrap_or(0);
        let zp = match &self.zero_point {
            ZeroPoint::None => vec![(Value::text("form"), Value::text("none"))],
            ZeroPoint::Implied(v) => vec![
                (Value::text("form"), Value::text("implied")),
                (Value::text("value"), int_value(*v)),
            ],
            ZeroPoint::Tensor { same_as_data } => vec![
                (Value::text("form"), Value::text("tensor")),
                (
                    Value::text("packing"),
                    Value::text(if *same_as_data { "same_as_data" } else { "plain" }),
                ),
            ],
        };
        Value::Map(vec![
            (Value::text("bits"), Value::Uint(self.bits)),
            (Value::text("group_size"), Value::Uint(self.group_size)),
            (Value::text("axis"), Value::Uint(self.axis)),
            (
                Value::text("packing"),
                Value::Map(vec![
                    (Value::text("word"), Value::Text(Cow::Owned(self.word.clone()))),
                    (
                        Value::text("order"),
                        Value::text(if self.msb_first { "msb_first" } else { "lsb_first" }),
                    ),
                    (Value::text("per_word"), Value::Uint(per_word)),
                ]),
            ),
            (
                Value::text("scale_form"),
                Value::Text(Cow::Owned(self.scale_form.clone())),
            ),
            (Value::text("zero_point"), Value::Map(zp)),
        ])
    }
}

fn int_value(v: i64) -> Value<'static> {
    if v >= 0 {
        Value::Uint(v as u64)
    } else {
        Value::Neg((-(v + 1)) as u64)
    }
}

/// A blob written by [`Writer::put_blob`]: where it is and its digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlobRef {
    /// Absolute offset.
    pub offset: u64,
    /// Length in bytes.
    pub length: u64,
    /// `algo:hex` of the bytes.
    pub digest: String,
}

/// What [`Writer::finish`] produced.
#[derive(Debug)]
pub struct Finished<S> {
    /// The sink, now holding the whole file.
    pub sink: S,
    /// File size in bytes.
    pub size: u64,
    /// Manifest offset (0 for a data shard).
    pub manifest_offset: u64,
    /// Manifest length (0 for a data shard).
    pub manifest_length: u64,
    /// The manifest bytes (deterministic CBOR; empty for a data shard).
    pub manifest: Vec<u8>,
}

// ---------------------------------------------------------------------------------------------
// Checks

fn check_name(name: &str, what: &str, canonical: bool) -> Res<()> {
    // The reader's §5 rules, then what canonical form adds.
    super::format::check_name(name, what).map_err(|e| WriteError::new(WriteRule::Name, e.message))?;
    if canonical && !name.is_ascii() && !unicode_normalization::is_nfc(name) {
        return Err(WriteError::new(
            WriteRule::Name,
            format!("canonical form requires NFC names (§10 rule 5); normalise {what} name {name:?} to NFC first"),
        ));
    }
    Ok(())
}

/// §5 shard names, as the reader checks them.
fn check_shard_name(name: &str) -> Res<()> {
    super::format::check_shard_name(name).map_err(|e| WriteError::new(WriteRule::Shard, e.message))
}

/// `"<algo>:<lowercase hex>"` (§4), as the reader checks it.
fn check_digest(d: &str) -> Res<()> {
    super::format::parse_digest(d)
        .map(|_| ())
        .map_err(|e| WriteError::new(WriteRule::Schema, e.message))
}

fn check_shape(shape: &[u64]) -> Res<u64> {
    if shape.len() > MAX_RANK {
        return Err(WriteError::new(
            WriteRule::Shape,
            format!("rank {} exceeds {MAX_RANK} (§5)", shape.len()),
        ));
    }
    shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).ok_or_else(|| {
        WriteError::new(
            WriteRule::Shape,
            format!("the element count of shape {shape:?} overflows u64 (§5)"),
        )
    })
}

fn depth(v: &Value<'_>) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Map(m) => 1 + m.iter().map(|(k, v)| depth(k).max(depth(v))).max().unwrap_or(0),
        _ => 0,
    }
}

/// Checks an attributes map that sits at manifest depth `at` (its own depth).
fn check_attributes(v: &Value<'_>, at: usize) -> Res<()> {
    let Value::Map(entries) = v else {
        return Err(WriteError::new(
            WriteRule::Schema,
            "attributes must be a map with text keys (§4)",
        ));
    };
    for (k, _) in entries {
        match k {
            Value::Text(s) => check_name(s, "attribute", false)?,
            _ => {
                return Err(WriteError::new(
                    WriteRule::Schema,
                    format!("attribute key {k:?} is not text (§4)"),
                ));
            }
        }
    }
    if at + depth(v) - 1 > MAX_DEPTH {
        return Err(WriteError::new(
            WriteRule::Schema,
            format!("attributes nest too deep: the manifest allows CBOR depth {MAX_DEPTH} (§3)"),
        ));
    }
    cbor::encode(v).map_err(|e| WriteError::new(WriteRule::Schema, format!("attributes: {e}")))?;
    Ok(())
}

/// The zt dtype name and logical type a [`DType`] is written as.
pub fn storage_of(dtype: DType, logical: Option<&str>) -> core::result::Result<(&'static str, Option<String>), String> {
    let (name, implied) = match dtype {
        DType::F64 => ("f64", None),
        DType::F32 => ("f32", None),
        DType::F16 => ("f16", None),
        DType::BF16 => ("bf16", None),
        DType::I64 => ("i64", None),
        DType::I32 => ("i32", None),
        DType::I16 => ("i16", None),
        DType::I8 => ("i8", None),
        DType::U64 => ("u64", None),
        DType::U32 => ("u32", None),
        DType::U16 => ("u16", None),
        DType::U8 => ("u8", None),
        DType::Bool => ("u8", Some("bool")),
        DType::C64 => ("f32", Some("complex64")),
        DType::C128 => ("f64", Some("complex128")),
        #[allow(unreachable_patterns)]
        other => return Err(format!("dtype {other} has no .zt storage type")),
    };
    match (implied, logical) {
        (Some(i), Some(l)) if i != l => Err(format!("dtype {dtype} implies logical type {i:?}, but {l:?} was given")),
        (Some(i), _) => Ok((name, Some(i.to_string()))),
        (None, l) => Ok((name, l.map(str::to_string))),
    }
}

fn dtype_width(name: &str) -> u64 {
    match name {
        "f64" | "i64" | "u64" => 8,
        "f32" | "i32" | "u32" => 4,
        "f16" | "bf16" | "i16" | "u16" => 2,
        _ => 1,
    }
}

fn word_width(word: &str) -> Option<u64> {
    match word {
        "u8" => Some(1),
        "u16" => Some(2),
        "u32" => Some(4),
        "u64" => Some(8),
        _ => None,
    }
}

/// A registered logical type's pinned dtype.
fn logical_dtype(l: &str) -> Option<&'static str> {
    match l {
        "bool" | "f8_e4m3fn" | "f8_e5m2" | "f8_e4m3fnuz" | "f8_e5m2fnuz" | "f8_e8m0" | "f4_e2m1" => Some("u8"),
        "complex64" => Some("f32"),
        "complex128" => Some("f64"),
        _ => None,
    }
}

/// Decoded bytes for `n` elements, `None` for an unknown logical type (structural) or overflow.
fn size_fn(dtype: &str, logical: Option<&str>, n: u64) -> Option<Option<u64>> {
    Some(match logical {
        None => n.checked_mul(dtype_width(dtype)),
        Some("f4_e2m1") => Some(n / 2 + n % 2),
        Some("complex64") => n.checked_mul(8),
        Some("complex128") => n.checked_mul(16),
        Some(l) if logical_dtype(l).is_some() => Some(n),
        Some(_) => return None,
    })
}

/// What the layout checks see of a part.
struct PartMeta<'a> {
    name: &'a str,
    dtype: &'static str,
    logical: Option<&'a str>,
    size: u64,
}

fn layout_err(msg: impl Into<String>) -> WriteError {
    WriteError::new(WriteRule::LayoutRule, msg)
}

fn expect_parts(parts: &[PartMeta<'_>], names: &[&str], layout: &str) -> Res<()> {
    let have: Vec<&str> = parts.iter().map(|p| p.name).collect();
    let mut want: Vec<&str> = names.to_vec();
    want.sort_unstable();
    if have != want {
        return Err(layout_err(format!(
            "{layout} needs exactly the parts {want:?}, got {have:?}"
        )));
    }
    Ok(())
}

fn expect_size(p: &PartMeta<'_>, n: u64, what: &str) -> Res<()> {
    match size_fn(p.dtype, p.logical, n) {
        None => Ok(()),
        Some(None) => {
            Err(WriteError::new(WriteRule::Shape, format!("size of {n} elements overflows u64")).part(p.name))
        }
        Some(Some(s)) if s == p.size => Ok(()),
        Some(Some(s)) => Err(layout_err(format!(
            "{what}: {n} elements of {} are {s} bytes, got {}",
            p.logical.unwrap_or(p.dtype),
            p.size
        ))
        .part(p.name)),
    }
}

fn get_part<'p, 'a>(parts: &'p [PartMeta<'a>], n: &str) -> &'p PartMeta<'a> {
    parts.iter().find(|p| p.name == n).expect("checked by expect_parts")
}

fn index_part(p: &PartMeta<'_>, layout: &str) -> Res<u64> {
    if p.logical.is_some() || !matches!(p.dtype, "u32" | "u64") {
        return Err(layout_err(format!(
            "{layout}: part {:?} must be u32 or u64 with no logical type",
            p.name
        ))
        .part(p.name));
    }
    Ok(dtype_width(p.dtype))
}

/// The §7 metadata rules of the four layouts this writer knows; other layouts are structural.
fn validate_layout(spec: &ObjectSpec, count: u64, parts: &[PartMeta<'_>]) -> Res<()> {
    let shape = &spec.shape;
    let layout = spec.layout.as_str();
    let no_attrs = || -> Res<()> {
        match &spec.attributes {
            Some(Value::Map(m)) if !m.is_empty() => Err(layout_err(format!("{layout} takes no attributes"))),
            _ => Ok(()),
        }
    };
    match layout {
        LAYOUT_DENSE => {
            if parts.len() != 1 || parts[0].name != "data" {
                return Err(layout_err("dense objects have exactly one part, named \"data\""));
            }
            let p = &parts[0];
            match size_fn(p.dtype, p.logical, count) {
                None => Ok(()),
                Some(Some(s)) if s == p.size => Ok(()),
                Some(s) => Err(WriteError::new(
                    WriteRule::DenseSize,
                    format!(
                        "shape {shape:?} of {} needs {} bytes, got {}",
                        p.logical.unwrap_or(p.dtype),
                        s.map_or("> u64::MAX".to_string(), |s| s.to_string()),
                        p.size
                    ),
                )
                .part("data")),
            }
        }
        LAYOUT_SPARSE_CSR => {
            no_attrs()?;
            if shape.len() != 2 {
                return Err(layout_err(format!("{layout} needs rank 2, got shape {shape:?}")));
            }
            expect_parts(parts, &["values", "indices", "indptr"], layout)?;
            let (indices, indptr, values) = (
                get_part(parts, "indices"),
                get_part(parts, "indptr"),
                get_part(parts, "values"),
            );
            let w = index_part(indices, layout)?;
            index_part(indptr, layout)?;
            if indptr.dtype != indices.dtype {
                return Err(layout_err(format!(
                    "{layout}: indptr is {} but indices is {}",
                    indptr.dtype, indices.dtype
                ))
                .part("indptr"));
            }
            let rows = shape[0].checked_add(1).and_then(|r| r.checked_mul(w));
            if rows != Some(indptr.size) {
                return Err(layout_err(format!(
                    "{layout}: indptr must hold R+1 = {} entries of {w} bytes, got {} bytes",
                    shape[0].wrapping_add(1),
                    indptr.size
                ))
                .part("indptr"));
            }
            if indices.size % w != 0 {
                return Err(layout_err(format!(
                    "{layout}: indices is {} bytes, not a multiple of {w}",
                    indices.size
                ))
                .part("indices"));
            }
            expect_size(values, indices.size / w, "values must hold one element per index")
        }
        LAYOUT_SPARSE_COO => {
            no_attrs()?;
            if shape.is_empty() {
                return Err(layout_err(format!("{layout} needs rank >= 1")));
            }
            expect_parts(parts, &["values", "coords"], layout)?;
            let (coords, values) = (get_part(parts, "coords"), get_part(parts, "values"));
            let w = index_part(coords, layout)?;
            let per = w * shape.len() as u64;
            if coords.size % per != 0 {
                return Err(layout_err(format!(
                    "{layout}: coords is {} bytes, not a multiple of {w} x rank {}",
                    coords.size,
                    shape.len()
                ))
                .part("coords"));
            }
            expect_size(values, coords.size / per, "values must hold one element per coordinate")
        }
        LAYOUT_QUANT_GROUP => validate_quant_group(spec, count, parts),
        _ => Ok(()),
    }
}

fn validate_quant_group(spec: &ObjectSpec, count: u64, parts: &[PartMeta<'_>]) -> Res<()> {
    let l = LAYOUT_QUANT_GROUP;
    let attrs = spec.attributes.as_ref().ok_or_else(|| {
        layout_err(format!(
            "{l} requires attributes bits, group_size, axis, packing, scale_form, zero_point"
        ))
    })?;
    let uint = |k: &str| {
        attrs
            .get(k)
            .and_then(Value::as_u64)
            .ok_or_else(|| layout_err(format!("{l}: attribute {k:?} must be an unsigned integer")))
    };
    let text = |v: Option<&Value<'static>>, k: &str| -> Res<String> {
        v.and_then(Value::as_text)
            .map(str::to_string)
            .ok_or_else(|| layout_err(format!("{l}: attribute {k:?} must be text")))
    };
    let (bits, group_size, axis) = (uint("bits")?, uint("group_size")?, uint("axis")?);
    if !matches!(bits, 2 | 3 | 4 | 5 | 6 | 8) {
        return Err(layout_err(format!("{l}: bits must be 2, 3, 4, 5, 6 or 8, got {bits}")));
    }
    if axis >= spec.shape.len() as u64 {
        return Err(layout_err(format!(
            "{l}: axis {axis} is not below rank {}",
            spec.shape.len()
        )));
    }
    let packing = attrs
        .get("packing")
        .filter(|v| v.as_map().is_some())
        .ok_or_else(|| layout_err(format!("{l}: attribute \"packing\" must be a map")))?;
    let word = text(packing.get("word"), "packing.word")?;
    let ww = word_width(&word)
        .ok_or_else(|| layout_err(format!("{l}: packing.word must be u8, u16, u32 or u64, got {word:?}")))?;
    let order = text(packing.get("order"), "packing.order")?;
    if order != "lsb_first" && order != "msb_first" {
        return Err(layout_err(format!(
            "{l}: packing.order must be lsb_first or msb_first, got {order:?}"
        )));
    }
    if (8 * ww) % bits != 0 {
        return Err(layout_err(format!(
            "{l}: bits {bits} must divide the {}-bit word",
            8 * ww
        )));
    }
    let per_word = 8 * ww / bits;
    if packing.get("per_word").and_then(Value::as_u64) != Some(per_word) {
        return Err(layout_err(format!(
            "{l}: packing.per_word must be 8 x width(word) / bits = {per_word}"
        )));
    }
    let scale_form = text(attrs.get("scale_form"), "scale_form")?;
    if !matches!(scale_form.as_str(), "f32_factors" | "f16_factors" | "e8m0_exponent") {
        return Err(layout_err(format!(
            "{l}: scale_form must be f32_factors, f16_factors or e8m0_exponent, got {scale_form:?}"
        )));
    }
    let zp = attrs
        .get("zero_point")
        .filter(|v| v.as_map().is_some())
        .ok_or_else(|| layout_err(format!("{l}: attribute \"zero_point\" must be a map")))?;
    let form = text(zp.get("form"), "zero_point.form")?;
    let zeros = match form.as_str() {
        "none" => None,
        "implied" => {
            if !matches!(zp.get("value"), Some(Value::Uint(_) | Value::Neg(_))) {
                return Err(layout_err(format!(
                    "{l}: zero_point.value (an integer) is required when form is implied"
                )));
            }
            None
        }
        "tensor" => {
            let p = text(zp.get("packing"), "zero_point.packing")?;
            if p != "same_as_data" && p != "plain" {
                return Err(layout_err(format!(
                    "{l}: zero_point.packing must be same_as_data or plain, got {p:?}"
                )));
            }
            Some(p == "same_as_data")
        }
        other => {
            return Err(layout_err(format!(
                "{l}: zero_point.form must be none, implied or tensor, got {other:?}"
            )));
        }
    };
    if zeros.is_some() {
        expect_parts(parts, &["data", "scales", "zeros"], l)?;
    } else {
        expect_parts(parts, &["data", "scales"], l)?;
    }
    let data = get_part(parts, "data");
    let unsigned = match data.dtype {
        "i8" => "u8",
        "i16" => "u16",
        "i32" => "u32",
        "i64" => "u64",
        d => d,
    };
    if unsigned != word || data.logical.is_some() {
        return Err(layout_err(format!(
            "{l}: data must be stored as the packing word {word} (or its signed twin), got {}",
            data.dtype
        ))
        .part("data"));
    }
    let scales = get_part(parts, "scales");
    if scale_form == "e8m0_exponent" && !(scales.dtype == "u8" && scales.logical == Some("f8_e8m0")) {
        return Err(layout_err(format!("{l}: e8m0_exponent scales must be u8 with type f8_e8m0")).part("scales"));
    }
    let along = spec.shape[axis as usize];
    let groups = if group_size == 0 {
        along
    } else {
        if !along.is_multiple_of(group_size) {
            return Err(layout_err(format!(
                "{l}: group_size {group_size} does not divide shape[{axis}] = {along}"
            )));
        }
        along / group_size
    };
    let lanes = count.checked_div(along).unwrap_or(0);
    let gl = groups
        .checked_mul(lanes)
        .ok_or_else(|| WriteError::new(WriteRule::Shape, "groups x lanes overflows u64"))?;
    if !count.is_multiple_of(per_word) || count / per_word * ww != data.size {
        return Err(layout_err(format!(
            "{l}: {count} codes of {bits} bits pack into {} bytes of {word}, got {}",
            count / per_word * ww,
            data.size
        ))
        .part("data"));
    }
    if gl * dtype_width(scales.dtype) != scales.size {
        return Err(layout_err(format!(
            "{l}: scales must hold groups x lanes = {gl} values, got {} bytes",
            scales.size
        ))
        .part("scales"));
    }
    if let Some(same) = zeros {
        let z = get_part(parts, "zeros");
        let want = if same {
            gl / per_word * ww
        } else {
            gl * dtype_width(z.dtype)
        };
        if want != z.size {
            return Err(layout_err(format!("{l}: zeros must be {want} bytes, got {}", z.size)).part("zeros"));
        }
    }
    Ok(())
}

fn part_value(
    dtype: &str,
    logical: Option<&str>,
    offset: u64,
    length: u64,
    shard: Option<&str>,
    digest: Option<&str>,
) -> Value<'static> {
    let mut m = vec![
        (
            Value::text("blob"),
            Value::Array(vec![Value::Uint(offset), Value::Uint(length)]),
        ),
        (Value::text("dtype"), Value::Text(Cow::Owned(dtype.to_string()))),
    ];
    if let Some(l) = logical {
        m.push((Value::text("type"), Value::Text(Cow::Owned(l.to_string()))));
    }
    if let Some(s) = shard {
        m.push((Value::text("shard"), Value::Text(Cow::Owned(s.to_string()))));
    }
    if let Some(d) = digest {
        m.push((Value::text("digest"), Value::Text(Cow::Owned(d.to_string()))));
    }
    Value::Map(m)
}

fn align_up(v: u64, align: u64) -> Res<u64> {
    v.checked_add(align - 1)
        .map(|x| x & !(align - 1))
        .ok_or_else(|| WriteError::new(WriteRule::Io, "file offset overflows u64"))
}

// ---------------------------------------------------------------------------------------------
// Writer

/// A part of the object being streamed.
struct StreamPart {
    decl: PartDecl,
    dtype: &'static str,
    logical: Option<String>,
    /// Set once begun: (position before padding, blob offset).
    start: Option<(u64, u64)>,
    written: u64,
    done: Option<(u64, String)>, // (offset, digest)
}

struct Stream {
    name: String,
    spec: ObjectSpec,
    parts: Vec<StreamPart>,
    current: Option<usize>,
    hasher: Option<Hasher>,
    dedup_hasher: Option<Xxh3>,
}

/// Writes one `.zt` file into a [`Sink`]. See the [module docs](self).
pub struct Writer<S: Sink> {
    sink: S,
    opts: Options,
    align: u64,
    objects: BTreeMap<String, Value<'static>>,
    shards: BTreeMap<String, (u64, String)>,
    attributes: Option<Value<'static>>,
    /// (xxh3-64, length) → offsets of blobs written in this session.
    dedup: BTreeMap<(u64, u64), Vec<u64>>,
    last_object: Option<String>,
    stream: Option<Stream>,
    appending: bool,
    /// The xxh3-64 of the next part's bytes (address, length, hash), from [`Writer::add_prehashed`].
    prehashed: Option<(usize, usize, u64)>,
}

impl<S: Sink> fmt::Debug for Writer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer")
            .field("options", &self.opts)
            .field("align", &self.align)
            .field("objects", &self.objects.len())
            .finish()
    }
}

impl<S: Sink> Writer<S> {
    /// Starts a new file in an empty `sink` (writes the magic).
    pub fn new(mut sink: S, opts: Options) -> Res<Self> {
        let align = Self::check_options(&opts)?;
        if sink.position() != 0 {
            return Err(WriteError::new(
                WriteRule::Usage,
                format!(
                    "a new file needs an empty sink, this one is at {}; use Writer::append to add to a file",
                    sink.position()
                ),
            ));
        }
        sink.write_all(&MAGIC)?;
        Ok(Writer {
            sink,
            opts,
            align,
            objects: BTreeMap::new(),
            shards: BTreeMap::new(),
            attributes: None,
            dedup: BTreeMap::new(),
            last_object: None,
            stream: None,
            appending: false,
            prehashed: None,
        })
    }

    fn check_options(opts: &Options) -> Res<u64> {
        if opts.canonical {
            if let Some(a) = opts.alignment.filter(|&a| a != ALIGN_CANONICAL) {
                return Err(WriteError::new(
                    WriteRule::Canonical,
                    format!("canonical form places blobs at 65536, not {a}; use Options::non_canonical() to choose"),
                ));
            }
            if opts.digest != DigestAlgo::Xxh3 {
                return Err(WriteError::new(
                    WriteRule::Canonical,
                    "canonical form requires xxh3 part digests; use Options::non_canonical() for sha256",
                ));
            }
        }
        let a = opts.alignment.unwrap_or(ALIGN_CANONICAL);
        if !a.is_power_of_two() || a < ALIGN_FLOOR {
            return Err(WriteError::new(
                WriteRule::Usage,
                format!("alignment must be a power of two >= 4096, got {a}"),
            ));
        }
        Ok(a)
    }

    /// Adds to an existing `.zt` (generational append, §2.3): `existing` is the file as it is now and
    /// `sink` writes at its end (`sink.position() == existing.size()`). The old objects, shards and
    /// attributes are kept, new blobs, a new manifest and a new footer go past the old EOF, and
    /// nothing is truncated or overwritten. Without [`Options::alignment`] the file's own alignment
    /// is inherited from its offsets. Needs [`Options::non_canonical`] (an append leaves the old
    /// manifest as an unreferenced blob). New blobs are not shared with old ones.
    pub fn append(sink: S, existing: &impl ReadAt, opts: Options) -> Res<Self> {
        if opts.canonical {
            return Err(WriteError::new(
                WriteRule::Canonical,
                "canonical form is written in one pass; append with Options::non_canonical()",
            ));
        }
        let align = Self::check_options(&opts)?;
        let size = existing.size();
        if sink.position() != size {
            return Err(WriteError::new(
                WriteRule::Usage,
                format!(
                    "the sink is at {}, but the existing file ends at {size}: append writes from EOF",
                    sink.position()
                ),
            ));
        }
        let bad = |m: String| WriteError::new(WriteRule::Existing, m);
        let read = |off: u64, len: u64| {
            existing
                .read_vec(off, len)
                .map_err(|e| bad(format!("cannot read the existing file: {e}")))
        };
        if size < 48 {
            return Err(bad(format!("{size} bytes is too small for a .zt file")));
        }
        if read(0, 8)? != MAGIC {
            return Err(bad("the existing file does not start with the .zt v2 magic".into()));
        }
        let footer = read(size - FOOTER_LEN, FOOTER_LEN)?;
        let u64_at = |i: usize| u64::from_le_bytes(footer[i..i + 8].try_into().unwrap());
        if footer[32..40] != MAGIC {
            return Err(bad(
                "the existing file's footer magic is missing (a crashed append is not recoverable, §2.3)".into(),
            ));
        }
        let version = u32::from_le_bytes(footer[24..28].try_into().unwrap());
        if version != VERSION {
            return Err(bad(format!(
                "footer version {version}; only version 2 can be appended to"
            )));
        }
        let (moff, mlen, mhash) = (u64_at(0), u64_at(8), u64_at(16));
        if mlen == 0 {
            return Err(bad(
                "the existing file is a data shard: it has no manifest to add to".into()
            ));
        }
        if mlen > MAX_MANIFEST_LEN || moff.checked_add(mlen).is_none_or(|e| e > size - FOOTER_LEN) {
            return Err(bad(format!("manifest [{moff}, +{mlen}) lies outside the file")));
        }
        let mbytes = read(moff, mlen)?;
        if xxh3_64(&mbytes) != mhash {
            return Err(bad("the manifest does not hash to the footer's XXH3 value".into()));
        }
        let root = cbor::decode(&mbytes, cbor::Mode::Deterministic)
            .map_err(|e| bad(format!("manifest CBOR: {e}")))?
            .into_owned();
        let mut objects = BTreeMap::new();
        let mut shards = BTreeMap::new();
        let mut attributes = None;
        let mut gcd = moff;
        let Some(root_map) = root.as_map() else {
            return Err(bad("the manifest is not a map".into()));
        };
        for (k, v) in root_map {
            match k.as_text() {
                Some("objects") => {
                    let m = v.as_map().ok_or_else(|| bad("\"objects\" is not a map".into()))?;
                    for (name, obj) in m {
                        let name = name.as_text().ok_or_else(|| bad("an object name is not text".into()))?;
                        if let Some(parts) = obj.get("parts").and_then(Value::as_map) {
                            for (_, p) in parts {
                                let local = p.get("shard").is_none();
                                let off = p
                                    .get("blob")
                                    .and_then(Value::as_array)
                                    .and_then(|b| b.first())
                                    .and_then(Value::as_u64);
                                if let (true, Some(off)) = (local, off) {
                                    gcd = gcd_u64(gcd, off);
                                }
                            }
                        }
                        objects.insert(name.to_string(), obj.clone());
                    }
                }
                Some("shards") => {
                    let m = v.as_map().ok_or_else(|| bad("\"shards\" is not a map".into()))?;
                    for (name, e) in m {
                        let name = name.as_text().ok_or_else(|| bad("a shard name is not text".into()))?;
                        let sz = e
                            .get("size")
                            .and_then(Value::as_u64)
                            .ok_or_else(|| bad(format!("shard {name:?} has no size")))?;
                        let d = e
                            .get("digest")
                            .and_then(Value::as_text)
                            .ok_or_else(|| bad(format!("shard {name:?} has no digest")))?;
                        shards.insert(name.to_string(), (sz, d.to_string()));
                    }
                }
                Some("attributes") => attributes = Some(v.clone()),
                _ => {}
            }
        }
        let align = if opts.alignment.is_some() {
            align
        } else {
            let p = if gcd == 0 {
                ALIGN_FLOOR
            } else {
                1u64 << gcd.trailing_zeros().min(63)
            };
            p.clamp(ALIGN_FLOOR, ALIGN_CANONICAL)
        };
        Ok(Writer {
            sink,
            opts,
            align,
            objects,
            shards,
            attributes,
            dedup: BTreeMap::new(),
            last_object: None,
            stream: None,
            appending: true,
            prehashed: None,
        })
    }

    /// The alignment blobs are placed at.
    pub fn alignment(&self) -> u64 {
        self.align
    }

    /// The sink being written (read-only: its settings, never its bytes).
    pub fn sink(&self) -> &S {
        &self.sink
    }

    /// Bytes written so far (the sink's position).
    pub fn position(&self) -> u64 {
        self.sink.position()
    }

    /// Sets the file attributes (a map with text keys). Once set, an `attributes` map is written
    /// even when empty (as the reference does).
    pub fn set_attributes(&mut self, attributes: Value<'static>) -> Res<()> {
        check_attributes(&attributes, 1)?;
        self.attributes = Some(attributes);
        Ok(())
    }

    /// Registers a shard (§12): a file of exactly `size` bytes whose whole-file digest is `digest`
    /// (`xxh3:` at least, `sha256:` for signed distribution). Non-canonical only.
    pub fn add_shard(&mut self, name: &str, size: u64, digest: &str) -> Res<()> {
        if self.opts.canonical {
            return Err(WriteError::new(
                WriteRule::Canonical,
                "canonical form is single-file (§10 rule 6); use Options::non_canonical() for shards",
            ));
        }
        check_shard_name(name)?;
        check_digest(digest)?;
        if size < 48 {
            return Err(WriteError::new(
                WriteRule::Shard,
                format!("shard {name:?}: size {size} is below the 48-byte minimum"),
            ));
        }
        match self.shards.get(name) {
            Some(e) if *e != (size, digest.to_string()) => Err(WriteError::new(
                WriteRule::Shard,
                format!("shard {name:?} is already registered with another identity"),
            )),
            _ => {
                self.shards.insert(name.to_string(), (size, digest.to_string()));
                Ok(())
            }
        }
    }

    /// Adds a dense tensor: one raw `data` part of `product(shape)` elements.
    pub fn add(&mut self, name: &str, dtype: DType, shape: &[u64], data: &[u8]) -> Res<()> {
        self.add_object(name, &ObjectSpec::dense(shape), &[PartSpec::new("data", dtype, data)])
    }

    /// [`Writer::add`] for a part whose xxh3-64 is already known, so the caller can hash the next
    /// part on another thread while this one is written (what `tensorlane::zt_write::ZtFile::add_many`
    /// does). `xxh3` must be `xxh3_64(data)`: it becomes the part's digest and dedup key (sharing
    /// still compares the bytes). Needs xxh3 part digests (the default).
    pub fn add_prehashed(&mut self, name: &str, dtype: DType, shape: &[u64], data: &[u8], xxh3: u64) -> Res<()> {
        if self.opts.digest != DigestAlgo::Xxh3 {
            return Err(WriteError::new(
                WriteRule::Usage,
                "add_prehashed needs xxh3 part digests; use add with sha256",
            ));
        }
        self.prehashed = Some((data.as_ptr() as usize, data.len(), xxh3));
        let r = self.add(name, dtype, shape, data);
        self.prehashed = None;
        r
    }

    /// Adds an object with any number of parts, validated against its layout (for `dense`,
    /// `zt.sparse_csr/1`, `zt.sparse_coo/1`, `zt.quant_group/1`) before anything is written. Parts
    /// are written in name order.
    pub fn add_object(&mut self, name: &str, spec: &ObjectSpec, parts: &[PartSpec<'_>]) -> Res<()> {
        self.check_object(name, spec).map_err(|e| e.at(name))?;
        let mut order: Vec<&PartSpec<'_>> = parts.iter().collect();
        order.sort_by(|a, b| a.name.cmp(&b.name));
        let mut metas = Vec::with_capacity(order.len());
        let mut storages = Vec::with_capacity(order.len());
        for (i, p) in order.iter().enumerate() {
            let (dtype, logical) = self
                .check_part(
                    p.name.as_str(),
                    p.dtype,
                    p.logical.as_deref(),
                    i,
                    &order.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
                )
                .map_err(|e| e.at(name))?;
            let size = match &p.data {
                PartData::Bytes(b) => b.len() as u64,
                PartData::External {
                    shard,
                    offset,
                    length,
                    digest,
                } => {
                    self.check_external(shard, *offset, *length, digest.as_deref())
                        .map_err(|e| e.at(name).part(&p.name))?;
                    *length
                }
                PartData::Encoded {
                    encoding,
                    stored,
                    decoded,
                } => {
                    self.check_encoded(encoding, stored, decoded.len() as u64)
                        .map_err(|e| e.at(name).part(&p.name))?;
                    decoded.len() as u64
                }
            };
            storages.push((dtype, logical));
            metas.push(size);
        }
        {
            let pm: Vec<PartMeta<'_>> = order
                .iter()
                .zip(&storages)
                .zip(&metas)
                .map(|((p, (d, l)), s)| PartMeta {
                    name: &p.name,
                    dtype: d,
                    logical: l.as_deref(),
                    size: *s,
                })
                .collect();
            validate_layout(spec, check_shape(&spec.shape)?, &pm).map_err(|e| e.at(name))?;
        }
        let mut part_values = Vec::with_capacity(order.len());
        for (p, (dtype, logical)) in order.iter().zip(&storages) {
            let v = match &p.data {
                PartData::Bytes(b) => {
                    let (offset, digest) = self.write_or_share(b).map_err(|e| e.at(name).part(&p.name))?;
                    part_value(dtype, logical.as_deref(), offset, b.len() as u64, None, Some(&digest))
                }
                PartData::External {
                    shard,
                    offset,
                    length,
                    digest,
                } => part_value(
                    dtype,
                    logical.as_deref(),
                    *offset,
                    *length,
                    Some(shard),
                    digest.as_deref(),
                ),
                PartData::Encoded {
                    encoding,
                    stored,
                    decoded,
                } => {
                    let offset = align_up(self.sink.position(), self.align)?;
                    self.pad_to(offset).map_err(|e| e.at(name).part(&p.name))?;
                    self.sink
                        .write_all(stored)
                        .map_err(|e| WriteError::from(e).at(name).part(&p.name))?;
                    let digest = self.opts.digest.digest(decoded);
                    let mut v = part_value(
                        dtype,
                        logical.as_deref(),
                        offset,
                        stored.len() as u64,
                        None,
                        Some(&digest),
                    );
                    if let Value::Map(m) = &mut v {
                        m.push((Value::text("encoding"), Value::Text(Cow::Owned(encoding.clone()))));
                        m.push((Value::text("decoded_length"), Value::Uint(decoded.len() as u64)));
                    }
                    v
                }
            };
            part_values.push((Value::Text(Cow::Owned(p.name.clone())), v));
        }
        self.commit(name, spec, part_values);
        Ok(())
    }

    fn check_object(&self, name: &str, spec: &ObjectSpec) -> Res<()> {
        if self.stream.is_some() {
            return Err(WriteError::new(
                WriteRule::Usage,
                "a streamed object is open; finish it with end_object first",
            ));
        }
        check_name(name, "object", self.opts.canonical)?;
        if self.objects.contains_key(name) {
            return Err(WriteError::new(
                WriteRule::Name,
                "an object of this name already exists in the file",
            ));
        }
        if self.opts.canonical
            && let Some(last) = &self.last_object
            && name.as_bytes() <= last.as_bytes()
        {
            return Err(WriteError::new(
                WriteRule::Order,
                format!(
                    "canonical form places blobs in name order: {name:?} comes after {last:?}; add objects sorted by name (bytewise), or use Options::non_canonical()"
                ),
            ));
        }
        check_shape(&spec.shape)?;
        if spec.layout.is_empty() {
            return Err(WriteError::new(WriteRule::Schema, "the layout id is empty"));
        }
        if let Some(a) = &spec.attributes {
            check_attributes(a, 3)?;
        }
        Ok(())
    }

    fn check_part(
        &self,
        pname: &str,
        dtype: DType,
        logical: Option<&str>,
        i: usize,
        names: &[&str],
    ) -> Res<(&'static str, Option<String>)> {
        check_name(pname, "part", self.opts.canonical).map_err(|e| e.part(pname))?;
        if i > 0 && names[i - 1] == pname {
            return Err(WriteError::new(WriteRule::Name, "two parts have this name").part(pname));
        }
        let (d, l) = storage_of(dtype, logical).map_err(|m| WriteError::new(WriteRule::Schema, m).part(pname))?;
        if let Some(l) = &l {
            if l.is_empty() {
                return Err(WriteError::new(WriteRule::Schema, "the logical type is empty").part(pname));
            }
            if let Some(pin) = logical_dtype(l)
                && pin != d
            {
                return Err(WriteError::new(
                    WriteRule::Schema,
                    format!("logical type {l:?} requires dtype {pin}, got {d} (§6.2)"),
                )
                .part(pname));
            }
        }
        Ok((d, l))
    }

    fn check_external(&self, shard: &str, offset: u64, length: u64, digest: Option<&str>) -> Res<()> {
        if self.opts.canonical {
            return Err(WriteError::new(
                WriteRule::Canonical,
                "canonical form is single-file (§10 rule 6); use Options::non_canonical() for parts in shards",
            ));
        }
        let (size, _) = self.shards.get(shard).ok_or_else(|| {
            WriteError::new(
                WriteRule::Shard,
                format!("shard {shard:?} is not registered; call add_shard first"),
            )
        })?;
        if !offset.is_multiple_of(ALIGN_FLOOR) || offset < ALIGN_FLOOR {
            return Err(WriteError::new(
                WriteRule::Shard,
                format!("offset {offset} in shard {shard:?} is not a multiple of 4096 at or above 4096"),
            ));
        }
        if offset.checked_add(length).is_none_or(|e| e > size - FOOTER_LEN) {
            return Err(WriteError::new(
                WriteRule::Shard,
                format!(
                    "blob [{offset}, +{length}) runs past shard {shard:?}'s data region ({} bytes)",
                    size - FOOTER_LEN
                ),
            ));
        }
        if let Some(d) = digest {
            check_digest(d)?;
        }
        Ok(())
    }

    fn check_encoded(&self, encoding: &str, stored: &[u8], decoded_length: u64) -> Res<()> {
        if self.opts.canonical {
            return Err(WriteError::new(
                WriteRule::Canonical,
                "canonical form stores every part raw (§10 rule 4); use Options::non_canonical() for encodings",
            ));
        }
        if encoding.is_empty() {
            return Err(WriteError::new(WriteRule::Schema, "the encoding id is empty"));
        }
        if encoding == ENCODING_ZSTD_SEEKABLE {
            super::seekable::SeekTable::parse(stored, decoded_length)
                .map_err(|e| WriteError::new(WriteRule::Schema, format!("the stored bytes are not a valid {ENCODING_ZSTD_SEEKABLE} stream of {decoded_length} decoded bytes: {e}")))?;
        }
        Ok(())
    }

    fn commit(&mut self, name: &str, spec: &ObjectSpec, parts: Vec<(Value<'static>, Value<'static>)>) {
        let mut obj = vec![
            (Value::text("parts"), Value::Map(parts)),
            (
                Value::text("shape"),
                Value::Array(spec.shape.iter().map(|&d| Value::Uint(d)).collect()),
            ),
            (Value::text("layout"), Value::Text(Cow::Owned(spec.layout.clone()))),
        ];
        if let Some(a) = &spec.attributes
            && a.as_map().is_some_and(|m| !m.is_empty())
        {
            obj.push((Value::text("attributes"), a.clone()));
        }
        self.objects.insert(name.to_string(), Value::Map(obj));
        self.last_object = Some(name.to_string());
    }

    // ---- blob placement ----

    fn pad_to(&mut self, target: u64) -> Res<()> {
        let zeros = [0u8; 4096];
        let mut gap = target - self.sink.position();
        while gap > 0 {
            let n = gap.min(zeros.len() as u64) as usize;
            self.sink.write_all(&zeros[..n])?;
            gap -= n as u64;
        }
        Ok(())
    }

    /// Does the blob at `offset` hold exactly `data`?
    fn blob_equals(&mut self, offset: u64, data: &[u8]) -> Res<bool> {
        let mut buf = vec![0u8; data.len().min(CHUNK)];
        let mut at = 0usize;
        while at < data.len() {
            let n = (data.len() - at).min(CHUNK);
            self.sink
                .read_back(offset + at as u64, &mut buf[..n])
                .map_err(|e| self.no_confirm(e))?;
            if buf[..n] != data[at..at + n] {
                return Ok(false);
            }
            at += n;
        }
        Ok(true)
    }

    /// Do two written ranges hold the same bytes?
    fn ranges_equal(&mut self, a: u64, b: u64, len: u64) -> Res<bool> {
        let n0 = (len as usize).min(CHUNK);
        let (mut x, mut y) = (vec![0u8; n0], vec![0u8; n0]);
        let mut at = 0u64;
        while at < len {
            let n = ((len - at) as usize).min(CHUNK);
            self.sink
                .read_back(a + at, &mut x[..n])
                .map_err(|e| self.no_confirm(e))?;
            self.sink
                .read_back(b + at, &mut y[..n])
                .map_err(|e| self.no_confirm(e))?;
            if x[..n] != y[..n] {
                return Ok(false);
            }
            at += n as u64;
        }
        Ok(true)
    }

    fn no_confirm(&self, e: SinkError) -> WriteError {
        WriteError::new(
            WriteRule::Io,
            format!(
                "cannot confirm that two parts are byte-identical before sharing a blob: {}",
                e.0
            ),
        )
    }

    /// Writes `data` as a new blob, or shares an earlier byte-identical one. Returns the offset and
    /// the part digest.
    fn write_or_share(&mut self, data: &[u8]) -> Res<(u64, String)> {
        let (key64, digest) = match self.prehashed.take() {
            Some((at, len, h)) if at == data.as_ptr() as usize && len == data.len() => (h, format!("xxh3:{h:016x}")),
            _ => {
                let mut h = Hasher::new(self.opts.digest);
                h.update(data);
                let key64 = h.finish_u64().unwrap_or_else(|| xxh3_64(data));
                (key64, h.finish())
            }
        };
        let key = (key64, data.len() as u64);
        if let Some(cands) = self.dedup.get(&key).cloned() {
            for off in cands {
                if self.blob_equals(off, data)? {
                    return Ok((off, digest));
                }
            }
        }
        let target = align_up(self.sink.position(), self.align)?;
        self.pad_to(target)?;
        self.sink.write_all(data)?;
        self.dedup.entry(key).or_default().push(target);
        Ok((target, digest))
    }

    /// Writes `data` as its own blob (no sharing, no manifest entry) and returns where it is, for
    /// building data shards (§12; finish with [`Writer::finish_data_shard`]) or parts that other
    /// manifests reference. Non-canonical only.
    pub fn put_blob(&mut self, data: &[u8]) -> Res<BlobRef> {
        if self.opts.canonical {
            return Err(WriteError::new(
                WriteRule::Canonical,
                "canonical form has no unreferenced blobs (§10 rule 1); use Options::non_canonical()",
            ));
        }
        if self.stream.is_some() {
            return Err(WriteError::new(
                WriteRule::Usage,
                "a streamed object is open; finish it with end_object first",
            ));
        }
        let target = align_up(self.sink.position(), self.align)?;
        self.pad_to(target)?;
        self.sink.write_all(data)?;
        Ok(BlobRef {
            offset: target,
            length: data.len() as u64,
            digest: self.opts.digest.digest(data),
        })
    }

    // ---- streaming ----

    /// Starts a streamed object: declares its metadata and every part with its exact byte count,
    /// validated now (names, shape, layout sizes). Then, per part in name order:
    /// [`begin_part`](Self::begin_part), [`write_chunk`](Self::write_chunk)…,
    /// [`end_part`](Self::end_part); finally [`end_object`](Self::end_object).
    pub fn begin_object(&mut self, name: &str, spec: &ObjectSpec, parts: &[PartDecl]) -> Res<()> {
        self.check_object(name, spec).map_err(|e| e.at(name))?;
        let mut order: Vec<&PartDecl> = parts.iter().collect();
        order.sort_by(|a, b| a.name.cmp(&b.name));
        let names: Vec<&str> = order.iter().map(|p| p.name.as_str()).collect();
        let mut sp = Vec::new();
        for (i, p) in order.iter().enumerate() {
            let (dtype, logical) = self
                .check_part(&p.name, p.dtype, p.logical.as_deref(), i, &names)
                .map_err(|e| e.at(name))?;
            sp.push(StreamPart {
                decl: (*p).clone(),
                dtype,
                logical,
                start: None,
                written: 0,
                done: None,
            });
        }
        {
            let pm: Vec<PartMeta<'_>> = sp
                .iter()
                .map(|p| PartMeta {
                    name: &p.decl.name,
                    dtype: p.dtype,
                    logical: p.logical.as_deref(),
                    size: p.decl.length,
                })
                .collect();
            validate_layout(spec, check_shape(&spec.shape)?, &pm).map_err(|e| e.at(name))?;
        }
        self.stream = Some(Stream {
            name: name.to_string(),
            spec: spec.clone(),
            parts: sp,
            current: None,
            hasher: None,
            dedup_hasher: None,
        });
        Ok(())
    }

    /// Starts streaming the bytes of part `part` (parts go in name order).
    pub fn begin_part(&mut self, part: &str) -> Res<()> {
        let pos = self.sink.position();
        let align = self.align;
        let digest = self.opts.digest;
        let st = self
            .stream
            .as_mut()
            .ok_or_else(|| WriteError::new(WriteRule::Usage, "begin_part without begin_object"))?;
        if st.current.is_some() {
            return Err(
                WriteError::new(WriteRule::Usage, "the previous part is still open; call end_part first")
                    .at(&st.name)
                    .part(part),
            );
        }
        let next = st.parts.iter().position(|p| p.done.is_none());
        let Some(i) = next.filter(|&i| st.parts[i].decl.name == part) else {
            let want = next.map(|i| st.parts[i].decl.name.clone());
            return Err(WriteError::new(
                WriteRule::Usage,
                format!("parts are streamed in name order; the next one is {want:?}"),
            )
            .at(&st.name)
            .part(part));
        };
        let target = align_up(pos, align)?;
        st.parts[i].start = Some((pos, target));
        st.current = Some(i);
        st.hasher = Some(Hasher::new(digest));
        st.dedup_hasher = if digest == DigestAlgo::Xxh3 {
            None
        } else {
            Some(Xxh3::new())
        };
        self.pad_to(target)
    }

    /// Streams the next bytes of the open part.
    pub fn write_chunk(&mut self, chunk: &[u8]) -> Res<()> {
        let st = self
            .stream
            .as_mut()
            .ok_or_else(|| WriteError::new(WriteRule::Usage, "write_chunk without begin_object"))?;
        let i = st
            .current
            .ok_or_else(|| WriteError::new(WriteRule::Usage, "write_chunk without begin_part").at(&st.name))?;
        let p = &mut st.parts[i];
        let end = p.written + chunk.len() as u64;
        if end > p.decl.length {
            return Err(WriteError::new(
                WriteRule::Usage,
                format!("{end} bytes written into a part declared as {}", p.decl.length),
            )
            .at(&st.name)
            .part(&p.decl.name));
        }
        p.written = end;
        if let Some(h) = st.hasher.as_mut() {
            h.update(chunk);
        }
        if let Some(h) = st.dedup_hasher.as_mut() {
            h.update(chunk);
        }
        self.sink.write_all(chunk).map_err(WriteError::from)
    }

    /// Ends the open part: checks its length, finalises its digest, and shares an earlier
    /// byte-identical blob when there is one (taking the streamed copy back with
    /// [`Sink::truncate`]).
    pub fn end_part(&mut self) -> Res<()> {
        let st = self
            .stream
            .as_mut()
            .ok_or_else(|| WriteError::new(WriteRule::Usage, "end_part without begin_object"))?;
        let i = st
            .current
            .ok_or_else(|| WriteError::new(WriteRule::Usage, "end_part without begin_part").at(&st.name))?;
        let (oname, pname) = (st.name.clone(), st.parts[i].decl.name.clone());
        let p = &st.parts[i];
        if p.written != p.decl.length {
            return Err(WriteError::new(
                WriteRule::Usage,
                format!("{} of {} declared bytes written", p.written, p.decl.length),
            )
            .at(&oname)
            .part(&pname));
        }
        let (before, offset) = p.start.expect("begun");
        let len = p.written;
        let mut h = st.hasher.take().expect("begun");
        let key64 = h
            .finish_u64()
            .unwrap_or_else(|| st.dedup_hasher.take().map_or(0, |x| x.digest()));
        let digest = h.finish();
        st.current = None;
        let key = (key64, len);
        let mut placed = offset;
        if let Some(cands) = self.dedup.get(&key).cloned() {
            for c in cands {
                if self
                    .ranges_equal(c, offset, len)
                    .map_err(|e| e.at(&oname).part(&pname))?
                {
                    match self.sink.truncate(before) {
                        Ok(()) => placed = c,
                        Err(e) if self.opts.canonical => {
                            return Err(WriteError::new(WriteRule::Canonical, format!("this part duplicates an earlier blob and canonical form requires sharing, but the sink cannot take the copy back: {}", e.0)).at(&oname).part(&pname));
                        }
                        Err(_) => {}
                    }
                    break;
                }
            }
        }
        if placed == offset {
            self.dedup.entry(key).or_default().push(offset);
        }
        let st = self.stream.as_mut().expect("open");
        st.parts[i].done = Some((placed, digest));
        Ok(())
    }

    /// Ends the streamed object and adds it to the manifest.
    pub fn end_object(&mut self) -> Res<()> {
        let st = self
            .stream
            .as_ref()
            .ok_or_else(|| WriteError::new(WriteRule::Usage, "end_object without begin_object"))?;
        if let Some(p) = st.parts.iter().find(|p| p.done.is_none()) {
            return Err(WriteError::new(WriteRule::Usage, "this part has not been streamed yet")
                .at(&st.name)
                .part(&p.decl.name));
        }
        let st = self.stream.take().expect("open");
        let parts = st
            .parts
            .iter()
            .map(|p| {
                let (off, d) = p.done.as_ref().expect("done");
                (
                    Value::Text(Cow::Owned(p.decl.name.clone())),
                    part_value(p.dtype, p.logical.as_deref(), *off, p.decl.length, None, Some(d)),
                )
            })
            .collect();
        self.commit(&st.name, &st.spec, parts);
        Ok(())
    }

    // ---- finishing ----

    /// The manifest as it would be written now.
    pub fn manifest(&self) -> Value<'static> {
        let mut root = vec![(
            Value::text("objects"),
            Value::Map(
                self.objects
                    .iter()
                    .map(|(k, v)| (Value::Text(Cow::Owned(k.clone())), v.clone()))
                    .collect(),
            ),
        )];
        if !self.shards.is_empty() {
            root.push((
                Value::text("shards"),
                Value::Map(
                    self.shards
                        .iter()
                        .map(|(k, (s, d))| {
                            (
                                Value::Text(Cow::Owned(k.clone())),
                                Value::Map(vec![
                                    (Value::text("size"), Value::Uint(*s)),
                                    (Value::text("digest"), Value::Text(Cow::Owned(d.clone()))),
                                ]),
                            )
                        })
                        .collect(),
                ),
            ));
        }
        if let Some(a) = &self.attributes {
            root.push((Value::text("attributes"), a.clone()));
        }
        Value::Map(root)
    }

    /// Writes the manifest at the next aligned offset and the footer after it.
    pub fn finish(mut self) -> Res<Finished<S>> {
        if self.stream.is_some() {
            return Err(WriteError::new(
                WriteRule::Usage,
                "a streamed object is still open; call end_object before finish",
            ));
        }
        let manifest =
            cbor::encode(&self.manifest()).map_err(|e| WriteError::new(WriteRule::Schema, format!("manifest: {e}")))?;
        let len = manifest.len() as u64;
        if len > MAX_MANIFEST_LEN {
            return Err(WriteError::new(
                WriteRule::ManifestTooLarge,
                format!("the manifest is {len} bytes; §2.1 allows at most 1 GiB"),
            ));
        }
        let offset = align_up(self.sink.position(), self.align)?;
        self.pad_to(offset)?;
        self.sink.write_all(&manifest)?;
        let hash = xxh3_64(&manifest);
        self.write_footer(offset, len, hash)?;
        Ok(Finished {
            size: self.sink.position(),
            sink: self.sink,
            manifest_offset: offset,
            manifest_length: len,
            manifest,
        })
    }

    /// Ends a **data shard** (§12): blobs written with [`put_blob`](Self::put_blob), then a footer
    /// with zero manifest offset, length and hash. Non-canonical, no objects, not an append.
    pub fn finish_data_shard(mut self) -> Res<Finished<S>> {
        if self.opts.canonical || !self.objects.is_empty() || self.appending || self.stream.is_some() {
            return Err(WriteError::new(
                WriteRule::Usage,
                "a data shard is a fresh non-canonical file holding only put_blob blobs (no objects)",
            ));
        }
        self.write_footer(0, 0, 0)?;
        Ok(Finished {
            size: self.sink.position(),
            sink: self.sink,
            manifest_offset: 0,
            manifest_length: 0,
            manifest: Vec::new(),
        })
    }

    fn write_footer(&mut self, offset: u64, len: u64, hash: u64) -> Res<()> {
        let mut footer = [0u8; FOOTER_LEN as usize];
        footer[0..8].copy_from_slice(&offset.to_le_bytes());
        footer[8..16].copy_from_slice(&len.to_le_bytes());
        footer[16..24].copy_from_slice(&hash.to_le_bytes());
        footer[24..28].copy_from_slice(&VERSION.to_le_bytes());
        footer[32..40].copy_from_slice(&MAGIC);
        self.sink.write_all(&footer)?;
        Ok(())
    }
}

fn gcd_u64(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd_u64(b, a % b) }
}

// ---------------------------------------------------------------------------------------------
// Content digest

/// The §11 content digest (`"<algo>:<hex>"`) of a manifest (deterministic CBOR bytes, e.g.
/// [`Finished::manifest`]): the digest of `["zt.content/1", {object: {shape, layout, attributes?,
/// parts: {part: {dtype, type?, digest}}}}]`. Independent of placement, alignment, encodings and
/// shards. Fails if any part lacks a digest.
pub fn content_digest(manifest: &[u8], algo: DigestAlgo) -> Res<String> {
    let bad = |m: String| WriteError::new(WriteRule::Schema, m);
    let root = cbor::decode(manifest, cbor::Mode::Deterministic).map_err(|e| bad(format!("manifest CBOR: {e}")))?;
    let objects = root
        .get("objects")
        .and_then(Value::as_map)
        .ok_or_else(|| bad("the manifest has no objects map".into()))?;
    let mut out = Vec::with_capacity(objects.len());
    for (name, obj) in objects {
        let oname = name.as_text().unwrap_or("?");
        let mut o = Vec::new();
        for key in ["shape", "layout", "attributes"] {
            if let Some(v) = obj.get(key) {
                o.push((Value::text(key), v.clone()));
            }
        }
        let parts = obj
            .get("parts")
            .and_then(Value::as_map)
            .ok_or_else(|| bad(format!("object {oname:?} has no parts")))?;
        let mut pm = Vec::with_capacity(parts.len());
        for (pname, part) in parts {
            let mut e = Vec::new();
            for key in ["dtype", "type"] {
                if let Some(v) = part.get(key) {
                    e.push((Value::text(key), v.clone()));
                }
            }
            let d = part.get("digest").ok_or_else(|| {
                bad(format!(
                    "object {oname:?} part {:?} has no digest, so the content digest is undefined (§11)",
                    pname.as_text().unwrap_or("?")
                ))
            })?;
            e.push((Value::text("digest"), d.clone()));
            pm.push((pname.clone(), Value::Map(e)));
        }
        o.push((Value::text("parts"), Value::Map(pm)));
        out.push((name.clone(), Value::Map(o)));
    }
    let doc = Value::Array(vec![Value::text("zt.content/1"), Value::Map(out)]);
    let bytes = cbor::encode(&doc).map_err(|e| bad(e.0))?;
    Ok(algo.digest(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn footer(b: &[u8]) -> (u64, u64, u64) {
        let f = &b[b.len() - 40..];
        let u = |i: usize| u64::from_le_bytes(f[i..i + 8].try_into().unwrap());
        (u(0), u(8), u(16))
    }

    #[test]
    fn canonical_layout_and_sharing() {
        let x = f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let mut w = Writer::new(Vec::new(), Options::default()).unwrap();
        w.add("a", DType::F32, &[0], &[]).unwrap();
        w.add("b", DType::F32, &[2, 3], &x).unwrap();
        w.add("c", DType::F32, &[0], &[]).unwrap();
        w.add("d", DType::F32, &[6], &x).unwrap();
        let err = w.add("c0", DType::F32, &[6], &x).unwrap_err();
        assert_eq!(err.rule, WriteRule::Order);
        let done = w.finish().unwrap();
        let b = &done.sink;
        let (mo, ml, mh) = footer(b);
        assert_eq!((mo, ml), (131072, done.manifest_length));
        assert_eq!(mh, xxh3_64(&b[mo as usize..(mo + ml) as usize]));
        assert!(b[8..65536].iter().all(|&z| z == 0));
        let m = cbor::decode(&done.manifest, cbor::Mode::Deterministic).unwrap();
        let blob = |o: &str| {
            m.get("objects")
                .unwrap()
                .get(o)
                .unwrap()
                .get("parts")
                .unwrap()
                .get("data")
                .unwrap()
                .get("blob")
                .unwrap()
                .clone()
        };
        assert_eq!(blob("a"), Value::Array(vec![Value::Uint(65536), Value::Uint(0)]));
        assert_eq!(blob("b"), Value::Array(vec![Value::Uint(65536), Value::Uint(24)]));
        assert_eq!(blob("d"), blob("b"));
        assert_eq!(b.len() as u64, mo + ml + 40);
    }

    #[test]
    fn names_and_limits() {
        let mut w = Writer::new(Vec::new(), Options::default()).unwrap();
        assert_eq!(
            w.add("e\u{301}", DType::U8, &[1], &[1]).unwrap_err().rule,
            WriteRule::Name
        );
        assert_eq!(w.add("", DType::U8, &[1], &[1]).unwrap_err().rule, WriteRule::Name);
        assert_eq!(w.add("a\0", DType::U8, &[1], &[1]).unwrap_err().rule, WriteRule::Name);
        assert_eq!(
            w.add(&"x".repeat(1025), DType::U8, &[1], &[1]).unwrap_err().rule,
            WriteRule::Name
        );
        w.add(&"x".repeat(1024), DType::U8, &[1], &[1]).unwrap();
        let e = w.add("y", DType::U8, &[2], &[1]).unwrap_err();
        assert_eq!(
            (e.rule, e.object.as_deref(), e.part.as_deref()),
            (WriteRule::DenseSize, Some("y"), Some("data"))
        );
        assert_eq!(
            w.add("z", DType::U8, &vec![1; 65], &[1]).unwrap_err().rule,
            WriteRule::Shape
        );
        assert_eq!(
            w.add("z", DType::U8, &[u64::MAX, 2], &[1]).unwrap_err().rule,
            WriteRule::Shape
        );
        w.add("z", DType::U8, &vec![1; 64], &[1]).unwrap();
        let mut n = Writer::new(Vec::new(), Options::non_canonical()).unwrap();
        n.add("e\u{301}", DType::U8, &[1], &[1]).unwrap();
        n.add("a", DType::Bool, &[1], &[1]).unwrap();
        assert!(Writer::new(Vec::new(), Options::default().alignment(4096)).is_err());
        assert!(Writer::new(Vec::new(), Options::non_canonical().alignment(8192 + 4096)).is_err());
    }

    #[test]
    fn layouts() {
        let mut w = Writer::new(Vec::new(), Options::default()).unwrap();
        let u32s = |v: &[u32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let (ind, ptr, val) = (u32s(&[0, 2, 1]), u32s(&[0, 2, 3]), f32s(&[1.0, 2.0, 3.0]));
        let csr = [
            PartSpec::new("values", DType::F32, &val),
            PartSpec::new("indices", DType::U32, &ind),
            PartSpec::new("indptr", DType::U32, &ptr),
        ];
        w.add_object("csr", &ObjectSpec::new(&[2, 3], LAYOUT_SPARSE_CSR), &csr)
            .unwrap();
        let bad = [
            PartSpec::new("values", DType::F32, &val),
            PartSpec::new("indices", DType::U32, &ind),
            PartSpec::new("indptr", DType::U32, &ind[..8]),
        ];
        assert_eq!(
            w.add_object("csr2", &ObjectSpec::new(&[2, 3], LAYOUT_SPARSE_CSR), &bad)
                .unwrap_err()
                .rule,
            WriteRule::LayoutRule
        );
        let q = QuantGroup {
            bits: 4,
            group_size: 8,
            axis: 1,
            word: "u32".into(),
            msb_first: false,
            scale_form: "f32_factors".into(),
            zero_point: ZeroPoint::Implied(8),
        };
        let data = u32s(&[1985229328, 4275878552, 1985229328, 4275878552]);
        let scales = f32s(&[0.5, 0.25, 1.0, 2.0]);
        let parts = [
            PartSpec::new("data", DType::U32, &data),
            PartSpec::new("scales", DType::F32, &scales),
        ];
        w.add_object(
            "q4",
            &ObjectSpec::new(&[2, 16], LAYOUT_QUANT_GROUP).attributes(q.attributes()),
            &parts,
        )
        .unwrap();
        let coords = u32s(&[0, 1, 2, 0]);
        w.add_object(
            "z",
            &ObjectSpec::new(&[3, 3], LAYOUT_SPARSE_COO),
            &[
                PartSpec::new("coords", DType::U32, &coords),
                PartSpec::new("values", DType::F32, &val[..8]),
            ],
        )
        .unwrap();
        w.finish().unwrap();
    }

    #[test]
    fn streaming_matches_in_memory_and_shares() {
        let x: Vec<u8> = (0..200_000u32).flat_map(|v| v.to_le_bytes()).collect();
        let mut a = Writer::new(Vec::new(), Options::default()).unwrap();
        a.add("p", DType::U32, &[200_000], &x).unwrap();
        a.add("q", DType::U32, &[200_000], &x).unwrap();
        let a = a.finish().unwrap().sink;
        let mut b = Writer::new(Vec::new(), Options::default()).unwrap();
        for name in ["p", "q"] {
            b.begin_object(
                name,
                &ObjectSpec::dense(&[200_000]),
                &[PartDecl::new("data", DType::U32, x.len() as u64)],
            )
            .unwrap();
            b.begin_part("data").unwrap();
            for c in x.chunks(7777) {
                b.write_chunk(c).unwrap();
            }
            b.end_part().unwrap();
            b.end_object().unwrap();
        }
        assert_eq!(a, b.finish().unwrap().sink);
    }

    #[test]
    fn append_keeps_old_bytes() {
        let mut w = Writer::new(Vec::new(), Options::non_canonical().alignment(4096)).unwrap();
        w.add("first", DType::F32, &[4], &f32s(&[1.0, 2.0, 3.0, 4.0])).unwrap();
        let old = w.finish().unwrap().sink;
        let mut w = Writer::append(old.clone(), &old, Options::non_canonical()).unwrap();
        assert_eq!(w.alignment(), 4096);
        w.add(
            "second",
            DType::I64,
            &[2],
            &[5, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0],
        )
        .unwrap();
        let done = w.finish().unwrap();
        let grow = &done.sink;
        assert_eq!(&grow[..old.len()], &old[..]);
        assert_eq!(done.manifest_offset, 16384);
        let m = cbor::decode(&done.manifest, cbor::Mode::Deterministic).unwrap();
        assert_eq!(m.get("objects").unwrap().as_map().unwrap().len(), 2);
    }

    #[test]
    fn sha256_shards_and_data_shards() {
        let mut s = Writer::new(Vec::new(), Options::non_canonical().alignment(4096)).unwrap();
        let r = s.put_blob(&[1, 2, 3, 4]).unwrap();
        assert_eq!(r.offset, 4096);
        let shard = s.finish_data_shard().unwrap();
        assert_eq!(footer(&shard.sink), (0, 0, 0));
        let mut w = Writer::new(Vec::new(), Options::non_canonical().digest(DigestAlgo::Sha256)).unwrap();
        assert_eq!(
            w.add_shard("../x", shard.size, "xxh3:00").unwrap_err().rule,
            WriteRule::Shard
        );
        w.add_shard("data", shard.size, &DigestAlgo::Xxh3.digest(&shard.sink))
            .unwrap();
        w.add_object(
            "t",
            &ObjectSpec::dense(&[4]),
            &[PartSpec::external(
                "data",
                DType::U8,
                "data",
                r.offset,
                r.length,
                Some(r.digest.clone()),
            )],
        )
        .unwrap();
        w.add("local", DType::U8, &[1], &[9]).unwrap();
        let done = w.finish().unwrap();
        let m = cbor::decode(&done.manifest, cbor::Mode::Deterministic).unwrap();
        let d = m
            .get("objects")
            .unwrap()
            .get("local")
            .unwrap()
            .get("parts")
            .unwrap()
            .get("data")
            .unwrap()
            .get("digest")
            .unwrap();
        assert!(d.as_text().unwrap().starts_with("sha256:"));
        assert!(
            content_digest(&done.manifest, DigestAlgo::Sha256)
                .unwrap()
                .starts_with("sha256:")
        );
    }
}
