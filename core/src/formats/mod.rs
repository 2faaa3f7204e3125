//! Foreign model formats, each a read-only projection over [`ReadAt`] into one [`Catalog`].
//!
//! A [`Catalog`] lists the tensors of a file (name, element type, shape, where the bytes are and
//! how they are laid out, attributes) and the file-level metadata. Opening reads only the
//! header-like parts of a file; [`read`] then fetches one tensor's bytes, borrowing them when the
//! source is in memory and the stored bytes already are the tensor (C order, little-endian).
//!
//! | format | module | detected by |
//! | --- | --- | --- |
//! | safetensors (+ `model.safetensors.index.json`) | [`safetensors`] | 8-byte header length, then `{` |
//! | GGUF v1–v3 (+ `-0000N-of-0000M` splits) | [`gguf`], block dequantization in [`ggml`] | `GGUF` |
//! | PyTorch zip and legacy | [`pt`] (restricted pickle VM, nothing is executed) | zip with `data.pkl`; pickle magic |
//! | NumPy `.npy` / `.npz` | [`npy`] | `\x93NUMPY`; zip of `.npy` members |
//! | ONNX | [`onnx`] (hand-written protobuf walk) | the first ModelProto fields |
//! | HDF5 | [`hdf5`] | `\x89HDF\r\n\x1a\n` at 0, 512, 1024, ... |
//!
//! Every parser is bounded: it checks each length and count against the bytes that are actually
//! there before it allocates, nests at most [`MAX_DEPTH`] deep and refuses with a [`FormatError`]
//! that names the byte offset, the tensor and the rule broken. No parser panics on input.

use alloc::borrow::Cow;
use alloc::boxed::Box;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use crate::detect::Format;
use crate::dtype::DType;
use crate::source::{ReadAt, SourceError};
use crate::zt::format::LogicalType;

pub mod ggml;
pub mod gguf;
pub mod hdf5;
pub mod npy;
pub mod onnx;
pub mod onnx_graph;
pub mod pickle;
pub mod protobuf;
pub mod pt;
pub mod safetensors;
pub mod tenso;
pub mod zip;
pub mod zt;

/// The deepest nesting any parser follows (JSON, pickle, protobuf messages, HDF5 groups).
pub const MAX_DEPTH: usize = 64;
/// The largest header any format may declare (safetensors JSON, npy header, pickle, GGUF KV
/// section, ONNX model without its tensor data): 100 MiB, as safetensors' own limit.
pub const MAX_HEADER: u64 = 100 << 20;

/// The element type of a catalog entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElementType {
    /// A plain dtype (`float32`, `bool`, `complex64`, ...).
    Dense(DType),
    /// A byte-sized logical type (float8 variants, packed float4).
    Logical(LogicalType),
    /// ggml block-quantized data (GGUF): raw blocks, see [`ggml::dequantize`].
    Ggml(ggml::GgmlType),
}

impl ElementType {
    /// The NumPy-style name used in manifests and JSON output: `float32`, `bfloat16`,
    /// `float8_e4m3fn`, `float8_e8m0fnu`, `float4_e2m1fn`, `complex64`, or a ggml type name
    /// (`Q4_0`, `Q6_K`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ElementType::Dense(d) => d.name(),
            ElementType::Logical(t) => match t {
                LogicalType::Bool => "bool",
                LogicalType::F8E4M3Fn => "float8_e4m3fn",
                LogicalType::F8E5M2 => "float8_e5m2",
                LogicalType::F8E4M3Fnuz => "float8_e4m3fnuz",
                LogicalType::F8E5M2Fnuz => "float8_e5m2fnuz",
                LogicalType::F8E8M0 => "float8_e8m0fnu",
                LogicalType::F4E2M1 => "float4_e2m1fn",
                LogicalType::Complex64 => "complex64",
                LogicalType::Complex128 => "complex128",
            },
            ElementType::Ggml(g) => g.name(),
        }
    }

    /// Bytes for `n` elements in the stored form (`None` on overflow, or for a ggml type when `n`
    /// is not a whole number of blocks).
    pub fn nbytes(self, n: u64) -> Option<u64> {
        match self {
            ElementType::Dense(d) => n.checked_mul(d.itemsize() as u64),
            ElementType::Logical(t) => t.size(n),
            ElementType::Ggml(g) => g.nbytes(n),
        }
    }

    /// The size of one scalar lane for byte swapping (1 for byte-sized and block types).
    pub fn lane(self) -> usize {
        match self {
            ElementType::Dense(d) => d.lane_size(),
            _ => 1,
        }
    }

    /// Bytes per element where every element has whole bytes (`None` for packed float4 and ggml
    /// blocks).
    pub fn itemsize(self) -> Option<usize> {
        match self {
            ElementType::Dense(d) => Some(d.itemsize()),
            ElementType::Logical(LogicalType::F4E2M1) | ElementType::Ggml(_) => None,
            ElementType::Logical(t) => Some(t.size(1)? as usize),
        }
    }
}

/// A metadata or attribute value, in the shape JSON can show.
#[derive(Clone, Debug, PartialEq)]
pub enum Meta {
    /// No value.
    Null,
    /// A boolean.
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer too large for `Int`, or a format's unsigned type.
    UInt(u64),
    /// A float (f32 values are widened).
    Float(f64),
    /// A UTF-8 string.
    Str(String),
    /// Bytes that are not valid UTF-8.
    Bytes(Vec<u8>),
    /// A list.
    List(Vec<Meta>),
    /// Key/value pairs in file order.
    Map(Vec<(String, Meta)>),
}

/// Where the stored bytes of a tensor are.
#[derive(Clone, Debug, PartialEq)]
pub enum Storage {
    /// Bytes `offset..offset + len` of source `source` (0 is the opened file; `k > 0` is
    /// [`Catalog::sources`]`[k]`).
    Range {
        /// Index into [`Catalog::sources`].
        source: usize,
        /// Absolute byte offset in that source.
        offset: u64,
        /// Number of bytes.
        len: u64,
    },
    /// A raw-deflate stream (a deflated zip member) at `offset..offset + compressed` that
    /// inflates to `inflated` bytes, of which the tensor's stored bytes are `skip..skip + len`.
    Deflate {
        /// Index into [`Catalog::sources`].
        source: usize,
        /// Absolute byte offset of the compressed stream.
        offset: u64,
        /// Compressed length.
        compressed: u64,
        /// Declared inflated length (checked while inflating: never more is produced).
        inflated: u64,
        /// Where the tensor bytes start in the inflated stream.
        skip: u64,
        /// Number of tensor bytes.
        len: u64,
        /// CRC-32 of the whole inflated member, as the archive declares it: checked whenever the
        /// member is inflated ([`read`], [`read_chunks`]).
        crc32: Option<u32>,
    },
    /// Bytes decoded while opening (ONNX typed fields, HDF5 compact data). They came out of the
    /// header, so they are bounded by its size.
    Inline(Vec<u8>),
    /// An HDF5 chunked dataset: chunks are found and unfiltered when the tensor is read.
    Hdf5Chunked(Box<hdf5::Chunked>),
    /// Bytes `offset..offset + len` of source `source`, stored under `codec`, that decode to
    /// `decoded` bytes (a `.zt` part under `zt.zstd-seekable/1`, a legacy `.zt` zstd component,
    /// an LZ4-compressed Tenso body). Decoding never produces more than `decoded` bytes.
    Encoded {
        /// Index into [`Catalog::sources`].
        source: usize,
        /// Absolute byte offset of the stored bytes.
        offset: u64,
        /// Stored (encoded) length.
        len: u64,
        /// Declared decoded length (checked while decoding).
        decoded: u64,
        /// How the stored bytes are encoded.
        codec: Codec,
    },
    /// An object that is not one array of elements but several parts under a layout (`.zt`
    /// sparse, group-quantized, MX and unknown layouts; Tenso sparse and quantized packets). The
    /// tensor's type and shape are its logical ones; [`read`] refuses it, naming the layout, and
    /// [`read_part`] reads one part.
    Parts(Box<Parts>),
}

