//! Writing `.safetensors` files, streaming: the header first, then each tensor's bytes as the
//! caller hands them over, so a model is never held in memory as a whole.
//!
//! The file is what the `safetensors` library's `serialize` writes: tensors ordered by dtype
//! (widest first, in the library's `Dtype` order) then by name, the JSON header with
//! `__metadata__` first and the tensors in data order, padded with spaces to a multiple of 8
//! bytes. It is written under a temporary name in the destination folder and renamed into place
//! by [`SafetensorsFile::finish`] after an fsync: a reader sees the old file or the new one, never
//! half of one. A writer dropped before `finish` removes its temporary file.
//!
//! ```no_run
//! use tensorlane::st_write::{SafetensorsFile, StDtype, StTensor};
//!
//! let tensors = vec![StTensor::new("w", StDtype::F32, vec![2])];
//! let mut w = SafetensorsFile::publish("model.safetensors", tensors, &[])?;
//! while let Some(i) = w.next_tensor() {
//!     let _ = i; // tensor i of the list given to `publish`
//!     w.write(&[0, 0, 128, 63, 0, 0, 0, 64])?;
//! }
//! w.finish()?;
//! # Ok::<(), tensorlane::Error>(())
//! ```

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::Error;
use crate::publish::Pending;

/// The safetensors header size limit (the library refuses larger headers): 100 MB.
pub const MAX_HEADER: usize = 100_000_000;

/// A safetensors dtype, in the library's order (the order tensors are laid out by, widest last
/// here and first in the file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[allow(non_camel_case_types)]
pub enum StDtype {
    /// Boolean, one byte.
    BOOL,
    /// float4 e2m1, two per byte.
    F4,
    /// float6 e2m3.
    F6_E2M3,
    /// float6 e3m2.
    F6_E3M2,
    /// Unsigned byte.
    U8,
    /// Signed byte.
    I8,
    /// float8 e5m2.
    F8_E5M2,
    /// float8 e4m3 (fn).
    F8_E4M3,
    /// float8 e8m0 (fnu).
    F8_E8M0,
    /// float8 e4m3fnuz.
    F8_E4M3FNUZ,
    /// float8 e5m2fnuz.
    F8_E5M2FNUZ,
    /// Signed 16-bit.
    I16,
    /// Unsigned 16-bit.
    U16,
    /// IEEE half.
    F16,
    /// bfloat16.
    BF16,
    /// Signed 32-bit.
    I32,
    /// Unsigned 32-bit.
    U32,
    /// IEEE single.
    F32,
    /// Two f32 (re, im).
    C64,
    /// IEEE double.
    F64,
    /// Signed 64-bit.
    I64,
    /// Unsigned 64-bit.
    U64,
}

impl StDtype {
    /// The header name (`"F32"`, `"F8_E4M3"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            StDtype::BOOL => "BOOL",
            StDtype::F4 => "F4",
            StDtype::F6_E2M3 => "F6_E2M3",
            StDtype::F6_E3M2 => "F6_E3M2",
            StDtype::U8 => "U8",
            StDtype::I8 => "I8",
            StDtype::F8_E5M2 => "F8_E5M2",
            StDtype::F8_E4M3 => "F8_E4M3",
            StDtype::F8_E8M0 => "F8_E8M0",
            StDtype::F8_E4M3FNUZ => "F8_E4M3FNUZ",
            StDtype::F8_E5M2FNUZ => "F8_E5M2FNUZ",
            StDtype::I16 => "I16",
            StDtype::U16 => "U16",
            StDtype::F16 => "F16",
            StDtype::BF16 => "BF16",
            StDtype::I32 => "I32",
            StDtype::U32 => "U32",
            StDtype::F32 => "F32",
            StDtype::C64 => "C64",
            StDtype::F64 => "F64",
            StDtype::I64 => "I64",
            StDtype::U64 => "U64",
        }
    }

    /// Bits per element.
    pub fn bits(self) -> u64 {
        match self {
            StDtype::F4 => 4,
            StDtype::F6_E2M3 | StDtype::F6_E3M2 => 6,
            StDtype::BOOL
            | StDtype::U8
            | StDtype::I8
            | StDtype::F8_E5M2
            | StDtype::F8_E4M3
            | StDtype::F8_E8M0
            | StDtype::F8_E4M3FNUZ
            | StDtype::F8_E5M2FNUZ => 8,
            StDtype::I16 | StDtype::U16 | StDtype::F16 | StDtype::BF16 => 16,
            StDtype::I32 | StDtype::U32 | StDtype::F32 => 32,
            StDtype::C64 | StDtype::F64 | StDtype::I64 | StDtype::U64 => 64,
        }
    }

    /// Bytes for `n` elements (`None` on overflow or when `n` elements are not whole bytes).
    pub fn nbytes(self, n: u64) -> Option<u64> {
        let bits = n.checked_mul(self.bits())?;
        bits.is_multiple_of(8).then_some(bits / 8)
    }
}

