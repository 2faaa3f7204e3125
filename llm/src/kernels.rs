//! Weights in their stored form and the CPU kernels over them: a weight matrix stays as the
//! file's bytes (borrowed from the map) and each product dequantizes one row at a time into a
//! small per-thread buffer, then takes its dot products with every input vector in f32.

use std::borrow::Cow;
use std::sync::OnceLock;

use crate::par::prelude::*;
use tensorlane_core::dtype::DType;
use tensorlane_core::formats::ggml::{self, GgmlType};
use tensorlane_core::formats::{ElementType, TensorInfo};

use crate::{Error, Result};

/// Weight rows per tile of a product with several inputs (a prompt).
const TILE_ROWS: usize = 16;
/// Inputs per block of such a product (kept in the first-level cache).
const TILE_INPUTS: usize = 8;

/// How a matrix's elements are stored (ggml's type names).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_K,
    Q6_K,
    /// Any other ggml block type: decoded by `tensorlane_core::formats::ggml`.
    Other(GgmlType),
}

impl Kind {
    /// The kind of a catalog element type, if it can be computed with.
    pub(crate) fn of(ty: ElementType) -> Option<Kind> {
        Some(match ty {
            ElementType::Dense(DType::F32) => Kind::F32,
            ElementType::Dense(DType::F16) => Kind::F16,
            ElementType::Dense(DType::BF16) => Kind::BF16,
            ElementType::Ggml(GgmlType(0)) => Kind::F32,
            ElementType::Ggml(GgmlType(1)) => Kind::F16,
            ElementType::Ggml(GgmlType(30)) => Kind::BF16,
            ElementType::Ggml(GgmlType(8)) => Kind::Q8_0,
            ElementType::Ggml(GgmlType(2)) => Kind::Q4_0,
            ElementType::Ggml(GgmlType(12)) => Kind::Q4_K,
            ElementType::Ggml(GgmlType(14)) => Kind::Q6_K,
            ElementType::Ggml(g) if g.is_quantized() && ggml::can_dequantize(g) => Kind::Other(g),
            _ => return None,
        })
    }

    /// `(elements, bytes)` per block.
    fn block(self) -> (usize, usize) {
        match self {
            Kind::F32 => (1, 4),
            Kind::F16 | Kind::BF16 => (1, 2),
            Kind::Q8_0 => (32, 34),
            Kind::Q4_0 => (32, 18),
            Kind::Q4_K => (256, 144),
            Kind::Q6_K => (256, 210),
            Kind::Other(g) => (
                g.block_size().unwrap_or(1) as usize,
                g.type_size().unwrap_or(1) as usize,
            ),
        }
    }
}

/// A `[rows, cols]` weight matrix in its stored form.
///
/// Under a budget ([`Matrix::split_at`]) only a prefix of its bytes is resident (an owned copy,
/// made once); the rest is streamed: copied from the model's map into `staged` before each use
/// ([`Matrix::stage`]) and dropped after it ([`Matrix::unstage`]).
#[derive(Debug)]
pub(crate) struct Matrix<'m> {
    pub name: String,
    pub kind: Kind,
    pub rows: usize,
    pub cols: usize,
    row_bytes: usize,
    /// The stored bytes as the model gives them (the map).
    data: Cow<'m, [u8]>,
    /// Bytes `..split` are resident, `split..` streamed (`split == data.len()`: all resident).
    split: usize,
    /// Under a budget, the resident prefix (copied once).
    resident: Option<Vec<u8>>,
    /// The streamed bytes of the current use.
    staged: Vec<u8>,
    /// The row that straddles `split`, put together from both parts.
    boundary: Vec<u8>,
    /// How long the last [`Matrix::stage`] took to copy (zero when nothing was copied).
    pub staged_in: std::time::Duration,
    /// A matrix whose streamed bytes are not in `data` (which then holds only the resident
    /// prefix) but read from the host at each use ([`Matrix::hosted`]).
    external: Option<External>,
    /// A matrix whose streamed bytes are read from the model file by the disk tier
    /// ([`Matrix::put_on_disk`]): `data` then holds only the resident prefix.
    disk: Option<Disk>,
    /// The streamed bytes of the current use, as the disk tier read them.
    #[cfg(feature = "native")]
    filled: Option<crate::disk::Filled>,
}

/// Where a matrix's bytes lie in the model file, for the disk tier.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Disk {
    /// The first stored byte's offset in the file.
    pub offset: u64,
    /// Stored bytes.
    pub len: usize,
    /// Rows are read one at a time where a forward pass looks them up (an embedding that is not
    /// the output), not streamed whole.
    pub gather: bool,
}

/// Reads `out.len()` bytes at byte `offset` of the model file into `out`, or says why it cannot:
/// how a host without a mapped file (the browser: File slices, HTTP Range) hands the executor
/// the streamed bytes of a weight ([`Matrix::hosted`]). A plain function, so a matrix stays
/// `Send` and `Sync` whatever the host keeps behind it.
pub type ReadAt = fn(offset: u64, out: &mut [u8]) -> std::result::Result<(), String>;

/// Where a hosted matrix's streamed bytes come from.
#[derive(Debug)]
struct External {
    read: ReadAt,
    /// The tensor's first byte in the file.
    offset: u64,
    /// Its stored bytes.
    len: usize,
    /// The last read's failure (the staged bytes are zeros then); taken by [`Matrix::take_error`].
    error: Option<String>,
}

impl<'m> Matrix<'m> {
    /// Wraps a tensor's stored bytes; `t` must be 2-D (the caller checked its shape).
    pub(crate) fn new(t: &TensorInfo, data: Cow<'m, [u8]>) -> Result<Matrix<'m>> {
        let (kind, rows, cols, row_bytes) = Matrix::layout(t)?;
        if data.len() != rows * row_bytes {
            return Err(Error::TensorType {
                name: t.name.clone(),
                ty: format!(
                    "{} with {} stored bytes for {rows} rows of {row_bytes} bytes",
                    t.ty.name(),
                    data.len()
                ),
            });
        }
        let split = data.len();
        Ok(Matrix {
            name: t.name.clone(),
            kind,
            rows,
            cols,
            row_bytes,
            data,
            split,
            resident: None,
            staged: Vec::new(),
            boundary: Vec::new(),
            staged_in: std::time::Duration::ZERO,
            external: None,
            disk: None,
            #[cfg(feature = "native")]
            filled: None,
        })
    }

    /// Stored bytes of the whole matrix.
    pub(crate) fn stored_bytes(&self) -> usize {
        match (&self.external, &self.disk) {
            (Some(e), _) => e.len,
            (None, Some(d)) => d.len,
            (None, None) => self.data.len(),
        }
    }

    /// Where the disk tier reads this matrix from (`None`: not from disk).
    pub(crate) fn disk(&self) -> Option<Disk> {
        self.disk
    }

    /// The stored bytes as the model gives them, when they are in memory (a mapped file's view
    /// before [`Matrix::put_on_disk`]; `None` after it).
    pub(crate) fn mapped_bytes(&self) -> Option<&[u8]> {
        match (&self.external, &self.disk, &self.data) {
            (None, None, Cow::Borrowed(b)) => Some(b),
            _ => None,
        }
    }

    /// Puts this matrix on the disk tier: `resident` (its first bytes, read from the file) stays
    /// in memory, the rest is read from byte `offset + resident.len()` of the file at each use
    /// (or row by row where it is looked up, when `gather`). The map's view is dropped, so its
    /// pages are not touched again.
    pub(crate) fn put_on_disk(&mut self, offset: u64, resident: Vec<u8>, gather: bool) {
        let len = self.stored_bytes();
        self.split = resident.len().min(len);
        self.data = Cow::Owned(resident);
        self.resident = None;
        self.disk = Some(Disk { offset, len, gather });
    }

    /// Bytes of one stored row.
    pub(crate) fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// A stored row (`row_bytes` long, e.g. read from the file) as f32 into `out`.
    pub(crate) fn dequantize_into(&self, row: &[u8], out: &mut [f32]) {
        dequantize_row(self.kind, row, out);
    }

    /// Takes the streamed bytes of a use as the disk tier read them (after [`Matrix::put_on_disk`]);
    /// returns how many.
    #[cfg(feature = "native")]
    pub(crate) fn stage_filled(&mut self, f: crate::disk::Filled) -> u64 {
        let rb = self.row_bytes;
        let n = f.bytes().len() as u64;
        if !self.split.is_multiple_of(rb) {
            let start = self.split / rb * rb;
            self.boundary.clear();
            self.boundary.extend_from_slice(&self.data[start..self.split]);
            self.boundary.extend_from_slice(&f.bytes()[..start + rb - self.split]);
        }
        self.filled = Some(f);
        n
    }

    /// The disk tier's buffer of the last use, to hand back to its ring.
    #[cfg(feature = "native")]
    pub(crate) fn take_filled(&mut self) -> Option<crate::disk::Filled> {
        self.filled.take()
    }

    /// The streamed bytes of the current use.
    fn streamed_part(&self) -> &[u8] {
        #[cfg(feature = "native")]
        if let Some(f) = &self.filled {
            return f.bytes();
        }
        &self.staged
    }

    /// Reads one byte of every 4 KiB page of the first `upto` stored bytes, so that a mapped
    /// file's pages are in memory before the first forward pass; `progress(bytes)` after each
    /// 16 MiB and at the end.
    pub(crate) fn touch(&self, upto: usize, progress: &mut dyn FnMut(u64)) {
        if self.disk.is_some() {
            return;
        }
        let data = &self.data[..upto.min(self.data.len())];
        for piece in data.chunks(16 << 20) {
            let mut acc = 0u8;
            for i in (0..piece.len()).step_by(4096) {
                acc ^= piece[i];
            }
            std::hint::black_box(acc);
            progress(piece.len() as u64);
        }
    }

    /// Keeps the first `resident` bytes (copied now) and streams the rest at each use.
    pub(crate) fn split_at(&mut self, resident: usize) {
        let resident = resident.min(self.data.len());
        self.split = resident;
        self.resident = Some(self.data[..resident].to_vec());
    }

    /// Bytes streamed at each use (none for a matrix whose rows are read one at a time where
    /// they are looked up: the plan counts a gathered embedding as kept on the host).
    pub(crate) fn streamed_bytes(&self) -> usize {
        if self.disk.is_some_and(|d| d.gather) {
            return 0;
        }
        self.stored_bytes() - self.split
    }

    /// Copies the streamed bytes in for a use; returns how many were copied.
    pub(crate) fn stage(&mut self) -> u64 {
        if let Some(e) = &mut self.external {
            return Self::stage_hosted(e, self.split, self.row_bytes, &self.data, &mut self.staged, &mut self.boundary);
        }
        // The disk tier's bytes come in through `stage_filled`.
        if self.disk.is_some() || self.split == self.data.len() || !self.staged.is_empty() {
            self.staged_in = std::time::Duration::ZERO;
            return 0;
        }
        #[cfg(not(target_arch = "wasm32"))]
        let t0 = std::time::Instant::now();
        self.staged.extend_from_slice(&self.data[self.split..]);
        let rb = self.row_bytes;
        if !self.split.is_multiple_of(rb) {
            let start = self.split / rb * rb;
            let resident = self.resident.as_deref().unwrap_or(&self.data[..self.split]);
            self.boundary.clear();
            self.boundary.extend_from_slice(&resident[start..self.split]);
            self.boundary.extend_from_slice(&self.staged[..start + rb - self.split]);
        }
        // (std's clock panics on wasm32-unknown-unknown: the browser runner times reads itself)
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.staged_in = t0.elapsed();
        }
        self.staged.len() as u64
    }

    /// Drops the streamed bytes after a use.
    pub(crate) fn unstage(&mut self) {
        self.staged = Vec::new();
    }

    /// Row `r`'s stored bytes (from the resident part, the staged part, or the straddling row).
    fn row(&self, r: usize) -> &[u8] {
        let (s, e) = (r * self.row_bytes, (r + 1) * self.row_bytes);
        if e <= self.split {
            match &self.resident {
                Some(v) => &v[s..e],
                None => &self.data[s..e],
            }
        } else if s >= self.split {
            &self.streamed_part()[s - self.split..e - self.split]
        } else {
            &self.boundary
        }
    }

    /// Row `r` as f32 into `out` (`cols` long).
    pub(crate) fn row_into(&self, r: usize, out: &mut [f32]) {
        dequantize_row(self.kind, self.row(r), out);
    }

    /// [`matmul`](Self::matmul) with the inputs quantized ([`QuantX`]): integer dot products per
    /// block, no dequantized row.
    fn matmul_quantized(&self, x: &QuantX, out: &mut [f32], pool: &crate::par::ThreadPool) {
        let n = x.vectors();
        let threads = pool.current_num_threads().max(1);
        let rows_per = self.rows.div_ceil(threads * 4).max(1);
        let row = |r: usize| self.row(r);
        if n == 1 {
            pool.install(|| {
                out.par_chunks_mut(rows_per).enumerate().for_each(|(ci, o)| {
                    // four rows a pass where a kernel takes them (four independent sums, the
                    // input read once), each bit for bit its row's own product
                    let mut j = 0;
                    while j + 4 <= o.len() {
                        let r = ci * rows_per + j;
                        match x.dot_rows4(self.kind, [row(r), row(r + 1), row(r + 2), row(r + 3)]) {
                            Some(v) => o[j..j + 4].copy_from_slice(&v),
                            None => break,
                        }
                        j += 4;
                    }
                    for (j, y) in o.iter_mut().enumerate().skip(j) {
                        *y = x.dot(self.kind, row(ci * rows_per + j), 0);
                    }
                })
            });
            return;
        }
        let mut t = vec![0f32; n * self.rows];
        pool.install(|| {
            t.par_chunks_mut(rows_per * n).enumerate().for_each(|(ci, o)| {
                // Tiles of TILE_ROWS weight rows (kept in cache) times blocks of TILE_INPUTS
                // inputs: each weight row is read from memory once, each input block once per tile.
                let rows_here = o.len() / n;
                for t0 in (0..rows_here).step_by(TILE_ROWS) {
                    let t1 = (t0 + TILE_ROWS).min(rows_here);
                    for i0 in (0..n).step_by(TILE_INPUTS) {
                        let i1 = (i0 + TILE_INPUTS).min(n);
                        for j in t0..t1 {
                            let w = row(ci * rows_per + j);
                            let mut i = i0;
                            while i + 8 <= i1 {
                                match x.dot8(self.kind, w, i) {
                                    Some(v) => o[j * n + i..j * n + i + 8].copy_from_slice(&v),
                                    None => break,
                                }
                                i += 8;
                            }
                            while i + 4 <= i1 {
                                o[j * n + i..j * n + i + 4].copy_from_slice(&x.dot4(self.kind, w, i));
                                i += 4;
                            }
                            for i in i..i1 {
                                o[j * n + i] = x.dot(self.kind, w, i);
                            }
                        }
                    }
                }
            })
        });
        transpose_into(&t, n, self.rows, out);
    }

    /// [`matmul`](Self::matmul) of `n = x.len() / cols` independent input vectors (one per
    /// sequence of a batched decode step), each output equal bit for bit to what `matmul` gives
    /// for that input alone (`n == 1`: the same rounding of the activations, the same dot product
    /// per weight row), while each weight row is read from memory once for all the inputs.
    pub(crate) fn matmul_each(&self, x: &[f32], out: &mut [f32], pool: &crate::par::ThreadPool) {
        let cols = self.cols;
        let n = x.len() / cols;
        if n <= 1 {
            return self.matmul(x, out, pool);
        }
        debug_assert_eq!(out.len(), n * self.rows);
        let threads = pool.current_num_threads().max(1);
        let rows_per = self.rows.div_ceil(threads * 4).max(1);
        let mut t = vec![0f32; n * self.rows];
        if let Some(mut q) = QuantX::new(self.kind, x, cols) {
            q.q4_k_interleaved = q4_k_interleaved(self.kind, self.rows);
            let dt = &q.scales_by_block();
            pool.install(|| {
                t.par_chunks_mut(rows_per * n).enumerate().for_each(|(ci, o)| {
                    for j in 0..o.len() / n {
                        let w = self.row(ci * rows_per + j);
                        let mut i = 0;
                        while i + 4 <= n {
                            o[j * n + i..j * n + i + 4].copy_from_slice(&q.dot4_exact(self.kind, w, i, dt));
                            i += 4;
                        }
                        for i in i..n {
                            o[j * n + i] = q.dot(self.kind, w, i);
                        }
                    }
                })
            });
        } else {
            // Rounded vector by vector, as `matmul` rounds a single one.
            let x: Vec<f32> = x
                .chunks_exact(cols)
                .flat_map(|v| round_activations(self.kind, v).into_owned())
                .collect();
            let x = &x;
            pool.install(|| {
                t.par_chunks_mut(rows_per * n).enumerate().for_each_init(
                    || vec![0f32; cols],
                    |buf, (ci, o)| {
                        for j in 0..o.len() / n {
                            let r = ci * rows_per + j;
                            let row = self.row(r);
                            let xi = |i: usize| &x[i * cols..(i + 1) * cols];
                            if let Some(v) = dot_16(self.kind, row, xi(0)) {
                                o[j * n] = v;
                                for i in 1..n {
                                    o[j * n + i] = dot_16(self.kind, row, xi(i)).unwrap_or(f32::NAN);
                                }
                            } else {
                                self.row_into(r, buf);
                                for i in 0..n {
                                    o[j * n + i] = dot(buf, xi(i));
                                }
                            }
                        }
                    },
                )
            });
        }
        transpose_into(&t, n, self.rows, out);
    }

    /// `out[i][r] = Σ_c W[r][c] · x[i][c]` for `n = x.len() / cols` input vectors:
    /// `out` is `n × rows`. Output rows are spread over the pool's threads.
    pub(crate) fn matmul(&self, x: &[f32], out: &mut [f32], pool: &crate::par::ThreadPool) {
        if let Some(mut q) = QuantX::new(self.kind, x, self.cols) {
            q.q4_k_interleaved = q4_k_interleaved(self.kind, self.rows);
            return self.matmul_quantized(&q, out, pool);
        }
        let x = &*round_activations(self.kind, x);
        let n = x.len() / self.cols;
        debug_assert_eq!(x.len(), n * self.cols);
        debug_assert_eq!(out.len(), n * self.rows);
        let threads = pool.current_num_threads().max(1);
        // Enough chunks to balance the threads, each a few rows at least.
        let rows_per = self.rows.div_ceil(threads * 4).max(1);
        let cols = self.cols;
        if n == 1 {
            pool.install(|| {
                out.par_chunks_mut(rows_per).enumerate().for_each_init(
                    || vec![0f32; cols],
                    |buf, (ci, o)| {
                        for (j, y) in o.iter_mut().enumerate() {
                            let r = ci * rows_per + j;
                            *y = match dot_16(self.kind, self.row(r), x) {
                                Some(v) => v,
                                None => {
                                    self.row_into(r, buf);
                                    dot(buf, x)
                                }
                            };
                        }
                    },
                )
            });
            return;
        }
        // Several inputs: each weight row is dequantized once and used n times; the result is
        // computed transposed (rows × n) and then put back in order.
        let mut t = vec![0f32; n * self.rows];
        let rows_per = rows_per.next_multiple_of(4);
        pool.install(|| {
            t.par_chunks_mut(rows_per * n).enumerate().for_each_init(
                || vec![0f32; TILE_ROWS * cols],
                |buf, (ci, o)| {
                    // Tiles of TILE_ROWS rows dequantized once into `buf`, times blocks of
                    // TILE_INPUTS inputs, four rows at a time (each input read once per four).
                    let rows_here = o.len() / n;
                    for t0 in (0..rows_here).step_by(TILE_ROWS) {
                        let t1 = (t0 + TILE_ROWS).min(rows_here);
                        for j in t0..t1 {
                            self.row_into(ci * rows_per + j, &mut buf[(j - t0) * cols..(j - t0 + 1) * cols]);
                        }
                        for i0 in (0..n).step_by(TILE_INPUTS) {
                            let i1 = (i0 + TILE_INPUTS).min(n);
                            for q0 in (t0..t1).step_by(4) {
                                let q1 = (q0 + 4).min(t1);
                                let w = &buf[(q0 - t0) * cols..(q1 - t0) * cols];
                                for i in i0..i1 {
                                    let xi = &x[i * cols..(i + 1) * cols];
                                    if q1 - q0 == 4 {
                                        let d = dot4(w, xi);
                                        for k in 0..4 {
                                            o[(q0 + k) * n + i] = d[k];
                                        }
                                    } else {
                                        for k in q0..q1 {
                                            o[k * n + i] = dot(&w[(k - q0) * cols..(k - q0 + 1) * cols], xi);
                                        }
                                    }
                                }
                            }
                        }
                    }
                },
            )
        });
        transpose_into(&t, n, self.rows, out);
    }
}

/// Inputs `i..i + 4` of `v`, `len` values each: what a four-input kernel takes (built without
/// closures, which the compiler left uninlined around the prompt's kernels: 9% of a prompt).
#[inline(always)]
fn four<T>(v: &[T], i: usize, len: usize) -> [&[T]; 4] {
    let (a, rest) = v[i * len..(i + 4) * len].split_at(len);
    let (b, rest) = rest.split_at(len);
    let (c, d) = rest.split_at(len);
    [a, b, c, d]
}

/// [`four`] for inputs `i..i + 8`.
#[inline(always)]
fn eight<T>(v: &[T], i: usize, len: usize) -> [&[T]; 8] {
    let ([a, b, c, d], [e, f, g, h]) = (four(v, i, len), four(v, i + 4, len));
    [a, b, c, d, e, f, g, h]
}

/// `out[i * rows + r] = t[r * n + i]`: a product's results, computed row by row (`rows × n`),
/// put in input order (`n × rows`), in tiles of 16 × 16 so that each cache line written is
/// filled at once (one value at a time, a prompt's transposes took 5% of its time).
fn transpose_into(t: &[f32], n: usize, rows: usize, out: &mut [f32]) {
    const TILE: usize = 16;
    debug_assert!(t.len() == n * rows && out.len() == n * rows);
    for r0 in (0..rows).step_by(TILE) {
        let r1 = (r0 + TILE).min(rows);
        for i0 in (0..n).step_by(TILE) {
            for i in i0..(i0 + TILE).min(n) {
                let o = &mut out[i * rows + r0..i * rows + r1];
                for (r, y) in (r0..r1).zip(o) {
                    *y = t[r * n + i];
                }
            }
        }
    }
}

/// Matrices whose streamed part the host reads in at each use (no mapped file: wasm32).
impl Matrix<'static> {
    /// A matrix of tensor `t` (stored at byte `offset` of the file, `len` bytes) whose first
    /// `resident.len()` bytes are `resident` and whose other bytes `read` fetches at each use
    /// ([`Matrix::stage`]). Shape and type are checked as [`Matrix::new`] checks them, the
    /// resident prefix against the stored length.
    pub(crate) fn hosted(t: &TensorInfo, resident: Vec<u8>, offset: u64, len: u64, read: ReadAt) -> Result<Matrix<'static>> {
        let len = usize::try_from(len).map_err(|_| Error::TensorType {
            name: t.name.clone(),
            ty: format!("{} with {len} stored bytes, more than this machine addresses", t.ty.name()),
        })?;
        if resident.len() > len {
            return Err(Error::Options(format!(
                "tensor {}: {} resident bytes were handed in for a tensor of {len} bytes",
                t.name,
                resident.len()
            )));
        }
        let (kind, rows, cols, row_bytes) = Self::layout(t)?;
        if len != rows * row_bytes {
            return Err(Error::TensorType {
                name: t.name.clone(),
                ty: format!("{} with {len} stored bytes for {rows} rows of {row_bytes} bytes", t.ty.name()),
            });
        }
        let split = resident.len();
        Ok(Matrix {
            name: t.name.clone(),
            kind,
            rows,
            cols,
            row_bytes,
            data: Cow::Owned(resident),
            split,
            resident: None,
            staged: Vec::new(),
            boundary: Vec::new(),
            staged_in: std::time::Duration::ZERO,
            external: Some(External {
                read,
                offset,
                len,
                error: None,
            }),
            disk: None,
            #[cfg(feature = "native")]
            filled: None,
        })
    }
}

impl Matrix<'_> {
    /// `(kind, rows, cols, row bytes)` of tensor `t`, or why it cannot be computed with.
    fn layout(t: &TensorInfo) -> Result<(Kind, usize, usize, usize)> {
        let kind = Kind::of(t.ty).ok_or_else(|| Error::TensorType {
            name: t.name.clone(),
            ty: t.ty.name().into(),
        })?;
        let (rows, cols) = match t.shape[..] {
            [r, c] => (r as usize, c as usize),
            [c] => (1, c as usize),
            _ => {
                return Err(Error::TensorShape {
                    name: t.name.clone(),
                    expected: vec![0, 0],
                    found: t.shape.clone(),
                });
            }
        };
        let (block, bytes) = kind.block();
        if !cols.is_multiple_of(block) {
            return Err(Error::TensorType {
                name: t.name.clone(),
                ty: format!("{} with rows of {cols} elements (not whole blocks of {block})", t.ty.name()),
            });
        }
        let row_bytes = (cols / block).checked_mul(bytes).filter(|rb| rows.checked_mul(*rb).is_some()).ok_or_else(|| {
            Error::TensorType {
                name: t.name.clone(),
                ty: format!("{} of shape {:?}, more bytes than this machine addresses", t.ty.name(), t.shape),
            }
        })?;
        Ok((kind, rows, cols, row_bytes))
    }

    /// [`Matrix::stage`] of a hosted matrix: its streamed bytes read from the host (zeros and
    /// the error kept when the read fails, so the pass ends and the caller reports it).
    fn stage_hosted(
        e: &mut External,
        split: usize,
        rb: usize,
        resident: &[u8],
        staged: &mut Vec<u8>,
        boundary: &mut Vec<u8>,
    ) -> u64 {
        if split == e.len || !staged.is_empty() {
            return 0;
        }
        staged.resize(e.len - split, 0);
        if let Err(why) = (e.read)(e.offset + split as u64, staged) {
            staged.fill(0);
            e.error.get_or_insert(why);
        }
        if !split.is_multiple_of(rb) {
            let start = split / rb * rb;
            boundary.clear();
            boundary.extend_from_slice(&resident[start..split]);
            boundary.extend_from_slice(&staged[..start + rb - split]);
        }
        staged.len() as u64
    }

    /// The failure of a read of this matrix's streamed bytes since the last call, if any.
    pub(crate) fn take_error(&mut self) -> Option<String> {
        self.external.as_mut().and_then(|e| e.error.take())
    }
}