/// How [`Storage::Encoded`] bytes are encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// `.zt` v2 `zt.zstd-seekable/1`: zstd frames with a seek table, decoded frame by frame.
    ZstdSeekable,
    /// One zstd stream (a legacy `.zt` component).
    Zstd,
    /// An LZ4 frame (a Tenso body with the LZ4 flag).
    Lz4Frame,
}

impl Codec {
    /// The name files and JSON use: `zt.zstd-seekable/1`, `zstd`, `lz4`.
    pub fn name(self) -> &'static str {
        match self {
            Codec::ZstdSeekable => crate::zt::format::ENCODING_ZSTD_SEEKABLE,
            Codec::Zstd => "zstd",
            Codec::Lz4Frame => "lz4",
        }
    }
}

/// The parts of a [`Storage::Parts`] tensor and the layout that gives them meaning.
#[derive(Clone, Debug, PartialEq)]
pub struct Parts {
    /// The layout id (`zt.sparse_csr/1`, `zt.quant_group/1`, `tenso.sparse_coo`, ...).
    pub layout: String,
    /// The parts, in the order the file lists them.
    pub parts: Vec<Part>,
}

/// One part of a [`Parts`] tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    /// The part's name (`data`, `indptr`, `values`, `scale`, ...).
    pub name: String,
    /// The element type, when this reader interprets it (`None`: a logical type it does not know;
    /// the bytes are still readable).
    pub ty: Option<ElementType>,
    /// The type as the file names it (`f32`, `u64`, `my.custom/1`, ...).
    pub type_name: String,
    /// Decoded length in bytes.
    pub len: u64,
    /// Where the bytes are ([`Storage::Range`] or [`Storage::Encoded`]).
    pub storage: Storage,
}

/// A strided view into the stored elements (PyTorch views, Fortran order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// Offset of element `[0, 0, ...]`, in elements.
    pub offset: u64,
    /// Step per dimension, in elements (same length as the shape).
    pub strides: Vec<u64>,
}

/// How the stored bytes map onto the tensor's C-order, little-endian bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Arrangement {
    /// Each scalar lane is stored big-endian.
    pub big_endian: bool,
    /// The elements are picked through a strided view (`None`: stored bytes are the elements in
    /// C order, back to back).
    pub view: Option<View>,
}

impl Arrangement {
    /// Stored bytes are the tensor bytes as they are.
    pub fn is_native(&self) -> bool {
        !self.big_endian && self.view.is_none()
    }
}

/// One tensor of a catalog.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// The tensor's name (format rules: safetensors key, GGUF name, pickle path joined with `.`,
    /// `array` for `.npy`, member name for `.npz`, ONNX initializer name, HDF5 path without `/`).
    pub name: String,
    /// Element type.
    pub ty: ElementType,
    /// Row-major shape (`[]` for a scalar).
    pub shape: Vec<u64>,
    /// Where the stored bytes are.
    pub storage: Storage,
    /// How stored bytes become C-order, little-endian element bytes.
    pub arrangement: Arrangement,
    /// Per-tensor details of the source format (stored dtype, strides, layout, filters, ...).
    pub attributes: Vec<(String, Meta)>,
}

impl TensorInfo {
    /// Number of elements (`None` on overflow).
    pub fn numel(&self) -> Option<u64> {
        crate::tensor::numel(&self.shape)
    }

    /// Bytes of the tensor in C order (`None` on overflow).
    pub fn nbytes(&self) -> Option<u64> {
        self.ty.nbytes(self.numel()?)
    }

    /// Whether [`read`] can hand out the stored bytes without copying (when the source is in
    /// memory).
    pub fn is_zero_copy(&self) -> bool {
        matches!(self.storage, Storage::Range { .. }) && self.arrangement.is_native()
    }
}

/// Every tensor of a file (or of a set of files), plus the file-level metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Catalog {
    /// The format of the opened file.
    pub format: Format,
    /// Tensors in file order.
    pub tensors: Vec<TensorInfo>,
    /// File-level metadata (`__metadata__`, GGUF key/values, ONNX model fields, HDF5 root
    /// attributes, ...), in file order.
    pub metadata: Vec<(String, Meta)>,
    /// Entries that are not tensors and were left out, with why (HDF5 string datasets, pickle
    /// leaves that are not tensors, ...).
    pub skipped: Vec<(String, String)>,
    /// The files the catalog reads from: `sources[0]` is `""` (the opened file); the others are
    /// paths relative to the opened file's folder (shards, external data), already checked not
    /// to leave that folder. The host opens them in this order.
    pub sources: Vec<String>,
    /// Checksums the file itself carries over stored byte ranges (a stored zip member's CRC-32,
    /// ONNX external data's SHA-1): [`read_chunks`] checks the one covering a tensor as it reads
    /// it, [`check_integrity`] checks any of them on demand (`verify`). Deflated members carry
    /// theirs in [`Storage::Deflate`].
    pub checks: Vec<Check>,
}

/// A checksum a file declares over a byte range of one of its sources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// Index into [`Catalog::sources`].
    pub source: usize,
    /// Absolute byte offset of the range.
    pub offset: u64,
    /// Length of the range; [`Check::TO_END`]: up to the end of the source, whatever its size.
    pub len: u64,
    /// The declared checksum.
    pub digest: Digest,
    /// What the range is, for messages (`zip member 'arr_0.npy'`, `external data of 'w'`).
    pub what: String,
    /// `None`: the digest is over the stored bytes of the range. `Some((codec, n))`: over the `n`
    /// bytes they decode to (a `.zt` part digest under an encoding).
    pub decoded: Option<(Codec, u64)>,
}

impl Check {
    /// A [`Check::len`] that means "to the end of the source" (ONNX's checksum is over the whole
    /// external data file, whose size the parser does not know).
    pub const TO_END: u64 = u64::MAX;

    /// The length of the range in a source of `size` bytes.
    pub fn len_in(&self, size: u64) -> u64 {
        if self.len == Check::TO_END {
            size.saturating_sub(self.offset)
        } else {
            self.len
        }
    }
}

/// A declared checksum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Digest {
    /// CRC-32 (ISO-HDLC, as zip uses it).
    Crc32(u32),
    /// SHA-1 (as ONNX external data's `checksum` key gives it, in hex).
    Sha1([u8; 20]),
    /// XXH3-64, seed 0 (Tenso footers, `.zt` `xxh3:` digests).
    Xxh3(u64),
    /// SHA-256 (`.zt` and legacy `.zt` `sha256:` digests).
    Sha256([u8; 32]),
    /// CRC-32C, Castagnoli (legacy `.zt` `crc32c:` digests).
    Crc32c(u32),
}

impl Digest {
    /// The digest as a file would print it: `crc32:0123abcd`, `sha1:<hex>`, `xxh3:<16 hex>`,
    /// `sha256:<hex>`, `crc32c:0x0123ABCD`.
    pub fn display(&self) -> String {
        match self {
            Digest::Crc32(v) => alloc::format!("crc32:{v:08x}"),
            Digest::Sha1(v) => alloc::format!("sha1:{}", hex(v)),
            Digest::Xxh3(v) => alloc::format!("xxh3:{v:016x}"),
            Digest::Sha256(v) => alloc::format!("sha256:{}", hex(v)),
            Digest::Crc32c(v) => alloc::format!("crc32c:0x{v:08X}"),
        }
    }
}

/// The largest tensor [`read`] (and [`ReadLimits::default`]) materialises in memory: 4 GiB, the
/// same default as the wire decoder's `max_decompressed_bytes`.
pub const DEFAULT_MAX_TENSOR_BYTES: u64 = 4 << 30;

