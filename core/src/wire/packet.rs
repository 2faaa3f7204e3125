//! The decoded forms of every packet kind.

use alloc::borrow::Cow;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;

use super::error::{Error, ErrorKind};
use crate::dtype::DType;
use crate::tensor::Tensor;

/// One decoded packet (or one to encode).
///
/// The large, rarer kinds (sparse, quantized) are boxed so that a `Packet` stays the size of a
/// [`Tensor`]: a packet is returned and moved by value, and decoding a small dense packet would
/// otherwise spend more time copying a ~250-byte enum than parsing. Build them with
/// `Packet::from(sparse)` / `quantized.into()` (or `Packet::Sparse(Box::new(sparse))`).
#[derive(Clone, Debug, PartialEq)]
pub enum Packet<'a> {
    /// A dense tensor.
    Dense(Tensor<'a>),
    /// A dict of packets.
    Bundle(Bundle<'a>),
    /// A sparse COO/CSR/CSC matrix (boxed: see above).
    Sparse(Box<Sparse<'a>>),
    /// A quantized tensor (qint8, quint8, qint4, quint4), boxed: see above.
    Quantized(Box<Quantized<'a>>),
    /// A tensor of variable-length strings.
    Strings(Strings<'a>),
}

impl<'a> Packet<'a> {
    /// `"dense"`, `"bundle"`, `"sparse"`, `"quantized"` or `"string"`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Packet::Dense(_) => "dense",
            Packet::Bundle(_) => "bundle",
            Packet::Sparse(_) => "sparse",
            Packet::Quantized(_) => "quantized",
            Packet::Strings(_) => "string",
        }
    }

    /// The dense tensor, if this is one.
    pub fn as_dense(&self) -> Option<&Tensor<'a>> {
        match self {
            Packet::Dense(t) => Some(t),
            _ => None,
        }
    }

    /// The bundle, if this is one.
    pub fn as_bundle(&self) -> Option<&Bundle<'a>> {
        match self {
            Packet::Bundle(b) => Some(b),
            _ => None,
        }
    }

    /// Detaches the packet from the input buffer.
    pub fn into_owned(self) -> Packet<'static> {
        self.into_owned_with(&mut |b| b.to_vec())
    }

    /// [`Packet::into_owned`] with every copy of borrowed bytes made by `copy` (owned bytes are
    /// moved), so that a host can put large copies in memory of its choosing (the `tensorlane`
    /// crate's `wire::decode_owned` asks Linux for transparent huge pages).
    pub fn into_owned_with(self, copy: &mut dyn FnMut(&[u8]) -> Vec<u8>) -> Packet<'static> {
        fn own(c: Cow<'_, [u8]>, copy: &mut dyn FnMut(&[u8]) -> Vec<u8>) -> Cow<'static, [u8]> {
            Cow::Owned(match c {
                Cow::Borrowed(b) => copy(b),
                Cow::Owned(v) => v,
            })
        }
        match self {
            Packet::Dense(t) => Packet::Dense(t.into_owned_with(copy)),
            Packet::Bundle(b) => Packet::Bundle(Bundle {
                entries: b
                    .entries
                    .into_iter()
                    .map(|(k, v)| (Cow::Owned(k.into_owned()), v.into_owned_with(copy)))
                    .collect(),
            }),
            Packet::Sparse(s) => {
                let Sparse {
                    format,
                    shape,
                    components: [a, b, c],
                } = *s;
                Packet::from(Sparse {
                    format,
                    shape,
                    components: [
                        a.into_owned_with(copy),
                        b.into_owned_with(copy),
                        c.into_owned_with(copy),
                    ],
                })
            }
            Packet::Quantized(q) => {
                let q = *q;
                Packet::from(Quantized {
                    data: own(q.data, copy),
                    ..q
                })
            }
            Packet::Strings(s) => Packet::Strings(Strings {
                offsets: own(s.offsets, copy),
                payload: own(s.payload, copy),
            }),
        }
    }
}

impl<'a> From<Tensor<'a>> for Packet<'a> {
    /// A dense packet.
    fn from(t: Tensor<'a>) -> Self {
        Packet::Dense(t)
    }
}

impl<'a> From<Bundle<'a>> for Packet<'a> {
    /// A bundle packet.
    fn from(b: Bundle<'a>) -> Self {
        Packet::Bundle(b)
    }
}