/// The activations as llama.cpp's CPU backend rounds them before a product with weights of
/// `kind` (its `vec_dot_type`): to f16 for F16 weights, to bf16 for BF16, to 8-bit blocks of 32
/// with an f16 scale (Q8_0, and Q8_1 for Q4_1 and Q5_1: the same values, plus each block's sum,
/// which [`QuantX`] keeps) for the 32-element block types, to 8-bit blocks of 256 with an f32
/// scale (Q8_K) for the K-quants and IQ4_XS; F32 and other types are left as they are. The product is then
/// taken in f32 over the rounded values, so results agree with llama.cpp's to float rounding.
pub(crate) fn round_activations(kind: Kind, x: &[f32]) -> Cow<'_, [f32]> {
    let t = f16_table();
    match kind {
        Kind::F32 => Cow::Borrowed(x),
        Kind::F16 => Cow::Owned(
            x.iter()
                .map(|&v| t[half::f16::from_f32(v).to_bits() as usize])
                .collect(),
        ),
        Kind::BF16 => Cow::Owned(
            x.iter()
                .map(|&v| {
                    let u = v.to_bits();
                    let h = if u & 0x7fff_ffff > 0x7f80_0000 {
                        (u >> 16) | 64
                    } else {
                        (u + (0x7fff + ((u >> 16) & 1))) >> 16
                    };
                    f32::from_bits(h << 16)
                })
                .collect(),
        ),
        Kind::Q8_0 | Kind::Q4_0 | Kind::Other(GgmlType(Q4_1 | Q5_0 | Q5_1 | IQ4_NL)) if x.len().is_multiple_of(32) => {
            let mut y = x.to_vec();
            for b in y.chunks_exact_mut(32) {
                let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
                let d = t[half::f16::from_f32(amax / 127.0).to_bits() as usize];
                let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
                for v in b.iter_mut() {
                    *v = (*v * id).round_ties_even() * d;
                }
            }
            Cow::Owned(y)
        }
        Kind::Q4_K | Kind::Q6_K | Kind::Other(GgmlType(Q2_K | Q3_K | Q5_K | IQ4_XS)) if x.len().is_multiple_of(256) => {
            let mut y = x.to_vec();
            for b in y.chunks_exact_mut(256) {
                let (mut amax, mut max) = (0f32, 0f32);
                for &v in b.iter() {
                    if v.abs() > amax {
                        amax = v.abs();
                        max = v;
                    }
                }
                if amax == 0.0 {
                    b.fill(0.0);
                    continue;
                }
                let iscale = -127.0 / max;
                let d = 1.0 / iscale;
                for v in b.iter_mut() {
                    *v = (iscale * *v).round_ties_even().min(127.0) * d;
                }
            }
            Cow::Owned(y)
        }
        _ => Cow::Borrowed(x),
    }
}

/// Input vectors quantized the way llama.cpp's CPU backend quantizes activations for the block
/// types with an integer dot product here: Q8_0 blocks (32 values, f16 scale) for Q8_0, Q4_0 and
/// Q5_0 weights, Q8_1 blocks (Q8_0's values and scale, plus `s`, the block's f32 scale times the
/// sum of its values, rounded to f16) for Q4_1 and Q5_1, Q8_K blocks (256 values, f32 scale, sums
/// of 16: llama.cpp's `bsums`) for the K-quants Q2_K, Q3_K, Q4_K, Q5_K and Q6_K and for IQ4_XS. The same values as [`round_activations`]; kept as integers so each
/// block's dot product is an exact integer sum.
pub(crate) struct QuantX {
    /// Values per input vector.
    cols: usize,
    /// Values per block.
    block: usize,
    /// One scale per block, all vectors back to back.
    d: Vec<f32>,
    /// The quantized values, all vectors back to back.
    q: Vec<i8>,
    /// `q` widened to i16, for the simd128 kernels (wasm has no 8-bit multiply-add).
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    q16: Vec<i16>,
    /// Q8_K: the sum of each 16 quantized values (llama.cpp's `block_q8_K::bsums`; |sum| <= 2032).
    sums: Vec<i16>,
    /// Q8_1 (Q4_1 and Q5_1 weights): each block's `s`, one per block as `d`; empty otherwise.
    s: Vec<f32>,
    /// Q4_K weights of a matrix whose rows llama.cpp interleaves (see [`q4_k_interleaved`]):
    /// each row's products summed in the order of its repacked kernels, not `vec_dot`'s.
    q4_k_interleaved: bool,
}

/// Whether llama.cpp's CPU backend computes a Q4_K matrix of `rows` rows with its repacked
/// kernels (`ggml_gemv_q4_K_8x8_q8_K` / `ggml_gemm_q4_K_8x8_q8_K`): on an AVX2 CPU it
/// interleaves the rows of every Q4_K matrix with a multiple of 8 rows at load. Their sums
/// differ from `ggml_vec_dot_q4_K_q8_K`'s by float rounding: each block's integer products are
/// summed exactly, converted once and multiply-added in block order (`d_w · d_x` and `dmin_w ·
/// d_x` as the factors), then the mins' sum is subtracted from the scales' sum. The kernels here
/// follow that order for such matrices (on any CPU, so that the portable kernel and the AVX2
/// one agree bit for bit), and `vec_dot`'s for the others.
pub(crate) fn q4_k_interleaved(kind: Kind, rows: usize) -> bool {
    kind == Kind::Q4_K && rows.is_multiple_of(8)
}

/// The 16 scale-and-min bytes of a Q4_K block (`blk[4..16]`, 6 bits each) unpacked as
/// llama.cpp's `utmp`: eight scales, then eight mins, one byte each.
#[inline(always)]
fn q4_k_scales_mins(blk: &[u8]) -> [u32; 4] {
    let (k1, k2, k3) = (0x3f3f_3f3fu32, 0x0f0f_0f0fu32, 0x0303_0303u32);
    let u = |k: usize| u32::from_le_bytes([blk[4 + 4 * k], blk[5 + 4 * k], blk[6 + 4 * k], blk[7 + 4 * k]]);
    let mut utmp = [u(0), u(1), u(2), 0];
    utmp[3] = ((utmp[2] >> 4) & k2) | (((utmp[1] >> 6) & k3) << 4);
    let uaux = utmp[1] & k1;
    utmp[1] = (utmp[2] & k2) | (((utmp[0] >> 6) & k3) << 4);
    utmp[2] = uaux;
    utmp[0] &= k1;
    utmp
}

/// One block of 32 values `b` quantized as llama.cpp's `quantize_row_q8_0` does into `qb`
/// (values `round(v * 127 / amax)`, half to even); returns the block's largest magnitude (its
/// scale is `amax / 127` as f16). Vectorized where the CPU has AVX2.
fn quantize_block_q8_0(b: &[f32], qb: &mut [i8]) -> f32 {
    // the block's largest magnitude where the vector code quantized it
    #[cfg(target_arch = "x86_64")]
    let vector = if simd() {
        // SAFETY: simd() checked AVX2 and FMA; x86::quantize_q8_0 checks the lengths.
        unsafe { x86::quantize_q8_0(b, qb) }
    } else {
        None
    };
    #[cfg(not(target_arch = "x86_64"))]
    let vector = None;
    vector.unwrap_or_else(|| {
        let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        for (o, v) in qb.iter_mut().zip(b) {
            *o = (v * id).round_ties_even() as i8;
        }
        amax
    })
}

/// One block of 256 values `b` quantized as llama.cpp's `quantize_row_q8_K` does into `qb`
/// (the value of largest magnitude `max`, the first where several tie; values `min(round(v *
/// -127 / max), 127)`, half to even); returns the block's scale `max / -127` (zero for a block
/// of zeros, whose values are left as they are). Vectorized where the CPU has AVX2.
fn quantize_block_q8_k(b: &[f32], qb: &mut [i8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: simd() checked AVX2 and FMA; x86::quantize_q8_k checks the lengths.
        if let Some(d) = unsafe { x86::quantize_q8_k(b, qb) } {
            return d;
        }
    }
    quantize_block_q8_k_scalar(b, qb)
}

/// [`quantize_block_q8_k`] without vectors (and where a value is infinite or NaN).
fn quantize_block_q8_k_scalar(b: &[f32], qb: &mut [i8]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in b {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        return 0.0;
    }
    let iscale = -127.0 / max;
    for (o, v) in qb.iter_mut().zip(b) {
        *o = (iscale * v).round_ties_even().min(127.0) as i8;
    }
    1.0 / iscale
}

/// Appends `x` (a multiple of 32 values) to `out` as ggml Q8_0 blocks (an f16 scale, then 32
/// signed bytes), quantized as llama.cpp quantizes what it writes into a q8_0 KV cache.
pub(crate) fn append_q8_0(x: &[f32], out: &mut Vec<u8>) {
    let mut qb = [0i8; 32];
    for b in x.chunks_exact(32) {
        let amax = quantize_block_q8_0(b, &mut qb);
        out.extend_from_slice(&half::f16::from_f32(amax / 127.0).to_le_bytes());
        out.extend(qb.iter().map(|&v| v as u8));
    }
}

impl QuantX {
    /// `None` for weight kinds without an integer kernel (or rows not of whole blocks).
    fn new(kind: Kind, x: &[f32], cols: usize) -> Option<QuantX> {
        let block = match kind {
            Kind::Q8_0 | Kind::Q4_0 | Kind::Other(GgmlType(Q4_1 | Q5_0 | Q5_1 | IQ4_NL)) => 32,
            Kind::Q4_K | Kind::Q6_K | Kind::Other(GgmlType(Q2_K | Q3_K | Q5_K | IQ4_XS)) => 256,
            _ => return None,
        };
        // llama.cpp's Q8_1 (quantize_row_q8_1): Q8_0's values and scale, and the sum
        let q8_1 = matches!(kind, Kind::Other(GgmlType(Q4_1 | Q5_1)));
        if !cols.is_multiple_of(block) || !x.len().is_multiple_of(cols) {
            return None;
        }
        let t = f16_table();
        let mut d = Vec::with_capacity(x.len() / block);
        let mut q = vec![0i8; x.len()];
        let mut sums = Vec::new();
        let mut s = Vec::with_capacity(if q8_1 { x.len() / block } else { 0 });
        for (b, qb) in x.chunks_exact(block).zip(q.chunks_exact_mut(block)) {
            if block == 32 {
                let amax = quantize_block_q8_0(b, qb);
                d.push(t[half::f16::from_f32(amax / 127.0).to_bits() as usize]);
                if q8_1 {
                    // y.s = FP32_TO_FP16(d * sum) with d = amax / 127 in f32 (not the f16 scale)
                    let sum: i32 = qb.iter().map(|&v| i32::from(v)).sum();
                    s.push(t[half::f16::from_f32(amax / 127.0 * sum as f32).to_bits() as usize]);
                }
            } else {
                d.push(quantize_block_q8_k(b, qb));
                sums.extend(
                    qb.chunks_exact(16)
                        .map(|c| c.iter().map(|&v| i16::from(v)).sum::<i16>()),
                );
            }
        }
        Some(QuantX {
            cols,
            block,
            d,
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            q16: q.iter().map(|&v| i16::from(v)).collect(),
            q,
            sums,
            s,
            q4_k_interleaved: false,
        })
    }

    fn vectors(&self) -> usize {
        self.q.len() / self.cols
    }