/// One tensor to write: name, dtype and shape (its byte count follows from them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StTensor {
    /// The header key.
    pub name: String,
    /// Element type.
    pub dtype: StDtype,
    /// Row-major shape.
    pub shape: Vec<u64>,
}

impl StTensor {
    /// A tensor entry.
    pub fn new(name: impl Into<String>, dtype: StDtype, shape: Vec<u64>) -> StTensor {
        StTensor {
            name: name.into(),
            dtype,
            shape,
        }
    }

    /// Its byte count (`None` on overflow or a fractional byte count).
    pub fn nbytes(&self) -> Option<u64> {
        let n = self.shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
        self.dtype.nbytes(n)
    }
}

fn invalid<T>(m: String) -> Result<T, Error> {
    Err(Error::Safetensors(m))
}

/// The data order of `tensors` (indices), as the library lays them out: dtype descending, then
/// name.
pub fn data_order(tensors: &[StTensor]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&tensors[a], &tensors[b]);
        y.dtype.cmp(&x.dtype).then_with(|| x.name.cmp(&y.name))
    });
    order
}

/// The header (8-byte length, JSON, space padding) of a file holding `tensors` in `order`, with
/// `metadata` as `__metadata__` (omitted when empty).
pub fn header(tensors: &[StTensor], order: &[usize], metadata: &[(String, String)]) -> Result<Vec<u8>, Error> {
    let js = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut json = String::from("{");
    if !metadata.is_empty() {
        json.push_str("\"__metadata__\":{");
        for (i, (k, v)) in metadata.iter().enumerate() {
            if i > 0 {
                json.push(',');
            }
            json.push_str(&format!("{}:{}", js(k), js(v)));
        }
        json.push('}');
    }
    let mut names = std::collections::HashSet::new();
    let mut offset = 0u64;
    for (i, &k) in order.iter().enumerate() {
        let t = tensors
            .get(k)
            .ok_or_else(|| Error::Safetensors(format!("the order names tensor #{k} of {}", tensors.len())))?;
        if t.name == "__metadata__" {
            return invalid("a tensor cannot be named \"__metadata__\" (the header's metadata key)".into());
        }
        if !names.insert(t.name.as_str()) {
            return invalid(format!("two tensors are named {:?}", t.name));
        }
        let n = t.nbytes().ok_or_else(|| {
            Error::Safetensors(format!(
                "{:?}: {} {:?} is not a whole number of bytes",
                t.name,
                t.dtype.name(),
                t.shape
            ))
        })?;
        let end = offset
            .checked_add(n)
            .ok_or_else(|| Error::Safetensors("the data section overflows 64 bits".into()))?;
        if i > 0 || !metadata.is_empty() {
            json.push(',');
        }
        let shape: Vec<String> = t.shape.iter().map(u64::to_string).collect();
        json.push_str(&format!(
            "{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{offset},{end}]}}",
            js(&t.name),
            t.dtype.name(),
            shape.join(",")
        ));
        offset = end;
    }
    json.push('}');
    let mut bytes = json.into_bytes();
    bytes.resize(bytes.len().next_multiple_of(8), b' ');
    if bytes.len() > MAX_HEADER {
        return invalid(format!(
            "the header would be {} bytes, over the format's {MAX_HEADER}-byte limit",
            bytes.len()
        ));
    }
    let mut out = Vec::with_capacity(8 + bytes.len());
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(&bytes);
    Ok(out)
}

/// A `.safetensors` file being written: the header is already out; tensor bytes follow in
/// [`SafetensorsFile::next_tensor`] order.
#[derive(Debug)]
pub struct SafetensorsFile {
    out: BufWriter<File>,
    pending: Pending,
    sizes: Vec<u64>,
    order: Vec<usize>,
    /// Position in `order`, and bytes of that tensor written so far.
    at: usize,
    written: u64,
    total: u64,
}

impl SafetensorsFile {
    /// Starts `dest` (under a temporary name in its folder) with the header of `tensors` and
    /// `metadata` (`__metadata__`, string values only, in the order given).
    pub fn publish(
        dest: impl AsRef<Path>,
        tensors: Vec<StTensor>,
        metadata: &[(String, String)],
    ) -> Result<SafetensorsFile, Error> {
        let dest = dest.as_ref().to_path_buf();
        let order = data_order(&tensors);
        let head = header(&tensors, &order, metadata)?;
        let sizes: Vec<u64> = order.iter().map(|&k| tensors[k].nbytes().unwrap_or(0)).collect();
        let (pending, file) = Pending::create(&dest)?;
        let mut w = SafetensorsFile {
            out: BufWriter::with_capacity(4 << 20, file),
            pending,
            total: head.len() as u64 + sizes.iter().sum::<u64>(),
            sizes,
            order,
            at: 0,
            written: 0,
        };
        w.put(&head)?;
        w.skip_empty();
        Ok(w)
    }

    /// The size the finished file will have.
    pub fn total_size(&self) -> u64 {
        self.total
    }