impl<'a> From<Sparse<'a>> for Packet<'a> {
    /// A sparse packet (boxed).
    fn from(s: Sparse<'a>) -> Self {
        Packet::Sparse(Box::new(s))
    }
}

impl<'a> From<Quantized<'a>> for Packet<'a> {
    /// A quantized packet (boxed).
    fn from(q: Quantized<'a>) -> Self {
        Packet::Quantized(Box::new(q))
    }
}

impl<'a> From<Strings<'a>> for Packet<'a> {
    /// A string packet.
    fn from(s: Strings<'a>) -> Self {
        Packet::Strings(s)
    }
}

/// A dict bundle: entries in wire order. Map-style lookup follows tenso (the last duplicate wins).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bundle<'a> {
    /// Key and value of every entry, in wire order (duplicates kept).
    pub entries: Vec<(Cow<'a, str>, Packet<'a>)>,
}

impl<'a> Bundle<'a> {
    /// An empty bundle.
    pub fn new() -> Self {
        Bundle { entries: Vec::new() }
    }

    /// Appends an entry (builder style).
    pub fn with(mut self, key: impl Into<Cow<'a, str>>, value: Packet<'a>) -> Self {
        self.entries.push((key.into(), value));
        self
    }

    /// The value stored under `key` (the last one, if the key repeats).
    pub fn get(&self, key: &str) -> Option<&Packet<'a>> {
        self.entries.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Number of entries on the wire (duplicates included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// `true` for an empty bundle.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The storage layout of a sparse matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SparseFormat {
    /// Coordinates: `data, row, col`.
    Coo,
    /// Compressed sparse rows: `data, indices, indptr`.
    Csr,
    /// Compressed sparse columns: `data, indices, indptr`.
    Csc,
}

impl SparseFormat {
    /// `"coo"`, `"csr"` or `"csc"` (scipy's names).
    pub fn name(self) -> &'static str {
        match self {
            SparseFormat::Coo => "coo",
            SparseFormat::Csr => "csr",
            SparseFormat::Csc => "csc",
        }
    }

    /// The names of the three components, in wire order.
    pub fn component_names(self) -> [&'static str; 3] {
        match self {
            SparseFormat::Coo => ["data", "row", "col"],
            _ => ["data", "indices", "indptr"],
        }
    }

    pub(crate) fn flag(self) -> u16 {
        match self {
            SparseFormat::Coo => super::flags::SPARSE_COO,
            SparseFormat::Csr => super::flags::SPARSE_CSR,
            SparseFormat::Csc => super::flags::SPARSE_CSC,
        }
    }
}

/// A sparse matrix: its logical shape and three dense components in wire order
/// (COO `data, row, col`; CSR/CSC `data, indices, indptr`).
#[derive(Clone, Debug, PartialEq)]
pub struct Sparse<'a> {
    /// COO, CSR or CSC.
    pub format: SparseFormat,
    /// The logical (dense) shape; 2-D for anything scipy writes.
    pub shape: Vec<u64>,
    /// The components, in wire order.
    pub components: [Tensor<'a>; 3],
}