    /// [`dot`](Self::dot) with inputs `i..i + 4`.
    #[inline]
    fn dot4(&self, kind: Kind, row: &[u8], i: usize) -> [f32; 4] {
        #[cfg(target_arch = "x86_64")]
        if kind == Kind::Q8_0 && simd() {
            let nb = self.cols / self.block;
            let d = four(&self.d, i, nb);
            let q = four(&self.q, i, self.cols);
            if avx512::available() {
                // SAFETY: available() checked the kernel's features; it checks the sizes (the
                // inputs are Q8_0-quantized: at most 127 in magnitude).
                return unsafe { avx512::dot_q8_0_x4(row, d, q) };
            }
            // SAFETY: simd() checked AVX2 and FMA; each input has nb scales and nb * 32 values and
            // the row nb blocks (QuantX::new and Matrix::new checked the sizes).
            return unsafe { x86::dot_q8_0_x4(row, d, q) };
        }
        #[cfg(target_arch = "x86_64")]
        if kind == Kind::Other(GgmlType(IQ4_NL)) && simd() {
            let nb = self.cols / self.block;
            // SAFETY: simd() checked AVX2 and FMA; the kernel checks the sizes.
            return unsafe { x86::dot_iq4_nl_x4(row, four(&self.d, i, nb), four(&self.q, i, self.cols)) };
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(v) = self.dot4_q4_1_q5(kind, row, i) {
            return v;
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        if let Some(v) = self.dot4_wasm(kind, row, i) {
            return v;
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(v) = self.dot4_k(kind, row, i) {
            return v;
        }
        [0, 1, 2, 3].map(|k| self.dot(kind, row, i + k))
    }

    /// [`dot`](Self::dot) with inputs `i..i + 8` where a kernel takes eight at once (Q4_K with
    /// AVX-512: the row's blocks decoded once for the eight), each bit for bit `dot`'s; `None`
    /// for other kinds or CPUs.
    #[inline]
    fn dot8(&self, kind: Kind, row: &[u8], i: usize) -> Option<[f32; 8]> {
        #[cfg(target_arch = "x86_64")]
        if kind == Kind::Q4_K && avx512::available() {
            let (nb, cols) = (self.cols / self.block, self.cols);
            let (d, q, s) = (eight(&self.d, i, nb), eight(&self.q, i, cols), eight(&self.sums, i, cols / 16));
            // SAFETY: available() checked the kernel's features; it checks the sizes.
            return Some(unsafe {
                if self.q4_k_interleaved {
                    avx512::dot_q4_k_xn::<true, 8>(row, d, q, s)
                } else {
                    avx512::dot_q4_k_xn::<false, 8>(row, d, q, s)
                }
            });
        }
        let _ = (kind, row, i);
        None
    }

    /// The 32-value block types with inputs `i..i + 4` on simd128, each bit for bit
    /// [`dot`](Self::dot)'s; `None` for other kinds.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[inline]
    fn dot4_wasm(&self, kind: Kind, row: &[u8], i: usize) -> Option<[f32; 4]> {
        let nb = self.cols / self.block;
        let d = four(&self.d, i, nb);
        let s = if self.s.is_empty() { [&[][..]; 4] } else { four(&self.s, i, nb) };
        let q = four(&self.q16, i, self.cols);
        Some(match kind {
            Kind::Q8_0 => wasm::dot4_32::<8>(row, d, s, q),
            Kind::Q4_0 => wasm::dot4_32::<2>(row, d, s, q),
            Kind::Other(GgmlType(Q4_1)) => wasm::dot4_32::<3>(row, d, s, q),
            Kind::Other(GgmlType(Q5_0)) => wasm::dot4_32::<6>(row, d, s, q),
            Kind::Other(GgmlType(Q5_1)) => wasm::dot4_32::<7>(row, d, s, q),
            _ => return None,
        })
    }

    /// The K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and IQ4_XS with inputs `i..i + 4`, each bit for bit
    /// [`dot`](Self::dot)'s, where the CPU has AVX2; `None` for other kinds or CPUs.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    fn dot4_k(&self, kind: Kind, row: &[u8], i: usize) -> Option<[f32; 4]> {
        if !matches!(
            kind,
            Kind::Q4_K | Kind::Q6_K | Kind::Other(GgmlType(Q2_K | Q3_K | Q5_K | IQ4_XS))
        ) || !simd()
        {
            return None;
        }
        let nb = self.cols / self.block;
        let d = four(&self.d, i, nb);
        let q = four(&self.q, i, self.cols);
        let s = four(&self.sums, i, self.cols / 16);
        let (wide, il) = (avx512::available(), self.q4_k_interleaved);
        // SAFETY: simd() checked AVX2 and FMA, and avx512::available() the AVX-512 kernels'
        // features; the kernels check the sizes.
        Some(unsafe {
            match kind {
                Kind::Q4_K if wide && il => avx512::dot_q4_k_xn::<true, 4>(row, d, q, s),
                Kind::Q4_K if wide => avx512::dot_q4_k_xn::<false, 4>(row, d, q, s),
                Kind::Q4_K if il => x86::dot_q4_k_x4::<true>(row, d, q, s),
                Kind::Q4_K => x86::dot_q4_k_x4::<false>(row, d, q, s),
                Kind::Q6_K if wide => avx512::dot_q6_k_x4(row, d, q, s),
                Kind::Q6_K => x86::dot_q6_k_x4(row, d, q, s),
                Kind::Other(GgmlType(Q2_K)) => x86::dot_k_x::<Q2_K, 4>(row, d, q, s),
                Kind::Other(GgmlType(Q3_K)) => x86::dot_k_x::<Q3_K, 4>(row, d, q, s),
                Kind::Other(GgmlType(IQ4_XS)) => x86::dot_k_x::<IQ4_XS, 4>(row, d, q, s),
                _ => x86::dot_k_x::<Q5_K, 4>(row, d, q, s),
            }
        })
    }

    /// Four rows with input 0, each bit for bit [`dot`](Self::dot)'s, for Q4_1 where the CPU
    /// has AVX2 (`None` for other kinds or CPUs): a decode step's kernel, four independent sums
    /// where one row's kernel waits on its one chain of multiply-adds, the input's blocks loaded
    /// once for the four. SmolLM2-135M Q4_1 (1 thread, CPU time of a decode step, the best call
    /// of each product): a 576x576 product 32 -> 20 µs, 1536x576 80 -> 48-52 µs, the step 15.6
    /// -> 13.4-13.9 ms.
    #[inline]
    fn dot_rows4(&self, kind: Kind, rows: [&[u8]; 4]) -> Option<[f32; 4]> {
        #[cfg(target_arch = "x86_64")]
        if kind == Kind::Other(GgmlType(Q4_1)) && simd() {
            let nb = self.cols / self.block;
            // SAFETY: simd() checked AVX2 and FMA; the kernel checks the sizes.
            return Some(unsafe { x86::dot_q4_1_rows4(rows, &self.d[..nb], &self.s[..nb], &self.q[..self.cols]) });
        }
        #[cfg(target_arch = "x86_64")]
        if kind == Kind::Other(GgmlType(IQ4_NL)) && simd() {
            let nb = self.cols / self.block;
            // SAFETY: simd() checked AVX2 and FMA; the kernel checks the sizes.
            return Some(unsafe { x86::dot_iq4_nl_rows4(rows, &self.d[..nb], &self.q[..self.cols]) });
        }
        let _ = (kind, rows);
        None
    }

    /// Q4_1, Q5_0 and Q5_1 with inputs `i..i + 4`, each bit for bit [`dot`](Self::dot)'s, where
    /// the CPU has AVX2; `None` for other kinds or CPUs.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    fn dot4_q4_1_q5(&self, kind: Kind, row: &[u8], i: usize) -> Option<[f32; 4]> {
        let Kind::Other(GgmlType(id @ (Q4_1 | Q5_0 | Q5_1))) = kind else {
            return None;
        };
        if !simd() {
            return None;
        }
        let nb = self.cols / self.block;
        let d = four(&self.d, i, nb);
        let s = if self.s.is_empty() { [&[][..]; 4] } else { four(&self.s, i, nb) };
        let q = four(&self.q, i, self.cols);
        // SAFETY: simd() checked AVX2 and FMA; the kernel checks the sizes.
        Some(unsafe {
            match id {
                Q4_1 => x86::dot_q4_1_q5_x4::<Q4_1>(row, d, s, q),
                Q5_0 => x86::dot_q4_1_q5_x4::<Q5_0>(row, d, s, q),
                _ => x86::dot_q4_1_q5_x4::<Q5_1>(row, d, s, q),
            }
        })
    }

    /// The scales block by block: element `b * n + i` is input `i`'s scale of block `b` (`n`
    /// inputs), the layout [`dot4_exact`](Self::dot4_exact) reads.
    fn scales_by_block(&self) -> Vec<f32> {
        let (n, nb) = (self.vectors(), self.cols / self.block);
        let mut dt = vec![0f32; self.d.len()];
        for (i, d) in self.d.chunks_exact(nb.max(1)).enumerate() {
            for (b, &v) in d.iter().enumerate() {
                dt[b * n + i] = v;
            }
        }
        dt
    }

    /// [`dot`](Self::dot) of a row with inputs `i..i + 4`, each bit for bit `dot`'s; `dt` is
    /// [`scales_by_block`](Self::scales_by_block).
    #[inline]
    fn dot4_exact(&self, kind: Kind, row: &[u8], i: usize, dt: &[f32]) -> [f32; 4] {
        #[cfg(target_arch = "x86_64")]
        if kind == Kind::Q8_0 && simd() {
            let q = &self.q[i * self.cols..(i + 4) * self.cols];
            // SAFETY: simd() checked AVX2 and FMA; the kernel checks the sizes (each input has
            // nb * 32 values, dt from input i on holds n * (nb - 1) + 4 scales as i + 4 <= n).
            return unsafe { x86::dot_q8_0_x4_exact(row, &dt[i..], self.vectors(), q, self.cols) };
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(v) = self.dot4_q4_1_q5(kind, row, i) {
            return v;
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        if let Some(v) = self.dot4_wasm(kind, row, i) {
            return v;
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(v) = self.dot4_k(kind, row, i) {
            return v;
        }
        let _ = dt;
        [0, 1, 2, 3].map(|k| self.dot(kind, row, i + k))
    }

    /// The dot product of a stored weight row with input vector `i`.
    #[inline]
    fn dot(&self, kind: Kind, row: &[u8], i: usize) -> f32 {
        let nb = self.cols / self.block;
        let d = &self.d[i * nb..(i + 1) * nb];
        let q = &self.q[i * self.cols..(i + 1) * self.cols];
        // Q8_1's sums (empty for the other kinds)
        let s = self.s.get(i * nb..(i + 1) * nb).unwrap_or(&[]);
        #[cfg(target_arch = "x86_64")]
        if simd() {
            match kind {
                // SAFETY: simd() checked AVX2 and FMA, which these are compiled for; the row holds
                // nb blocks and q nb * 32 values (QuantX::new and Matrix::new checked the sizes).
                Kind::Q8_0 => return unsafe { x86::dot_q8_0(row, d, q) },
                // SAFETY: as above.
                Kind::Q4_0 => return unsafe { x86::dot_q4_0(row, d, q) },
                // SAFETY: as above (the kernels stop at the shortest of row, d and s).
                Kind::Other(GgmlType(Q4_1)) => return unsafe { x86::dot_q4_1(row, d, s, q) },
                // SAFETY: as above.
                Kind::Other(GgmlType(Q5_0)) => return unsafe { x86::dot_q5_0(row, d, q) },
                // SAFETY: as above.
                Kind::Other(GgmlType(Q5_1)) => return unsafe { x86::dot_q5_1(row, d, s, q) },
                // SAFETY: as above.
                Kind::Other(GgmlType(IQ4_NL)) => return unsafe { x86::dot_iq4_nl(row, d, q) },
                // SAFETY: as above; the kernel checks that q and the sums cover the row's blocks.
                Kind::Q4_K => {
                    let sums = &self.sums[i * self.cols / 16..(i + 1) * self.cols / 16];
                    return unsafe {
                        if self.q4_k_interleaved {
                            x86::dot_q4_k::<true>(row, d, q, sums)
                        } else {
                            x86::dot_q4_k::<false>(row, d, q, sums)
                        }
                    };
                }
                // SAFETY: as above.
                Kind::Q6_K => {
                    return unsafe {
                        x86::dot_q6_k(row, d, q, &self.sums[i * self.cols / 16..(i + 1) * self.cols / 16])
                    };
                }
                Kind::Other(GgmlType(id @ (Q2_K | Q3_K | Q5_K | IQ4_XS))) => {
                    let sums = &self.sums[i * self.cols / 16..(i + 1) * self.cols / 16];
                    // SAFETY: as above; the kernel checks that d, q and the sums cover the row.
                    return unsafe {
                        match id {
                            Q2_K => x86::dot_k_x::<Q2_K, 1>(row, [d], [q], [sums]),
                            Q3_K => x86::dot_k_x::<Q3_K, 1>(row, [d], [q], [sums]),
                            IQ4_XS => x86::dot_k_x::<IQ4_XS, 1>(row, [d], [q], [sums]),
                            _ => x86::dot_k_x::<Q5_K, 1>(row, [d], [q], [sums]),
                        }
                    }[0];
                }
                _ => {}
            }
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        let q16 = &self.q16[i * self.cols..(i + 1) * self.cols];
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        match kind {
            Kind::Q8_0 => return wasm::dot_q8_0(row, d, q16),
            Kind::Q4_0 => return wasm::dot_q4_0(row, d, q16),
            Kind::Other(GgmlType(Q4_1)) => return wasm::dot_q4_1(row, d, s, q16),
            Kind::Other(GgmlType(Q5_0)) => return wasm::dot_q5_0(row, d, q16),
            Kind::Other(GgmlType(Q5_1)) => return wasm::dot_q5_1(row, d, s, q16),
            // (a matrix summed in llama.cpp's interleaved order takes the portable kernel below)
            Kind::Q4_K if !self.q4_k_interleaved => {
                return wasm::dot_q4_k(row, d, q16, &self.sums[i * self.cols / 16..(i + 1) * self.cols / 16]);
            }
            Kind::Q6_K => return wasm::dot_q6_k(row, d, q16),
            _ => {}
        }
        match kind {
            Kind::Q8_0 => dot_q8_0(row, d, q),
            Kind::Q4_0 => dot_q4_0(row, d, q),
            Kind::Other(GgmlType(Q4_1)) => dot_q4_1(row, d, s, q),
            Kind::Other(GgmlType(Q5_0)) => dot_q5_0(row, d, q),
            Kind::Other(GgmlType(Q5_1)) => dot_q5_1(row, d, s, q),
            Kind::Other(GgmlType(IQ4_NL)) => dot_iq4_nl(row, d, q),
            Kind::Q4_K if self.q4_k_interleaved => {
                dot_q4_k_interleaved(row, d, q, &self.sums[i * self.cols / 16..(i + 1) * self.cols / 16])
            }
            Kind::Q4_K => dot_q4_k(row, d, q, &self.sums[i * self.cols / 16..(i + 1) * self.cols / 16]),
            Kind::Q6_K => dot_q6_k(row, d, q),
            Kind::Other(GgmlType(Q2_K)) => {
                dot_q2_k(row, d, q, &self.sums[i * self.cols / 16..(i + 1) * self.cols / 16])
            }
            Kind::Other(GgmlType(Q3_K)) => dot_q3_k(row, d, q),
            Kind::Other(GgmlType(IQ4_XS)) => dot_iq4_xs(row, d, q),
            Kind::Other(GgmlType(Q5_K)) => {
                dot_q5_k(row, d, q, &self.sums[i * self.cols / 16..(i + 1) * self.cols / 16])
            }
            _ => f32::NAN,
        }
    }
}

#[inline]
fn isum32(a: &[i8], b: &[i8]) -> i32 {
    let mut s = 0i32;
    for (x, y) in a[..32].iter().zip(&b[..32]) {
        s += i32::from(*x) * i32::from(*y);
    }
    s
}

fn dot_q8_0(row: &[u8], d: &[f32], q: &[i8]) -> f32 {
    let t = f16_table();
    let mut sum = 0f32;
    for ((blk, &dx), qx) in row.chunks_exact(34).zip(d).zip(q.chunks_exact(32)) {
        let mut w = [0i8; 32];
        for (o, &b) in w.iter_mut().zip(&blk[2..34]) {
            *o = b as i8;
        }
        sum += isum32(&w, qx) as f32 * (f16_at(t, blk, 0) * dx);
    }
    sum
}

fn dot_q4_0(row: &[u8], d: &[f32], q: &[i8]) -> f32 {
    let t = f16_table();
    let mut sum = 0f32;
    for ((blk, &dx), qx) in row.chunks_exact(18).zip(d).zip(q.chunks_exact(32)) {
        let mut w = [0i8; 32];
        for j in 0..16 {
            w[j] = (blk[2 + j] & 0xF) as i8 - 8;
            w[j + 16] = (blk[2 + j] >> 4) as i8 - 8;
        }
        sum += isum32(&w, qx) as f32 * (f16_at(t, blk, 0) * dx);
    }
    sum
}

/// ggml's type ids of the 32-element block types kept as [`Kind::Other`] with an integer kernel
/// here (`bind.rs` names the device kernels' kinds, so these have no variant of their own).
const Q4_1: u32 = 3;
const Q5_0: u32 = 6;
const Q5_1: u32 = 7;
const IQ4_NL: u32 = 20;

/// An IQ4_NL block's 32 values (`kvalues_iq4nl` of its nibbles: low nibbles are values 0..16,
/// high ones 16..32).
#[inline]
fn iq4_nl_values(qs: &[u8]) -> [i8; 32] {
    let mut w = [0i8; 32];
    for j in 0..16 {
        w[j] = IQ4NL_VALUES[usize::from(qs[j] & 0xF)];
        w[j + 16] = IQ4NL_VALUES[usize::from(qs[j] >> 4)];
    }
    w
}

/// IQ4_NL (blocks of 32: an f16 scale, 16 bytes of nibbles standing for `kvalues_iq4nl`) with
/// Q8_0 activations, in the order of llama.cpp's repacked kernels (`ggml_gemv/gemm_iq4_nl_8x8_q8_0`,
/// which an AVX2 CPU runs for a matrix of a multiple of 8 rows): each block's 32 products summed
/// exactly as integers, then one fused multiply-add per block by `d_w · d_x`, in block order.
fn dot_iq4_nl(row: &[u8], d: &[f32], q: &[i8]) -> f32 {
    let t = f16_table();
    let mut sum = 0f32;
    for ((blk, &dx), qx) in row.chunks_exact(18).zip(d).zip(q.chunks_exact(32)) {
        sum = (isum32(&iq4_nl_values(&blk[2..18]), qx) as f32).mul_add(f16_at(t, blk, 0) * dx, sum);
    }
    sum
}

/// A Q5_0/Q5_1 block's 32 5-bit values, unsigned (0..32): low nibbles are values 0..16, high
/// nibbles 16..32, bit `j` of the little-endian `qh` the fifth bit of value `j`.
#[inline]
fn q5_values(qh: &[u8], qs: &[u8]) -> [i8; 32] {
    let h = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut w = [0i8; 32];
    for j in 0..16 {
        w[j] = ((qs[j] & 0xF) | (((h >> j) & 1) << 4) as u8) as i8;
        w[j + 16] = ((qs[j] >> 4) | (((h >> (j + 16)) & 1) << 4) as u8) as i8;
    }
    w
}

/// llama.cpp's `ggml_vec_dot_q4_1_q8_1_generic`: `d_w d_x Σ w x + m s` per block, `s` the
/// activations' Q8_1 sums.
fn dot_q4_1(row: &[u8], d: &[f32], s: &[f32], q: &[i8]) -> f32 {
    let t = f16_table();
    let mut sum = 0f32;
    for (((blk, &dx), &sx), qx) in row.chunks_exact(20).zip(d).zip(s).zip(q.chunks_exact(32)) {
        let mut w = [0i8; 32];
        for j in 0..16 {
            w[j] = (blk[4 + j] & 0xF) as i8;
            w[j + 16] = (blk[4 + j] >> 4) as i8;
        }
        sum += (f16_at(t, blk, 0) * dx) * isum32(&w, qx) as f32 + f16_at(t, blk, 2) * sx;
    }
    sum
}

/// llama.cpp's `ggml_vec_dot_q5_0_q8_0_generic`.
fn dot_q5_0(row: &[u8], d: &[f32], q: &[i8]) -> f32 {
    let t = f16_table();
    let mut sum = 0f32;
    for ((blk, &dx), qx) in row.chunks_exact(22).zip(d).zip(q.chunks_exact(32)) {
        let w = q5_values(&blk[2..6], &blk[6..22]).map(|v| v - 16);
        sum += (f16_at(t, blk, 0) * dx) * isum32(&w, qx) as f32;
    }
    sum
}

/// llama.cpp's `ggml_vec_dot_q5_1_q8_1_generic`.
fn dot_q5_1(row: &[u8], d: &[f32], s: &[f32], q: &[i8]) -> f32 {
    let t = f16_table();
    let mut sum = 0f32;
    for (((blk, &dx), &sx), qx) in row.chunks_exact(24).zip(d).zip(s).zip(q.chunks_exact(32)) {
        let w = q5_values(&blk[4..8], &blk[8..24]);
        sum += (f16_at(t, blk, 0) * dx) * isum32(&w, qx) as f32 + f16_at(t, blk, 2) * sx;
    }
    sum
}

/// [`dot_q4_k`] in the order of llama.cpp's interleaved Q4_K kernels ([`q4_k_interleaved`]):
/// per block the exact integer sums of the scaled products and of the mins times the
/// activations' sums of 32, then `acc = isum · (d_w d_x) + acc` and `accm = imin · (dmin_w d_x) +
/// accm` fused, and `acc - accm`.
fn dot_q4_k_interleaved(row: &[u8], d: &[f32], q: &[i8], sums: &[i16]) -> f32 {
    let t = f16_table();
    let (mut acc, mut accm) = (0f32, 0f32);
    for (((blk, &dx), qx), bs16) in row
        .chunks_exact(144)
        .zip(d)
        .zip(q.chunks_exact(256))
        .zip(sums.chunks_exact(16))
    {
        let scales = &blk[4..16];
        let qs = &blk[16..144];
        let (mut isum, mut imin) = (0i32, 0i32);
        for j in 0..8 {
            let (sc, m) = scale_min_k4(j, scales);
            let x = &qx[32 * j..32 * j + 32];
            let g = &qs[32 * (j / 2)..32 * (j / 2) + 32];
            let shift = 4 * (j % 2);
            let s: i32 = g.iter().zip(x).map(|(&w, &v)| i32::from((w >> shift) & 0xF) * i32::from(v)).sum();
            isum += i32::from(sc) * s;
            imin += i32::from(m) * (i32::from(bs16[2 * j]) + i32::from(bs16[2 * j + 1]));
        }
        acc = (isum as f32).mul_add(f16_at(t, blk, 0) * dx, acc);
        accm = (imin as f32).mul_add(f16_at(t, blk, 2) * dx, accm);
    }
    acc - accm
}

/// llama.cpp's `ggml_vec_dot_q4_K_q8_K_generic` in its integer parts (the float sums are taken
/// per block here, per lane there); `sums` holds the activations' sums of 16.
fn dot_q4_k(row: &[u8], d: &[f32], q: &[i8], sums: &[i16]) -> f32 {
    let t = f16_table();
    let mut sum = 0f32;
    for (((blk, &dx), qx), bs16) in row
        .chunks_exact(144)
        .zip(d)
        .zip(q.chunks_exact(256))
        .zip(sums.chunks_exact(16))
    {
        let bs: [i32; 8] = std::array::from_fn(|k| i32::from(bs16[2 * k]) + i32::from(bs16[2 * k + 1]));
        let scales = &blk[4..16];
        let qs = &blk[16..144];
        let (mut isum, mut msum) = (0i32, 0i32);
        for j in 0..4 {
            let (sc1, m1) = scale_min_k4(2 * j, scales);
            let (sc2, m2) = scale_min_k4(2 * j + 1, scales);
            let mut lo = [0i8; 32];
            let mut hi = [0i8; 32];
            for l in 0..32 {
                lo[l] = (qs[32 * j + l] & 0xF) as i8;
                hi[l] = (qs[32 * j + l] >> 4) as i8;
            }
            isum += i32::from(sc1) * isum32(&lo, &qx[64 * j..]) + i32::from(sc2) * isum32(&hi, &qx[64 * j + 32..]);
            msum += i32::from(m1) * bs[2 * j] + i32::from(m2) * bs[2 * j + 1];
        }
        sum += dx * f16_at(t, blk, 0) * isum as f32 - dx * f16_at(t, blk, 2) * msum as f32;
    }
    sum
}

fn dot_q6_k(row: &[u8], d: &[f32], q: &[i8]) -> f32 {
    let t = f16_table();
    let mut sum = 0f32;
    for ((blk, &dx), qx) in row.chunks_exact(210).zip(d).zip(q.chunks_exact(256)) {
        let mut isum = 0i32;
        for h in 0..2 {
            let ql = &blk[h * 64..h * 64 + 64];
            let qh = &blk[128 + h * 32..128 + h * 32 + 32];
            let sc = &blk[192 + h * 8..192 + h * 8 + 8];
            let x = &qx[h * 128..h * 128 + 128];
            let mut w = [[0i8; 32]; 4];
            for l in 0..32 {
                w[0][l] = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
                w[1][l] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                w[2][l] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                w[3][l] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
            }
            // 16 values per scale: w[k][0..16] uses sc[2k], w[k][16..32] sc[2k + 1]
            for (k, wk) in w.iter().enumerate() {
                let xk = &x[32 * k..32 * k + 32];
                let (mut s0, mut s1) = (0i32, 0i32);
                for l in 0..16 {
                    s0 += i32::from(wk[l]) * i32::from(xk[l]);
                    s1 += i32::from(wk[l + 16]) * i32::from(xk[l + 16]);
                }
                isum += i32::from(sc[2 * k] as i8) * s0 + i32::from(sc[2 * k + 1] as i8) * s1;
            }
        }
        sum += f16_at(t, blk, 208) * dx * isum as f32;
    }
    sum
}

/// ggml's type ids of the 256-value block types kept as [`Kind::Other`] with an integer kernel
/// on Q8_K activations here (Q2_K, Q3_K, Q5_K, IQ4_XS: `bind.rs` names the device kernels'
/// kinds, so these have no variant of their own either).
const Q2_K: u32 = 10;
const Q3_K: u32 = 11;
const Q5_K: u32 = 13;
const IQ4_XS: u32 = 23;

/// Bytes per block (of 256 values) of the [`Kind::Other`] types with a Q8_K kernel here.
fn k_block_bytes(id: u32) -> usize {
    match id {
        Q2_K => 84,
        Q3_K => 110,
        IQ4_XS => 136,
        _ => 176,
    }
}

/// ggml's `kvalues_iq4nl`: the 16 values an IQ4_NL/IQ4_XS nibble stands for.
const IQ4NL_VALUES: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// Scale `g` (0..8, one per 32 values) of an IQ4_XS block: 4 low bits from `scales_l`, 2 high
/// from `scales_h`, offset by 32.
#[inline]
fn iq4_xs_scale(blk: &[u8], g: usize) -> i32 {
    let sh = u16::from_le_bytes([blk[2], blk[3]]);
    let lo = (blk[4 + g / 2] >> (4 * (g % 2))) & 0xF;
    i32::from(lo | (((sh >> (2 * g)) & 3) << 4) as u8) - 32
}

/// The sum of eight f32 lanes in the order of llama.cpp's `hsum_float_8` (and `x86::hsum`).
#[inline]
fn hsum8(a: &[f32; 8]) -> f32 {
    ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

/// Adds a group of 32 products `w · x` into the eight i32 lanes of llama.cpp's AVX2 K-quant
/// kernels: lane `k` holds values `4k..4k + 4`, values 0..16 scaled by `sc[0]` and 16..32 by
/// `sc[1]` (`_mm256_maddubs_epi16` then `_mm256_madd_epi16` with the scales). Each lane is
/// converted to f32 on its own there, so a portable kernel that keeps the same lanes sums the
/// same floats in the same order: its results are the AVX2 kernel's bit for bit.
#[inline]
fn add_lanes(lanes: &mut [i32; 8], w: &[i8; 32], x: &[i8], sc: [i32; 2]) {
    let x = &x[..32];
    for (k, lane) in lanes.iter_mut().enumerate() {
        let mut s = 0i32;
        for l in 4 * k..4 * k + 4 {
            s += i32::from(w[l]) * i32::from(x[l]);
        }
        *lane += s * sc[k / 4];
    }
}

/// Q3_K's 16 scales (6 bits packed in 12 bytes, offset by 32) as llama.cpp's AVX2 kernel
/// unpacks them.
#[inline]
fn q3_k_scales(s: &[u8]) -> [i8; 16] {
    let a = |k: usize| u32::from_le_bytes([s[4 * k], s[4 * k + 1], s[4 * k + 2], s[4 * k + 3]]);
    let (a0, a1, a2) = (a(0), a(1), a(2));
    let (k1, k2) = (0x0303_0303u32, 0x0f0f_0f0fu32);
    let w = [
        (a0 & k2) | ((a2 & k1) << 4),
        (a1 & k2) | (((a2 >> 2) & k1) << 4),
        ((a0 >> 4) & k2) | (((a2 >> 4) & k1) << 4),
        ((a1 >> 4) & k2) | (((a2 >> 6) & k1) << 4),
    ];
    std::array::from_fn(|i| (w[i / 4].to_le_bytes()[i % 4] as i8).wrapping_sub(32))
}

/// llama.cpp's `ggml_vec_dot_q5_K_q8_K` (its AVX2 build) in portable code, bit for bit: the
/// scaled products in [`add_lanes`]' eight lanes, `d_w d_x` times each lane fused into eight
/// float sums, the mins times the activations' sums of 32 (`sums` holds their sums of 16) fused
/// into one, and `hsum8(lanes) + mins` at the end.
fn dot_q5_k(row: &[u8], d: &[f32], q: &[i8], sums: &[i16]) -> f32 {
    let t = f16_table();
    let (mut acc, mut summs) = ([0f32; 8], 0f32);
    for (((blk, &dx), qx), bs) in row
        .chunks_exact(176)
        .zip(d)
        .zip(q.chunks_exact(256))
        .zip(sums.chunks_exact(16))
    {
        let dd = dx * f16_at(t, blk, 0);
        let dmin = -dx * f16_at(t, blk, 2);
        let (scales, qh, qs) = (&blk[4..16], &blk[16..48], &blk[48..176]);
        let (mut lanes, mut msum) = ([0i32; 8], 0i32);
        for g in 0..8 {
            let (sc, m) = scale_min_k4(g, scales);
            msum += i32::from(m) * (i32::from(bs[2 * g]) + i32::from(bs[2 * g + 1]));
            let w: [i8; 32] = std::array::from_fn(|l| {
                (((qs[32 * (g / 2) + l] >> (4 * (g % 2))) & 0xF) | (((qh[l] >> g) & 1) << 4)) as i8
            });
            add_lanes(&mut lanes, &w, &qx[32 * g..], [i32::from(sc); 2]);
        }
        summs = dmin.mul_add(msum as f32, summs);
        for (a, &l) in acc.iter_mut().zip(&lanes) {
            *a = dd.mul_add(l as f32, *a);
        }
    }
    hsum8(&acc) + summs
}

/// llama.cpp's `ggml_vec_dot_q3_K_q8_K` (its AVX2 build) in portable code, bit for bit (see
/// [`dot_q5_k`]): values `low 2 bits - 4` where the high bit is clear, 16 signed scales.
fn dot_q3_k(row: &[u8], d: &[f32], q: &[i8]) -> f32 {
    let t = f16_table();
    let mut acc = [0f32; 8];
    for ((blk, &dx), qx) in row.chunks_exact(110).zip(d).zip(q.chunks_exact(256)) {
        let dd = dx * f16_at(t, blk, 108);
        let (hm, qs, sc) = (&blk[..32], &blk[32..96], q3_k_scales(&blk[96..108]));
        let mut lanes = [0i32; 8];
        for g in 0..8 {
            let (j, k) = (g / 4, g % 4);
            let w: [i8; 32] = std::array::from_fn(|l| {
                ((qs[32 * j + l] >> (2 * k)) & 3) as i8 - if (hm[l] >> g) & 1 == 1 { 0 } else { 4 }
            });
            add_lanes(
                &mut lanes,
                &w,
                &qx[32 * g..],
                [i32::from(sc[2 * g]), i32::from(sc[2 * g + 1])],
            );
        }
        for (a, &l) in acc.iter_mut().zip(&lanes) {
            *a = dd.mul_add(l as f32, *a);
        }
    }
    hsum8(&acc)
}

/// llama.cpp's `ggml_vec_dot_iq4_xs_q8_K` (its AVX2 build) in portable code, bit for bit (see
/// [`dot_q5_k`]): each nibble's value from [`IQ4NL_VALUES`], one 6-bit scale per 32.
fn dot_iq4_xs(row: &[u8], d: &[f32], q: &[i8]) -> f32 {
    let t = f16_table();
    let mut acc = [0f32; 8];
    for ((blk, &dx), qx) in row.chunks_exact(136).zip(d).zip(q.chunks_exact(256)) {
        let dd = f16_at(t, blk, 0) * dx;
        let mut lanes = [0i32; 8];
        for g in 0..8 {
            let qs = &blk[8 + 16 * g..8 + 16 * g + 16];
            let w: [i8; 32] = std::array::from_fn(|l| IQ4NL_VALUES[usize::from((qs[l % 16] >> (4 * (l / 16))) & 0xF)]);
            let ls = iq4_xs_scale(blk, g);
            add_lanes(&mut lanes, &w, &qx[32 * g..], [ls, ls]);
        }
        for (a, &l) in acc.iter_mut().zip(&lanes) {
            *a = dd.mul_add(l as f32, *a);
        }
    }
    hsum8(&acc)
}

/// llama.cpp's `ggml_vec_dot_q2_K_q8_K` (its AVX2 build) in portable code, bit for bit (see
/// [`dot_q5_k`]): 2-bit values with 4-bit scales and mins per 16; each lane first takes
/// `-dmin_w d_x` times its two mins' products with the activations' sums of 16, then the scaled
/// products.
fn dot_q2_k(row: &[u8], d: &[f32], q: &[i8], sums: &[i16]) -> f32 {
    let t = f16_table();
    let mut acc = [0f32; 8];
    for (((blk, &dx), qx), bs) in row
        .chunks_exact(84)
        .zip(d)
        .zip(q.chunks_exact(256))
        .zip(sums.chunks_exact(16))
    {
        let dd = dx * f16_at(t, blk, 80);
        let dmin = -dx * f16_at(t, blk, 82);
        let (sc, qs) = (&blk[..16], &blk[16..80]);
        for (k, a) in acc.iter_mut().enumerate() {
            let m = |i: usize| i32::from(sc[i] >> 4) * i32::from(bs[i]);
            *a = dmin.mul_add((m(2 * k) + m(2 * k + 1)) as f32, *a);
        }
        let mut lanes = [0i32; 8];
        for g in 0..8 {
            let (j, k) = (g / 4, g % 4);
            let w: [i8; 32] = std::array::from_fn(|l| ((qs[32 * j + l] >> (2 * k)) & 3) as i8);
            let s = |i: usize| i32::from(sc[i] & 0xF);
            add_lanes(&mut lanes, &w, &qx[32 * g..], [s(2 * g), s(2 * g + 1)]);
        }
        for (a, &l) in acc.iter_mut().zip(&lanes) {
            *a = dd.mul_add(l as f32, *a);
        }
    }
    hsum8(&acc)
}

/// Whether this CPU has AVX2, FMA and F16C (checked once).
fn simd() -> bool {
    static SIMD: OnceLock<bool> = OnceLock::new();
    *SIMD.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// The dot product of two equal-length vectors in f32 (AVX2/FMA where the CPU has them).
#[inline]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: simd() checked that the CPU has AVX2 and FMA, which x86::dot is compiled for.
        return unsafe { x86::dot(a, b) };
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return wasm::dot(a, b);
    #[allow(unreachable_code)]
    dot_portable(a, b)
}

/// `out[i] += p * v[i]` over the shorter of the two, each product rounded and then the sum (no
/// fused multiply-add, so every value is what the scalar loop gives), 8 at a time with AVX
/// where the CPU has it: attention's weighted sum of values (the scalar loop compiled to SSE
/// was about a tenth of a batched decode step).
#[inline]
pub(crate) fn add_scaled(out: &mut [f32], p: f32, v: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: simd() checked AVX2 and FMA, which x86::add_scaled is compiled for.
        return unsafe { x86::add_scaled(out, p, v) };
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return wasm::add_scaled(out, p, v);
    #[allow(unreachable_code)]
    for (o, &x) in out.iter_mut().zip(v) {
        *o += p * x;
    }
}

/// Four rows (`w` holds them back to back) times `x`: `x` is read once for the four.
#[inline]
fn dot4(w: &[f32], x: &[f32]) -> [f32; 4] {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return wasm::dot4(w, x);
    #[allow(unreachable_code)]
    let c = w.len() / 4;
    #[cfg(target_arch = "x86_64")]
    if simd() && x.len() >= c {
        // SAFETY: simd() checked AVX2 and FMA, which x86::dot4 is compiled for.
        return unsafe { x86::dot4(w, x) };
    }
    [0, 1, 2, 3].map(|k| dot(&w[k * c..(k + 1) * c], x))
}

/// A stored F16 or BF16 row times `x` in f32, converting in registers (AVX2/F16C); `None` where
/// the CPU lacks them (the caller dequantizes the row instead).
#[inline]
fn dot_16(kind: Kind, row: &[u8], x: &[f32]) -> Option<f32> {
    #[cfg(target_arch = "x86_64")]
    if simd() {
        return match kind {
            // SAFETY: simd() checked AVX2, FMA and F16C, which x86::dot_f16 is compiled for.
            Kind::F16 => Some(unsafe { x86::dot_f16(row, x) }),
            // SAFETY: simd() checked AVX2 and FMA, which x86::dot_bf16 is compiled for.
            Kind::BF16 => Some(unsafe { x86::dot_bf16(row, x) }),
            _ => None,
        };
    }
    let _ = (kind, row, x);
    None
}

/// AVX2 kernels: measured on SmolLM-135M-shaped F16 weights (1 thread, decode), 4.6 tokens/s with
/// a table lookup per value and a portable dot product, 9.5-13.5 with these (llama.cpp: 22.8, same
/// machine); `unsafe` only because `std::arch` intrinsics and `#[target_feature]` functions are.
#[cfg(target_arch = "x86_64")]
mod avx512;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps::<1>(v);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps::<1>(s, s));
        _mm_cvtss_f32(s)
    }

    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let (mut a0, mut a1, mut a2, mut a3) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        let mut i = 0;
        // SAFETY: every load reads 8 floats at i + 8k with i + 8k + 8 <= n, inside both slices.
        unsafe {
            while i + 32 <= n {
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), a0);
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i + 8)), _mm256_loadu_ps(pb.add(i + 8)), a1);
                a2 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i + 16)), _mm256_loadu_ps(pb.add(i + 16)), a2);
                a3 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i + 24)), _mm256_loadu_ps(pb.add(i + 24)), a3);
                i += 32;
            }
            while i + 8 <= n {
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), a0);
                i += 8;
            }
        }
        let v = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
        let mut s = hsum(v);
        for j in i..n {
            s += a[j] * b[j];
        }
        s
    }

    /// [`super::add_scaled`] with AVX: a multiply, then an add (not fused).
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn add_scaled(out: &mut [f32], p: f32, v: &[f32]) {
        let n = out.len().min(v.len());
        let (po, pv) = (out.as_mut_ptr(), v.as_ptr());
        let pp = _mm256_set1_ps(p);
        let mut i = 0;
        // SAFETY: each step reads and writes 8 floats at i with i + 8 <= n, inside both slices.
        unsafe {
            while i + 8 <= n {
                let prod = _mm256_mul_ps(pp, _mm256_loadu_ps(pv.add(i)));
                _mm256_storeu_ps(po.add(i), _mm256_add_ps(_mm256_loadu_ps(po.add(i)), prod));
                i += 8;
            }
        }
        for j in i..n {
            out[j] += p * v[j];
        }
    }

    /// 32 signed weights times 32 signed activations, summed in 8 i32 lanes, as f32 (llama.cpp's
    /// `mul_sum_i8_pairs`: |w| as unsigned times x with w's sign; no pair saturates, |w| <= 128
    /// and |x| <= 127).
    #[target_feature(enable = "avx2,fma")]
    fn isum32(w: __m256i, x: __m256i) -> __m256 {
        let p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
        _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)))
    }

    /// [`super::dot_q8_0`] with AVX2.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `row` holds `d.len()` Q8_0 blocks and `q` at least
    /// `32 * d.len()` values.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_q8_0(row: &[u8], d: &[f32], q: &[i8]) -> f32 {
        let t = super::f16_table();
        // two accumulators: one FMA chain per block would wait on the previous block's
        let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for (b, (blk, &dx)) in row.chunks_exact(34).zip(d).enumerate() {
            // SAFETY: blk has 34 bytes (32 after the scale); q has 32 values at 32b (the caller).
            let (w, x) = unsafe {
                (
                    _mm256_loadu_si256(blk.as_ptr().add(2) as *const __m256i),
                    _mm256_loadu_si256(q.as_ptr().add(32 * b) as *const __m256i),
                )
            };
            let s = _mm256_set1_ps(super::f16_at(t, blk, 0) * dx);
            if b % 2 == 0 {
                a0 = _mm256_fmadd_ps(s, isum32(w, x), a0);
            } else {
                a1 = _mm256_fmadd_ps(s, isum32(w, x), a1);
            }
        }
        hsum(_mm256_add_ps(a0, a1))
    }

    /// [`dot_q8_0`] of one row with four inputs, each result bit for bit `dot_q8_0`'s (the same
    /// two accumulators per input, even and odd blocks, and the same products and scales): the
    /// row's blocks are loaded once for the four. `q[k]` is input `k`'s values; `dt` holds the
    /// inputs' scales block by block, `dt[b * stride + k]` input `k`'s scale of block `b`, so one
    /// vector multiply gives the four products of the weight's scale with them. The batched
    /// decode step's kernel ([`super::Matrix::matmul_each`]).
    ///
    /// `q` holds the four inputs' values back to back, `cols` each.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA. Sizes are checked (a panic, not undefined behaviour):
    /// with `nb = row.len() / 34` blocks, `cols >= 32 * nb`, `q` holds `4 * cols` values and
    /// `dt` `stride * (nb - 1) + 4` scales.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_q8_0_x4_exact(row: &[u8], dt: &[f32], stride: usize, q: &[i8], cols: usize) -> [f32; 4] {
        let nb = row.len() / 34;
        if nb == 0 {
            return [0.0; 4];
        }
        assert!(cols >= 32 * nb && q.len() >= 4 * cols && stride >= 4 && dt.len() >= stride * (nb - 1) + 4);
        let t = super::f16_table();
        let (rp, dp) = (row.as_ptr(), dt.as_ptr());
        // SAFETY: 3 * cols < q.len() (asserted).
        let [q0, q1, q2, q3] = [0, 1, 2, 3].map(|k| unsafe { q.as_ptr().add(k * cols) });
        let ones = _mm256_set1_epi16(1);
        let lane = [0, 1, 2, 3].map(|k| _mm256_set1_epi32(k));
        let sum = |aw: __m256i, w: __m256i, x: __m256i| {
            _mm256_cvtepi32_ps(_mm256_madd_epi16(
                _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w)),
                ones,
            ))
        };
        let zero = _mm256_setzero_ps();
        // even blocks into e*, odd into o*, as dot_q8_0's a0 and a1 (named: an array of them is
        // kept on the stack)
        let (mut e0, mut e1, mut e2, mut e3) = (zero, zero, zero, zero);
        let (mut o0, mut o1, mut o2, mut o3) = (zero, zero, zero, zero);
        macro_rules! block {
            ($b:expr, $a0:ident, $a1:ident, $a2:ident, $a3:ident) => {{
                let b = $b;
                // SAFETY: b < nb: the block's 34 bytes are in `row`, 32 values at 32b in each q[k]
                // and 4 scales at stride * b in dt (asserted above); the table has every u16.
                unsafe {
                    let blk = rp.add(34 * b);
                    let w = _mm256_loadu_si256(blk.add(2) as *const __m256i);
                    let dw = *t.get_unchecked(u16::from_le_bytes([*blk, *blk.add(1)]) as usize);
                    let s = _mm256_castps128_ps256(_mm_mul_ps(_mm_set1_ps(dw), _mm_loadu_ps(dp.add(stride * b))));
                    let aw = _mm256_sign_epi8(w, w);
                    let x = |p: *const i8| _mm256_loadu_si256(p.add(32 * b) as *const __m256i);
                    $a0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s, lane[0]), sum(aw, w, x(q0)), $a0);
                    $a1 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s, lane[1]), sum(aw, w, x(q1)), $a1);
                    $a2 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s, lane[2]), sum(aw, w, x(q2)), $a2);
                    $a3 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s, lane[3]), sum(aw, w, x(q3)), $a3);
                }
            }};
        }
        let mut b = 0;
        while b + 2 <= nb {
            block!(b, e0, e1, e2, e3);
            block!(b + 1, o0, o1, o2, o3);
            b += 2;
        }
        if b < nb {
            block!(b, e0, e1, e2, e3);
        }
        [
            hsum(_mm256_add_ps(e0, o0)),
            hsum(_mm256_add_ps(e1, o1)),
            hsum(_mm256_add_ps(e2, o2)),
            hsum(_mm256_add_ps(e3, o3)),
        ]
    }

    /// [`dot_q8_0`] of one row with four inputs (`d[k]`, `q[k]`): the row's blocks are loaded
    /// once for the four, and the four sums are independent chains.
    ///
    /// # Safety
    /// As [`dot_q8_0`], for each of the four inputs.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_q8_0_x4(row: &[u8], d: [&[f32]; 4], q: [&[i8]; 4]) -> [f32; 4] {
        let t = super::f16_table();
        let (mut a0, mut a1, mut a2, mut a3) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        for (b, blk) in row.chunks_exact(34).enumerate() {
            // SAFETY: blk has 34 bytes (32 after the scale); each q[k] has 32 values at 32b.
            let (w, x0, x1, x2, x3) = unsafe {
                (
                    _mm256_loadu_si256(blk.as_ptr().add(2) as *const __m256i),
                    _mm256_loadu_si256(q[0].as_ptr().add(32 * b) as *const __m256i),
                    _mm256_loadu_si256(q[1].as_ptr().add(32 * b) as *const __m256i),
                    _mm256_loadu_si256(q[2].as_ptr().add(32 * b) as *const __m256i),
                    _mm256_loadu_si256(q[3].as_ptr().add(32 * b) as *const __m256i),
                )
            };
            let dw = super::f16_at(t, blk, 0);
            let aw = _mm256_sign_epi8(w, w);
            let ones = _mm256_set1_epi16(1);
            let sum = |x: __m256i| {
                _mm256_cvtepi32_ps(_mm256_madd_epi16(
                    _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w)),
                    ones,
                ))
            };
            a0 = _mm256_fmadd_ps(_mm256_set1_ps(dw * d[0][b]), sum(x0), a0);
            a1 = _mm256_fmadd_ps(_mm256_set1_ps(dw * d[1][b]), sum(x1), a1);
            a2 = _mm256_fmadd_ps(_mm256_set1_ps(dw * d[2][b]), sum(x2), a2);
            a3 = _mm256_fmadd_ps(_mm256_set1_ps(dw * d[3][b]), sum(x3), a3);
        }
        [hsum(a0), hsum(a1), hsum(a2), hsum(a3)]
    }

    /// One block of 32 activations quantized as [`super::QuantX::new`] does (the same values:
    /// the same largest magnitude, the same `v * (127 / amax)` rounded half to even), into `q`;
    /// returns that magnitude, or `None` with `q` untouched where a value is infinite or NaN
    /// (the scalar code's casts and `max` decide those). The scalar loop called `rintf` per
    /// value: about 10% of a batched decode step's time.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA. `x` and `q` must hold 32 values (checked).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn quantize_q8_0(x: &[f32], q: &mut [i8]) -> Option<f32> {
        let (x, q): (&[f32; 32], &mut [i8; 32]) = (x.try_into().ok()?, q.try_into().ok()?);
        // SAFETY: x holds 32 floats, read 8 at a time at 0, 8, 16 and 24.
        let v = [0, 8, 16, 24].map(|k| unsafe { _mm256_loadu_ps(x.as_ptr().add(k)) });
        let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let a = v.map(|v| _mm256_and_ps(v, abs));
        let inf = _mm256_set1_ps(f32::INFINITY);
        // not (|v| < inf): infinite or NaN
        let bad = a
            .iter()
            .fold(0, |m, &a| m | _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_NLT_UQ>(a, inf)));
        if bad != 0 {
            return None;
        }
        let m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps::<1>(m, m)));
        let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        // |v * id| <= 127 (to rounding), so the rounded values convert and pack exactly
        let r = v.map(|v| {
            _mm256_cvtps_epi32(_mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm256_mul_ps(v, id),
            ))
        });
        let p = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
        let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        // SAFETY: q holds 32 bytes.
        unsafe { _mm256_storeu_si256(q.as_mut_ptr() as *mut __m256i, p) };
        Some(amax)
    }

    /// llama.cpp's `quantize_row_q8_K` of one block of 256 values (the value of largest
    /// magnitude `max`, the first where several tie; `q = min(round_half_even(v * -127 / max),
    /// 127)`), as `QuantX::new`'s scalar loop computes it, into `q`; returns the block's scale
    /// (`max / -127`, zero for a block of zeros, `q` then untouched), or `None` with `q` untouched
    /// where a value is infinite or NaN. The scalar loop called `rintf` per value: about 10% of
    /// a prompt's time on a TinyLlama-shaped Q4_K_M model.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA. `x` and `q` must hold 256 values (checked).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn quantize_q8_k(x: &[f32], q: &mut [i8]) -> Option<f32> {
        let (x, q): (&[f32; 256], &mut [i8; 256]) = (x.try_into().ok()?, q.try_into().ok()?);
        // SAFETY: x holds 256 floats, read 8 at a time.
        let v: [__m256; 32] = std::array::from_fn(|k| unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * k)) });
        let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let inf = _mm256_set1_ps(f32::INFINITY);
        let (mut m, mut bad) = (_mm256_setzero_ps(), 0);
        for &v in &v {
            let a = _mm256_and_ps(v, abs);
            // not (|v| < inf): infinite or NaN
            bad |= _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_NLT_UQ>(a, inf));
            m = _mm256_max_ps(m, a);
        }
        if bad != 0 {
            return None;
        }
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps::<1>(m, m)));
        if amax == 0.0 {
            return Some(0.0);
        }
        let at = _mm256_set1_ps(amax);
        let first = v
            .iter()
            .enumerate()
            .find_map(|(k, &v)| {
                let hit = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(_mm256_and_ps(v, abs), at));
                (hit != 0).then(|| 8 * k + hit.trailing_zeros() as usize)
            })
            .unwrap_or(0);
        let iscale = -127.0 / x[first];
        let (id, top) = (_mm256_set1_ps(iscale), _mm256_set1_ps(127.0));
        for (c, qc) in v.chunks_exact(4).zip(q.chunks_exact_mut(32)) {
            let r: [__m256i; 4] = std::array::from_fn(|k| {
                let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(id, c[k]));
                _mm256_cvtps_epi32(_mm256_min_ps(r, top))
            });
            let p = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
            let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            // SAFETY: qc holds 32 bytes.
            unsafe { _mm256_storeu_si256(qc.as_mut_ptr() as *mut __m256i, p) };
        }
        Some(1.0 / iscale)
    }

    /// The IQ4_NL weights of one block (32 bytes: `kvalues_iq4nl` of the 16 bytes' low
    /// nibbles, then of their high nibbles) from its 16 bytes of nibbles at `p`.
    ///
    /// # Safety
    /// The CPU must have AVX2; `p` must point at 16 readable bytes.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn iq4_nl_values(p: *const u8, lut: __m128i) -> __m256i {
        // SAFETY: the caller promises 16 bytes at p.
        let qs = unsafe { _mm_loadu_si128(p as *const __m128i) };
        let m4 = _mm_set1_epi8(0xF);
        let lo = _mm_shuffle_epi8(lut, _mm_and_si128(qs, m4));
        let hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16::<4>(qs), m4));
        _mm256_set_m128i(hi, lo)
    }

    /// Signed bytes `w · x` summed in fours into 8 lanes of i32 (llama.cpp's
    /// `mul_sum_i8_pairs`: the sign moved onto `x`, `|w|` unsigned).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn mul_sum_i8(w: __m256i, x: __m256i) -> __m256i {
        let p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
        _mm256_madd_epi16(p, _mm256_set1_epi16(1))
    }

    /// Four vectors of 8 lanes of i32 reduced to their four sums, one lane each.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn sums4(a: __m256i, b: __m256i, c: __m256i, d: __m256i) -> __m128i {
        let h = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
        _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
    }

    /// [`super::dot_iq4_nl`] of one row with four inputs (`d[k]`, `q[k]`), bit for bit: each
    /// block's weights looked up once for the four, its four integer sums reduced together and
    /// multiply-added a lane each. The prompt's kernel (and, with one input repeated, a row's).
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA. Sizes are checked (a panic, not undefined behaviour):
    /// with `nb` the row's blocks of 18 bytes, each `d[k]` holds `nb` scales and `q[k]` `32 * nb`
    /// values.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_iq4_nl_x4(row: &[u8], d: [&[f32]; 4], q: [&[i8]; 4]) -> [f32; 4] {
        let nb = row.len() / 18;
        assert!((0..4).all(|k| d[k].len() >= nb && q[k].len() >= 32 * nb));
        // SAFETY: the table holds 16 bytes.
        let lut = unsafe { _mm_loadu_si128(super::IQ4NL_VALUES.as_ptr() as *const __m128i) };
        let mut acc = _mm_setzero_ps();
        for b in 0..nb {
            let blk = &row[18 * b..18 * (b + 1)];
            // SAFETY: the block's 16 bytes of nibbles are at 2; 32 values at 32b of each input.
            let (w, x0, x1, x2, x3) = unsafe {
                let x = |k: usize| _mm256_loadu_si256(q[k].as_ptr().add(32 * b) as *const __m256i);
                (iq4_nl_values(blk.as_ptr().add(2), lut), x(0), x(1), x(2), x(3))
            };
            let tot = sums4(mul_sum_i8(w, x0), mul_sum_i8(w, x1), mul_sum_i8(w, x2), mul_sum_i8(w, x3));
            let dx = _mm_set_ps(d[3][b], d[2][b], d[1][b], d[0][b]);
            acc = _mm_fmadd_ps(_mm_cvtepi32_ps(tot), _mm_mul_ps(_mm_set1_ps(super::f16_bits(blk, 0)), dx), acc);
        }
        let mut out = [0f32; 4];
        // SAFETY: out holds four floats.
        unsafe { _mm_storeu_ps(out.as_mut_ptr(), acc) };
        out
    }

    /// [`super::dot_iq4_nl`] with AVX2, bit for bit: a row with one input (a decode step's
    /// last rows, a batch's single inputs).
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA. Sizes are checked (a panic, not undefined behaviour):
    /// with `nb` the row's blocks of 18 bytes, `d` holds `nb` scales and `q` `32 * nb` values.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_iq4_nl(row: &[u8], d: &[f32], q: &[i8]) -> f32 {
        let nb = row.len() / 18;
        assert!(d.len() >= nb && q.len() >= 32 * nb);
        // SAFETY: the table holds 16 bytes.
        let lut = unsafe { _mm_loadu_si128(super::IQ4NL_VALUES.as_ptr() as *const __m128i) };
        let mut sum = 0f32;
        for b in 0..nb {
            let blk = &row[18 * b..18 * (b + 1)];
            // SAFETY: the block's 16 bytes of nibbles are at 2; 32 values at 32b of q (asserted).
            let (w, x) = unsafe {
                (
                    iq4_nl_values(blk.as_ptr().add(2), lut),
                    _mm256_loadu_si256(q.as_ptr().add(32 * b) as *const __m256i),
                )
            };
            sum = (hsum_i32(mul_sum_i8(w, x)) as f32).mul_add(super::f16_bits(blk, 0) * d[b], sum);
        }
        sum
    }

    /// [`super::dot_iq4_nl`] of four rows with one input, bit for bit: the input's block loaded
    /// once for the four rows, their four integer sums reduced together. The decode kernel.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA. Sizes are checked (a panic, not undefined behaviour):
    /// with `nb` blocks of 18 bytes in the shortest row, `d` holds `nb` scales and `q` `32 * nb`
    /// values.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_iq4_nl_rows4(rows: [&[u8]; 4], d: &[f32], q: &[i8]) -> [f32; 4] {
        let nb = rows.iter().map(|r| r.len() / 18).min().unwrap_or(0);
        assert!(d.len() >= nb && q.len() >= 32 * nb);
        // SAFETY: the table holds 16 bytes.
        let lut = unsafe { _mm_loadu_si128(super::IQ4NL_VALUES.as_ptr() as *const __m128i) };
        let mut acc = _mm_setzero_ps();
        let (r0, r1, r2, r3) = (rows[0].as_ptr(), rows[1].as_ptr(), rows[2].as_ptr(), rows[3].as_ptr());
        let t = super::f16_table();
        // (pointers and named vectors, no closures or arrays of vectors: those were left
        // uninlined around this loop and cost a third of a decode step)
        for b in 0..nb {
            // SAFETY: b < nb: 18 bytes at 18b in each row (the f16 scale, then 16 bytes of
            // nibbles), 32 values at 32b in q (asserted).
            unsafe {
                let x = _mm256_loadu_si256(q.as_ptr().add(32 * b) as *const __m256i);
                let scale = |p: *const u8| *t.get_unchecked(u16::from_le_bytes([*p, *p.add(1)]) as usize);
                let (p0, p1, p2, p3) = (r0.add(18 * b), r1.add(18 * b), r2.add(18 * b), r3.add(18 * b));
                let tot = sums4(
                    mul_sum_i8(iq4_nl_values(p0.add(2), lut), x),
                    mul_sum_i8(iq4_nl_values(p1.add(2), lut), x),
                    mul_sum_i8(iq4_nl_values(p2.add(2), lut), x),
                    mul_sum_i8(iq4_nl_values(p3.add(2), lut), x),
                );
                let dw = _mm_set_ps(scale(p3), scale(p2), scale(p1), scale(p0));
                acc = _mm_fmadd_ps(_mm_cvtepi32_ps(tot), _mm_mul_ps(dw, _mm_set1_ps(*d.get_unchecked(b))), acc);
            }
        }
        let mut out = [0f32; 4];
        // SAFETY: out holds four floats.
        unsafe { _mm_storeu_ps(out.as_mut_ptr(), acc) };
        out
    }

    /// [`super::dot_q4_0`] with AVX2.
    ///
    /// # Safety
    /// As [`dot_q8_0`], for Q4_0 blocks.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_q4_0(row: &[u8], d: &[f32], q: &[i8]) -> f32 {
        let t = super::f16_table();
        let mut acc = _mm256_setzero_ps();
        let low = _mm256_set1_epi8(0xF);
        let eight = _mm256_set1_epi8(8);
        for (b, (blk, &dx)) in row.chunks_exact(18).zip(d).enumerate() {
            // SAFETY: blk has 18 bytes (16 of nibbles after the scale); q has 32 values at 32b.
            let (nib, x) = unsafe {
                (
                    _mm_loadu_si128(blk.as_ptr().add(2) as *const __m128i),
                    _mm256_loadu_si256(q.as_ptr().add(32 * b) as *const __m256i),
                )
            };
            // low nibbles are values 0..16, high nibbles 16..32
            let both = _mm256_set_m128i(_mm_srli_epi16::<4>(nib), nib);
            let w = _mm256_sub_epi8(_mm256_and_si256(both, low), eight);
            let s = super::f16_at(t, blk, 0) * dx;
            acc = _mm256_fmadd_ps(_mm256_set1_ps(s), isum32(w, x), acc);
        }
        hsum(acc)
    }

    /// 32 unsigned weights (0..32) times 32 signed activations, summed in 8 i32 lanes, as f32
    /// (llama.cpp's `mul_sum_us8_pairs_float`; no pair saturates: 2 * 31 * 128 < 2^15).
    #[target_feature(enable = "avx2,fma")]
    fn usum32(w: __m256i, x: __m256i) -> __m256 {
        let p = _mm256_maddubs_epi16(w, x);
        _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)))
    }

    /// A block's 16 bytes of nibbles as 32 bytes 0..16: low nibbles are values 0..16, high
    /// nibbles 16..32 (llama.cpp's `bytes_from_nibbles_32`).
    ///
    /// # Safety
    /// `p` must point at 16 readable bytes.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn nibbles(p: *const u8) -> __m256i {
        // SAFETY: 16 bytes at p (the caller).
        let nib = unsafe { _mm_loadu_si128(p as *const __m128i) };
        _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16::<4>(nib), nib), _mm256_set1_epi8(0xF))
    }

    /// Byte `j` all ones where bit `j` of the little-endian `qh` is set, else zero (llama.cpp's
    /// `bytes_from_bits_32`).
    #[target_feature(enable = "avx2,fma")]
    fn bits(qh: &[u8]) -> __m256i {
        let h = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
        let shuf = _mm256_set_epi64x(0x0303_0303_0303_0303, 0x0202_0202_0202_0202, 0x0101_0101_0101_0101, 0);
        let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(h as i32), shuf);
        let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe));
        _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
    }

    /// [`super::dot_q4_1`] with AVX2, llama.cpp's `ggml_vec_dot_q4_1_q8_1` (the same products,
    /// lanes and sums, so the same result bit for bit given the same activations).
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `q` holds at least 32 values for each block of
    /// `min(row.len() / 20, d.len(), s.len())`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_q4_1(row: &[u8], d: &[f32], s: &[f32], q: &[i8]) -> f32 {
        let t = super::f16_table();
        let mut acc = _mm256_setzero_ps();
        let mut summs = 0f32;
        for (b, ((blk, &dx), &sx)) in row.chunks_exact(20).zip(d).zip(s).enumerate() {
            summs += super::f16_at(t, blk, 2) * sx;
            // SAFETY: blk has 20 bytes (16 of nibbles at 4); q has 32 values at 32b (the caller).
            let (w, x) = unsafe {
                (
                    nibbles(blk.as_ptr().add(4)),
                    _mm256_loadu_si256(q.as_ptr().add(32 * b) as *const __m256i),
                )
            };
            let dd = _mm256_set1_ps(super::f16_at(t, blk, 0) * dx);
            acc = _mm256_fmadd_ps(dd, usum32(w, x), acc);
        }
        hsum(acc) + summs
    }

    /// [`super::dot_q5_0`] with AVX2, llama.cpp's `ggml_vec_dot_q5_0_q8_0`.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `q` holds at least 32 values for each block of
    /// `min(row.len() / 22, d.len())`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_q5_0(row: &[u8], d: &[f32], q: &[i8]) -> f32 {
        let t = super::f16_table();
        let mut acc = _mm256_setzero_ps();
        let high = _mm256_set1_epi8(0xF0u8 as i8);
        for (b, (blk, &dx)) in row.chunks_exact(22).zip(d).enumerate() {
            // SAFETY: blk has 22 bytes (16 of nibbles at 6); q has 32 values at 32b (the caller).
            let (w, x) = unsafe {
                (
                    nibbles(blk.as_ptr().add(6)),
                    _mm256_loadu_si256(q.as_ptr().add(32 * b) as *const __m256i),
                )
            };
            // fifth bit clear: the nibble minus 16 (its high bits all set), set: the nibble
            let w = _mm256_or_si256(w, _mm256_andnot_si256(bits(&blk[2..6]), high));
            let dd = _mm256_set1_ps(super::f16_at(t, blk, 0) * dx);
            acc = _mm256_fmadd_ps(dd, isum32(w, x), acc);
        }
        hsum(acc)
    }

    /// [`super::dot_q5_1`] with AVX2, llama.cpp's `ggml_vec_dot_q5_1_q8_1`.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `q` holds at least 32 values for each block of
    /// `min(row.len() / 24, d.len(), s.len())`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_q5_1(row: &[u8], d: &[f32], s: &[f32], q: &[i8]) -> f32 {
        let t = super::f16_table();
        let mut acc = _mm256_setzero_ps();
        let mut summs = 0f32;
        let fifth = _mm256_set1_epi8(0x10);
        for (b, ((blk, &dx), &sx)) in row.chunks_exact(24).zip(d).zip(s).enumerate() {
            summs += super::f16_at(t, blk, 2) * sx;
            // SAFETY: blk has 24 bytes (16 of nibbles at 8); q has 32 values at 32b (the caller).
            let (w, x) = unsafe {
                (
                    nibbles(blk.as_ptr().add(8)),
                    _mm256_loadu_si256(q.as_ptr().add(32 * b) as *const __m256i),
                )
            };
            let w = _mm256_or_si256(w, _mm256_and_si256(bits(&blk[4..8]), fifth));
            let dd = _mm256_mul_ps(_mm256_set1_ps(super::f16_at(t, blk, 0)), _mm256_set1_ps(dx));
            acc = _mm256_fmadd_ps(usum32(w, x), dd, acc);
        }
        hsum(acc) + summs
    }

    /// [`dot_q4_1`], [`dot_q5_0`] or [`dot_q5_1`] (ggml type `ID`) of one row with four inputs,
    /// each result bit for bit that kernel's (the same products, lanes and sums per input): the
    /// row's blocks are decoded once for the four. `s` is unused for Q5_0.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA. Sizes are checked (a panic, not undefined behaviour): with
    /// `nb` the blocks of `row`, each `d[k]` (and, but for Q5_0, `s[k]`) holds `nb` values and
    /// each `q[k]` `32 * nb`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_q4_1_q5_x4<const ID: u32>(
        row: &[u8],
        d: [&[f32]; 4],
        s: [&[f32]; 4],
        q: [&[i8]; 4],
    ) -> [f32; 4] {
        use super::{Q4_1, Q5_0};
        let size = match ID {
            Q4_1 => 20,
            Q5_0 => 22,
            _ => 24,
        };
        let nb = row.len() / size;
        assert!(
            d.iter().all(|d| d.len() >= nb)
                && (ID == Q5_0 || s.iter().all(|s| s.len() >= nb))
                && q.iter().all(|q| q.len() >= 32 * nb)
        );
        let t = super::f16_table();
        let (low, high, fifth) = (
            _mm256_set1_epi8(0xF),
            _mm256_set1_epi8(0xF0u8 as i8),
            _mm256_set1_epi8(0x10),
        );
        let ones = _mm256_set1_epi16(1);
        let zero = _mm256_setzero_ps();
        // (named accumulators: an array of them is kept on the stack)
        let (mut a0, mut a1, mut a2, mut a3) = (zero, zero, zero, zero);
        let mut m = [0f32; 4];
        for b in 0..nb {
            let blk = &row[size * b..size * (b + 1)];
            // SAFETY: the block's nibbles are its last 16 bytes.
            let nib = unsafe { _mm_loadu_si128(blk.as_ptr().add(size - 16) as *const __m128i) };
            let w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16::<4>(nib), nib), low);
            let w = match ID {
                Q4_1 => w,
                Q5_0 => _mm256_or_si256(w, _mm256_andnot_si256(bits(&blk[2..6]), high)),
                _ => _mm256_or_si256(w, _mm256_and_si256(bits(&blk[4..8]), fifth)),
            };
            // Q5_0's signed weights as |w| and the activations given w's sign (isum32)
            let aw = if ID == Q5_0 { _mm256_sign_epi8(w, w) } else { w };
            let dw = super::f16_at(t, blk, 0);
            if ID != Q5_0 {
                let mw = super::f16_at(t, blk, 2);
                for (mk, sk) in m.iter_mut().zip(s) {
                    *mk += mw * sk[b];
                }
            }
            let prod = |k: usize| {
                // SAFETY: q[k] holds 32 values at 32b (asserted).
                let x = unsafe { _mm256_loadu_si256(q[k].as_ptr().add(32 * b) as *const __m256i) };
                let x = if ID == Q5_0 { _mm256_sign_epi8(x, w) } else { x };
                let p = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(aw, x), ones));
                (_mm256_set1_ps(dw * d[k][b]), p)
            };
            let (s0, p0) = prod(0);
            a0 = _mm256_fmadd_ps(s0, p0, a0);
            let (s1, p1) = prod(1);
            a1 = _mm256_fmadd_ps(s1, p1, a1);
            let (s2, p2) = prod(2);
            a2 = _mm256_fmadd_ps(s2, p2, a2);
            let (s3, p3) = prod(3);
            a3 = _mm256_fmadd_ps(s3, p3, a3);
        }
        let sums = [hsum(a0), hsum(a1), hsum(a2), hsum(a3)];
        if ID == Q5_0 {
            sums
        } else {
            [0, 1, 2, 3].map(|k| sums[k] + m[k])
        }
    }

    /// [`dot_q4_1`] of four rows with one input, each bit for bit `dot_q4_1`'s for its row (the
    /// same products, lanes and sums in the same order, per row).
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA. Sizes are checked (a panic, not undefined behaviour):
    /// with `nb` the blocks of the shortest row, `d` and `s` hold `nb` values and `q` `32 * nb`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_q4_1_rows4(rows: [&[u8]; 4], d: &[f32], s: &[f32], q: &[i8]) -> [f32; 4] {
        let nb = rows.iter().map(|r| r.len() / 20).min().unwrap_or(0);
        assert!(d.len() >= nb && s.len() >= nb && q.len() >= 32 * nb);
        let t = super::f16_table();
        let zero = _mm256_setzero_ps();
        let (mut a0, mut a1, mut a2, mut a3) = (zero, zero, zero, zero);
        let (mut m0, mut m1, mut m2, mut m3) = (0f32, 0f32, 0f32, 0f32);
        let (r0, r1, r2, r3) = (rows[0].as_ptr(), rows[1].as_ptr(), rows[2].as_ptr(), rows[3].as_ptr());
        for b in 0..nb {
            // SAFETY: b < nb: 20 bytes at 20b in each row, 32 values at 32b in q (asserted).
            unsafe {
                let x = _mm256_loadu_si256(q.as_ptr().add(32 * b) as *const __m256i);
                let (dx, sx) = (*d.get_unchecked(b), *s.get_unchecked(b));
                macro_rules! row {
                    ($p:ident, $a:ident, $m:ident) => {{
                        let blk = $p.add(20 * b);
                        let h = |o: usize| *t.get_unchecked(u16::from_le_bytes([*blk.add(o), *blk.add(o + 1)]) as usize);
                        $m += h(2) * sx;
                        let w = nibbles(blk.add(4));
                        $a = _mm256_fmadd_ps(_mm256_set1_ps(h(0) * dx), usum32(w, x), $a);
                    }};
                }
                row!(r0, a0, m0);
                row!(r1, a1, m1);
                row!(r2, a2, m2);
                row!(r3, a3, m3);
            }
        }
        [hsum(a0) + m0, hsum(a1) + m1, hsum(a2) + m2, hsum(a3) + m3]
    }

    /// Four rows of `c = w.len() / 4` values times `x` (at least `c` long).
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot4(w: &[f32], x: &[f32]) -> [f32; 4] {
        let c = w.len() / 4;
        assert!(x.len() >= c);
        let (pw, px) = (w.as_ptr(), x.as_ptr());
        // (four named accumulators: an array of them is kept on the stack, not in registers)
        let (mut a0, mut a1, mut a2, mut a3) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        let mut i = 0;
        // SAFETY: each step reads 8 floats at i of x and at k*c + i of w, with i + 8 <= c.
        unsafe {
            while i + 8 <= c {
                let xv = _mm256_loadu_ps(px.add(i));
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(pw.add(i)), xv, a0);
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(pw.add(c + i)), xv, a1);
                a2 = _mm256_fmadd_ps(_mm256_loadu_ps(pw.add(2 * c + i)), xv, a2);
                a3 = _mm256_fmadd_ps(_mm256_loadu_ps(pw.add(3 * c + i)), xv, a3);
                i += 8;
            }
        }
        let acc = [a0, a1, a2, a3];
        let mut out = [0f32; 4];
        for (k, o) in out.iter_mut().enumerate() {
            *o = hsum(acc[k]);
            for j in i..c {
                *o += w[k * c + j] * x[j];
            }
        }
        out
    }

    /// `row` holds little-endian f16 values (2 bytes each); the product with `x` over
    /// `min(row.len() / 2, x.len())` values.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_f16(row: &[u8], x: &[f32]) -> f32 {
        let n = (row.len() / 2).min(x.len());
        let (pw, px) = (row.as_ptr(), x.as_ptr());
        let (mut a0, mut a1, mut a2, mut a3) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        let mut i = 0;
        // (pointers stepped, no closure: the closure's captures and an index multiplication with
        // its overflow check kept the loop's state on the stack)
        let (mut w, mut xp) = (pw as *const __m128i, px);
        // SAFETY: each step reads 8 f16 (16 bytes at w) and 8 f32 at xp, both at element i with
        // i + 8 <= n (i + 32 <= n for the unrolled steps), inside both slices.
        unsafe {
            while i + 32 <= n {
                a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(w)), _mm256_loadu_ps(xp), a0);
                a1 = _mm256_fmadd_ps(
                    _mm256_cvtph_ps(_mm_loadu_si128(w.add(1))),
                    _mm256_loadu_ps(xp.add(8)),
                    a1,
                );
                a2 = _mm256_fmadd_ps(
                    _mm256_cvtph_ps(_mm_loadu_si128(w.add(2))),
                    _mm256_loadu_ps(xp.add(16)),
                    a2,
                );
                a3 = _mm256_fmadd_ps(
                    _mm256_cvtph_ps(_mm_loadu_si128(w.add(3))),
                    _mm256_loadu_ps(xp.add(24)),
                    a3,
                );
                w = w.add(4);
                xp = xp.add(32);
                i += 32;
            }
            while i + 8 <= n {
                a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(w)), _mm256_loadu_ps(xp), a0);
                w = w.add(1);
                xp = xp.add(8);
                i += 8;
            }
        }
        let mut s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        for j in i..n {
            s += half::f16::from_bits(u16::from_le_bytes([row[2 * j], row[2 * j + 1]])).to_f32() * x[j];
        }
        s
    }

    /// [`dot_f16`] for bf16 values (the top 16 bits of an f32).
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_bf16(row: &[u8], x: &[f32]) -> f32 {
        let n = (row.len() / 2).min(x.len());
        let (pw, px) = (row.as_ptr(), x.as_ptr());
        let mut acc = _mm256_setzero_ps();
        let mut i = 0;
        // SAFETY: each step reads 8 bf16 (16 bytes at 2i) and 8 f32 at i with i + 8 <= n.
        unsafe {
            while i + 8 <= n {
                let h = _mm_loadu_si128(pw.add(2 * i) as *const __m128i);
                let w = _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)));
                acc = _mm256_fmadd_ps(w, _mm256_loadu_ps(px.add(i)), acc);
                i += 8;
            }
        }
        let mut s = hsum(acc);
        for j in i..n {
            s += f32::from_bits(u32::from(u16::from_le_bytes([row[2 * j], row[2 * j + 1]])) << 16) * x[j];
        }
        s
    }

    /// The sum of eight i32 lanes (exact: the callers' lanes sum within i32).
    #[target_feature(enable = "avx2,fma")]
    fn hsum_i32(v: __m256i) -> i32 {
        hsum_i32_128(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v)))
    }

    /// The sum of four i32 lanes.
    #[target_feature(enable = "avx2,fma")]
    fn hsum_i32_128(v: __m128i) -> i32 {
        let v = _mm_add_epi32(v, _mm_shuffle_epi32::<0b01_00_11_10>(v));
        let v = _mm_add_epi32(v, _mm_shuffle_epi32::<0b10_11_00_01>(v));
        _mm_cvtsi128_si32(v)
    }

    /// llama.cpp's `get_scale_shuffle_k4` table: row `i` is bytes `2i, 2i + 1` repeated.
    static SHUFFLE_K4: [[u8; 32]; 8] = {
        let mut t = [[0u8; 32]; 8];
        let mut i = 0;
        while i < 8 {
            let mut j = 0;
            while j < 32 {
                t[i][j] = (2 * i + j % 2) as u8;
                j += 1;
            }
            i += 1;
        }
        t
    };

    /// llama.cpp's `get_scale_shuffle` table: row `i` is byte `2i` eight times, then `2i + 1`.
    static SHUFFLE: [[u8; 16]; 8] = {
        let mut t = [[0u8; 16]; 8];
        let mut i = 0;
        while i < 8 {
            let mut j = 0;
            while j < 16 {
                t[i][j] = (2 * i + j / 8) as u8;
                j += 1;
            }
            i += 1;
        }
        t
    };

    /// llama.cpp's `get_scale_shuffle_k4(i)` (a load from a table: a vector built from 32
    /// variable bytes cost more than the rest of a block's work).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn scale_shuffle_k4(i: usize) -> __m256i {
        let row = &SHUFFLE_K4[i];
        // SAFETY: the row holds 32 bytes.
        unsafe { _mm256_loadu_si256(row.as_ptr() as *const __m256i) }
    }

    /// llama.cpp's `get_scale_shuffle(i)`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(super) fn scale_shuffle(i: usize) -> __m128i {
        let row = &SHUFFLE[i];
        // SAFETY: the row holds 16 bytes.
        unsafe { _mm_loadu_si128(row.as_ptr() as *const __m128i) }
    }

    /// [`super::dot_q4_k`] with AVX2: llama.cpp's `ggml_vec_dot_q4_K_q8_K` (the same integer
    /// lanes, the same float accumulators and sums, so the same result bit for bit given the
    /// same Q8_K activations). `sums` holds the activations' sums of 16 (`bsums`).
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA. Sizes are checked (a panic, not undefined behaviour):
    /// with `nb` the row's blocks of 144 bytes, `d` holds `nb` scales, `q` `256 * nb` values and
    /// `sums` `16 * nb`.
    #[target_feature(enable = "avx2,fma")]
    ///
    /// With `INTERLEAVED`, the sums are taken in the order of llama.cpp's interleaved kernels
    /// instead ([`super::dot_q4_k_interleaved`], bit for bit).
    pub(super) unsafe fn dot_q4_k<const INTERLEAVED: bool>(row: &[u8], d: &[f32], q: &[i8], sums: &[i16]) -> f32 {
        let nb = row.len() / 144;
        assert!(d.len() >= nb && q.len() >= 256 * nb && sums.len() >= 16 * nb);
        let m4 = _mm256_set1_epi8(0xF);
        let mut acc = _mm256_setzero_ps();
        let mut acc_m = _mm_setzero_ps();
        let (mut sacc, mut sacc_m) = (0f32, 0f32);
        for i in 0..nb {
            let blk = &row[144 * i..144 * (i + 1)];
            let dx = d[i];
            let dd = dx * super::f16_bits(blk, 0);
            let dmin = -dx * super::f16_bits(blk, 2);
            let utmp = super::q4_k_scales_mins(blk);
            let mins_and_scales = _mm256_cvtepu8_epi16(_mm_set_epi32(
                utmp[3] as i32,
                utmp[2] as i32,
                utmp[1] as i32,
                utmp[0] as i32,
            ));
            // SAFETY: sums holds 16 values at 16i, q 256 at 256i (asserted).
            let (q8sums, q8) = unsafe {
                (
                    _mm256_loadu_si256(sums.as_ptr().add(16 * i) as *const __m256i),
                    q.as_ptr().add(256 * i),
                )
            };
            let q8s = _mm_hadd_epi16(_mm256_castsi256_si128(q8sums), _mm256_extracti128_si256::<1>(q8sums));
            let prod = _mm_madd_epi16(_mm256_extracti128_si256::<1>(mins_and_scales), q8s);
            if !INTERLEAVED {
                acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
            }
            let sc128 = _mm256_castsi256_si128(mins_and_scales);
            let scales = _mm256_set_m128i(sc128, sc128);
            let mut sumi = _mm256_setzero_si256();
            for j in 0..4 {
                let scale_l = _mm256_shuffle_epi8(scales, scale_shuffle_k4(2 * j));
                let scale_h = _mm256_shuffle_epi8(scales, scale_shuffle_k4(2 * j + 1));
                // SAFETY: the block's 128 bytes of nibbles are at 16, 32 of them at 16 + 32j;
                // 64 activations at 64j of this block's 256.
                let (q4bits, q8l, q8h) = unsafe {
                    (
                        _mm256_loadu_si256(blk.as_ptr().add(16 + 32 * j) as *const __m256i),
                        _mm256_loadu_si256(q8.add(64 * j) as *const __m256i),
                        _mm256_loadu_si256(q8.add(64 * j + 32) as *const __m256i),
                    )
                };
                let q4l = _mm256_and_si256(q4bits, m4);
                let q4h = _mm256_and_si256(_mm256_srli_epi16::<4>(q4bits), m4);
                let p16l = _mm256_madd_epi16(scale_l, _mm256_maddubs_epi16(q4l, q8l));
                let p16h = _mm256_madd_epi16(scale_h, _mm256_maddubs_epi16(q4h, q8h));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16l, p16h));
            }
            if INTERLEAVED {
                sacc = (hsum_i32(sumi) as f32).mul_add(super::f16_bits(blk, 0) * dx, sacc);
                sacc_m = (hsum_i32_128(prod) as f32).mul_add(super::f16_bits(blk, 2) * dx, sacc_m);
            } else {
                acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(sumi), acc);
            }
        }
        if INTERLEAVED {
            return sacc - sacc_m;
        }
        fin(acc, acc_m)
    }

    /// A Q4_K kernel's result from its accumulators: the scales' 8 lanes and the mins' 4
    /// (llama.cpp's order of the final sums).
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn fin(acc: __m256, acc_m: __m128) -> f32 {
        let acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
        let acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
        hsum(acc) + _mm_cvtss_f32(acc_m)
    }

    /// The 6-bit values (unsigned) of half `j` (0 or 1) of a Q6_K block: four groups of 32, as
    /// llama.cpp's kernel lays them out (low nibbles of 64 bytes at 64j, two high bits each from
    /// the 32 bytes at 128 + 32j).
    ///
    /// # Safety
    /// The CPU must have AVX2; `blk` must be a whole block (210 bytes, checked).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(super) unsafe fn q6_k_values(blk: &[u8], j: usize) -> [__m256i; 4] {
        assert!(blk.len() >= 192 && j < 2);
        let (m3, m15) = (_mm256_set1_epi8(3), _mm256_set1_epi8(15));
        // SAFETY: 64 bytes of low bits at 64j, 32 of high bits at 128 + 32j (asserted).
        let (b1, b2, bh) = unsafe {
            let p = blk.as_ptr();
            (
                _mm256_loadu_si256(p.add(64 * j) as *const __m256i),
                _mm256_loadu_si256(p.add(64 * j + 32) as *const __m256i),
                _mm256_loadu_si256(p.add(128 + 32 * j) as *const __m256i),
            )
        };
        let h0 = _mm256_slli_epi16::<4>(_mm256_and_si256(bh, m3));
        let h1 = _mm256_slli_epi16::<2>(_mm256_and_si256(bh, _mm256_set1_epi8(12)));
        let h2 = _mm256_and_si256(bh, _mm256_set1_epi8(48));
        let h3 = _mm256_srli_epi16::<2>(_mm256_and_si256(bh, _mm256_set1_epi8(-64)));
        [
            _mm256_or_si256(_mm256_and_si256(b1, m15), h0),
            _mm256_or_si256(_mm256_and_si256(b2, m15), h1),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(b1), m15), h2),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(b2), m15), h3),
        ]
    }

    /// A Q4_K block's eight mins times the sums of its activations' eight groups of 32 (four
    /// lanes of pairs), from the 16 sums of 16 at `sums[16 * i..]`.
    ///
    /// # Safety
    /// The CPU must have AVX2; `sums` must hold `16 * (i + 1)` values (checked).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(super) unsafe fn q4_k_mins_product(mins: __m128i, sums: &[i16], i: usize) -> __m128i {
        let s = &sums[16 * i..16 * (i + 1)];
        // SAFETY: s holds 16 values.
        let q8sums = unsafe { _mm256_loadu_si256(s.as_ptr() as *const __m256i) };
        let q8s = _mm_hadd_epi16(_mm256_castsi256_si128(q8sums), _mm256_extracti128_si256::<1>(q8sums));
        _mm_madd_epi16(mins, q8s)
    }

    /// [`super::dot_q6_k`] with AVX2: llama.cpp's `ggml_vec_dot_q6_K_q8_K` (the 6-bit values
    /// unsigned, their offset of 32 taken off as 32 times the scaled sums of 16 activations;
    /// the same lanes and sums, so the same result bit for bit given the same activations).
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA. Sizes are checked (a panic, not undefined behaviour):
    /// with `nb` the row's blocks of 210 bytes, `d` holds `nb` scales, `q` `256 * nb` values and
    /// `sums` `16 * nb`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_q6_k(row: &[u8], d: &[f32], q: &[i8], sums: &[i16]) -> f32 {
        let nb = row.len() / 210;
        assert!(d.len() >= nb && q.len() >= 256 * nb && sums.len() >= 16 * nb);
        let mut acc = _mm256_setzero_ps();
        for i in 0..nb {
            let blk = &row[210 * i..210 * (i + 1)];
            let dd = d[i] * super::f16_bits(blk, 208);
            // SAFETY: the block's 16 scales are at 192; sums holds 16 values at 16i and q 256 at
            // 256i (asserted).
            let (q8sums, scales, q8) = unsafe {
                (
                    _mm256_loadu_si256(sums.as_ptr().add(16 * i) as *const __m256i),
                    _mm_loadu_si128(blk.as_ptr().add(192) as *const __m128i),
                    q.as_ptr().add(256 * i),
                )
            };
            let scales_16 = _mm256_cvtepi8_epi16(scales);
            let q8sclsub = _mm256_slli_epi32::<5>(_mm256_madd_epi16(q8sums, scales_16));
            let mut sumi = _mm256_setzero_si256();
            for j in 0..2 {
                // SAFETY: 64 bytes of low bits at 64j, 32 of high bits at 128 + 32j; 128
                // activations at 128j of this block's 256.
                let ([w0, w1, w2, w3], x) = unsafe {
                    let x = |k: usize| _mm256_loadu_si256(q8.add(128 * j + 32 * k) as *const __m256i);
                    (q6_k_values(blk, j), [x(0), x(1), x(2), x(3)])
                };
                let is = 4 * j;
                let p = |w: __m256i, x: __m256i, k: usize| {
                    let sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, scale_shuffle(is + k)));
                    _mm256_madd_epi16(sc, _mm256_maddubs_epi16(w, x))
                };
                let (p0, p1, p2, p3) = (p(w0, x[0], 0), p(w1, x[1], 1), p(w2, x[2], 2), p(w3, x[3], 3));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p2, p3));
            }
            let sumi = _mm256_sub_epi32(sumi, q8sclsub);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum(acc)
    }

    /// [`dot_q4_k`] of one row with four inputs (`d[k]`, `q[k]`, `sums[k]`), each result bit
    /// for bit `dot_q4_k`'s (the same lanes, products and sums per input): the row's nibbles and
    /// scales are decoded once for the four. The prompt's kernel.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA. Sizes are checked (a panic, not undefined behaviour), as
    /// [`dot_q4_k`]'s for each input.
    #[target_feature(enable = "avx2,fma")]
    ///
    /// `INTERLEAVED` as for [`dot_q4_k`].
    pub(super) unsafe fn dot_q4_k_x4<const INTERLEAVED: bool>(
        row: &[u8],
        d: [&[f32]; 4],
        q: [&[i8]; 4],
        sums: [&[i16]; 4],
    ) -> [f32; 4] {
        let nb = row.len() / 144;
        assert!((0..4).all(|k| d[k].len() >= nb && q[k].len() >= 256 * nb && sums[k].len() >= 16 * nb));
        let m4 = _mm256_set1_epi8(0xF);
        let (z, zm) = (_mm256_setzero_ps(), _mm_setzero_ps());
        // (named accumulators: an array of them is kept on the stack)
        let (mut a0, mut a1, mut a2, mut a3) = (z, z, z, z);
        let (mut m0, mut m1, mut m2, mut m3) = (zm, zm, zm, zm);
        // INTERLEAVED: the sums per input, a lane each
        let (mut s4, mut sm4) = (zm, zm);
        for i in 0..nb {
            let blk = &row[144 * i..144 * (i + 1)];
            let (wd, wm) = (super::f16_bits(blk, 0), super::f16_bits(blk, 2));
            let utmp = super::q4_k_scales_mins(blk);
            let mins_and_scales = _mm256_cvtepu8_epi16(_mm_set_epi32(
                utmp[3] as i32,
                utmp[2] as i32,
                utmp[1] as i32,
                utmp[0] as i32,
            ));
            let mins = _mm256_extracti128_si256::<1>(mins_and_scales);
            let sc128 = _mm256_castsi256_si128(mins_and_scales);
            let scales = _mm256_set_m128i(sc128, sc128);
            // each 64 values' nibbles and scales, for the four inputs
            let w: [(__m256i, __m256i, __m256i, __m256i); 4] = std::array::from_fn(|j| {
                // SAFETY: the block's 128 bytes of nibbles are at 16, 32 of them at 16 + 32j.
                let bits = unsafe { _mm256_loadu_si256(blk.as_ptr().add(16 + 32 * j) as *const __m256i) };
                (
                    _mm256_and_si256(bits, m4),
                    _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4),
                    _mm256_shuffle_epi8(scales, scale_shuffle_k4(2 * j)),
                    _mm256_shuffle_epi8(scales, scale_shuffle_k4(2 * j + 1)),
                )
            });
            // input k's integer sums of this block: the scaled nibble products (8 lanes) and
            // the mins times the activations' sums (4 lanes)
            let input = |k: usize| {
                // SAFETY: q[k] holds 256 values at 256i (asserted); q4_k_mins_product checks sums.
                let (prod, q8) = unsafe { (q4_k_mins_product(mins, sums[k], i), q[k].as_ptr().add(256 * i)) };
                let mut sumi = _mm256_setzero_si256();
                for (j, &(q4l, q4h, scale_l, scale_h)) in w.iter().enumerate() {
                    // SAFETY: 64 activations at 64j of this block's 256.
                    let (q8l, q8h) = unsafe {
                        (
                            _mm256_loadu_si256(q8.add(64 * j) as *const __m256i),
                            _mm256_loadu_si256(q8.add(64 * j + 32) as *const __m256i),
                        )
                    };
                    let p16l = _mm256_madd_epi16(scale_l, _mm256_maddubs_epi16(q4l, q8l));
                    let p16h = _mm256_madd_epi16(scale_h, _mm256_maddubs_epi16(q4h, q8h));
                    sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16l, p16h));
                }
                (sumi, prod)
            };
            let ((i0, p0), (i1, p1), (i2, p2), (i3, p3)) = (input(0), input(1), input(2), input(3));
            if INTERLEAVED {
                // The four inputs' block sums reduced together (integer sums: exact in any
                // order), then each one's two multiply-adds as the scalar kernel takes them, a
                // lane per input: one reduction for the four where each took its own.
                let h = _mm256_hadd_epi32(_mm256_hadd_epi32(i0, i1), _mm256_hadd_epi32(i2, i3));
                let tot = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
                let mtot = _mm_hadd_epi32(_mm_hadd_epi32(p0, p1), _mm_hadd_epi32(p2, p3));
                let dx = _mm_set_ps(d[3][i], d[2][i], d[1][i], d[0][i]);
                s4 = _mm_fmadd_ps(_mm_cvtepi32_ps(tot), _mm_mul_ps(_mm_set1_ps(wd), dx), s4);
                sm4 = _mm_fmadd_ps(_mm_cvtepi32_ps(mtot), _mm_mul_ps(_mm_set1_ps(wm), dx), sm4);
            } else {
                macro_rules! fold {
                    ($k:expr, $sumi:ident, $prod:ident, $acc:ident, $accm:ident) => {{
                        let dx = d[$k][i];
                        let (dd, dmin) = (dx * wd, -dx * wm);
                        $accm = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps($prod), $accm);
                        $acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps($sumi), $acc);
                    }};
                }
                fold!(0, i0, p0, a0, m0);
                fold!(1, i1, p1, a1, m1);
                fold!(2, i2, p2, a2, m2);
                fold!(3, i3, p3, a3, m3);
            }
        }
        if INTERLEAVED {
            let mut out = [0f32; 4];
            // SAFETY: out holds four floats.
            unsafe { _mm_storeu_ps(out.as_mut_ptr(), _mm_sub_ps(s4, sm4)) };
            return out;
        }
        [fin(a0, m0), fin(a1, m1), fin(a2, m2), fin(a3, m3)]
    }

    /// [`dot_q6_k`] of one row with four inputs, each result bit for bit `dot_q6_k`'s: the
    /// row's 6-bit values and scales are decoded once for the four.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA. Sizes are checked (a panic, not undefined behaviour), as
    /// [`dot_q6_k`]'s for each input.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_q6_k_x4(row: &[u8], d: [&[f32]; 4], q: [&[i8]; 4], sums: [&[i16]; 4]) -> [f32; 4] {
        let nb = row.len() / 210;
        assert!((0..4).all(|k| d[k].len() >= nb && q[k].len() >= 256 * nb && sums[k].len() >= 16 * nb));
        let z = _mm256_setzero_ps();
        let (mut a0, mut a1, mut a2, mut a3) = (z, z, z, z);
        for i in 0..nb {
            let blk = &row[210 * i..210 * (i + 1)];
            let wd = super::f16_bits(blk, 208);
            // SAFETY: the block's 16 scales are at 192.
            let scales = unsafe { _mm_loadu_si128(blk.as_ptr().add(192) as *const __m128i) };
            let scales_16 = _mm256_cvtepi8_epi16(scales);
            // the eight groups of 32 values (unsigned 6 bits) and their scales, j = 0, 1
            let w: [[(__m256i, __m256i); 4]; 2] = std::array::from_fn(|j| {
                // SAFETY: the CPU has AVX2 (this function's features); blk is a whole block.
                let v = unsafe { q6_k_values(blk, j) };
                std::array::from_fn(|k| {
                    (v[k], _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, scale_shuffle(4 * j + k))))
                })
            });
            macro_rules! input {
                ($k:expr, $acc:ident) => {{
                    let dd = d[$k][i] * wd;
                    // SAFETY: sums[k] holds 16 values at 16i and q[k] 256 at 256i (asserted).
                    let (q8sums, q8) = unsafe {
                        (
                            _mm256_loadu_si256(sums[$k].as_ptr().add(16 * i) as *const __m256i),
                            q[$k].as_ptr().add(256 * i),
                        )
                    };
                    let q8sclsub = _mm256_slli_epi32::<5>(_mm256_madd_epi16(q8sums, scales_16));
                    let mut sumi = _mm256_setzero_si256();
                    for (j, g) in w.iter().enumerate() {
                        // SAFETY: 128 activations at 128j of this block's 256.
                        let x = |k: usize| unsafe { _mm256_loadu_si256(q8.add(128 * j + 32 * k) as *const __m256i) };
                        let p = |k: usize| _mm256_madd_epi16(g[k].1, _mm256_maddubs_epi16(g[k].0, x(k)));
                        let (p0, p1, p2, p3) = (p(0), p(1), p(2), p(3));
                        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
                        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p2, p3));
                    }
                    let sumi = _mm256_sub_epi32(sumi, q8sclsub);
                    $acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(sumi), $acc);
                }};
            }
            input!(0, a0);
            input!(1, a1);
            input!(2, a2);
            input!(3, a3);
        }
        [hsum(a0), hsum(a1), hsum(a2), hsum(a3)]
    }

    /// llama.cpp's `get_scale_shuffle_q3k` table: row `i` picks 16-bit element `2i` for the
    /// lower 16 bytes and `2i + 1` for the upper.
    static SHUFFLE_Q3K: [[u8; 32]; 4] = {
        let mut t = [[0u8; 32]; 4];
        let mut i = 0;
        while i < 4 {
            let mut j = 0;
            while j < 32 {
                t[i][j] = (2 * (2 * i + j / 16) + j % 2) as u8;
                j += 1;
            }
            i += 1;
        }
        t
    };

    /// llama.cpp's `get_scale_shuffle_q3k(i)`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn scale_shuffle_q3k(i: usize) -> __m256i {
        let row = &SHUFFLE_Q3K[i];
        // SAFETY: the row holds 32 bytes.
        unsafe { _mm256_loadu_si256(row.as_ptr() as *const __m256i) }
    }

    /// What a Q2_K, Q3_K, Q5_K or IQ4_XS block's groups of 32 values are decoded from
    /// ([`k_group`]), and its mins and scales (`k_block!`): decoded once for every input it is multiplied
    /// with, each group as it is used (a whole block's decoded groups do not fit in the 16
    /// registers beside the inputs' sums).
    struct KBlock {
        /// The 16-bit scales each group's multipliers are shuffled from: Q5_K's 8 in both
        /// halves of `scales[0]`; Q2_K's and Q3_K's 16, values 0..128 in `scales[0]` and
        /// 128..256 in `scales[1]` (both halves); unused for IQ4_XS.
        scales: [__m256i; 2],
        /// Q3_K's and Q5_K's high bits (bit g of each byte: group g's); unused otherwise.
        hb: __m256i,
        /// The mins as 16-bit values: Q2_K's 16 (one per 16 values), Q5_K's 8 in the low half.
        mins: __m256i,
        /// The block's f16 scale and min scale.
        d: f32,
        dmin: f32,
    }

    /// `k_block!(ID, blk)`: the scales, mins and high bits ([`KBlock`]) of block `blk` of ggml
    /// type `ID` (Q2_K, Q3_K, Q5_K or IQ4_XS). A macro, not a function, so that it is always
    /// inlined into the `avx2,fma` kernel it is used in: as a function LLVM kept it out of line
    /// and passed the block through memory (a tenth of a Q5_K_M decode step). To be expanded
    /// only where the CPU has AVX2 and FMA (a `target_feature` function); `blk` must hold a
    /// whole block (84, 110, 176 or 136 bytes: a shorter one panics).
    macro_rules! k_block {
        ($id:ident, $blk:expr) => {{
            let blk: &[u8] = &$blk[..super::k_block_bytes($id)];
            let p = blk.as_ptr();
            let z = _mm256_setzero_si256();
            let mut b = KBlock { scales: [z; 2], hb: z, mins: z, d: 0.0, dmin: 0.0 };
            // Q2_K's and Q3_K's 16 scales, as llama.cpp's kernels lay them out
            let halves = |all: __m256i| {
                let (l, h) = (_mm256_castsi256_si128(all), _mm256_extracti128_si256::<1>(all));
                [_mm256_set_m128i(l, l), _mm256_set_m128i(h, h)]
            };
            match $id {
                super::Q5_K => {
                    b.d = super::f16_bits(blk, 0);
                    b.dmin = super::f16_bits(blk, 2);
                    let utmp = super::q4_k_scales_mins(blk);
                    let mins_and_scales = _mm256_cvtepu8_epi16(_mm_set_epi32(
                        utmp[3] as i32,
                        utmp[2] as i32,
                        utmp[1] as i32,
                        utmp[0] as i32,
                    ));
                    b.mins = _mm256_castsi128_si256(_mm256_extracti128_si256::<1>(mins_and_scales));
                    let sc128 = _mm256_castsi256_si128(mins_and_scales);
                    b.scales[0] = _mm256_set_m128i(sc128, sc128);
                    // SAFETY: the 32 bytes of fifth bits are at 16, within the block.
                    b.hb = unsafe { _mm256_loadu_si256(p.add(16) as *const __m256i) };
                }
                super::Q3_K => {
                    b.d = super::f16_bits(blk, 108);
                    let sc = super::q3_k_scales(&blk[96..108]);
                    // SAFETY: sc holds 16 bytes.
                    b.scales = halves(_mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(sc.as_ptr() as *const __m128i) }));
                    // SAFETY: the 32 bytes of high bits are at 0.
                    b.hb = unsafe { _mm256_loadu_si256(p as *const __m256i) };
                }
                super::IQ4_XS => b.d = super::f16_bits(blk, 0),
                _ => {
                    b.d = super::f16_bits(blk, 80);
                    b.dmin = super::f16_bits(blk, 82);
                    // SAFETY: the 16 scale bytes are at 0.
                    let ms = unsafe { _mm_loadu_si128(p as *const __m128i) };
                    let m4 = _mm_set1_epi8(0xF);
                    b.mins = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(ms), m4));
                    b.scales = halves(_mm256_cvtepi8_epi16(_mm_and_si128(ms, m4)));
                }
            }
            b
            }};
    }

    /// Group `g` (values `32g..32g + 32`) of block `blk` of ggml type `ID`, `b` its
    /// [`KBlock`]: the values (unsigned; Q3_K: the low two bits only; IQ4_XS: signed, from the
    /// table), Q3_K's offsets (4 where a value's high bit is clear, subtracted; zero otherwise)
    /// and the scales as 16-bit multipliers for `_mm256_madd_epi16` (one per 32 values for Q5_K
    /// and IQ4_XS, one per 16 for the others).
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `blk` must hold a whole block (a shorter one panics),
    /// `b` its [`KBlock`], `g < 8`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn k_group<const ID: u32>(blk: &[u8], b: &KBlock, g: usize) -> (__m256i, __m256i, __m256i) {
        let blk = &blk[..super::k_block_bytes(ID)];
        assert!(g < 8);
        let p = blk.as_ptr();
        // SAFETY: the callers read 32 bytes at offsets whose end is within the block.
        let ld = |o: usize| unsafe { _mm256_loadu_si256(p.add(o) as *const __m256i) };
        let one = _mm256_set1_epi8(1);
        let shift = |v: __m256i, n: usize| _mm256_srl_epi16(v, _mm_cvtsi32_si128(n as i32));
        let z = _mm256_setzero_si256();
        match ID {
            super::Q5_K => {
                let bits = ld(48 + 32 * (g / 2));
                let m4 = _mm256_set1_epi8(0xF);
                let nib = _mm256_and_si256(shift(bits, 4 * (g % 2)), m4);
                let high = _mm256_slli_epi16::<4>(_mm256_and_si256(shift(b.hb, g), one));
                (_mm256_add_epi8(nib, high), z, _mm256_shuffle_epi8(b.scales[0], scale_shuffle_k4(g)))
            }
            super::Q3_K => {
                let (j, k) = (g / 4, g % 4);
                let w = _mm256_and_si256(shift(ld(32 + 32 * j), 2 * k), _mm256_set1_epi8(3));
                let h = _mm256_slli_epi16::<2>(_mm256_andnot_si256(shift(b.hb, g), one));
                (w, h, _mm256_shuffle_epi8(b.scales[j], scale_shuffle_q3k(k)))
            }
            super::IQ4_XS => {
                // SAFETY: the table holds 16 values; the group's 16 bytes of nibbles are at
                // 8 + 16g, within the block.
                let (values, bits) = unsafe {
                    (
                        _mm_loadu_si128(super::IQ4NL_VALUES.as_ptr() as *const __m128i),
                        _mm_loadu_si128(p.add(8 + 16 * g) as *const __m128i),
                    )
                };
                let m4 = _mm_set1_epi8(0xF);
                let w = _mm256_set_m128i(
                    _mm_shuffle_epi8(values, _mm_and_si128(_mm_srli_epi16::<4>(bits), m4)),
                    _mm_shuffle_epi8(values, _mm_and_si128(bits, m4)),
                );
                (w, z, _mm256_set1_epi16(super::iq4_xs_scale(blk, g) as i16))
            }
            _ => {
                let (j, k) = (g / 4, g % 4);
                let w = _mm256_and_si256(shift(ld(16 + 32 * j), 2 * k), _mm256_set1_epi8(3));
                (w, z, _mm256_shuffle_epi8(b.scales[j], scale_shuffle_q3k(k)))
            }
        }
    }

    /// A group's 16-bit products with 32 activations `x` as llama.cpp's kernel for `ID` takes
    /// them (`_mm256_maddubs_epi16`; Q3_K: less the offsets' products; IQ4_XS: its
    /// `mul_add_epi8`, signed values times signed activations).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn k_products<const ID: u32>(w: __m256i, h: __m256i, x: __m256i) -> __m256i {
        if ID == super::Q3_K {
            _mm256_sub_epi16(_mm256_maddubs_epi16(w, x), _mm256_maddubs_epi16(h, x))
        } else if ID == super::IQ4_XS {
            _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
        } else {
            _mm256_maddubs_epi16(w, x)
        }
    }

    /// One input's float sums for block `b` of ggml type `ID` (`acc`; Q5_K's mins in `summs`)
    /// from its scaled integer products `sumi`, `dx` the input's Q8_K scale: llama.cpp's order.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `bsums` must point at the block's 16 activation sums of 16.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn k_finish<const ID: u32>(
        b: &KBlock,
        dx: f32,
        sumi: __m256i,
        bsums: *const i16,
        acc: &mut __m256,
        summs: &mut f32,
    ) {
        // SAFETY: bsums points at 16 sums (the caller's contract).
        let q8sums = unsafe { _mm256_loadu_si256(bsums as *const __m256i) };
        match ID {
            super::Q5_K => {
                let q8s = _mm_hadd_epi16(_mm256_castsi256_si128(q8sums), _mm256_extracti128_si256::<1>(q8sums));
                let prod = _mm_madd_epi16(_mm256_castsi256_si128(b.mins), q8s);
                // llama.cpp's `summs += dmin * hsum` (compiled to a fused multiply-add)
                *summs = (-dx * b.dmin).mul_add(hsum_i32_128(prod) as f32, *summs);
            }
            super::Q2_K => {
                let prod = _mm256_madd_epi16(b.mins, q8sums);
                *acc = _mm256_fmadd_ps(_mm256_set1_ps(-dx * b.dmin), _mm256_cvtepi32_ps(prod), *acc);
            }
            _ => {}
        }
        *acc = _mm256_fmadd_ps(_mm256_set1_ps(dx * b.d), _mm256_cvtepi32_ps(sumi), *acc);
    }

    /// llama.cpp's `ggml_vec_dot_q2_K_q8_K`, `_q3_K_q8_K`, `_q5_K_q8_K` or `_iq4_xs_q8_K`
    /// (`ID` the weight type) of one row with `N` inputs (`d[k]`, `q[k]`, `sums[k]`: Q8_K
    /// scales, values and sums of 16), each result bit for bit llama.cpp's AVX2 kernel's (and the
    /// portable [`super::dot_q2_k`], [`super::dot_q3_k`], [`super::dot_q5_k`],
    /// [`super::dot_iq4_xs`]): the same integer lanes, the same float sums in the same order.
    /// Each group of a block is decoded once for the `N` inputs (`N = 4`: the prompt's kernel).
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA. Sizes are checked (a panic, not undefined behaviour):
    /// with `nb` the row's whole blocks, each `d[k]` holds `nb` scales, `q[k]` `256 * nb` values
    /// and `sums[k]` `16 * nb`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_k_x<const ID: u32, const N: usize>(
        row: &[u8],
        d: [&[f32]; N],
        q: [&[i8]; N],
        sums: [&[i16]; N],
    ) -> [f32; N] {
        let size = super::k_block_bytes(ID);
        let nb = row.len() / size;
        assert!((0..N).all(|k| d[k].len() >= nb && q[k].len() >= 256 * nb && sums[k].len() >= 16 * nb));
        let mut acc = [_mm256_setzero_ps(); N];
        let mut summs = [0f32; N];
        for i in 0..nb {
            let blk = &row[size * i..size * (i + 1)];
            // the block is whole (a slice of `size` bytes)
            let b = k_block!(ID, blk);
            let mut sumi = [_mm256_setzero_si256(); N];
            for g in 0..8 {
                // SAFETY: as above; g < 8.
                let (w, h, sc) = unsafe { k_group::<ID>(blk, &b, g) };
                for k in 0..N {
                    // SAFETY: q[k] holds 256 values at 256i (asserted).
                    let x = unsafe { _mm256_loadu_si256(q[k].as_ptr().add(256 * i + 32 * g) as *const __m256i) };
                    sumi[k] = _mm256_add_epi32(sumi[k], _mm256_madd_epi16(sc, k_products::<ID>(w, h, x)));
                }
            }
            for k in 0..N {
                // SAFETY: sums[k] holds 16 values at 16i (asserted).
                unsafe {
                    k_finish::<ID>(&b, d[k][i], sumi[k], sums[k].as_ptr().add(16 * i), &mut acc[k], &mut summs[k])
                };
            }
        }
        std::array::from_fn(|k| {
            if ID == super::Q5_K {
                hsum(acc[k]) + summs[k]
            } else {
                hsum(acc[k])
            }
        })
    }
}