    /// The index (into the list given to [`publish`](Self::publish)) of the tensor whose bytes
    /// come next; `None` once every tensor is written.
    pub fn next_tensor(&self) -> Option<usize> {
        self.order.get(self.at).copied()
    }

    fn skip_empty(&mut self) {
        while self.sizes.get(self.at).is_some_and(|&n| n == self.written) {
            self.at += 1;
            self.written = 0;
        }
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.out
            .write_all(bytes)
            .map_err(Error::at(self.pending.dest(), "write"))
    }

    /// Writes (part of) the current tensor's bytes. Chunks may split a tensor anywhere, but may
    /// not run past its end.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let Some(&size) = self.sizes.get(self.at) else {
            return invalid(format!("{} bytes given after the last tensor", bytes.len()));
        };
        if self.written + bytes.len() as u64 > size {
            return invalid(format!(
                "tensor #{} has {size} bytes; {} more were given after {}",
                self.order[self.at],
                bytes.len(),
                self.written
            ));
        }
        self.put(bytes)?;
        self.written += bytes.len() as u64;
        self.skip_empty();
        Ok(())
    }

    /// Checks that every tensor's bytes were written, fsyncs, and renames the file into place.
    pub fn finish(self) -> Result<PathBuf, Error> {
        if let Some(k) = self.next_tensor() {
            return invalid(format!("tensor #{k} is not complete ({} bytes written)", self.written));
        }
        let file = self
            .out
            .into_inner()
            .map_err(|e| Error::io(self.pending.dest(), "write", e.into_error()))?;
        self.pending.commit(&file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::tensor::{Dtype, TensorView};
    use std::fs;

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tl-st-write-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn same_bytes_as_the_safetensors_crate() {
        let d = temp("same");
        let a: Vec<u8> = (0..24).collect();
        let b: Vec<u8> = (0..6).map(|i| i * 3).collect();
        let c: Vec<u8> = vec![1, 0, 1];
        let e: Vec<u8> = Vec::new();
        let f4: Vec<u8> = vec![0x21, 0x43];
        let views = vec![
            ("b.half", TensorView::new(Dtype::F16, vec![3], &b).unwrap()),
            ("a", TensorView::new(Dtype::F32, vec![2, 3], &a).unwrap()),
            ("flags", TensorView::new(Dtype::BOOL, vec![3], &c).unwrap()),
            ("empty", TensorView::new(Dtype::I64, vec![0, 4], &e).unwrap()),
            ("q\"uote", TensorView::new(Dtype::F4, vec![4], &f4).unwrap()),
        ];
        let meta: std::collections::HashMap<String, String> = [("format".to_string(), "pt".to_string())].into();
        let want = safetensors::serialize(views.clone(), Some(meta)).unwrap();

        let tensors = vec![
            StTensor::new("b.half", StDtype::F16, vec![3]),
            StTensor::new("a", StDtype::F32, vec![2, 3]),
            StTensor::new("flags", StDtype::BOOL, vec![3]),
            StTensor::new("empty", StDtype::I64, vec![0, 4]),
            StTensor::new("q\"uote", StDtype::F4, vec![4]),
        ];
        let data = [&b[..], &a, &c, &e, &f4];
        let p = d.join("x.safetensors");
        let mut w = SafetensorsFile::publish(&p, tensors, &[("format".into(), "pt".into())]).unwrap();
        while let Some(i) = w.next_tensor() {
            // In two pieces, to check chunking.
            let (x, y) = data[i].split_at(data[i].len() / 2);
            w.write(x).unwrap();
            w.write(y).unwrap();
        }
        assert_eq!(w.total_size(), want.len() as u64);
        w.finish().unwrap();
        assert_eq!(fs::read(&p).unwrap(), want);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn refusals_leave_nothing_behind() {
        let d = temp("refuse");
        let p = d.join("x.safetensors");
        let dup = vec![
            StTensor::new("a", StDtype::U8, vec![1]),
            StTensor::new("a", StDtype::U8, vec![1]),
        ];
        assert!(matches!(
            SafetensorsFile::publish(&p, dup, &[]),
            Err(Error::Safetensors(m)) if m.contains("two tensors")
        ));
        let odd = vec![StTensor::new("a", StDtype::F4, vec![3])];
        assert!(SafetensorsFile::publish(&p, odd, &[]).is_err());
        let reserved = vec![StTensor::new("__metadata__", StDtype::U8, vec![1])];
        assert!(SafetensorsFile::publish(&p, reserved, &[]).is_err());
        let mut w = SafetensorsFile::publish(&p, vec![StTensor::new("a", StDtype::U8, vec![2])], &[]).unwrap();
        assert!(w.write(&[1, 2, 3]).is_err());
        w.write(&[1]).unwrap();
        drop(w);
        let w = SafetensorsFile::publish(&p, vec![StTensor::new("a", StDtype::U8, vec![2])], &[]).unwrap();
        assert!(w.finish().is_err());
        assert!(
            fs::read_dir(&d).unwrap().next().is_none(),
            "temporary files left behind"
        );
        fs::remove_dir_all(&d).unwrap();
    }
}
