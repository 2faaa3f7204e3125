//! [`Tensor`]: a dense, C-ordered, little-endian tensor that borrows its bytes when it can.

use alloc::borrow::Cow;
use alloc::vec::Vec;
use core::fmt;

use crate::dtype::DType;

/// Byte order of caller-supplied element bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteOrder {
    /// Little-endian (the wire order, and the order of every common host).
    Little,
    /// Big-endian: swapped to little-endian on the way in.
    Big,
}

/// Why a tensor could not be built from the given parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TensorError {
    /// The shape's element count overflows `u64`/`usize`.
    ShapeOverflow,
    /// The data length does not match `numel * itemsize`.
    LengthMismatch {
        /// Bytes the shape and dtype call for.
        expected: u64,
        /// Bytes supplied.
        actual: usize,
    },
}

impl fmt::Display for TensorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TensorError::ShapeOverflow => {
                f.write_str("the shape's element count overflows 64 bits; check the dimensions")
            }
            TensorError::LengthMismatch { expected, actual } => write!(
                f,
                "data has {actual} bytes but dtype and shape need {expected}; pass exactly numel * itemsize bytes"
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for TensorError {}

/// Product of the dimensions with overflow checks (the empty product is 1).
pub fn numel(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

/// How many dimensions a [`Tensor`] keeps in place before its shape goes to the heap.
pub(crate) const INLINE_DIMS: usize = 4;

/// A tensor's dimensions: up to [`INLINE_DIMS`] in place (no allocation, which is most of the
/// cost of decoding a small packet), more in a `Vec`. Two `Dims` are equal when their dimensions
/// are, wherever they are kept.
#[derive(Clone)]
pub(crate) enum Dims {
    /// `dims[..len]` are the dimensions.
    Inline { len: Rank, dims: [u64; INLINE_DIMS] },
    /// More dimensions than fit in place (or a `Vec` the caller handed over).
    Heap(Vec<u64>),
}

/// The rank of an inline shape. A word-sized enum rather than a `u8`: it is written with one
/// full-width store (a byte store read back by a wider load, as every move of a `Tensor` does,
/// stalls the CPU's store forwarding for ~10 cycles), and its unused values hold the tag of
/// [`Dims`], which therefore stays 40 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum Rank {
    R0 = 0,
    R1 = 1,
    R2 = 2,
    R3 = 3,
    R4 = 4,
}

impl Rank {
    /// `n` as a rank; anything above [`INLINE_DIMS`] is clamped (callers check first).
    #[inline]
    fn new(n: usize) -> Rank {
        match n {
            0 => Rank::R0,
            1 => Rank::R1,
            2 => Rank::R2,
            3 => Rank::R3,
            _ => Rank::R4,
        }
    }
}

impl Dims {
    /// The dimensions, outermost first.
    #[inline]
    pub(crate) fn as_slice(&self) -> &[u64] {
        match self {
            Dims::Inline { len, dims } => &dims[..*len as usize],
            Dims::Heap(v) => v,
        }
    }

    /// The first `len` of `dims` (at most [`INLINE_DIMS`]), kept in place.
    #[inline]
    pub(crate) fn inline(len: usize, dims: [u64; INLINE_DIMS]) -> Dims {
        debug_assert!(len <= INLINE_DIMS);
        Dims::Inline {
            len: Rank::new(len),
            dims,
        }
    }

    /// Dimensions read from `n` little-endian `u32`s at the start of `bytes` (the wire's shape
    /// field); the caller has checked that `bytes` holds them.
    #[inline]
    pub(crate) fn from_le_u32s(bytes: &[u8], n: usize) -> Dims {
        let words = bytes[..4 * n]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as u64);
        if n <= INLINE_DIMS {
            let mut dims = [0u64; INLINE_DIMS];
            for (d, w) in dims.iter_mut().zip(words) {
                *d = w;
            }
            Dims::Inline {
                len: Rank::new(n),
                dims,
            }
        } else {
            Dims::Heap(words.collect())
        }
    }
}