/// simd128 kernels for the wasm32 build (`-C target-feature=+simd128`, .cargo/config.toml): the
/// block types' integer dot products on 16 lanes (i8 products widened to i16, pairs summed into
/// i32: exact, so each block's sum and therefore each result is bit for bit the scalar kernel's),
/// the f32 dot products on 4 lanes. Measured on SmolLM2-135M Q4_1 in Chromium (1 thread, decode):
/// BENCHMARKS.md, "wasm CPU executor". `unsafe` only for `v128_load`, which reads 16 bytes.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm {
    use core::arch::wasm32::*;

    /// 16 bytes at the start of `b` (bounds-checked: the callers' blocks are whole).
    #[inline(always)]
    fn load(b: &[u8]) -> v128 {
        let b: &[u8; 16] = b[..16].try_into().unwrap_or(&[0; 16]);
        // SAFETY: `b` is 16 bytes; v128_load reads 16 bytes and needs no alignment.
        unsafe { v128_load(b.as_ptr() as *const v128) }
    }

    /// 8 activations widened to i16 ([`super::QuantX`] keeps them so on wasm: one widening
    /// per input instead of one per weight row).
    #[inline(always)]
    fn load_i16(q: &[i16]) -> v128 {
        let q: &[i16; 8] = q[..8].try_into().unwrap_or(&[0; 8]);
        // SAFETY: `q` is 16 bytes; v128_load needs no alignment.
        unsafe { v128_load(q.as_ptr() as *const v128) }
    }

    #[inline(always)]
    fn load_f32(x: &[f32]) -> v128 {
        let x: &[f32; 4] = x[..4].try_into().unwrap_or(&[0.0; 4]);
        // SAFETY: `x` is 16 bytes; v128_load needs no alignment.
        unsafe { v128_load(x.as_ptr() as *const v128) }
    }

    /// Σ a·x over 16 signed byte weights `a` and 16 i16 activations, in 4 i32 lanes (each
    /// product at most 2^14 in magnitude, pairs summed: exact).
    #[inline(always)]
    fn dot16(a: v128, x: &[i16]) -> v128 {
        let lo = i32x4_dot_i16x8(i16x8_extend_low_i8x16(a), load_i16(x));
        let hi = i32x4_dot_i16x8(i16x8_extend_high_i8x16(a), load_i16(&x[8..]));
        i32x4_add(lo, hi)
    }

    /// A block of 32 weights (`w0` values 0..16, `w1` 16..32) widened to four i16x8 vectors,
    /// once for every input it meets.
    #[inline(always)]
    fn widen(w0: v128, w1: v128) -> [v128; 4] {
        [
            i16x8_extend_low_i8x16(w0),
            i16x8_extend_high_i8x16(w0),
            i16x8_extend_low_i8x16(w1),
            i16x8_extend_high_i8x16(w1),
        ]
    }

    /// Σ w·x of a widened block of 32.
    #[inline(always)]
    fn isum32w(w: &[v128; 4], x: &[i16]) -> i32 {
        let a = i32x4_add(i32x4_dot_i16x8(w[0], load_i16(x)), i32x4_dot_i16x8(w[1], load_i16(&x[8..])));
        let b = i32x4_add(i32x4_dot_i16x8(w[2], load_i16(&x[16..])), i32x4_dot_i16x8(w[3], load_i16(&x[24..])));
        hsum_i32(i32x4_add(a, b))
    }

    #[inline(always)]
    fn hsum_i32(v: v128) -> i32 {
        i32x4_extract_lane::<0>(v)
            .wrapping_add(i32x4_extract_lane::<1>(v))
            .wrapping_add(i32x4_extract_lane::<2>(v))
            .wrapping_add(i32x4_extract_lane::<3>(v))
    }

    /// Σ w·x of a block of 32: `w0` holds values 0..16, `w1` 16..32.
    #[inline(always)]
    fn isum32(w0: v128, w1: v128, x: &[i16]) -> i32 {
        isum32w(&widen(w0, w1), x)
    }

    #[inline(always)]
    fn f16(t: &[f32], b: &[u8], i: usize) -> f32 {
        super::f16_at(t, b, i)
    }

    /// [`super::dot_q8_0`].
    pub(super) fn dot_q8_0(row: &[u8], d: &[f32], q: &[i16]) -> f32 {
        let t = super::f16_table();
        let mut sum = 0f32;
        for ((blk, &dx), qx) in row.chunks_exact(34).zip(d).zip(q.chunks_exact(32)) {
            let s = isum32(load(&blk[2..]), load(&blk[18..]), qx);
            sum += s as f32 * (f16(t, blk, 0) * dx);
        }
        sum
    }

    /// The low and high nibbles of 16 bytes, each minus `off`.
    #[inline(always)]
    fn nibbles(b: &[u8], off: u8) -> (v128, v128) {
        let v = load(b);
        let m = u8x16_splat(0x0F);
        let o = u8x16_splat(off);
        (i8x16_sub(v128_and(v, m), o), i8x16_sub(u8x16_shr(v, 4), o))
    }

    /// [`super::dot_q4_0`].
    pub(super) fn dot_q4_0(row: &[u8], d: &[f32], q: &[i16]) -> f32 {
        let t = super::f16_table();
        let mut sum = 0f32;
        for ((blk, &dx), qx) in row.chunks_exact(18).zip(d).zip(q.chunks_exact(32)) {
            let (lo, hi) = nibbles(&blk[2..], 8);
            sum += isum32(lo, hi, qx) as f32 * (f16(t, blk, 0) * dx);
        }
        sum
    }

    /// [`super::dot_q4_1`].
    pub(super) fn dot_q4_1(row: &[u8], d: &[f32], s: &[f32], q: &[i16]) -> f32 {
        let t = super::f16_table();
        let mut sum = 0f32;
        for (((blk, &dx), &sx), qx) in row.chunks_exact(20).zip(d).zip(s).zip(q.chunks_exact(32)) {
            let (lo, hi) = nibbles(&blk[4..], 0);
            sum += (f16(t, blk, 0) * dx) * isum32(lo, hi, qx) as f32 + f16(t, blk, 2) * sx;
        }
        sum
    }

    /// A Q5 block's 32 values (unsigned 0..32, minus `off`): nibbles of `qs` with bit j of the
    /// little-endian `qh` as value j's fifth bit.
    #[inline(always)]
    fn q5(qh: &[u8], qs: &[u8], off: u8) -> (v128, v128) {
        let h = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
        let hv = u32x4_splat(h);
        // byte k of h in lanes 8k..8k+8; one bit of it per lane
        let bit = u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
        let five = u8x16_splat(16);
        let top = |bytes: v128| v128_and(u8x16_ne(v128_and(bytes, bit), u8x16_splat(0)), five);
        let lo_h = top(i8x16_swizzle(hv, u8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1)));
        let hi_h = top(i8x16_swizzle(hv, u8x16(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3)));
        let v = load(qs);
        let m = u8x16_splat(0x0F);
        let o = u8x16_splat(off);
        (
            i8x16_sub(v128_or(v128_and(v, m), lo_h), o),
            i8x16_sub(v128_or(u8x16_shr(v, 4), hi_h), o),
        )
    }

    /// [`super::dot_q5_0`].
    pub(super) fn dot_q5_0(row: &[u8], d: &[f32], q: &[i16]) -> f32 {
        let t = super::f16_table();
        let mut sum = 0f32;
        for ((blk, &dx), qx) in row.chunks_exact(22).zip(d).zip(q.chunks_exact(32)) {
            let (lo, hi) = q5(&blk[2..6], &blk[6..22], 16);
            sum += (f16(t, blk, 0) * dx) * isum32(lo, hi, qx) as f32;
        }
        sum
    }

    /// [`super::dot_q5_1`].
    pub(super) fn dot_q5_1(row: &[u8], d: &[f32], s: &[f32], q: &[i16]) -> f32 {
        let t = super::f16_table();
        let mut sum = 0f32;
        for (((blk, &dx), &sx), qx) in row.chunks_exact(24).zip(d).zip(s).zip(q.chunks_exact(32)) {
            let (lo, hi) = q5(&blk[4..8], &blk[8..24], 0);
            sum += (f16(t, blk, 0) * dx) * isum32(lo, hi, qx) as f32 + f16(t, blk, 2) * sx;
        }
        sum
    }

    /// [`super::dot_q4_k`].
    pub(super) fn dot_q4_k(row: &[u8], d: &[f32], q: &[i16], sums: &[i16]) -> f32 {
        let t = super::f16_table();
        let mut sum = 0f32;
        for (((blk, &dx), qx), bs) in row.chunks_exact(144).zip(d).zip(q.chunks_exact(256)).zip(sums.chunks_exact(16)) {
            // the activations' sums of 32 from their sums of 16 (llama.cpp's bsums)
            let bs: [i32; 8] = std::array::from_fn(|k| i32::from(bs[2 * k]) + i32::from(bs[2 * k + 1]));
            let scales = &blk[4..16];
            let qs = &blk[16..144];
            let (mut isum, mut msum) = (0i32, 0i32);
            for j in 0..4 {
                let (sc1, m1) = super::scale_min_k4(2 * j, scales);
                let (sc2, m2) = super::scale_min_k4(2 * j + 1, scales);
                let (lo0, hi0) = nibbles(&qs[32 * j..], 0);
                let (lo1, hi1) = nibbles(&qs[32 * j + 16..], 0);
                isum += i32::from(sc1) * isum32(lo0, lo1, &qx[64 * j..])
                    + i32::from(sc2) * isum32(hi0, hi1, &qx[64 * j + 32..]);
                msum += i32::from(m1) * bs[2 * j] + i32::from(m2) * bs[2 * j + 1];
            }
            sum += dx * f16(t, blk, 0) * isum as f32 - dx * f16(t, blk, 2) * msum as f32;
        }
        sum
    }

    /// [`super::dot_q6_k`].
    pub(super) fn dot_q6_k(row: &[u8], d: &[f32], q: &[i16]) -> f32 {
        let t = super::f16_table();
        let m4 = u8x16_splat(0x0F);
        let m2 = u8x16_splat(3);
        let o = u8x16_splat(32);
        let mut sum = 0f32;
        for ((blk, &dx), qx) in row.chunks_exact(210).zip(d).zip(q.chunks_exact(256)) {
            let mut isum = 0i32;
            for h in 0..2 {
                let ql = &blk[h * 64..h * 64 + 64];
                let qh = &blk[128 + h * 32..128 + h * 32 + 32];
                let sc = &blk[192 + h * 8..192 + h * 8 + 8];
                let x = &qx[h * 128..h * 128 + 128];
                // values l (0..16) and 16 + l of each of the four groups of 32
                for part in 0..2 {
                    let (a, c) = (load(&ql[16 * part..]), load(&ql[32 + 16 * part..]));
                    let hb = load(&qh[16 * part..]);
                    let w = [
                        v128_or(v128_and(a, m4), u8x16_shl(v128_and(hb, m2), 4)),
                        v128_or(v128_and(c, m4), u8x16_shl(v128_and(u8x16_shr(hb, 2), m2), 4)),
                        v128_or(u8x16_shr(a, 4), u8x16_shl(v128_and(u8x16_shr(hb, 4), m2), 4)),
                        v128_or(u8x16_shr(c, 4), u8x16_shl(u8x16_shr(hb, 6), 4)),
                    ];
                    for (k, wk) in w.into_iter().enumerate() {
                        let s = hsum_i32(dot16(i8x16_sub(wk, o), &x[32 * k + 16 * part..]));
                        isum += i32::from(sc[2 * k + part] as i8) * s;
                    }
                }
            }
            sum += f16(t, blk, 208) * dx * isum as f32;
        }
        sum
    }

    /// A 32-value block of ggml type `K` (Q8_0 8, Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7): its values
    /// (0..16, 16..32), scale and min (0 for the types without one).
    #[inline(always)]
    fn block32<const K: u32>(t: &[f32], blk: &[u8]) -> (v128, v128, f32, f32) {
        match K {
            8 => (load(&blk[2..]), load(&blk[18..]), f16(t, blk, 0), 0.0),
            2 => {
                let (lo, hi) = nibbles(&blk[2..], 8);
                (lo, hi, f16(t, blk, 0), 0.0)
            }
            3 => {
                let (lo, hi) = nibbles(&blk[4..], 0);
                (lo, hi, f16(t, blk, 0), f16(t, blk, 2))
            }
            6 => {
                let (lo, hi) = q5(&blk[2..6], &blk[6..22], 16);
                (lo, hi, f16(t, blk, 0), 0.0)
            }
            _ => {
                let (lo, hi) = q5(&blk[4..8], &blk[8..24], 0);
                (lo, hi, f16(t, blk, 0), f16(t, blk, 2))
            }
        }
    }

    /// The single-input kernels of the 32-value block types (`dot_q8_0` .. `dot_q5_1`) for four
    /// inputs at once: each block decoded once, each input's sum taken in the same order with
    /// the same operations, so each result is that kernel's bit for bit (a prompt's tiled
    /// product reads each weight block once per four inputs).
    pub(super) fn dot4_32<const K: u32>(row: &[u8], d: [&[f32]; 4], s: [&[f32]; 4], q: [&[i16]; 4]) -> [f32; 4] {
        let t = super::f16_table();
        let size = match K {
            8 => 34,
            2 => 18,
            3 => 20,
            6 => 22,
            _ => 24,
        };
        let min = K == 3 || K == 7;
        // (the single kernels stop at the shortest of the row, the scales, the sums and values)
        let mut nb = row.len() / size;
        for k in 0..4 {
            nb = nb.min(d[k].len()).min(q[k].len() / 32);
            if min {
                nb = nb.min(s[k].len());
            }
        }
        let mut out = [0f32; 4];
        for (b, blk) in row.chunks_exact(size).take(nb).enumerate() {
            let (lo, hi, dw, mw) = block32::<K>(t, blk);
            let wv = widen(lo, hi);
            for k in 0..4 {
                let is = isum32w(&wv, &q[k][32 * b..]) as f32;
                if min {
                    out[k] += (dw * d[k][b]) * is + mw * s[k][b];
                } else {
                    out[k] += (dw * d[k][b]) * is;
                }
            }
        }
        out
    }

    /// [`super::dot`] on 4 lanes (four accumulators), the tail in order.
    pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        let mut acc = [f32x4_splat(0.0); 4];
        let mut i = 0;
        while i + 16 <= n {
            for (k, s) in acc.iter_mut().enumerate() {
                *s = f32x4_add(*s, f32x4_mul(load_f32(&a[i + 4 * k..]), load_f32(&b[i + 4 * k..])));
            }
            i += 16;
        }
        while i + 4 <= n {
            acc[0] = f32x4_add(acc[0], f32x4_mul(load_f32(&a[i..]), load_f32(&b[i..])));
            i += 4;
        }
        let v = f32x4_add(f32x4_add(acc[0], acc[1]), f32x4_add(acc[2], acc[3]));
        let mut s = (f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<1>(v))
            + (f32x4_extract_lane::<2>(v) + f32x4_extract_lane::<3>(v));
        for j in i..n {
            s += a[j] * b[j];
        }
        s
    }

    /// [`super::dot4`]: four rows of `w` (back to back) times `x`, `x` read once.
    pub(super) fn dot4(w: &[f32], x: &[f32]) -> [f32; 4] {
        let c = w.len() / 4;
        let n = c.min(x.len());
        let mut acc = [f32x4_splat(0.0); 4];
        let mut i = 0;
        while i + 4 <= n {
            let xv = load_f32(&x[i..]);
            for (k, s) in acc.iter_mut().enumerate() {
                *s = f32x4_add(*s, f32x4_mul(load_f32(&w[k * c + i..]), xv));
            }
            i += 4;
        }
        let mut out = [0f32; 4];
        for (k, o) in out.iter_mut().enumerate() {
            let v = acc[k];
            *o = (f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<1>(v))
                + (f32x4_extract_lane::<2>(v) + f32x4_extract_lane::<3>(v));
            for j in i..n {
                *o += w[k * c + j] * x[j];
            }
        }
        out
    }

    /// [`super::add_scaled`]: a multiply, then an add (not fused), as the scalar loop.
    pub(super) fn add_scaled(out: &mut [f32], p: f32, v: &[f32]) {
        let n = out.len().min(v.len());
        let pp = f32x4_splat(p);
        let mut i = 0;
        while i + 4 <= n {
            let r = f32x4_add(load_f32(&out[i..]), f32x4_mul(pp, load_f32(&v[i..])));
            out[i..i + 4].copy_from_slice(&[
                f32x4_extract_lane::<0>(r),
                f32x4_extract_lane::<1>(r),
                f32x4_extract_lane::<2>(r),
                f32x4_extract_lane::<3>(r),
            ]);
            i += 4;
        }
        for j in i..n {
            out[j] += p * v[j];
        }
    }
}