/// Limits on what reading a whole tensor into memory may allocate.
///
/// [`read_limited`] (and the hosts' `Model::read`, `dequantize`; the JS `tensor()` through
/// [`read`], at the default) refuse, with [`ErrorKind::Limit`] naming the tensor, its size and
/// this option, a tensor whose bytes (or the
/// bytes that must be decoded to produce it: a whole deflated member, a strided view's storage)
/// are over `max_tensor_bytes`, before anything is allocated. Streaming reads ([`read_chunks`],
/// statistics, hashing, conversion) hold bounded pieces and are not limited by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadLimits {
    /// The most bytes one whole-tensor read may allocate (default [`DEFAULT_MAX_TENSOR_BYTES`]).
    pub max_tensor_bytes: u64,
}

impl Default for ReadLimits {
    fn default() -> Self {
        ReadLimits {
            max_tensor_bytes: DEFAULT_MAX_TENSOR_BYTES,
        }
    }
}

impl ReadLimits {
    /// Refuses `bytes` (what reading tensor `name` whole would allocate) when over the limit.
    pub fn check(&self, format: &'static str, name: &str, bytes: u64) -> Result<(), FormatError> {
        if bytes <= self.max_tensor_bytes {
            return Ok(());
        }
        Err(FormatError::new(
            format,
            ErrorKind::Limit,
            alloc::format!(
                "reading it whole needs {bytes} bytes ({}), over the {} bytes ({}) allowed by max_tensor_bytes \
                 (Rust: ReadLimits::max_tensor_bytes; CLI: --max-tensor-bytes; JS: the maxTensorBytes option); raise the limit if the machine \
                 has the memory, or use a streaming command (stats, inspect --hash, convert)",
                iec(bytes),
                self.max_tensor_bytes,
                iec(self.max_tensor_bytes)
            ),
        )
        .tensor(name))
    }
}

/// `n` bytes in IEC units with two decimals (`2.79 GiB`), for messages.
pub fn iec(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return alloc::format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    alloc::format!("{v:.2} {}", UNITS[u])
}

impl Catalog {
    /// An empty catalog of `format` reading only the opened file.
    pub fn new(format: Format) -> Catalog {
        Catalog {
            format,
            tensors: Vec::new(),
            metadata: Vec::new(),
            skipped: Vec::new(),
            sources: alloc::vec![String::new()],
            checks: Vec::new(),
        }
    }

    /// The tensor called `name`.
    pub fn get(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The index of companion file `path` in [`Catalog::sources`], added when new.
    pub fn source_index(&mut self, path: &str) -> Result<usize, FormatError> {
        check_companion_path(self.format.name(), path)?;
        if let Some(i) = self.sources.iter().position(|s| s == path) {
            return Ok(i);
        }
        self.sources.push(path.to_string());
        Ok(self.sources.len() - 1)
    }

    /// Moves the tensors of `part` (a shard or split opened on its own) into this catalog, as
    /// read from companion file `path`: their storage now points at `path`'s source index.
    /// Refuses a tensor name that is already present.
    pub fn absorb(&mut self, part: Catalog, path: &str) -> Result<(), FormatError> {
        let format = self.format.name();
        // The part's own sources: 0 is `path`; others are its companions, relative to the same folder.
        let mut map = alloc::vec![self.source_index(path)?];
        for p in part.sources.iter().skip(1) {
            map.push(self.source_index(p)?);
        }
        for mut c in part.checks {
            c.source = *map.get(c.source).ok_or_else(|| {
                FormatError::new(
                    format,
                    ErrorKind::Companion,
                    alloc::format!("'{path}' names source #{} it does not list", c.source),
                )
            })?;
            self.checks.push(c);
        }
        for mut t in part.tensors {
            if self.get(&t.name).is_some() {
                return Err(FormatError::new(
                    format,
                    ErrorKind::Duplicate,
                    alloc::format!("'{path}' repeats a tensor name"),
                )
                .tensor(t.name));
            }
            let source = match &mut t.storage {
                Storage::Range { source, .. } | Storage::Deflate { source, .. } | Storage::Encoded { source, .. } => {
                    vec![source]
                }
                Storage::Hdf5Chunked(c) => vec![&mut c.source],
                Storage::Inline(_) => Vec::new(),
                Storage::Parts(p) => p.parts.iter_mut().filter_map(|p| p.storage.source_mut()).collect(),
            };
            for s in source {
                *s = *map.get(*s).ok_or_else(|| {
                    FormatError::new(
                        format,
                        ErrorKind::Companion,
                        alloc::format!("'{path}' names source #{s} it does not list"),
                    )
                })?;
            }
            self.tensors.push(t);
        }
        Ok(())
    }

    /// Checks every stored range against the sizes of the sources (`sizes[k]` is the size of
    /// [`Catalog::sources`]`[k]`): a companion file that is shorter than the ranges that point
    /// into it is refused here, when the set is opened, not when a tensor is read.
    pub fn check_ranges(&self, sizes: &[u64]) -> Result<(), FormatError> {
        let format = self.format.name();
        for t in &self.tensors {
            for (source, offset, len) in t.storage.stored_ranges() {
                let size = *sizes.get(source).ok_or_else(|| {
                    FormatError::new(
                        format,
                        ErrorKind::Companion,
                        alloc::format!("no size given for source #{source}"),
                    )
                    .tensor(t.name.clone())
                })?;
                if offset.checked_add(len).is_none_or(|end| end > size) {
                    let file = if source == 0 {
                        "the file"
                    } else {
                        self.sources[source].as_str()
                    };
                    return Err(FormatError::new(
                        format,
                        ErrorKind::OutOfBounds,
                        alloc::format!(
                            "its bytes [{offset}, {offset}+{len}) run past the end of {file} ({size} bytes)"
                        ),
                    )
                    .tensor(t.name.clone())
                    .at(offset));
                }
            }
        }
        Ok(())
    }
}

impl Storage {
    /// The source index this storage reads from, when it reads from one source.
    fn source_mut(&mut self) -> Option<&mut usize> {
        match self {
            Storage::Range { source, .. } | Storage::Deflate { source, .. } | Storage::Encoded { source, .. } => {
                Some(source)
            }
            Storage::Hdf5Chunked(c) => Some(&mut c.source),
            Storage::Inline(_) | Storage::Parts(_) => None,
        }
    }

    /// The stored byte ranges `(source, offset, len)` this storage reads whole (a range, a
    /// deflated or encoded stream, every part of a [`Storage::Parts`]); HDF5 chunks are found
    /// when read and inline bytes need none.
    pub fn stored_ranges(&self) -> Vec<(usize, u64, u64)> {
        match self {
            Storage::Range { source, offset, len }
            | Storage::Encoded {
                source, offset, len, ..
            } => {
                vec![(*source, *offset, *len)]
            }
            Storage::Deflate {
                source,
                offset,
                compressed,
                ..
            } => vec![(*source, *offset, *compressed)],
            Storage::Parts(p) => p.parts.iter().flat_map(|p| p.storage.stored_ranges()).collect(),
            Storage::Inline(_) | Storage::Hdf5Chunked(_) => Vec::new(),
        }
    }

    /// The stored bytes this storage holds or points at (what crosses a link when the tensor is
    /// moved as stored): a range's length, a compressed stream's, the sum over parts.
    pub fn stored_len(&self) -> Option<u64> {
        match self {
            Storage::Inline(b) => Some(b.len() as u64),
            Storage::Hdf5Chunked(_) => None,
            _ => self.stored_ranges().iter().try_fold(0u64, |a, r| a.checked_add(r.2)),
        }
    }
}

/// What went wrong, as a stable category (tests and callers match on it; the message says more).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The file ends before a structure it declares.
    Truncated,
    /// A declared header or section size is over [`MAX_HEADER`] or the file size.
    HeaderTooLarge,
    /// Bytes are not valid for the format (bad JSON, bad pickle opcode, bad protobuf, bad magic).
    Syntax,
    /// A version this reader does not know.
    UnsupportedVersion,
    /// A feature or type this reader does not support (named in the message).
    Unsupported,
    /// A data range runs outside the file, section or storage.
    OutOfBounds,
    /// Two tensors' byte ranges overlap.
    Overlap,
    /// Bytes of a data section belong to no tensor.
    Gap,
    /// A tensor's byte count does not match its dtype and shape.
    SizeMismatch,
    /// Two entries with the same name.
    Duplicate,
    /// Element counts or sizes overflow 64 bits.
    Overflow,
    /// A declared count, length or depth is over a limit or over what the file can hold.
    Limit,
    /// Refused for safety: code a pickle would run, an object array, a path leaving the model
    /// folder.
    Refused,
    /// A companion file (shard, external data) is missing or does not match.
    Companion,
    /// A checksum does not match (HDF5 fletcher32, zip CRC).
    Checksum,
    /// The source could not be read.
    Io,
}