impl fmt::Debug for Dims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_slice().fmt(f)
    }
}

impl PartialEq for Dims {
    fn eq(&self, other: &Dims) -> bool {
        self.as_slice() == other.as_slice()
    }
}

/// Declares [`DTypeWord`] with one variant per [`DType`] variant, and the conversions.
macro_rules! dtype_word {
    ($($v:ident),* $(,)?) => {
        /// A [`DType`] kept in a full word inside [`Tensor`], for the reason given at [`Rank`]
        /// (`DType` itself is a byte). Same variants; converting either way compiles to nothing.
        #[derive(Clone, Copy, PartialEq, Eq)]
        #[repr(usize)]
        enum DTypeWord {
            $($v = DType::$v as usize),*
        }

        impl DTypeWord {
            #[inline]
            fn new(d: DType) -> DTypeWord {
                match d {
                    $(DType::$v => DTypeWord::$v),*
                }
            }

            #[inline]
            fn get(self) -> DType {
                match self {
                    $(DTypeWord::$v => DType::$v),*
                }
            }
        }
    };
}

dtype_word!(
    F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32, U64, Bool, C64, C128
);

/// A dense tensor: dtype, shape (outermost first) and C-order little-endian element bytes.
///
/// The bytes are either borrowed from the caller (a *view*: decoding an uncompressed packet costs
/// O(1) whatever its size) or owned (after decompression, byte swapping, or `into_owned`).
/// [`Tensor::is_view`] says which.
#[derive(Clone, PartialEq)]
pub struct Tensor<'a> {
    dtype: DTypeWord,
    shape: Dims,
    data: Cow<'a, [u8]>,
}

impl fmt::Debug for Tensor<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tensor")
            .field("dtype", &self.dtype())
            .field("shape", &self.shape())
            .field("nbytes", &self.data.len())
            .field("is_view", &self.is_view())
            .finish()
    }
}

impl<'a> Tensor<'a> {
    /// Builds a tensor from little-endian element bytes; `data.len()` must equal
    /// `numel(shape) * dtype.itemsize()`.
    pub fn new(dtype: DType, shape: impl Into<Vec<u64>>, data: impl Into<Cow<'a, [u8]>>) -> Result<Self, TensorError> {
        let shape = shape.into();
        let data = data.into();
        let expected = numel(&shape)
            .and_then(|n| n.checked_mul(dtype.itemsize() as u64))
            .ok_or(TensorError::ShapeOverflow)?;
        if expected != data.len() as u64 {
            return Err(TensorError::LengthMismatch {
                expected,
                actual: data.len(),
            });
        }
        Ok(Tensor {
            dtype: DTypeWord::new(dtype),
            shape: Dims::Heap(shape),
            data,
        })
    }

    /// Builds a tensor from element bytes in the given byte order. Big-endian input is swapped
    /// into an owned little-endian copy (tenso 0.24 writes it unswapped, corrupting it).
    pub fn from_bytes_in_order(
        dtype: DType,
        shape: impl Into<Vec<u64>>,
        data: &'a [u8],
        order: ByteOrder,
    ) -> Result<Self, TensorError> {
        let t = Tensor::new(dtype, shape, data)?;
        Ok(match order {
            ByteOrder::Little => t,
            ByteOrder::Big => {
                let mut owned = data.to_vec();
                swap_lanes(&mut owned, dtype.lane_size());
                Tensor {
                    data: Cow::Owned(owned),
                    ..t
                }
            }
        })
    }