/// The dot product of two equal-length vectors, in f32 with 16 partial sums (so the compiler can
/// keep them in vector registers).
#[inline]
fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; 16];
    let ca = a.chunks_exact(16);
    let cb = b.chunks_exact(16);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..16 {
            acc[k] += x[k] * y[k];
        }
    }
    let mut tail = 0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    // pairwise reduction of the partial sums
    let mut w = 16;
    while w > 1 {
        w /= 2;
        for k in 0..w {
            acc[k] += acc[k + w];
        }
    }
    acc[0] + tail
}

/// Every f16 bit pattern as f32 (256 KiB, built once): a table lookup is faster than converting
/// in software without F16C.
fn f16_table() -> &'static [f32] {
    static TABLE: OnceLock<Vec<f32>> = OnceLock::new();
    TABLE.get_or_init(|| (0..=u16::MAX).map(|b| half::f16::from_bits(b).to_f32()).collect())
}

/// The f16 at bytes `i, i + 1` of `b` as f32 (exact), from the table.
#[inline]
fn f16_bits(b: &[u8], i: usize) -> f32 {
    f16_at(f16_table(), b, i)
}

#[inline]
fn f16_at(t: &[f32], b: &[u8], i: usize) -> f32 {
    t[u16::from_le_bytes([b[i], b[i + 1]]) as usize]
}