impl ErrorKind {
    /// A short kebab-case name (`out-of-bounds`, `refused`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Truncated => "truncated",
            ErrorKind::HeaderTooLarge => "header-too-large",
            ErrorKind::Syntax => "syntax",
            ErrorKind::UnsupportedVersion => "unsupported-version",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::OutOfBounds => "out-of-bounds",
            ErrorKind::Overlap => "overlap",
            ErrorKind::Gap => "gap",
            ErrorKind::SizeMismatch => "size-mismatch",
            ErrorKind::Duplicate => "duplicate",
            ErrorKind::Overflow => "overflow",
            ErrorKind::Limit => "limit",
            ErrorKind::Refused => "refused",
            ErrorKind::Companion => "companion",
            ErrorKind::Checksum => "checksum",
            ErrorKind::Io => "io",
        }
    }
}

/// Why a file could not be read: the format, the category, where (byte offset, tensor) and a
/// message that says what is wrong and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FormatError {
    /// The format being read (`"safetensors"`, `"gguf"`, ...).
    pub format: &'static str,
    /// The category.
    pub kind: ErrorKind,
    /// The byte offset in the file where the problem is, when known.
    pub offset: Option<u64>,
    /// The tensor concerned, when known.
    pub tensor: Option<String>,
    /// The metadata key concerned (a GGUF key/value, ...), when the problem is in metadata.
    pub key: Option<String>,
    /// What is wrong and what to do.
    pub message: String,
}

impl FormatError {
    /// A new error.
    pub fn new(format: &'static str, kind: ErrorKind, message: impl Into<String>) -> FormatError {
        FormatError {
            format,
            kind,
            offset: None,
            tensor: None,
            key: None,
            message: message.into(),
        }
    }

    /// Sets the byte offset.
    pub fn at(mut self, offset: u64) -> FormatError {
        self.offset = Some(offset);
        self
    }

    /// Sets the tensor name.
    pub fn tensor(mut self, name: impl Into<String>) -> FormatError {
        self.tensor = Some(name.into());
        self
    }

    /// Sets the metadata key.
    pub fn key(mut self, key: impl Into<String>) -> FormatError {
        self.key = Some(key.into());
        self
    }

    /// Maps a source error (out of bounds → [`ErrorKind::Truncated`], I/O → [`ErrorKind::Io`]).
    pub fn source(format: &'static str, e: SourceError) -> FormatError {
        match e {
            SourceError::OutOfBounds { offset, len, size } => FormatError::new(
                format,
                ErrorKind::Truncated,
                alloc::format!(
                    "needs bytes [{offset}, {offset}+{len}) but the file has {size} bytes; the file is truncated or a \
                     length in it is wrong"
                ),
            )
            .at(offset),
            SourceError::Io(m) => FormatError::new(format, ErrorKind::Io, m),
        }
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.format)?;
        if let Some(t) = &self.tensor {
            write!(f, "tensor '{t}': ")?;
        }
        if let Some(k) = &self.key {
            write!(f, "metadata key '{k}': ")?;
        }
        f.write_str(&self.message)?;
        if let Some(o) = self.offset {
            write!(f, " (at byte {o})")?;
        }
        write!(f, " [{}]", self.kind.name())
    }
}

#[cfg(feature = "std")]
impl std::error::Error for FormatError {}

/// Checks a companion path (shard, external data file) named inside a file: relative, no `..`,
/// no absolute or drive path, no NUL, so that it stays in the model's folder.
pub fn check_companion_path(format: &'static str, path: &str) -> Result<(), FormatError> {
    let bad = path.is_empty()
        || path.contains('\0')
        || path.starts_with('/')
        || path.starts_with('\\')
        || path.as_bytes().get(1) == Some(&b':')
        || path.split(['/', '\\']).any(|c| c == "..");
    if bad {
        return Err(FormatError::new(
            format,
            ErrorKind::Refused,
            alloc::format!(
                "companion file '{path}' is not a plain relative path inside the model's folder; refusing to read \
                 outside it"
            ),
        ));
    }
    Ok(())
}

/// Reads `len` bytes at `offset` of `src` for `format`, borrowing when the source is in memory.
pub fn bytes_at<'s, S: ReadAt + ?Sized>(
    format: &'static str,
    src: &'s S,
    offset: u64,
    len: u64,
) -> Result<Cow<'s, [u8]>, FormatError> {
    if let Some(s) = src.slice(offset, len) {
        return Ok(Cow::Borrowed(s));
    }
    src.read_vec(offset, len)
        .map(Cow::Owned)
        .map_err(|e| FormatError::source(format, e))
}

/// Opens `src` as `format`: the catalog of its tensors. Companion files named by the catalog
/// ([`Catalog::sources`]) are not opened here. A safetensors index is checked and then refused
/// with [`ErrorKind::Companion`]: its tensors are in its shards, which
/// [`safetensors::open_index`] opens through a callback the host gives it.
pub fn open_as<S: ReadAt + ?Sized>(format: Format, src: &S) -> Result<Catalog, FormatError> {
    match format {
        Format::Safetensors => safetensors::open(src),
        Format::SafetensorsIndex => safetensors::open_index_alone(src),
        Format::Gguf => gguf::open(src),
        Format::PyTorch | Format::PyTorchLegacy => pt::open(src),
        Format::Npy => npy::open(src),
        Format::Npz => npy::open_npz(src),
        Format::Onnx => onnx::open(src),
        Format::Hdf5 => hdf5::open(src),
        Format::Zt => zt::open(src),
        Format::ZtV1 | Format::ZtV0 => zt::open_legacy(src),
        Format::Tenso => tenso::open(src),
    }
}

/// The format of `src` from its content: [`crate::detect::detect`] over the first
/// [`crate::detect::HEAD_LEN`] bytes, then the HDF5 signature after a user block (at 512, 1024,
/// 2048, ... bytes: one 8-byte read per power of two up to the file size). `None` when nothing
/// matches.
pub fn detect_source<S: ReadAt + ?Sized>(src: &S) -> Result<Option<Format>, FormatError> {
    let size = src.size();
    let head = bytes_at("formats", src, 0, size.min(crate::detect::HEAD_LEN as u64))?;
    if let Some(f) = crate::detect::detect(&head) {
        return Ok(Some(f));
    }
    let mut at = 512u64;
    while at.checked_add(8).is_some_and(|end| end <= size) {
        if bytes_at("formats", src, at, 8)?.as_ref() == crate::detect::HDF5_MAGIC {
            return Ok(Some(Format::Hdf5));
        }
        at = match at.checked_mul(2) {
            Some(next) => next,
            None => break,
        };
    }
    Ok(None)
}

/// What `src`, a file called `name` (may be empty), is taken as: the one rule of
/// [`crate::detect::identify`] over its first bytes and [`detect_source`].
pub fn identify_source<S: ReadAt + ?Sized>(src: &S, name: &str) -> Result<crate::detect::Identified, FormatError> {
    let head = bytes_at("formats", src, 0, src.size().min(crate::detect::HEAD_LEN as u64))?;
    Ok(crate::detect::identify(&head, detect_source(src)?, name))
}