impl Sparse<'_> {
    /// Checks that the components describe a valid matrix: 1-D components, integer indices, COO
    /// lengths equal, CSR/CSC `indptr` of length major+1, starting at 0, non-decreasing and ending
    /// at nnz, and every index within the shape. Linear in nnz.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |msg: String| Err(Error::new(ErrorKind::Sparse(msg), 0));
        let names = self.format.component_names();
        for (t, n) in self.components.iter().zip(names) {
            if t.shape().len() != 1 {
                return bad(alloc::format!(
                    "component {n} has shape {:?}; components are 1-D",
                    t.shape()
                ));
            }
        }
        for (t, n) in self.components[1..].iter().zip(&names[1..]) {
            if !matches!(
                t.dtype(),
                DType::I8 | DType::I16 | DType::I32 | DType::I64 | DType::U8 | DType::U16 | DType::U32 | DType::U64
            ) {
                return bad(alloc::format!(
                    "component {n} has dtype {}; index arrays must be integers",
                    t.dtype()
                ));
            }
        }
        if self.shape.len() != 2 {
            return bad(alloc::format!(
                "shape {:?} is not 2-D; sparse matrices have two dimensions",
                self.shape
            ));
        }
        let nnz = self.components[0].numel();
        let (rows, cols) = (self.shape[0], self.shape[1]);
        let idx = |t: &Tensor<'_>, i: usize| -> i128 {
            let s = t.dtype().itemsize();
            let b = &t.data()[i * s..(i + 1) * s];
            let mut a = [0u8; 8];
            a[..s].copy_from_slice(b);
            let signed = matches!(t.dtype(), DType::I8 | DType::I16 | DType::I32 | DType::I64);
            if signed && b[s - 1] & 0x80 != 0 {
                for x in &mut a[s..] {
                    *x = 0xff;
                }
                i64::from_le_bytes(a) as i128
            } else {
                u64::from_le_bytes(a) as i128
            }
        };
        let in_range = |t: &Tensor<'_>, name: &str, limit: u64| -> Result<(), Error> {
            for i in 0..t.numel() as usize {
                let v = idx(t, i);
                if v < 0 || v >= limit as i128 {
                    return bad(alloc::format!("{name}[{i}] = {v} is outside 0..{limit}"));
                }
            }
            Ok(())
        };
        match self.format {
            SparseFormat::Coo => {
                let (r, c) = (&self.components[1], &self.components[2]);
                if r.numel() != nnz || c.numel() != nnz {
                    return bad(alloc::format!(
                        "data, row and col have lengths {nnz}, {}, {}; they must be equal",
                        r.numel(),
                        c.numel()
                    ));
                }
                in_range(r, "row", rows)?;
                in_range(c, "col", cols)
            }
            SparseFormat::Csr | SparseFormat::Csc => {
                let (major, minor) = if self.format == SparseFormat::Csr {
                    (rows, cols)
                } else {
                    (cols, rows)
                };
                let (ind, ptr) = (&self.components[1], &self.components[2]);
                if ind.numel() != nnz {
                    return bad(alloc::format!("indices has {} entries but data has {nnz}", ind.numel()));
                }
                if ptr.numel() != major.saturating_add(1) {
                    return bad(alloc::format!(
                        "indptr has {} entries; expected {} (major dimension + 1)",
                        ptr.numel(),
                        major.saturating_add(1)
                    ));
                }
                let mut prev = 0i128;
                for i in 0..ptr.numel() as usize {
                    let v = idx(ptr, i);
                    if (i == 0 && v != 0) || v < prev || v > nnz as i128 {
                        return bad(alloc::format!(
                            "indptr[{i}] = {v} breaks 0 = indptr[0] <= ... <= indptr[-1] = nnz ({nnz})"
                        ));
                    }
                    prev = v;
                }
                if prev != nnz as i128 {
                    return bad(alloc::format!("indptr ends at {prev} but there are {nnz} values"));
                }
                in_range(ind, "indices", minor)
            }
        }
    }
}

/// Quantized dtypes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QDType {
    /// Signed 8-bit (-128..=127).
    QInt8,
    /// Unsigned 8-bit (0..=255).
    QUInt8,
    /// Signed 4-bit (-8..=7), two per byte, low nibble first.
    QInt4,
    /// Unsigned 4-bit (0..=15), two per byte, low nibble first.
    QUInt4,
}

impl QDType {
    /// The wire dtype code (16..=19).
    pub fn code(self) -> u8 {
        match self {
            QDType::QInt8 => 16,
            QDType::QUInt8 => 17,
            QDType::QInt4 => 18,
            QDType::QUInt4 => 19,
        }
    }

    /// From a wire dtype code.
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            16 => QDType::QInt8,
            17 => QDType::QUInt8,
            18 => QDType::QInt4,
            19 => QDType::QUInt4,
            _ => return None,
        })
    }

    /// `"qint8"`, `"quint8"`, `"qint4"` or `"quint4"`.
    pub fn name(self) -> &'static str {
        match self {
            QDType::QInt8 => "qint8",
            QDType::QUInt8 => "quint8",
            QDType::QInt4 => "qint4",
            QDType::QUInt4 => "quint4",
        }
    }

    /// From a name as returned by [`QDType::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        [QDType::QInt8, QDType::QUInt8, QDType::QInt4, QDType::QUInt4]
            .into_iter()
            .find(|q| q.name() == name)
    }

    /// Whether two values share a byte.
    pub fn is_4bit(self) -> bool {
        matches!(self, QDType::QInt4 | QDType::QUInt4)
    }

    /// The representable range `(qmin, qmax)`.
    pub fn range(self) -> (i32, i32) {
        match self {
            QDType::QInt8 => (-128, 127),
            QDType::QUInt8 => (0, 255),
            QDType::QInt4 => (-8, 7),
            QDType::QUInt4 => (0, 15),
        }
    }

    /// Packed body length for `n` elements.
    pub fn packed_len(self, n: u64) -> u64 {
        if self.is_4bit() { n.div_ceil(2) } else { n }
    }
}