    /// Builds a tensor from typed values (copies them into little-endian bytes).
    pub fn from_values<T: Element>(shape: impl Into<Vec<u64>>, values: &[T]) -> Result<Tensor<'static>, TensorError> {
        let mut bytes = Vec::with_capacity(core::mem::size_of_val(values));
        for v in values {
            v.write_le(&mut bytes);
        }
        Tensor::new(T::DTYPE, shape, bytes)
    }

    /// A tensor from parts the caller has already checked against each other.
    #[inline]
    pub(crate) fn from_parts_unchecked(dtype: DType, shape: Dims, data: Cow<'a, [u8]>) -> Self {
        Tensor {
            dtype: DTypeWord::new(dtype),
            shape,
            data,
        }
    }

    /// The element dtype.
    #[inline]
    pub fn dtype(&self) -> DType {
        self.dtype.get()
    }

    /// The shape, outermost dimension first; empty for a 0-d scalar.
    #[inline]
    pub fn shape(&self) -> &[u64] {
        self.shape.as_slice()
    }

    /// Number of elements (1 for a 0-d scalar).
    #[inline]
    pub fn numel(&self) -> u64 {
        (self.data.len() / self.dtype().itemsize()) as u64
    }

    /// The C-order little-endian element bytes.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Number of data bytes.
    #[inline]
    pub fn nbytes(&self) -> usize {
        self.data.len()
    }

    /// `true` when the bytes are borrowed from the input (no copy was made).
    #[inline]
    pub fn is_view(&self) -> bool {
        matches!(self.data, Cow::Borrowed(_))
    }

    /// Detaches the tensor from the input buffer (copies the bytes if they were borrowed).
    pub fn into_owned(self) -> Tensor<'static> {
        self.into_owned_with(&mut |b| b.to_vec())
    }

    /// [`Tensor::into_owned`] with the copy made by `copy` (borrowed bytes only; owned bytes are
    /// moved), so that a host can put large copies in memory of its choosing (the `tensorlane`
    /// crate's `buffers::copy_of` asks Linux for transparent huge pages).
    pub fn into_owned_with(self, copy: &mut dyn FnMut(&[u8]) -> Vec<u8>) -> Tensor<'static> {
        let data = match self.data {
            Cow::Borrowed(b) => copy(b),
            Cow::Owned(v) => v,
        };
        Tensor {
            dtype: self.dtype,
            shape: self.shape,
            data: Cow::Owned(data),
        }
    }

    /// Takes the bytes out (borrowed or owned).
    pub fn into_data(self) -> Cow<'a, [u8]> {
        self.data
    }

    /// A typed, zero-copy view of the elements, or `None` when `T` does not fit the dtype
    /// (see [`Element`]), the bytes are not aligned in memory for `T`, or the host is big-endian.
    pub fn as_slice<T: Element>(&self) -> Option<&[T]> {
        if !T::accepts(self.dtype()) || cfg!(target_endian = "big") {
            return None;
        }
        bytemuck::try_cast_slice(&self.data).ok()
    }

    /// The elements as typed values: a view when possible, else a copy (misaligned memory or a
    /// big-endian host).
    pub fn to_values<T: Element>(&self) -> Option<Cow<'_, [T]>> {
        if !T::accepts(self.dtype()) {
            return None;
        }
        if let Some(s) = self.as_slice::<T>() {
            return Some(Cow::Borrowed(s));
        }
        Some(Cow::Owned(
            self.data
                .chunks_exact(core::mem::size_of::<T>())
                .map(T::read_le)
                .collect(),
        ))
    }

    /// Bool elements, validated: `None` if the dtype is not bool or a byte is neither 0 nor 1
    /// (tenso accepts any byte; reinterpreting such bytes as Rust `bool` would be undefined
    /// behaviour, so tensorlane only exposes them as `u8` unless they validate).
    pub fn bool_values(&self) -> Option<Vec<bool>> {
        if self.dtype() != DType::Bool {
            return None;
        }
        self.data
            .iter()
            .map(|&b| match b {
                0 => Some(false),
                1 => Some(true),
                _ => None,
            })
            .collect()
    }
}

/// Reverses each `lane`-byte group in place (little <-> big endian).
pub fn swap_lanes(bytes: &mut [u8], lane: usize) {
    if lane > 1 {
        for c in bytes.chunks_exact_mut(lane) {
            c.reverse();
        }
    }
}