/// The error for a file that [`identify_source`] did not recognise ([`ErrorKind::Unsupported`]).
pub fn unrecognised_error(u: crate::detect::Unrecognised) -> FormatError {
    let kind = match u {
        crate::detect::Unrecognised::Empty => ErrorKind::Truncated,
        _ => ErrorKind::Unsupported,
    };
    FormatError::new("formats", kind, u.message())
}

/// Detects the format from the file's content ([`detect_source`]) and opens it (see [`open_as`]).
pub fn open<S: ReadAt + ?Sized>(src: &S) -> Result<Catalog, FormatError> {
    match detect_source(src)? {
        Some(f) => open_as(f, src),
        None => Err(FormatError::new(
            "formats",
            ErrorKind::Unsupported,
            "the first bytes match no known format (safetensors, GGUF, PyTorch, NumPy, ONNX, HDF5, .zt, Tenso)",
        )),
    }
}

/// The tensor's bytes in C order, little-endian (one byte per bool, packed float4 as stored,
/// ggml blocks as stored). `sources[k]` must be the file named by [`Catalog::sources`]`[k]`.
/// Borrowed from the source when [`TensorInfo::is_zero_copy`] and the source is in memory.
/// [`read_limited`] with [`ReadLimits::default`] and no [`Catalog::checks`].
pub fn read<'s, S: ReadAt + ?Sized>(
    format: &'static str,
    t: &TensorInfo,
    sources: &[&'s S],
) -> Result<Cow<'s, [u8]>, FormatError> {
    read_limited(format, t, sources, &[], &ReadLimits::default())
}

/// The most bytes reading `t` whole allocates: its bytes, or more where they must be decoded
/// from more (a whole deflated member, a strided view's stored range). `None` on overflow.
pub fn whole_read_bytes(t: &TensorInfo) -> Option<u64> {
    let want = t.nbytes()?;
    Some(match (&t.storage, &t.arrangement.view) {
        (Storage::Deflate { inflated, .. }, _) => want.max(*inflated),
        (Storage::Range { len, .. }, Some(_)) => want.saturating_add(*len),
        (Storage::Encoded { len, decoded, .. }, _) => want.max(*decoded).saturating_add(*len),
        _ => want,
    })
}

/// The check of `checks` whose range covers `[offset, offset + len)` of `source` with at most
/// 1 MiB more (a `.npy` header before the data): reading it costs little more than the tensor.
fn covering(checks: &[Check], source: usize, offset: u64, len: u64, size: u64) -> Option<&Check> {
    checks.iter().find(|c| {
        let clen = c.len_in(size);
        c.decoded.is_none()
            && c.source == source
            && c.offset <= offset
            && offset
                .checked_add(len)
                .is_some_and(|end| c.offset.checked_add(clen).is_some_and(|ce| end <= ce))
            && clen - len <= 1 << 20
    })
}

/// A running checksum of a [`Digest`]'s kind.
enum Running {
    Crc32(crc32fast::Hasher),
    Sha1(sha1_smol::Sha1),
    Xxh3(Box<crate::hash::Xxh3>),
    Sha256(sha2::Sha256),
    Crc32c(crc::Digest<'static, u32>),
}

/// CRC-32C (Castagnoli), as legacy `.zt` digests use it.
static CASTAGNOLI: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

impl Running {
    fn new(d: &Digest) -> Running {
        match d {
            Digest::Crc32(_) => Running::Crc32(crc32fast::Hasher::new()),
            Digest::Sha1(_) => Running::Sha1(sha1_smol::Sha1::new()),
            Digest::Xxh3(_) => Running::Xxh3(Box::default()),
            Digest::Sha256(_) => Running::Sha256(<sha2::Sha256 as sha2::Digest>::new()),
            Digest::Crc32c(_) => Running::Crc32c(CASTAGNOLI.digest()),
        }
    }
    fn update(&mut self, b: &[u8]) {
        match self {
            Running::Crc32(h) => h.update(b),
            Running::Sha1(h) => h.update(b),
            Running::Xxh3(h) => h.update(b),
            Running::Sha256(h) => sha2::Digest::update(h, b),
            Running::Crc32c(h) => h.update(b),
        }
    }
    /// Compares with the declared digest of `c`.
    fn finish(self, format: &'static str, c: &Check) -> Result<(), FormatError> {
        let got = match self {
            Running::Crc32(h) => Digest::Crc32(h.finalize()),
            Running::Sha1(h) => Digest::Sha1(h.digest().bytes()),
            Running::Xxh3(h) => Digest::Xxh3(h.digest()),
            Running::Sha256(h) => Digest::Sha256(sha2::Digest::finalize(h).into()),
            Running::Crc32c(h) => Digest::Crc32c(h.finalize()),
        };
        if got == c.digest {
            return Ok(());
        }
        let show = |d: &Digest| match d {
            Digest::Crc32(v) => alloc::format!("CRC-32 {v:08x}"),
            Digest::Sha1(v) => alloc::format!("SHA-1 {}", hex(v)),
            other => other.display(),
        };
        let over = match c.decoded {
            None => "",
            Some(_) => " decoded",
        };
        Err(FormatError::new(
            format,
            ErrorKind::Checksum,
            alloc::format!(
                "{}: checksum mismatch: the file declares {}, the{over} bytes from offset {} have {}; the file is \
                 corrupt (or was changed after it was written)",
                c.what,
                show(&c.digest),
                c.offset,
                show(&got)
            ),
        )
        .at(c.offset))
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| alloc::format!("{x:02x}")).collect()
}

/// A consumer of pieces with their absolute offsets.
type OffsetSink<'a> = dyn FnMut(u64, &[u8]) -> Result<(), FormatError> + 'a;

/// Streams the range of check `c` of `src` and compares its checksum; `each(at, piece)` sees every
/// piece (`at`: absolute offset) before the comparison.
fn stream_checked<S: ReadAt + ?Sized>(
    format: &'static str,
    src: &S,
    c: &Check,
    each: &mut OffsetSink<'_>,
) -> Result<(), FormatError> {
    let mut h = Running::new(&c.digest);
    let len = c.len_in(src.size());
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(1 << 20);
        let b = bytes_at(format, src, c.offset + at, n)?;
        h.update(&b);
        each(c.offset + at, &b)?;
        at += n;
    }
    h.finish(format, c)
}

/// Checks one of [`Catalog::checks`] against its source (`sources[k]` is the file named by
/// [`Catalog::sources`]`[k]`), reading the range in 1 MiB pieces. [`ErrorKind::Checksum`] when
/// the bytes do not match.
pub fn check_integrity<S: ReadAt + ?Sized>(format: &'static str, c: &Check, sources: &[&S]) -> Result<(), FormatError> {
    let src = sources.get(c.source).copied().ok_or_else(|| {
        FormatError::new(
            format,
            ErrorKind::Companion,
            alloc::format!(
                "{}: needs source #{}, but only {} were supplied",
                c.what,
                c.source,
                sources.len()
            ),
        )
    })?;
    match c.decoded {
        None => stream_checked(format, src, c, &mut |_, _| Ok(())),
        Some((codec, decoded)) => {
            let mut h = Running::new(&c.digest);
            decode_each(format, src, c.offset, c.len, decoded, codec, &mut |p| {
                h.update(p);
                Ok(())
            })?;
            h.finish(format, c)
        }
    }
}

