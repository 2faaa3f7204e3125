//! What to write: [`Options`], object and part specs, and what the writer hands back.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use crate::dtype::DType;
use crate::zt::cbor::Value;
use crate::zt::layout::DENSE as LAYOUT_DENSE;

use super::checks::word_width;
use super::digest::DigestAlgo;

/// How to write. `Options::default()` is canonical form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub(super) canonical: bool,
    pub(super) alignment: Option<u64>,
    pub(super) digest: DigestAlgo,
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
        /// Shard table key, registered with [`Writer::add_shard`](super::Writer::add_shard).
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
    /// Layout id ([`LAYOUT_DENSE`], [`LAYOUT_SPARSE_CSR`](super::LAYOUT_SPARSE_CSR), ...). Unknown layouts are written as
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

/// A blob written by [`Writer::put_blob`](super::Writer::put_blob): where it is and its digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlobRef {
    /// Absolute offset.
    pub offset: u64,
    /// Length in bytes.
    pub length: u64,
    /// `algo:hex` of the bytes.
    pub digest: String,
}

/// What [`Writer::finish`](super::Writer::finish) produced.
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