/// A Rust element type that can view tensor bytes.
///
/// `u8` views bool tensors, `u16` views float16/bfloat16 raw bits, `[f32; 2]`/`[f64; 2]` view
/// complex tensors.
pub trait Element: bytemuck::Pod {
    /// The dtype this type is written as by [`Tensor::from_values`].
    const DTYPE: DType;
    /// Whether this type may view a tensor of `dtype`.
    fn accepts(dtype: DType) -> bool {
        dtype == Self::DTYPE
    }
    /// Appends the little-endian bytes of `self`.
    fn write_le(&self, out: &mut Vec<u8>);
    /// Reads one value from little-endian bytes (`bytes.len() == size_of::<Self>()`).
    fn read_le(bytes: &[u8]) -> Self;
}

macro_rules! element {
    ($t:ty, $d:expr $(, $extra:pat)?) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn accepts(dtype: DType) -> bool {
                matches!(dtype, d if d == $d) $(|| matches!(dtype, $extra))?
            }
            fn write_le(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn read_le(bytes: &[u8]) -> Self {
                let mut a = [0u8; core::mem::size_of::<$t>()];
                a.copy_from_slice(bytes);
                <$t>::from_le_bytes(a)
            }
        }
    };
}

element!(f32, DType::F32);
element!(f64, DType::F64);
element!(i8, DType::I8);
element!(i16, DType::I16);
element!(i32, DType::I32);
element!(i64, DType::I64);
element!(u8, DType::U8, DType::Bool);
element!(u16, DType::U16, DType::F16 | DType::BF16);
element!(u32, DType::U32);
element!(u64, DType::U64);

macro_rules! complex_element {
    ($t:ty, $d:expr) => {
        impl Element for [$t; 2] {
            const DTYPE: DType = $d;
            fn write_le(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self[0].to_le_bytes());
                out.extend_from_slice(&self[1].to_le_bytes());
            }
            fn read_le(bytes: &[u8]) -> Self {
                let h = bytes.len() / 2;
                [<$t>::read_le(&bytes[..h]), <$t>::read_le(&bytes[h..])]
            }
        }
    };
}
complex_element!(f32, DType::C64);
complex_element!(f64, DType::C128);

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn new_checks_length() {
        assert!(Tensor::new(DType::F32, vec![2, 3], &[0u8; 24][..]).is_ok());
        assert_eq!(
            Tensor::new(DType::F32, vec![2, 3], &[0u8; 23][..]).unwrap_err(),
            TensorError::LengthMismatch {
                expected: 24,
                actual: 23
            }
        );
        assert_eq!(
            Tensor::new(DType::F64, vec![u64::MAX, 2], &[][..]).unwrap_err(),
            TensorError::ShapeOverflow
        );
    }

    #[test]
    fn big_endian_input_is_swapped() {
        let be: Vec<u8> = [1i32, 256].iter().flat_map(|v| v.to_be_bytes()).collect();
        let t = Tensor::from_bytes_in_order(DType::I32, vec![2], &be, ByteOrder::Big).unwrap();
        assert!(!t.is_view());
        assert_eq!(&*t.to_values::<i32>().unwrap(), &[1, 256]);
        let c: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|v| v.to_be_bytes()).collect();
        let t = Tensor::from_bytes_in_order(DType::C64, vec![1], &c, ByteOrder::Big).unwrap();
        assert_eq!(&*t.to_values::<[f32; 2]>().unwrap(), &[[1.5, -2.0]]);
    }

    #[test]
    fn bool_validation() {
        let t = Tensor::new(DType::Bool, vec![3], &[0u8, 1, 2][..]).unwrap();
        assert_eq!(t.bool_values(), None);
        assert_eq!(t.as_slice::<u8>().unwrap(), &[0, 1, 2]);
    }
}