/// Decodes the `len` stored bytes at `offset` of `src` under `codec`, handing the decoded bytes to
/// `f` in order: frame by frame for `zt.zstd-seekable/1` (memory: one frame, at most 16 MiB),
/// whole for the one-stream codecs. The output must be exactly `decoded` bytes: decoding stops
/// (with [`ErrorKind::SizeMismatch`]) as soon as it would produce more, and fewer is an error too.
pub fn decode_each<S: ReadAt + ?Sized>(
    format: &'static str,
    src: &S,
    offset: u64,
    len: u64,
    decoded: u64,
    codec: Codec,
    f: &mut dyn FnMut(&[u8]) -> Result<(), FormatError>,
) -> Result<(), FormatError> {
    let bad = |at: u64, m: String| {
        FormatError::new(format, ErrorKind::Syntax, alloc::format!("{}: {m}", codec.name())).at(at)
    };
    let mut produced = 0u64;
    match codec {
        Codec::ZstdSeekable => {
            // `f`'s own errors pass through unchanged; the decoder's are located in the file.
            let mut own = None;
            let r = crate::zt::seekable::for_each_frame_at(src, offset, len, decoded, &mut |b| {
                produced += b.len() as u64;
                f(b).map_err(|e| {
                    own = Some(e);
                    crate::zt::Error::new(crate::zt::rule::Rule::Unsupported, "stopped")
                })
            });
            match (r, own) {
                (_, Some(e)) => return Err(e),
                (Ok(()), None) => {}
                (Err(e), None) => return Err(bad(offset + e.offset.unwrap_or(0), e.message)),
            }
        }
        Codec::Zstd => {
            let stored = bytes_at(format, src, offset, len)?;
            let out =
                crate::zt::seekable::decode_stream_bounded(&stored, decoded).map_err(|(at, m)| bad(offset + at, m))?;
            produced = out.len() as u64;
            if produced == decoded {
                f(&out)?;
            }
        }
        Codec::Lz4Frame => {
            let stored = bytes_at(format, src, offset, len)?;
            let want = usize::try_from(decoded).map_err(|_| {
                bad(
                    offset,
                    alloc::format!("{decoded} decoded bytes do not fit this machine"),
                )
            })?;
            let out = crate::wire::lz4::decompress_frame(&stored, want).map_err(|e| bad(offset, e.to_string()))?;
            produced = out.len() as u64;
            if produced == decoded {
                f(&out)?;
            }
        }
    }
    if produced != decoded {
        return Err(FormatError::new(
            format,
            ErrorKind::SizeMismatch,
            alloc::format!(
                "{}: the stored bytes decode to {produced} bytes, not the {decoded} declared",
                codec.name()
            ),
        )
        .at(offset));
    }
    Ok(())
}

/// The check of `checks` over the decoded bytes of the encoded range `(source, offset, len)`.
fn decoded_check(checks: &[Check], source: usize, offset: u64, len: u64) -> Option<&Check> {
    checks
        .iter()
        .find(|c| c.decoded.is_some() && c.source == source && c.offset == offset && c.len == len)
}

/// Decodes an [`Storage::Encoded`] range to `f`, checking the stored-bytes check covering it
/// first and the decoded-bytes check on the way (compared after the last piece).
fn decode_checked<S: ReadAt + ?Sized>(
    format: &'static str,
    src: &S,
    checks: &[Check],
    (source, offset, len, decoded, codec): (usize, u64, u64, u64, Codec),
    f: &mut dyn FnMut(&[u8]) -> Result<(), FormatError>,
) -> Result<(), FormatError> {
    if let Some(c) = covering(checks, source, offset, len, src.size()) {
        stream_checked(format, src, c, &mut |_, _| Ok(()))?;
    }
    let check = decoded_check(checks, source, offset, len);
    let mut h = check.map(|c| Running::new(&c.digest));
    decode_each(format, src, offset, len, decoded, codec, &mut |p| {
        if let Some(h) = &mut h {
            h.update(p);
        }
        f(p)
    })?;
    match (h, check) {
        (Some(h), Some(c)) => h.finish(format, c),
        _ => Ok(()),
    }
}

/// The bytes of part `part` of a [`Storage::Parts`] tensor `t` (decoded, checked like [`read`]),
/// under `limits`. [`ErrorKind::Unsupported`] when `t` has no parts, naming the tensor;
/// a missing part is named with the ones there are.
pub fn read_part<'s, S: ReadAt + ?Sized>(
    format: &'static str,
    t: &TensorInfo,
    part: &str,
    sources: &[&'s S],
    checks: &[Check],
    limits: &ReadLimits,
) -> Result<Cow<'s, [u8]>, FormatError> {
    let Storage::Parts(p) = &t.storage else {
        return Err(FormatError::new(
            format,
            ErrorKind::Unsupported,
            "it is one array of elements, with no parts; read it whole",
        )
        .tensor(t.name.clone()));
    };
    let found = p.parts.iter().find(|x| x.name == part).ok_or_else(|| {
        let names: Vec<&str> = p.parts.iter().map(|x| x.name.as_str()).collect();
        FormatError::new(
            format,
            ErrorKind::Unsupported,
            alloc::format!(
                "layout {} has no part '{part}' (its parts: {})",
                p.layout,
                names.join(", ")
            ),
        )
        .tensor(t.name.clone())
    })?;
    let bytes = TensorInfo {
        name: alloc::format!("{}/{}", t.name, found.name),
        ty: ElementType::Dense(DType::U8),
        shape: alloc::vec![found.len],
        storage: found.storage.clone(),
        arrangement: Arrangement::default(),
        attributes: Vec::new(),
    };
    read_limited(format, &bytes, sources, checks, limits)
}

/// [`read`] with explicit limits and the catalog's checks: refuses with [`ErrorKind::Limit`] (naming
/// the tensor, the size and `max_tensor_bytes`) before allocating when [`whole_read_bytes`] is over
/// `limits.max_tensor_bytes` (a borrowed, zero-copy read allocates nothing and is not limited); a
/// deflated member's CRC-32 is checked as it is inflated, and the check of `checks` covering a
/// stored range (zip CRC-32, ONNX SHA-1) on the bytes read.
pub fn read_limited<'s, S: ReadAt + ?Sized>(
    format: &'static str,
    t: &TensorInfo,
    sources: &[&'s S],
    checks: &[Check],
    limits: &ReadLimits,
) -> Result<Cow<'s, [u8]>, FormatError> {
    let err = |kind, msg: String| FormatError::new(format, kind, msg).tensor(t.name.clone());
    let want = t
        .nbytes()
        .ok_or_else(|| err(ErrorKind::Overflow, "its size overflows 64 bits".into()))?;
    let src = |i: usize| {
        sources.get(i).copied().ok_or_else(|| {
            err(
                ErrorKind::Companion,
                alloc::format!("needs source #{i}, but only {} were supplied", sources.len()),
            )
        })
    };
    let borrowed = match &t.storage {
        Storage::Range { source, offset, len } if t.is_zero_copy() => src(*source)?.slice(*offset, *len).is_some(),
        _ => false,
    };
    if !borrowed {
        let need = whole_read_bytes(t).ok_or_else(|| err(ErrorKind::Overflow, "its size overflows 64 bits".into()))?;
        limits.check(format, &t.name, need)?;
    }
    let stored: Cow<'s, [u8]> = match &t.storage {
        Storage::Range { source, offset, len } => {
            let s = src(*source)?;
            if let Some(c) = covering(checks, *source, *offset, *len, s.size()) {
                stream_checked(format, s, c, &mut |_, _| Ok(())).map_err(|e| e.tensor(t.name.clone()))?;
            }
            bytes_at(format, s, *offset, *len).map_err(|e| e.tensor(t.name.clone()))?
        }
        Storage::Deflate {
            source,
            offset,
            compressed,
            inflated,
            skip,
            len,
            crc32,
        } => {
            let end = skip.checked_add(*len).filter(|e| e <= inflated).ok_or_else(|| {
                err(
                    ErrorKind::Truncated,
                    alloc::format!(
                        "the member declares {inflated} inflated bytes, fewer than the tensor's {skip} + {len}"
                    ),
                )
            })?;
            let mut out = Vec::new();
            let mut at = 0u64;
            zip::inflate_each(
                format,
                src(*source)?,
                *offset,
                *compressed,
                *inflated,
                *crc32,
                &mut |p| {
                    let lo = at.max(*skip);
                    let hi = (at + p.len() as u64).min(end);
                    if lo < hi {
                        out.extend_from_slice(&p[(lo - at) as usize..(hi - at) as usize]);
                    }
                    at += p.len() as u64;
                    Ok(())
                },
            )
            .map_err(|e| e.tensor(t.name.clone()))?;
            Cow::Owned(out)
        }
        Storage::Inline(b) => Cow::Owned(b.clone()),
        Storage::Hdf5Chunked(c) => {
            Cow::Owned(hdf5::read_chunked(c, src(c.source)?).map_err(|e| e.tensor(t.name.clone()))?)
        }
        Storage::Encoded {
            source,
            offset,
            len,
            decoded,
            codec,
        } => {
            let mut out = Vec::new();
            decode_checked(
                format,
                src(*source)?,
                checks,
                (*source, *offset, *len, *decoded, *codec),
                &mut |p| {
                    out.extend_from_slice(p);
                    Ok(())
                },
            )
            .map_err(|e| e.tensor(t.name.clone()))?;
            Cow::Owned(out)
        }
        Storage::Parts(p) => return Err(parts_error(format, t, p)),
    };
    arrange(format, t, stored, want)
}