/// How scales apply to elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantScheme {
    /// One scale for the whole tensor.
    PerTensor,
    /// One scale per index along `axis`.
    PerChannel,
    /// One scale per run of `group_size` consecutive C-order elements.
    PerGroup,
    /// A scheme byte tensorlane does not know (kept so the packet re-encodes unchanged).
    Other(u8),
}

impl QuantScheme {
    /// The wire byte.
    pub fn code(self) -> u8 {
        match self {
            QuantScheme::PerTensor => 0,
            QuantScheme::PerChannel => 1,
            QuantScheme::PerGroup => 2,
            QuantScheme::Other(c) => c,
        }
    }

    /// From the wire byte.
    pub fn from_code(c: u8) -> Self {
        match c {
            0 => QuantScheme::PerTensor,
            1 => QuantScheme::PerChannel,
            2 => QuantScheme::PerGroup,
            c => QuantScheme::Other(c),
        }
    }

    /// `"per_tensor"`, `"per_channel"`, `"per_group"` or `"unknown"`.
    pub fn name(self) -> &'static str {
        match self {
            QuantScheme::PerTensor => "per_tensor",
            QuantScheme::PerChannel => "per_channel",
            QuantScheme::PerGroup => "per_group",
            QuantScheme::Other(_) => "unknown",
        }
    }
}

/// A quantized tensor: packed integers plus float32 scales and zero points.
/// `value = (q - zero_point) * scale`, per slice (see [`QuantScheme`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Quantized<'a> {
    /// The quantized dtype.
    pub qdtype: QDType,
    /// The logical shape.
    pub shape: Vec<u64>,
    /// How scales map to elements.
    pub scheme: QuantScheme,
    /// The channel axis as on the wire (tenso writes `axis & 0xFF`, so -1 arrives as 255).
    pub axis: u8,
    /// The group size as on the wire (meaningful for per-group only).
    pub group_size: u32,
    /// One scale per slice.
    pub scales: Vec<f32>,
    /// One zero point per slice (floats, as tenso stores them).
    pub zero_points: Vec<f32>,
    /// The packed body: one byte per element, or two 4-bit elements per byte.
    pub data: Cow<'a, [u8]>,
}

/// A tensor of variable-length strings: `count + 1` little-endian `u64` offsets into a payload.
/// Payload bytes are not validated as UTF-8 on decode; [`Strings::get_str`] validates.
#[derive(Clone, Debug, PartialEq)]
pub struct Strings<'a> {
    pub(crate) offsets: Cow<'a, [u8]>,
    pub(crate) payload: Cow<'a, [u8]>,
}

impl<'a> Strings<'a> {
    /// Builds a string tensor from UTF-8 strings (or any byte strings).
    pub fn from_items<S: AsRef<[u8]>>(items: &[S]) -> Strings<'static> {
        let mut offsets = Vec::with_capacity((items.len() + 1) * 8);
        let mut payload = Vec::new();
        offsets.extend_from_slice(&0u64.to_le_bytes());
        for s in items {
            payload.extend_from_slice(s.as_ref());
            offsets.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        }
        Strings {
            offsets: Cow::Owned(offsets),
            payload: Cow::Owned(payload),
        }
    }

    /// Number of strings.
    pub fn len(&self) -> usize {
        self.offsets.len() / 8 - 1
    }

    /// `true` when there are no strings.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn offset(&self, i: usize) -> usize {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.offsets[i * 8..i * 8 + 8]);
        u64::from_le_bytes(a) as usize
    }

    /// The raw bytes of string `i`.
    pub fn get_bytes(&self, i: usize) -> Option<&[u8]> {
        if i >= self.len() {
            return None;
        }
        Some(&self.payload[self.offset(i)..self.offset(i + 1)])
    }

    /// String `i`, validated as UTF-8.
    pub fn get_str(&self, i: usize) -> Option<Result<&str, core::str::Utf8Error>> {
        self.get_bytes(i).map(core::str::from_utf8)
    }

    /// The offsets, `len() + 1` values starting at 0.
    pub fn offsets(&self) -> impl Iterator<Item = u64> + '_ {
        self.offsets.chunks_exact(8).map(|c| {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            u64::from_le_bytes(a)
        })
    }

    /// The concatenated payload.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }
}