/// Dequantizes one row's stored bytes into `out` (its element count).
pub(crate) fn dequantize_row(kind: Kind, b: &[u8], out: &mut [f32]) {
    match kind {
        Kind::F32 => {
            for (y, c) in out.iter_mut().zip(b.chunks_exact(4)) {
                *y = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        Kind::F16 => {
            let t = f16_table();
            for (y, c) in out.iter_mut().zip(b.chunks_exact(2)) {
                *y = t[u16::from_le_bytes([c[0], c[1]]) as usize];
            }
        }
        Kind::BF16 => {
            for (y, c) in out.iter_mut().zip(b.chunks_exact(2)) {
                *y = f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16);
            }
        }
        Kind::Q8_0 => {
            let t = f16_table();
            for (blk, y) in b.chunks_exact(34).zip(out.chunks_exact_mut(32)) {
                let d = f16_at(t, blk, 0);
                for (v, &q) in y.iter_mut().zip(&blk[2..34]) {
                    *v = d * f32::from(q as i8);
                }
            }
        }
        Kind::Q4_0 => {
            let t = f16_table();
            for (blk, y) in b.chunks_exact(18).zip(out.chunks_exact_mut(32)) {
                let d = f16_at(t, blk, 0);
                let qs = &blk[2..18];
                let (lo, hi) = y.split_at_mut(16);
                for j in 0..16 {
                    lo[j] = d * f32::from((qs[j] & 0xF) as i8 - 8);
                    hi[j] = d * f32::from((qs[j] >> 4) as i8 - 8);
                }
            }
        }
        Kind::Q4_K => {
            let t = f16_table();
            for (blk, y) in b.chunks_exact(144).zip(out.chunks_exact_mut(256)) {
                let d = f16_at(t, blk, 0);
                let dmin = f16_at(t, blk, 2);
                let scales = &blk[4..16];
                let q = &blk[16..144];
                for (j, (y, q)) in y.chunks_exact_mut(64).zip(q.chunks_exact(32)).enumerate() {
                    let (sc1, m1) = scale_min_k4(2 * j, scales);
                    let (sc2, m2) = scale_min_k4(2 * j + 1, scales);
                    let (d1, m1) = (d * f32::from(sc1), dmin * f32::from(m1));
                    let (d2, m2) = (d * f32::from(sc2), dmin * f32::from(m2));
                    let (lo, hi) = y.split_at_mut(32);
                    for l in 0..32 {
                        lo[l] = d1 * f32::from(q[l] & 0xF) - m1;
                        hi[l] = d2 * f32::from(q[l] >> 4) - m2;
                    }
                }
            }
        }
        Kind::Q6_K => {
            let t = f16_table();
            for (blk, y) in b.chunks_exact(210).zip(out.chunks_exact_mut(256)) {
                let d = f16_at(t, blk, 208);
                for h in 0..2 {
                    let ql = &blk[h * 64..h * 64 + 64];
                    let qh = &blk[128 + h * 32..128 + h * 32 + 32];
                    let sc = &blk[192 + h * 8..192 + h * 8 + 8];
                    let y = &mut y[h * 128..h * 128 + 128];
                    for l in 0..32 {
                        let is = l / 16;
                        let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
                        let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                        let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                        let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                        y[l] = d * f32::from(sc[is] as i8) * f32::from(q1);
                        y[l + 32] = d * f32::from(sc[is + 2] as i8) * f32::from(q2);
                        y[l + 64] = d * f32::from(sc[is + 4] as i8) * f32::from(q3);
                        y[l + 96] = d * f32::from(sc[is + 6] as i8) * f32::from(q4);
                    }
                }
            }
        }
        Kind::Other(g) => {
            // The row is whole blocks of a type `can_dequantize` accepts (checked in Matrix::new).
            if ggml::dequantize_into(g, b, out).is_err() {
                out.fill(f32::NAN);
            }
        }
    }
}

/// Scale and min `j` (0..8) of a Q4_K/Q5_K super-block's 12 packed 6-bit values.
#[inline]
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`blocks`] for the other test modules.
    pub(super) fn blocks_for(kind: Kind, n: usize, seed: u64) -> Vec<u8> {
        blocks(kind, n, seed)
    }

    /// Random blocks with sane f16 scales, so every value is finite.
    fn blocks(kind: Kind, n: usize, seed: u64) -> Vec<u8> {
        let (_, size) = kind.block();
        let mut s = seed;
        let mut b: Vec<u8> = (0..n * size)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (s >> 33) as u8
            })
            .collect();
        let d = half::f16::from_f32(0.01).to_bits().to_le_bytes();
        for blk in b.chunks_exact_mut(size) {
            match kind {
                Kind::Q8_0 | Kind::Q4_0 => blk[..2].copy_from_slice(&d),
                Kind::Q4_K => {
                    blk[..2].copy_from_slice(&d);
                    blk[2..4].copy_from_slice(&d);
                }
                Kind::Q6_K => blk[208..210].copy_from_slice(&d),
                Kind::Other(GgmlType(Q5_0)) => blk[..2].copy_from_slice(&d),
                Kind::Other(GgmlType(Q4_1 | Q5_1)) => {
                    blk[..2].copy_from_slice(&d);
                    blk[2..4].copy_from_slice(&half::f16::from_f32(-0.07).to_bits().to_le_bytes());
                }
                _ => {}
            }
        }
        b
    }

    /// The kernels here decode exactly what the core's (gguf-py-identical) decoder does.
    #[test]
    fn block_kernels_match_core_dequantize() {
        for (kind, id) in [(Kind::Q8_0, 8u32), (Kind::Q4_0, 2), (Kind::Q4_K, 12), (Kind::Q6_K, 14)] {
            let (block, _) = kind.block();
            let b = blocks(kind, 8, u64::from(id));
            let want = ggml::dequantize(GgmlType(id), &b).unwrap();
            let mut got = vec![0f32; 8 * block];
            dequantize_row(kind, &b, &mut got);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                    "{kind:?} element {i}: {g} vs {w}"
                );
            }
        }
    }

    /// The integer kernels give what the float path gives: the dequantized row times the rounded
    /// activations (for Q4_1 and Q5_1, to the rounding of Q8_1's sums to f16: see
    /// [`s_allowance`]).
    #[test]
    fn integer_kernels_match_the_float_path() {
        let o = |id: u32| Kind::Other(GgmlType(id));
        for (kind, id) in [
            (Kind::Q8_0, 8u64),
            (Kind::Q4_0, 2),
            (Kind::Q4_K, 12),
            (Kind::Q6_K, 14),
            (o(Q4_1), 3),
            (o(Q5_0), 6),
            (o(Q5_1), 7),
        ] {
            let (block, _) = kind.block();
            let cols = 512;
            let row = blocks(kind, cols / block, id + 100);
            let x: Vec<f32> = (0..2 * cols)
                .map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 3.0)
                .collect();
            let q = QuantX::new(kind, &x, cols).unwrap();
            let mut w = vec![0f32; cols];
            dequantize_row(kind, &row, &mut w);
            let xr = round_activations(kind, &x);
            let q4 = QuantX::new(kind, &x.repeat(2), cols).unwrap();
            let four = q4.dot4(kind, &row, 0);
            for (k, v) in four.iter().enumerate() {
                assert!(
                    (v - q.dot(kind, &row, k % 2)).abs() <= 1e-4 * v.abs().max(1.0),
                    "{kind:?} dot4 {k}"
                );
            }
            for i in 0..2 {
                let want: f64 = w
                    .iter()
                    .zip(&xr[i * cols..])
                    .map(|(a, b)| f64::from(*a) * f64::from(*b))
                    .sum();
                let got = f64::from(q.dot(kind, &row, i));
                let scale: f64 = w
                    .iter()
                    .zip(&xr[i * cols..])
                    .map(|(a, b)| f64::from((a * b).abs()))
                    .sum();
                let allow = s_allowance(kind, &row, &xr[i * cols..(i + 1) * cols]);
                assert!(
                    (got - want).abs() <= 1e-5 * scale + allow,
                    "{kind:?} vector {i}: {got} vs {want}"
                );
            }
        }
    }

    /// How far Q4_1's and Q5_1's products may be from the float path's (zero for other kinds):
    /// llama.cpp's Q8_1 sum `s` is the f32 scale (not the f16 one the values are rounded with)
    /// times the values' sum, rounded to f16, so each block's `m · s` may differ from `m` times
    /// the sum of the rounded activations by 2^-11 for each of the two roundings (and f16's
    /// smallest step, 2^-24, where `s` is subnormal).
    fn s_allowance(kind: Kind, row: &[u8], xr: &[f32]) -> f64 {
        let Kind::Other(GgmlType(Q4_1 | Q5_1)) = kind else {
            return 0.0;
        };
        let (_, size) = kind.block();
        let t = f16_table();
        row.chunks_exact(size)
            .zip(xr.chunks_exact(32))
            .map(|(blk, x)| {
                let sum: f64 = x.iter().map(|&v| f64::from(v)).sum();
                f64::from(f16_at(t, blk, 2)).abs() * (sum.abs() * 2f64.powi(-9) + 2f64.powi(-23))
            })
            .sum()
    }

    /// One block of `kind` (Q4_1, Q5_0 or Q5_1) from its scale, min (ignored by Q5_0), the fifth
    /// bits and the 16 bytes of nibbles.
    fn block_of(kind: Kind, d: f32, m: f32, qh: u32, qs: [u8; 16]) -> Vec<u8> {
        let f = |v: f32| half::f16::from_f32(v).to_bits().to_le_bytes();
        let mut b = f(d).to_vec();
        if kind != Kind::Other(GgmlType(Q5_0)) {
            b.extend(f(m));
        }
        if kind != Kind::Other(GgmlType(Q4_1)) {
            b.extend(qh.to_le_bytes());
        }
        b.extend(qs);
        assert_eq!(b.len(), kind.block().1);
        b
    }

    /// The portable kernel of `kind` (Q4_1, Q5_0 or Q5_1), whatever the CPU has.
    fn portable(kind: Kind, q: &QuantX, row: &[u8], i: usize) -> f32 {
        let nb = q.cols / 32;
        let (d, x) = (&q.d[i * nb..(i + 1) * nb], &q.q[i * q.cols..(i + 1) * q.cols]);
        match kind {
            Kind::Other(GgmlType(Q4_1)) => dot_q4_1(row, d, &q.s[i * nb..(i + 1) * nb], x),
            Kind::Other(GgmlType(Q5_0)) => dot_q5_0(row, d, x),
            Kind::Other(GgmlType(Q5_1)) => dot_q5_1(row, d, &q.s[i * nb..(i + 1) * nb], x),
            _ => unreachable!(),
        }
    }

    /// Q4_1, Q5_0 and Q5_1 on blocks at the extremes (the largest and most negative f16 scales
    /// and mins, zero blocks, every nibble 15 and every value 31, every fifth bit alone) and
    /// random ones: the vector kernel (where the CPU has AVX2), the portable one and the
    /// dequantized row times the rounded activations in f64 agree to float rounding (and the
    /// rounding of Q8_1's sums, [`s_allowance`]).
    #[test]
    fn q4_1_q5_0_q5_1_kernels_on_extreme_blocks() {
        for id in [Q4_1, Q5_0, Q5_1] {
            let kind = Kind::Other(GgmlType(id));
            let mut row = Vec::new();
            let big = 65504f32;
            for (d, m, qh, qs) in [
                (big, big, u32::MAX, [0xFF; 16]),
                (big, -big, 0, [0xFF; 16]),
                (-big, big, u32::MAX, [0; 16]),
                (0.0, 0.0, 0, [0; 16]),
                (0.0, 0.0, u32::MAX, [0xFF; 16]),
                (0.5, -8.0, 0x8000_0001, [0x0F; 16]),
                (1e-7, 1e-7, 0x0001_0000, [0xF0; 16]),
                (-0.03, 0.25, 0x5555_5555, [0x5A; 16]),
            ] {
                row.extend(block_of(kind, d, m, qh, qs));
            }
            row.extend(blocks(kind, 8, u64::from(id)));
            let cols = 16 * 32;
            let mut x: Vec<f32> = (0..4 * cols)
                .map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 3.0)
                .collect();
            x[cols..cols + 32].fill(0.0); // a zero activation block against each weight block
            x[2 * cols..2 * cols + 64].fill(-2.5); // all equal (all -127)
            let q = QuantX::new(kind, &x, cols).unwrap();
            let mut w = vec![0f32; cols];
            dequantize_row(kind, &row, &mut w);
            let xr = round_activations(kind, &x);
            for i in 0..4 {
                let xi = &xr[i * cols..(i + 1) * cols];
                let want: f64 = w.iter().zip(xi).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
                let scale: f64 = w.iter().zip(xi).map(|(a, b)| f64::from((a * b).abs())).sum();
                let allow = 1e-5 * scale + s_allowance(kind, &row, xi);
                let (fast, slow) = (f64::from(q.dot(kind, &row, i)), f64::from(portable(kind, &q, &row, i)));
                assert!((fast - want).abs() <= allow, "{kind:?} vector {i}: {fast} vs {want}");
                assert!((slow - want).abs() <= allow, "{kind:?} portable {i}: {slow} vs {want}");
                assert!((fast - slow).abs() <= 1e-5 * scale, "{kind:?} {i}: {fast} vs {slow}");
            }
            // four inputs at once: each bit for bit the one-input kernel's
            let four = q.dot4(kind, &row, 0).map(f32::to_bits);
            assert_eq!(
                four,
                [0, 1, 2, 3].map(|i| q.dot(kind, &row, i).to_bits()),
                "{kind:?} dot4"
            );
        }
    }

    /// IQ4_NL on blocks at the extremes (the largest f16 scales of either sign, zero scales,
    /// every nibble 0 or 15) and random ones, four rows and four inputs: the AVX2 kernels (four
    /// inputs of a row, four rows of an input, where the CPU has AVX2) give the portable kernel's
    /// bits, and it agrees with the dequantized row times the rounded activations in f64.
    #[test]
    fn iq4_nl_kernels() {
        let kind = Kind::Other(GgmlType(IQ4_NL));
        let (nb, cols) = (16, 16 * 32);
        let mut seed = 0x1234_5678u64;
        let mut byte = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as u8
        };
        let rows: Vec<Vec<u8>> = (0..4)
            .map(|r| {
                let mut row = Vec::new();
                for b in 0..nb {
                    let random: [u8; 16] = std::array::from_fn(|_| byte());
                    let (d, qs) = match (b + r) % 8 {
                        0 => (65504.0, [0xFF; 16]),
                        1 => (-65504.0, [0x00; 16]),
                        2 => (0.0, random),
                        3 => (1e-7, [0x0F; 16]),
                        _ => (0.01 * (b as f32 - 7.0), random),
                    };
                    row.extend(half::f16::from_f32(d).to_le_bytes());
                    row.extend(qs);
                }
                row
            })
            .collect();
        let mut x: Vec<f32> = (0..4 * cols).map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 3.0).collect();
        x[cols..cols + 32].fill(0.0);
        x[2 * cols..2 * cols + 64].fill(-2.5);
        let q = QuantX::new(kind, &x, cols).unwrap();
        let xr = round_activations(kind, &x);
        let portable = |row: &[u8], i: usize| dot_iq4_nl(row, &q.d[i * nb..(i + 1) * nb], &q.q[i * cols..(i + 1) * cols]);
        for row in &rows {
            let mut w = vec![0f32; cols];
            dequantize_row(kind, row, &mut w);
            for i in 0..4 {
                let xi = &xr[i * cols..(i + 1) * cols];
                let want: f64 = w.iter().zip(xi).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
                let scale: f64 = w.iter().zip(xi).map(|(a, b)| f64::from((a * b).abs())).sum();
                let slow = portable(row, i);
                assert!((f64::from(slow) - want).abs() <= 1e-5 * scale, "portable {i}: {slow} vs {want}");
                assert_eq!(q.dot(kind, row, i).to_bits(), slow.to_bits(), "dot {i}");
            }
            assert_eq!(q.dot4(kind, row, 0).map(f32::to_bits), [0, 1, 2, 3].map(|i| portable(row, i).to_bits()), "dot4");
        }
        let four_rows = [&rows[0][..], &rows[1][..], &rows[2][..], &rows[3][..]];
        if let Some(got) = q.dot_rows4(kind, four_rows) {
            assert_eq!(got.map(f32::to_bits), four_rows.map(|r| portable(r, 0).to_bits()), "dot_rows4");
        }
    }

    /// Where every product and sum is exact in f32 (power-of-two scales, activations whose
    /// largest magnitude is 127 so their scale is 1, block sums within f16's integers), the
    /// vector kernel, the portable one and the exact product agree bit for bit: the integer
    /// parts (nibbles, fifth bits, offsets, mins) are llama.cpp's.
    #[test]
    fn q4_1_q5_0_q5_1_kernels_are_exact_where_f32_is() {
        for id in [Q4_1, Q5_0, Q5_1] {
            let kind = Kind::Other(GgmlType(id));
            let nb = 12;
            let mut row = Vec::new();
            let mut r = u64::from(id) * 977;
            let mut next = || {
                r = r.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (r >> 33) as u32
            };
            for b in 0..nb {
                let d = [0.25, 0.5, -1.0, 0.0][b % 4];
                let m = [-2.0, 4.0, 0.125, 0.0][(b / 2) % 4];
                let qh = [u32::MAX, 0, next()][b % 3];
                let qs = if b % 5 == 0 {
                    [0xFF; 16]
                } else {
                    [0; 16].map(|_| next() as u8)
                };
                row.extend(block_of(kind, d, m, qh, qs));
            }
            let cols = nb * 32;
            let x: Vec<f32> = (0..cols)
                .map(|c| match c % 32 {
                    0 if c / 32 % 2 == 0 => 127.0,
                    0 => -127.0,
                    _ => (next() % 81) as f32 - 40.0,
                })
                .collect();
            let q = QuantX::new(kind, &x, cols).unwrap();
            assert!(q.d.iter().all(|&d| d == 1.0));
            let mut w = vec![0f32; cols];
            dequantize_row(kind, &row, &mut w);
            let want: f64 = w.iter().zip(&x).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
            let want = want as f32;
            assert_eq!(
                f64::from(want),
                w.iter()
                    .zip(&x)
                    .map(|(a, b)| f64::from(*a) * f64::from(*b))
                    .sum::<f64>()
            );
            assert_eq!(q.dot(kind, &row, 0).to_bits(), want.to_bits(), "{kind:?}");
            assert_eq!(
                portable(kind, &q, &row, 0).to_bits(),
                want.to_bits(),
                "{kind:?} portable"
            );
        }
    }

    /// The converting F16/BF16 kernels (where the CPU has them) and the vector dot product give
    /// the dequantized row's product to float rounding, for every length remainder.
    #[test]
    fn sixteen_bit_kernels_match_the_dequantized_row() {
        for n in [1usize, 7, 8, 15, 16, 33, 300] {
            let vals: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect();
            let x: Vec<f32> = (0..n).map(|i| ((i * 53 % 89) as f32 - 44.0) / 13.0).collect();
            for kind in [Kind::F16, Kind::BF16] {
                let row: Vec<u8> = vals
                    .iter()
                    .flat_map(|&v| match kind {
                        Kind::F16 => half::f16::from_f32(v).to_bits().to_le_bytes(),
                        _ => half::bf16::from_f32(v).to_bits().to_le_bytes(),
                    })
                    .collect();
                let mut w = vec![0f32; n];
                dequantize_row(kind, &row, &mut w);
                let want: f64 = w.iter().zip(&x).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
                let got = dot_16(kind, &row, &x).unwrap_or_else(|| dot(&w, &x));
                assert!((f64::from(got) - want).abs() < 1e-4, "{kind:?} n={n}: {got} vs {want}");
                assert!((f64::from(dot(&w, &x)) - want).abs() < 1e-4, "dot n={n}");
            }
        }
    }

    /// A `rows x cols` matrix of random blocks of a 32-value kind with its scale first (Q8_0,
    /// Q4_1, Q5_0, Q5_1), scales varied so products differ.
    fn block_matrix(kind: Kind, rows: usize, cols: usize) -> Matrix<'static> {
        let (_, size) = kind.block();
        let mut data = blocks(kind, rows * cols / 32, 7);
        for (i, blk) in data.chunks_exact_mut(size).enumerate() {
            let d = half::f16::from_f32(0.001 + (i % 13) as f32 * 0.0007).to_bits();
            blk[..2].copy_from_slice(&d.to_le_bytes());
        }
        let len = data.len();
        Matrix {
            name: "w".into(),
            kind,
            rows,
            cols,
            row_bytes: cols / 32 * size,
            data: Cow::Owned(data),
            split: len,
            resident: None,
            staged: Vec::new(),
            boundary: Vec::new(),
            staged_in: std::time::Duration::ZERO,
            external: None,
            disk: None,
            #[cfg(feature = "native")]
            filled: None,
        }
    }

    /// The batched decode step's product gives each input exactly (bit for bit) what the
    /// product of that input alone gives, for batch sizes around the 4-input kernel's groups
    /// and an odd and an even number of blocks per row (Q8_0's kernel's two accumulators). For
    /// Q4_1, Q5_0 and Q5_1 a prompt's product (`matmul` of all the inputs) does too.
    #[test]
    fn matmul_each_is_matmul_of_each_input_alone() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let o = |id: u32| Kind::Other(GgmlType(id));
        for ((rows, cols), kind) in [(37, 96), (20, 128)]
            .into_iter()
            .flat_map(|s| [Kind::Q8_0, o(Q4_1), o(Q5_0), o(Q5_1)].map(|k| (s, k)))
        {
            let m = block_matrix(kind, rows, cols);
            for n in [2usize, 3, 4, 5, 8, 9] {
                let x: Vec<f32> = (0..n * cols)
                    .map(|i| ((i * 7919 % 1013) as f32 / 506.0 - 1.0) * (1.0 + (i / cols) as f32))
                    .collect();
                let mut all = vec![0f32; n * rows];
                m.matmul_each(&x, &mut all, &pool);
                let mut prompt = vec![0f32; n * rows];
                m.matmul(&x, &mut prompt, &pool);
                for i in 0..n {
                    let mut one = vec![0f32; rows];
                    m.matmul(&x[i * cols..(i + 1) * cols], &mut one, &pool);
                    for r in 0..rows {
                        assert_eq!(
                            all[i * rows + r].to_bits(),
                            one[r].to_bits(),
                            "{kind:?} {rows}x{cols}, {n} inputs: input {i} row {r}"
                        );
                        if kind != Kind::Q8_0 {
                            assert_eq!(
                                prompt[i * rows + r].to_bits(),
                                one[r].to_bits(),
                                "{kind:?} {rows}x{cols}, prompt of {n}: input {i} row {r}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Q8_0 activation blocks (vectorized where the CPU allows) are llama.cpp's
    /// `quantize_row_q8_0` written out: the largest magnitude, an f16 scale, values rounded half
    /// to even; blocks with exact halves, zeros, one large value, and infinities or NaN.
    #[test]
    fn activation_blocks_quantize_as_the_reference() {
        let mut x: Vec<f32> = (0..32 * 6).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        x[32..64].fill(0.0);
        for (j, v) in x[64..96].iter_mut().enumerate() {
            *v = j as f32 - 15.5; // amax 16: v * 127/16 has exact halves at j = 15, 16 (±0.5 * 127/16)...
        }
        x[64] = 127.0; // ...and with amax 127, integer-and-a-half values round half to even
        x[65] = 2.5;
        x[66] = -3.5;
        x[100] = 1e30;
        x[130] = f32::INFINITY;
        x[170] = f32::NAN;
        let q = QuantX::new(Kind::Q8_0, &x, 32 * 6).unwrap();
        let t = f16_table();
        for (b, xb) in x.chunks_exact(32).enumerate() {
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = t[half::f16::from_f32(amax / 127.0).to_bits() as usize];
            let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
            assert_eq!(q.d[b].to_bits(), d.to_bits(), "block {b} scale");
            for (j, v) in xb.iter().enumerate() {
                assert_eq!(q.q[32 * b + j], (v * id).round_ties_even() as i8, "block {b} value {j}");
            }
        }
        assert_eq!(&q.q[64..67], &[127, 2, -4]);
        // Q8_1 (Q4_1, Q5_1): the same values and scales, and s = f16(amax / 127 * Σ q) in f32
        for id in [Q4_1, Q5_1] {
            let q1 = QuantX::new(Kind::Other(GgmlType(id)), &x, 32 * 6).unwrap();
            assert_eq!((&q1.q, &q1.d), (&q.q, &q.d));
            assert!(
                QuantX::new(Kind::Other(GgmlType(Q5_0)), &x, 32 * 6)
                    .unwrap()
                    .s
                    .is_empty()
            );
            for (b, xb) in x.chunks_exact(32).enumerate() {
                let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
                let sum: i32 = q.q[32 * b..32 * b + 32].iter().map(|&v| i32::from(v)).sum();
                let s = t[half::f16::from_f32(amax / 127.0 * sum as f32).to_bits() as usize];
                assert_eq!(q1.s[b].to_bits(), s.to_bits(), "block {b} sum");
            }
        }
    }

    /// `add_scaled` is the scalar loop, bit for bit, for every length remainder.
    #[test]
    fn add_scaled_is_the_scalar_loop() {
        for n in [1usize, 7, 8, 13, 64, 67] {
            let v: Vec<f32> = (0..n).map(|i| (i as f32 * 0.731).sin() * 3.7).collect();
            let mut got: Vec<f32> = (0..n).map(|i| (i as f32 * 0.29).cos()).collect();
            let mut want = got.clone();
            for p in [0.123_456_79f32, -7.77, 1e-3] {
                add_scaled(&mut got, p, &v);
                for (o, &x) in want.iter_mut().zip(&v) {
                    *o += p * x;
                }
            }
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "n={n}");
        }
    }

    #[test]
    fn dot_matches_f64() {
        let a: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..37).map(|i| (i as f32 * 0.11).cos()).collect();
        let want: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
        assert!((f64::from(dot(&a, &b)) - want).abs() < 1e-5);
    }
}

/// The K-quant kernels against llama.cpp's own (its AVX2 library, called by
/// tests/python/ggml_dot.py) and against the portable kernels here.
#[cfg(test)]
mod k_quant_tests {
    use super::*;

    /// A K-quant row of `nb` blocks: random bytes with sane scales, then blocks at the extremes
    /// (all bytes zero, every byte 0xFF with the largest finite f16 scales, negative scales).
    fn k_row(kind: Kind, nb: usize, seed: u64) -> Vec<u8> {
        let (_, size) = kind.block();
        let mut s = seed;
        let mut next = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 33) as u8
        };
        let f = |v: f32| half::f16::from_f32(v).to_bits().to_le_bytes();
        let mut row = Vec::with_capacity(nb * size);
        for b in 0..nb {
            let mut blk: Vec<u8> = (0..size).map(|_| next()).collect();
            let (d, m) = match b % 6 {
                0 => {
                    blk.fill(0);
                    (0.0, 0.0)
                }
                1 => {
                    blk.fill(0xFF);
                    (65504.0, 65504.0)
                }
                2 => (-0.02, 0.01),
                3 => (1e-7, -3.0),
                _ => (0.01, 0.005),
            };
            match kind {
                Kind::Q4_K | Kind::Other(GgmlType(Q5_K)) => {
                    blk[..2].copy_from_slice(&f(d));
                    blk[2..4].copy_from_slice(&f(m));
                }
                Kind::Other(GgmlType(Q2_K)) => {
                    blk[80..82].copy_from_slice(&f(d));
                    blk[82..84].copy_from_slice(&f(m));
                }
                Kind::Other(GgmlType(Q3_K)) => blk[108..110].copy_from_slice(&f(d)),
                Kind::Other(GgmlType(IQ4_XS | IQ4_NL)) => blk[..2].copy_from_slice(&f(d)),
                _ => blk[208..210].copy_from_slice(&f(d)),
            }
            row.extend(blk);
        }
        row
    }

    /// Input vectors: smooth values, a zero block, a block of one repeated value, a vector of
    /// huge and one of tiny values.
    fn inputs(cols: usize) -> Vec<f32> {
        let mut x: Vec<f32> = (0..4 * cols)
            .map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 3.0)
            .collect();
        x[..256].fill(0.0);
        x[cols + 256..cols + 512].fill(-2.5);
        for v in &mut x[2 * cols..3 * cols] {
            *v *= 1e30;
        }
        for v in &mut x[3 * cols..] {
            *v *= 1e-30;
        }
        x
    }

    /// The K-quants with Q8_K activations, bit for bit llama.cpp's `ggml_vec_dot_q4_K_q8_K` /
    /// `_q6_K_q8_K` / `_q2_K_q8_K` / `_q3_K_q8_K` / `_q5_K_q8_K` / `_iq4_xs_q8_K` (its AVX2
    /// build: the same lanes and sums as the kernels here), and Q4_K and IQ4_NL (Q8_0
    /// activations) bit for bit its repacked `ggml_gemv_q4_K_8x8_q8_K` /
    /// `ggml_gemv_iq4_nl_8x8_q8_0` (IQ4_NL's only order here), on every row and input, where this
    /// CPU has AVX2 (on others the portable kernel runs: Q2_K's, Q3_K's, Q5_K's and IQ4_XS's give the same bits, checked
    /// in `k_quant_portable_kernels_are_the_avx2_ones`; Q4_K's and Q6_K's sums differ from
    /// llama.cpp's by float rounding, checked against the float path in
    /// `integer_kernels_match_the_float_path`).
    #[test]
    fn k_quant_kernels_are_llama_cpp_bit_for_bit() {
        if !simd() {
            eprintln!("no AVX2/FMA/F16C on this CPU: llama.cpp's AVX2 kernels cannot run here");
            return;
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
        let dir = std::env::temp_dir().join(format!("tensorlane-k-quant-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let o = |id: u32| Kind::Other(GgmlType(id));
        for (kind, name) in [
            (Kind::Q4_K, "Q4_K"),
            (Kind::Q4_K, "Q4_K_8x8"),
            (Kind::Q6_K, "Q6_K"),
            (o(Q5_K), "Q5_K"),
            (o(Q3_K), "Q3_K"),
            (o(Q2_K), "Q2_K"),
            (o(IQ4_XS), "IQ4_XS"),
            (o(IQ4_NL), "IQ4_NL_8x8"),
        ] {
            let (nb, rows) = (6, 8);
            let cols = nb * 256;
            let blocks = cols / kind.block().0;
            let w: Vec<u8> = (0..rows).flat_map(|r| k_row(kind, blocks, 11 + r as u64)).collect();
            let x = inputs(cols);
            let (wp, xp) = (dir.join(format!("{name}.rows")), dir.join(format!("{name}.x")));
            std::fs::write(&wp, &w).unwrap();
            std::fs::write(&xp, x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
            let o = std::process::Command::new("python3")
                .arg(root.join("tests/python/ggml_dot.py"))
                .arg(name)
                .arg(cols.to_string())
                .arg(&wp)
                .arg(&xp)
                .output()
                .expect("run python3 tests/python/ggml_dot.py");
            assert!(o.status.success(), "ggml_dot.py failed: {}", String::from_utf8_lossy(&o.stderr));
            let want: Vec<Vec<u32>> = String::from_utf8(o.stdout)
                .unwrap()
                .lines()
                .map(|l| l.split(' ').map(|h| u32::from_str_radix(h, 16).unwrap()).collect())
                .collect();
            assert_eq!(want.len(), rows);
            let mut q = QuantX::new(kind, &x, cols).unwrap();
            // llama.cpp's interleaved kernel, which it uses for these 8 rows on an AVX2 CPU
            q.q4_k_interleaved = name == "Q4_K_8x8";
            assert_eq!(q.q4_k_interleaved, name == "Q4_K_8x8" && q4_k_interleaved(kind, rows));
            let row_bytes = w.len() / rows;
            let mut finite = 0;
            for (r, want) in want.iter().enumerate() {
                let row = &w[r * row_bytes..(r + 1) * row_bytes];
                for (i, &b) in want.iter().enumerate() {
                    let got = q.dot(kind, row, i);
                    let llama = f32::from_bits(b);
                    finite += usize::from(llama.is_finite());
                    assert!(
                        got.to_bits() == b || (got.is_nan() && llama.is_nan()),
                        "{name} row {r} input {i}: {got} vs llama.cpp's {llama}"
                    );
                }
            }
            assert!(finite >= rows * 3, "{name}: too few finite products to compare");
            // four inputs at once (the prompt's kernel): each bit for bit the one-input kernel's
            for r in 0..rows {
                let row = &w[r * row_bytes..(r + 1) * row_bytes];
                let four = q.dot4(kind, row, 0).map(f32::to_bits);
                let one = [0, 1, 2, 3].map(|i| q.dot(kind, row, i).to_bits());
                let nan = |b: u32| f32::from_bits(b).is_nan();
                assert!(
                    (0..4).all(|i| four[i] == one[i] || (nan(four[i]) && nan(one[i]))),
                    "{name} row {r}: dot4 {four:x?} vs dot {one:x?}"
                );
            }
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Q2_K, Q3_K, Q5_K and IQ4_XS: the portable kernels give the AVX2 kernels' results bit for bit
    /// (one input and four), on random blocks and the extremes of [`k_row`], and both give the
    /// dequantized rows times the rounded activations (rows without the huge block, whose
    /// products overflow f32).
    #[test]
    fn k_quant_portable_kernels_are_the_avx2_ones() {
        for id in [Q2_K, Q3_K, Q5_K, IQ4_XS] {
            let kind = Kind::Other(GgmlType(id));
            let nb = 6;
            let cols = nb * 256;
            let x = inputs(cols);
            let q = QuantX::new(kind, &x, cols).unwrap();
            let xr = round_activations(kind, &x);
            for seed in 0..3 {
                let row = k_row(kind, nb, 40 + seed);
                let four = q.dot4(kind, &row, 0);
                for (i, &four_i) in four.iter().enumerate() {
                    let (d, qi) = (&q.d[i * nb..(i + 1) * nb], &q.q[i * cols..(i + 1) * cols]);
                    let sums = &q.sums[i * cols / 16..(i + 1) * cols / 16];
                    let slow = match id {
                        Q2_K => dot_q2_k(&row, d, qi, sums),
                        Q3_K => dot_q3_k(&row, d, qi),
                        IQ4_XS => dot_iq4_xs(&row, d, qi),
                        _ => dot_q5_k(&row, d, qi, sums),
                    };
                    let fast = q.dot(kind, &row, i);
                    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
                    assert!(
                        same(fast, slow),
                        "{kind:?} row {seed} input {i}: {fast} vs portable {slow}"
                    );
                    assert!(same(four_i, fast), "{kind:?} row {seed} input {i}: dot4 {four_i} vs {fast}");
                }
                // against the float path, without the huge block
                let size = kind.block().1;
                let tame: Vec<u8> = row
                    .chunks_exact(size)
                    .enumerate()
                    .flat_map(|(b, blk)| if b % 6 == 1 { vec![0; size] } else { blk.to_vec() })
                    .collect();
                let mut w = vec![0f32; cols];
                dequantize_row(kind, &tame, &mut w);
                for i in 0..2 {
                    let got = f64::from(q.dot(kind, &tame, i));
                    let xi = &xr[i * cols..(i + 1) * cols];
                    let want: f64 = w.iter().zip(xi).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
                    let scale: f64 = w.iter().zip(xi).map(|(a, b)| f64::from((a * b).abs())).sum();
                    assert!(
                        (got - want).abs() <= 1e-5 * scale,
                        "{kind:?} row {seed} input {i}: {got} vs {want}"
                    );
                }
            }
        }
    }

    /// The AVX2 K-quant kernels and the portable ones agree to float rounding (their integer
    /// parts are the same; the AVX2 ones sum eight lanes per block in f32, the portable one
    /// block by block), and both give the dequantized rows times the rounded activations.
    /// The same float, NaN for NaN (whose sign and payload no kernel promises).
    fn same_bits(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    /// The prompt's Q4_K kernels (in both orders of sums) and Q6_K kernels, AVX-512 and AVX2: each of four
    /// inputs' results bit for bit the one-input AVX2 kernel's (itself llama.cpp's, in
    /// `k_quant_kernels_are_llama_cpp_bit_for_bit`), on rows with blocks at the extremes; the
    /// AVX-512 one where this CPU has it (`TENSORLANE_NO_AVX512` unset).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn k_quant_prompt_kernels_are_the_one_input_kernel_bit_for_bit() {
        if !simd() {
            return;
        }
        let (nb, cols) = (12, 12 * 256);
        let row = k_row(Kind::Q4_K, nb, 23);
        // eight inputs: the four of `inputs`, then the same times -0.37
        let mut x = inputs(cols);
        x.extend(inputs(cols).iter().map(|v| v * -0.37));
        let q = QuantX::new(Kind::Q4_K, &x, cols).unwrap();
        let (d8, qs8, sums8) = (eight(&q.d, 0, nb), eight(&q.q, 0, cols), eight(&q.sums, 0, cols / 16));
        let (d, qs, sums) = (four(&q.d, 0, nb), four(&q.q, 0, cols), four(&q.sums, 0, cols / 16));
        macro_rules! check {
            ($interleaved:literal) => {{
                // SAFETY: simd() checked AVX2 and FMA (and available() AVX-512 below).
                let one: Vec<f32> =
                    (0..8).map(|k| unsafe { x86::dot_q4_k::<$interleaved>(&row, d8[k], qs8[k], sums8[k]) }).collect();
                let avx2 = unsafe { x86::dot_q4_k_x4::<$interleaved>(&row, d, qs, sums) };
                let mut kernels = vec![("avx2", avx2.to_vec())];
                if avx512::available() {
                    kernels.push(("avx512 x4", unsafe { avx512::dot_q4_k_xn::<$interleaved, 4>(&row, d, qs, sums) }.to_vec()));
                    kernels.push(("avx512 x8", unsafe { avx512::dot_q4_k_xn::<$interleaved, 8>(&row, d8, qs8, sums8) }.to_vec()));
                }
                for (name, got) in kernels {
                    for (k, (g, o)) in got.iter().zip(&one).enumerate() {
                        assert!(same_bits(*g, *o), "{name} interleaved={} input {k}: {g} vs {o}", $interleaved);
                    }
                }
                assert!(one.iter().any(|v| v.is_finite() && *v != 0.0));
            }};
        }
        check!(false);
        check!(true);
        let row = k_row(Kind::Q6_K, nb, 29);
        // SAFETY: simd() checked AVX2 and FMA (and available() AVX-512 below).
        let one = [0, 1, 2, 3].map(|k| unsafe { x86::dot_q6_k(&row, d[k], qs[k], sums[k]) });
        let mut kernels = vec![("avx2", unsafe { x86::dot_q6_k_x4(&row, d, qs, sums) })];
        if avx512::available() {
            kernels.push(("avx512", unsafe { avx512::dot_q6_k_x4(&row, d, qs, sums) }));
        }
        for (name, got) in kernels {
            for k in 0..4 {
                assert!(same_bits(got[k], one[k]), "Q6_K {name} input {k}: {} vs {}", got[k], one[k]);
            }
        }
    }

    /// The prompt's Q8_0 kernels on a row of an odd number of blocks (the AVX-512 kernel's
    /// tail) with blocks at the extremes (every byte -128 or 127, the largest f16 scales, zero
    /// scales): the AVX2 one near the exact product, the AVX-512 one (two blocks a vector) bit
    /// for bit the AVX2 one for each of four inputs.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn q8_0_prompt_kernels_are_the_one_input_kernel_bit_for_bit() {
        if !simd() {
            return;
        }
        let (nb, cols) = (13, 13 * 32);
        let mut seed = 99u64;
        let mut byte = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as u8
        };
        let mut row = Vec::new();
        for b in 0..nb {
            let (d, v): (f32, [u8; 32]) = match b % 5 {
                0 => (65504.0, [0x80; 32]),
                1 => (-65504.0, [0x7F; 32]),
                2 => (0.0, std::array::from_fn(|_| byte())),
                _ => (0.01 * (b as f32 - 6.0), std::array::from_fn(|_| byte())),
            };
            row.extend(half::f16::from_f32(d).to_le_bytes());
            row.extend(v);
        }
        let x: Vec<f32> = (0..4 * cols).map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 3.0).collect();
        let q = QuantX::new(Kind::Q8_0, &x, cols).unwrap();
        let (d, qs) = (four(&q.d, 0, nb), four(&q.q, 0, cols));
        // SAFETY: simd() checked AVX2 and FMA (and available() AVX-512 below).
        let avx2 = unsafe { x86::dot_q8_0_x4(&row, d, qs) };
        assert!(avx2.iter().all(|v| v.is_finite()));
        // the AVX2 kernel's order (one accumulator, llama.cpp's `vec_dot`) in f64 terms
        let t = f16_table();
        for k in 0..4 {
            let want: f64 = row
                .chunks_exact(34)
                .enumerate()
                .map(|(b, blk)| {
                    let s: i64 = (0..32).map(|j| i64::from(blk[2 + j] as i8) * i64::from(qs[k][32 * b + j])).sum();
                    s as f64 * f64::from(f16_at(t, blk, 0)) * f64::from(d[k][b])
                })
                .sum();
            assert!((f64::from(avx2[k]) - want).abs() <= 1e-5 * want.abs().max(1.0), "avx2 input {k}: {} vs {want}", avx2[k]);
        }
        if avx512::available() {
            let got = unsafe { avx512::dot_q8_0_x4(&row, d, qs) };
            for k in 0..4 {
                assert!(same_bits(got[k], avx2[k]), "avx512 input {k}: {} vs {}", got[k], avx2[k]);
            }
        }
    }

    /// Activations quantized to Q8_K with AVX2 are the scalar code's bits: smooth blocks, a
    /// block of zeros, blocks whose largest magnitude is reached by `+a` and `-a` (the first
    /// decides the sign of the scale), huge and tiny values; a block with a NaN or an infinity
    /// falls back to the scalar code.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn q8_k_activations_vector_and_scalar_agree() {
        if !simd() {
            return;
        }
        let smooth: Vec<f32> = (0..256).map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 3.0).collect();
        let mut blocks = vec![smooth.clone(), vec![0.0; 256], vec![-2.5; 256]];
        for (first, second) in [(3.0f32, -3.0f32), (-3.0, 3.0)] {
            let mut b = smooth.clone();
            b[40] = first;
            b[200] = second;
            blocks.push(b);
        }
        blocks.push(smooth.iter().map(|v| v * 1e30).collect());
        blocks.push(smooth.iter().map(|v| v * 1e-30).collect());
        // values that land half way between two integers after scaling
        blocks.push((0..256).map(|i| if i == 0 { 127.0 } else { (i % 255) as f32 - 127.5 }).collect());
        for (n, b) in blocks.iter().enumerate() {
            let (mut fast, mut slow) = ([0i8; 256], [0i8; 256]);
            // SAFETY: simd() checked AVX2 and FMA.
            let df = unsafe { x86::quantize_q8_k(b, &mut fast) }.expect("finite block");
            let ds = quantize_block_q8_k_scalar(b, &mut slow);
            assert_eq!(df.to_bits(), ds.to_bits(), "block {n}: scale");
            assert_eq!(fast, slow, "block {n}: values");
        }
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut b = smooth.clone();
            b[77] = bad;
            // SAFETY: simd() checked AVX2 and FMA.
            assert_eq!(unsafe { x86::quantize_q8_k(&b, &mut [0i8; 256]) }, None, "{bad}");
        }
    }

    #[test]
    fn k_quant_vector_and_portable_kernels_agree() {
        for kind in [Kind::Q4_K, Kind::Q6_K] {
            let nb = 4;
            let cols = nb * 256;
            // rows without the huge block (its products overflow f32 in any order of sums)
            let row: Vec<u8> = k_row(kind, 6, 5)
                .chunks_exact(kind.block().1)
                .enumerate()
                .filter(|(b, _)| b % 6 != 1)
                .flat_map(|(_, blk)| blk.to_vec())
                .take(nb * kind.block().1)
                .collect();
            let x = inputs(cols);
            let q = QuantX::new(kind, &x[..2 * cols], cols).unwrap();
            let mut w = vec![0f32; cols];
            dequantize_row(kind, &row, &mut w);
            let xr = round_activations(kind, &x[..2 * cols]);
            for i in 0..2 {
                let nbk = cols / 256;
                let (d, qi) = (&q.d[i * nbk..(i + 1) * nbk], &q.q[i * cols..(i + 1) * cols]);
                let sums = &q.sums[i * cols / 16..(i + 1) * cols / 16];
                let slow = f64::from(match kind {
                    Kind::Q4_K => dot_q4_k(&row, d, qi, sums),
                    _ => dot_q6_k(&row, d, qi),
                });
                let fast = f64::from(q.dot(kind, &row, i));
                let xi = &xr[i * cols..(i + 1) * cols];
                let want: f64 = w.iter().zip(xi).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
                let scale: f64 = w.iter().zip(xi).map(|(a, b)| f64::from((a * b).abs())).sum();
                assert!((fast - want).abs() <= 1e-5 * scale, "{kind:?} {i}: {fast} vs {want}");
                assert!((slow - want).abs() <= 1e-5 * scale, "{kind:?} portable {i}: {slow} vs {want}");
            }
        }
    }

    /// Q4_K in llama.cpp's interleaved order: the AVX2 kernels (one input and four) and the
    /// portable one agree bit for bit (the same exact integer sums, the same fused
    /// multiply-adds), and all give the dequantized row times the rounded activations.
    #[test]
    fn q4_k_interleaved_order_is_the_same_on_every_path() {
        let nb = 4;
        let cols = nb * 256;
        let row: Vec<u8> = k_row(Kind::Q4_K, 6, 9)
            .chunks_exact(144)
            .enumerate()
            .filter(|(b, _)| b % 6 != 1)
            .flat_map(|(_, blk)| blk.to_vec())
            .take(nb * 144)
            .collect();
        let x = inputs(cols);
        let mut q = QuantX::new(Kind::Q4_K, &x, cols).unwrap();
        q.q4_k_interleaved = true;
        let mut w = vec![0f32; cols];
        dequantize_row(Kind::Q4_K, &row, &mut w);
        let xr = round_activations(Kind::Q4_K, &x);
        let four = q.dot4(Kind::Q4_K, &row, 0);
        for i in 0..4 {
            let (d, qi) = (&q.d[i * nb..(i + 1) * nb], &q.q[i * cols..(i + 1) * cols]);
            let slow = dot_q4_k_interleaved(&row, d, qi, &q.sums[i * cols / 16..(i + 1) * cols / 16]);
            let fast = q.dot(Kind::Q4_K, &row, i);
            assert_eq!(fast.to_bits(), slow.to_bits(), "input {i}: {fast} vs portable {slow}");
            assert_eq!(four[i].to_bits(), fast.to_bits(), "input {i}: dot4 {} vs {fast}", four[i]);
            let xi = &xr[i * cols..(i + 1) * cols];
            let want: f64 = w.iter().zip(xi).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
            let scale: f64 = w.iter().zip(xi).map(|(a, b)| f64::from((a * b).abs())).sum();
            assert!((f64::from(fast) - want).abs() <= 1e-5 * scale, "input {i}: {fast} vs {want}");
        }
    }

    /// The decode step's four-row Q4_1 kernel gives each row bit for bit what the one-row kernel
    /// gives it, on random blocks and blocks with the largest f16 scale and all zeros.
    #[test]
    fn four_q4_1_rows_at_once_are_each_rows_own_product() {
        let kind = Kind::Other(GgmlType(Q4_1));
        let nb = 10;
        let rows: Vec<Vec<u8>> = (0..4)
            .map(|r| {
                let mut row = super::tests::blocks_for(kind, nb, 31 + r as u64);
                row[20 * r..20 * r + 2].copy_from_slice(&half::f16::from_f32(65504.0).to_bits().to_le_bytes());
                row[20 * r + 2..20 * r + 4].copy_from_slice(&half::f16::from_f32(-65504.0).to_bits().to_le_bytes());
                row[20 * (r + 4)..20 * (r + 5)].fill(0);
                row
            })
            .collect();
        let cols = nb * 32;
        let x: Vec<f32> = (0..cols).map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 3.0).collect();
        let q = QuantX::new(kind, &x, cols).unwrap();
        let Some(four) = q.dot_rows4(kind, [&rows[0], &rows[1], &rows[2], &rows[3]]) else {
            assert!(!simd(), "no four-row Q4_1 kernel on an AVX2 CPU");
            return;
        };
        for (k, row) in rows.iter().enumerate() {
            let one = q.dot(kind, row, 0);
            assert!(
                four[k].to_bits() == one.to_bits() || (four[k].is_nan() && one.is_nan()),
                "row {k}: {} vs {one}",
                four[k]
            );
        }
        assert!(four.iter().filter(|v| v.is_finite()).count() >= 2);
    }
}