/// Streams tensor `t`'s bytes (C order, little-endian, as [`read`] gives them) to `sink` in pieces
/// of at most `chunk` bytes (a multiple of the element's lane size; the last may be shorter),
/// holding only bounded buffers where the stored bytes are the elements in order (a range, read
/// piece by piece; a deflated zip member, inflated piece by piece; either byte-swapped on the
/// way). Strided views and HDF5 chunked datasets are read whole through [`read_limited`] (under
/// `limits`) and then handed out in pieces.
///
/// Checksums are checked on the way: a deflated member's CRC-32, and the check of `checks`
/// ([`Catalog::checks`]) covering a stored range; a mismatch fails after the last piece (the sink
/// has seen the bytes: act on them only once this returns `Ok`).
pub fn read_chunks<S: ReadAt + ?Sized>(
    format: &'static str,
    t: &TensorInfo,
    sources: &[&S],
    checks: &[Check],
    limits: &ReadLimits,
    chunk: usize,
    sink: &mut dyn FnMut(&[u8]) -> Result<(), FormatError>,
) -> Result<(), FormatError> {
    let err = |kind, msg: String| FormatError::new(format, kind, msg).tensor(t.name.clone());
    let want = t
        .nbytes()
        .ok_or_else(|| err(ErrorKind::Overflow, "its size overflows 64 bits".into()))?;
    let src = |i: usize| {
        sources.get(i).copied().ok_or_else(|| {
            err(
                ErrorKind::Companion,
                alloc::format!("needs source #{i}, but only {} were supplied", sources.len()),
            )
        })
    };
    let lane = t.ty.lane().max(1);
    let chunk = (chunk.max(lane) / lane) * lane;
    let swap = t.arrangement.big_endian && lane > 1;
    let mut feed = Feeder {
        chunk,
        lane,
        swap,
        buf: Vec::new(),
        sent: 0,
        sink,
    };
    let tensor = |e: FormatError| {
        if e.tensor.is_none() {
            e.tensor(t.name.clone())
        } else {
            e
        }
    };
    let size_mismatch = |stored: u64| {
        err(
            ErrorKind::SizeMismatch,
            alloc::format!(
                "{} {:?} needs {want} bytes but {stored} are stored",
                t.ty.name(),
                t.shape
            ),
        )
    };
    match (&t.storage, &t.arrangement.view) {
        (Storage::Range { source, offset, len }, None) => {
            if *len != want {
                return Err(size_mismatch(*len));
            }
            let s = src(*source)?;
            crate::source::check_range(*offset, *len, s.size()).map_err(|e| tensor(FormatError::source(format, e)))?;
            let end = offset + len;
            match covering(checks, *source, *offset, *len, s.size()) {
                Some(c) => stream_checked(format, s, c, &mut |at, p| {
                    let lo = at.max(*offset);
                    let hi = (at + p.len() as u64).min(end);
                    if lo < hi {
                        feed.push(&p[(lo - at) as usize..(hi - at) as usize])?;
                    }
                    Ok(())
                })
                .map_err(tensor)?,
                None => {
                    let mut at = *offset;
                    while at < end {
                        let n = (end - at).min(chunk as u64);
                        let b = bytes_at(format, s, at, n).map_err(tensor)?;
                        feed.push(&b)?;
                        at += n;
                    }
                }
            }
        }
        (
            Storage::Deflate {
                source,
                offset,
                compressed,
                inflated,
                skip,
                len,
                crc32,
            },
            None,
        ) => {
            if *len != want {
                return Err(size_mismatch(*len));
            }
            let end = skip.checked_add(*len).filter(|e| e <= inflated).ok_or_else(|| {
                err(
                    ErrorKind::Truncated,
                    alloc::format!(
                        "the member declares {inflated} inflated bytes, fewer than the tensor's {skip} + {len}"
                    ),
                )
            })?;
            let mut at = 0u64;
            zip::inflate_each(
                format,
                src(*source)?,
                *offset,
                *compressed,
                *inflated,
                *crc32,
                &mut |p| {
                    let lo = at.max(*skip);
                    let hi = (at + p.len() as u64).min(end);
                    if lo < hi {
                        feed.push(&p[(lo - at) as usize..(hi - at) as usize])?;
                    }
                    at += p.len() as u64;
                    Ok(())
                },
            )
            .map_err(tensor)?;
        }
        (
            Storage::Encoded {
                source,
                offset,
                len,
                decoded,
                codec: codec @ Codec::ZstdSeekable,
            },
            None,
        ) => {
            if *decoded != want {
                return Err(size_mismatch(*decoded));
            }
            decode_checked(
                format,
                src(*source)?,
                checks,
                (*source, *offset, *len, *decoded, *codec),
                &mut |p| feed.push(p),
            )
            .map_err(tensor)?;
        }
        (Storage::Parts(p), _) => return Err(parts_error(format, t, p)),
        _ => {
            let whole = read_limited(format, t, sources, checks, limits)?;
            feed.swap = false;
            for p in whole.chunks(chunk.max(1)) {
                feed.push(p)?;
            }
        }
    }
    feed.finish()?;
    if feed.sent != want {
        return Err(size_mismatch(feed.sent));
    }
    Ok(())
}

/// Why a [`Storage::Parts`] tensor is not read as one array.
fn parts_error(format: &'static str, t: &TensorInfo, p: &Parts) -> FormatError {
    let names: Vec<&str> = p.parts.iter().map(|x| x.name.as_str()).collect();
    FormatError::new(
        format,
        ErrorKind::Unsupported,
        alloc::format!(
            "it is stored in layout {} as the parts {}, not as one array of {} elements; read its parts one by \
             one (Rust: formats::read_part / Model::read_part; JS: reader.part(); CLI: inspect lists them)",
            p.layout,
            names.join(", "),
            t.ty.name()
        ),
    )
    .tensor(t.name.clone())
}

/// Regroups pieces of any size into pieces of `chunk` bytes, byte-swapping lanes when asked.
struct Feeder<'a> {
    chunk: usize,
    lane: usize,
    swap: bool,
    buf: Vec<u8>,
    sent: u64,
    sink: &'a mut dyn FnMut(&[u8]) -> Result<(), FormatError>,
}

impl Feeder<'_> {
    fn push(&mut self, mut p: &[u8]) -> Result<(), FormatError> {
        while !p.is_empty() {
            if self.buf.is_empty() && p.len() >= self.chunk && !self.swap {
                (self.sink)(&p[..self.chunk])?;
                self.sent += self.chunk as u64;
                p = &p[self.chunk..];
                continue;
            }
            let n = (self.chunk - self.buf.len()).min(p.len());
            self.buf.extend_from_slice(&p[..n]);
            p = &p[n..];
            if self.buf.len() == self.chunk {
                self.emit()?;
            }
        }
        Ok(())
    }

    fn emit(&mut self) -> Result<(), FormatError> {
        if self.swap {
            let whole = self.buf.len() / self.lane * self.lane;
            crate::tensor::swap_lanes(&mut self.buf[..whole], self.lane);
        }
        (self.sink)(&self.buf)?;
        self.sent += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    fn finish(&mut self) -> Result<(), FormatError> {
        if !self.buf.is_empty() {
            self.emit()?;
        }
        Ok(())
    }
}

/// Applies [`TensorInfo::arrangement`] to stored bytes: strided gather, then byte swap.
fn arrange<'s>(
    format: &'static str,
    t: &TensorInfo,
    stored: Cow<'s, [u8]>,
    want: u64,
) -> Result<Cow<'s, [u8]>, FormatError> {
    let err = |kind, msg: String| FormatError::new(format, kind, msg).tensor(t.name.clone());
    let mut bytes = match &t.arrangement.view {
        None => {
            if stored.len() as u64 != want {
                return Err(err(
                    ErrorKind::SizeMismatch,
                    alloc::format!(
                        "{} {:?} needs {want} bytes but {} are stored",
                        t.ty.name(),
                        t.shape,
                        stored.len()
                    ),
                ));
            }
            stored
        }
        Some(v) => Cow::Owned(gather(&stored, t, v).map_err(|m| err(ErrorKind::OutOfBounds, m))?),
    };
    let lane = t.ty.lane();
    if t.arrangement.big_endian && lane > 1 {
        crate::tensor::swap_lanes(bytes.to_mut(), lane);
    }
    Ok(bytes)
}

/// The last byte a strided view touches, plus one (`None` on overflow). For an empty view: 0.
pub fn view_extent(shape: &[u64], view: &View, itemsize: u64) -> Option<u64> {
    if shape.contains(&0) {
        return Some(0);
    }
    let mut last = view.offset;
    for (d, s) in shape.iter().zip(&view.strides) {
        last = last.checked_add((d - 1).checked_mul(*s)?)?;
    }
    last.checked_add(1)?.checked_mul(itemsize)
}

fn gather(stored: &[u8], t: &TensorInfo, v: &View) -> Result<Vec<u8>, String> {
    let item =
        t.ty.itemsize()
            .ok_or_else(|| alloc::format!("a strided view of {} is not supported", t.ty.name()))? as u64;
    if v.strides.len() != t.shape.len() {
        return Err(alloc::format!(
            "the view has {} strides for {} dimensions",
            v.strides.len(),
            t.shape.len()
        ));
    }
    let end = view_extent(&t.shape, v, item).ok_or_else(|| "the view's extent overflows 64 bits".to_string())?;
    if end > stored.len() as u64 {
        return Err(alloc::format!(
            "the view (offset {}, strides {:?}, shape {:?}) needs {end} bytes of a {}-byte storage",
            v.offset,
            v.strides,
            t.shape,
            stored.len()
        ));
    }
    let n = t.numel().unwrap_or(0);
    let item = item as usize;
    let mut out = Vec::with_capacity((n as usize).saturating_mul(item));
    if n == 0 {
        return Ok(out);
    }
    let rank = t.shape.len();
    let mut idx = alloc::vec![0u64; rank];
    loop {
        let e = v.offset + idx.iter().zip(&v.strides).map(|(i, s)| i * s).sum::<u64>();
        let at = e as usize * item;
        out.extend_from_slice(&stored[at..at + item]);
        // Odometer increment, last dimension fastest.
        let mut k = rank;
        loop {
            if k == 0 {
                return Ok(out);
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < t.shape[k] {
                break;
            }
            idx[k] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hdf5_after_a_user_block_is_detected() {
        let mut file = alloc::vec![0u8; 2048 + 64];
        file[1024..1032].copy_from_slice(&crate::detect::HDF5_MAGIC);
        assert_eq!(detect_source(&file[..]).unwrap(), Some(Format::Hdf5));
        file[1024] = 0;
        assert_eq!(detect_source(&file[..]).unwrap(), None);
        assert_eq!(detect_source(&[][..]).unwrap(), None);
    }

    #[test]
    fn companion_paths() {
        assert!(check_companion_path("x", "model.onnx.data").is_ok());
        assert!(check_companion_path("x", "sub/shard-1.safetensors").is_ok());
        for bad in ["", "../x", "a/../../x", "/etc/passwd", "\\\\srv\\x", "C:\\x", "a\0b"] {
            assert_eq!(
                check_companion_path("x", bad).unwrap_err().kind,
                ErrorKind::Refused,
                "{bad}"
            );
        }
    }

    #[test]
    fn strided_fortran_view() {
        // A 2x3 array stored in Fortran order: column-major elements 0..6.
        let stored: Vec<u8> = (0u8..6).collect();
        let t = TensorInfo {
            name: "a".into(),
            ty: ElementType::Dense(DType::U8),
            shape: alloc::vec![2, 3],
            storage: Storage::Inline(stored.clone()),
            arrangement: Arrangement {
                big_endian: false,
                view: Some(View {
                    offset: 0,
                    strides: alloc::vec![1, 2],
                }),
            },
            attributes: Vec::new(),
        };
        let out = read::<[u8]>("test", &t, &[]).unwrap();
        assert_eq!(&out[..], &[0, 2, 4, 1, 3, 5]);
        let mut bad = t.clone();
        bad.arrangement.view = Some(View {
            offset: 2,
            strides: alloc::vec![1, 2],
        });
        assert_eq!(
            read::<[u8]>("test", &bad, &[]).unwrap_err().kind,
            ErrorKind::OutOfBounds
        );
    }

    #[test]
    fn big_endian_swap() {
        let t = TensorInfo {
            name: "b".into(),
            ty: ElementType::Dense(DType::U16),
            shape: alloc::vec![2],
            storage: Storage::Inline(alloc::vec![0, 1, 0, 2]),
            arrangement: Arrangement {
                big_endian: true,
                view: None,
            },
            attributes: Vec::new(),
        };
        assert_eq!(&read::<[u8]>("test", &t, &[]).unwrap()[..], &[1, 0, 2, 0]);
    }

    fn range_tensor(name: &str, source: usize, offset: u64, len: u64) -> TensorInfo {
        TensorInfo {
            name: name.into(),
            ty: ElementType::Dense(DType::U8),
            shape: alloc::vec![len],
            storage: Storage::Range { source, offset, len },
            arrangement: Arrangement::default(),
            attributes: Vec::new(),
        }
    }

    #[test]
    fn absorb_remaps_sources_and_refuses_duplicates() {
        let mut set = Catalog::new(Format::Safetensors);
        let mut a = Catalog::new(Format::Safetensors);
        a.tensors.push(range_tensor("a", 0, 8, 4));
        let mut b = Catalog::new(Format::Onnx);
        b.sources.push("b.data".into());
        b.tensors.push(range_tensor("b", 1, 0, 4));
        set.absorb(a.clone(), "part-1").unwrap();
        set.absorb(b, "part-2").unwrap();
        assert_eq!(set.sources, ["", "part-1", "part-2", "b.data"]);
        assert_eq!(
            set.tensors[0].storage,
            Storage::Range {
                source: 1,
                offset: 8,
                len: 4
            }
        );
        assert_eq!(
            set.tensors[1].storage,
            Storage::Range {
                source: 3,
                offset: 0,
                len: 4
            }
        );
        assert_eq!(set.absorb(a, "part-3").unwrap_err().kind, ErrorKind::Duplicate);
        assert!(set.check_ranges(&[0, 12, 0, 4]).is_ok());
        let e = set.check_ranges(&[0, 12, 0, 3]).unwrap_err();
        assert_eq!((e.kind, e.tensor.as_deref()), (ErrorKind::OutOfBounds, Some("b")));
        assert!(set.absorb(Catalog::new(Format::Onnx), "../escape").is_err());
    }
}
