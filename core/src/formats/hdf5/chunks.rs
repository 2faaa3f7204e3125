//! Chunked datasets: the chunk indexes (version-1 B-tree, single chunk, implicit, fixed array,
//! extensible array, version-2 B-tree), the filters (deflate, shuffle, Fletcher-32) and the
//! assembly of chunks into the C-order stored bytes, edge chunks clipped, missing chunks filled.

use alloc::collections::BTreeSet;
use alloc::vec::Vec;

use super::super::{ErrorKind, FormatError};
use super::Chunked;
use super::header::{ChunkIndex, Filter};
use super::io::{Ctx, Cur, err, fletcher32, log2};
use super::tree::{ChunkRef, btree2_records, chunk_btree_v1};
use crate::source::ReadAt;

/// Filter ids this reader undoes.
pub(super) const DEFLATE: u16 = 1;
/// Byte shuffle.
pub(super) const SHUFFLE: u16 = 2;
/// Fletcher-32 checksum.
pub(super) const FLETCHER32: u16 = 3;

/// The registered name of a filter id (HDF5's and the HDF Group's filter registry).
pub(super) fn filter_name(id: u16) -> &'static str {
    match id {
        DEFLATE => "gzip",
        SHUFFLE => "shuffle",
        FLETCHER32 => "fletcher32",
        4 => "szip",
        5 => "nbit",
        6 => "scaleoffset",
        305 => "lzo",
        307 => "bzip2",
        32000 => "lzf",
        32001 => "blosc",
        32004 => "lz4",
        32008 => "bitshuffle",
        32013 => "zfp",
        32015 => "zstd",
        32017 => "sz",
        32026 => "blosc2",
        _ => "unregistered",
    }
}

/// The most bytes a chunked dataset or one chunk may expand to when read: 1024 bytes per byte
/// of file (deflate's best ratio is about 1032:1), and at least 64 MiB. Datasets made mostly of
/// never-written chunks beyond that are refused rather than allocated on the file's word.
pub(super) fn expand_limit(file_size: u64) -> u64 {
    file_size.saturating_mul(1024).max(64 << 20)
}

fn product(dims: &[u64]) -> Option<u64> {
    dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d))
}

/// Chunks per dimension covering `dims` (`u64::MAX` stays unlimited).
fn grid(dims: &[u64], chunk: &[u64]) -> Vec<u64> {
    dims.iter()
        .zip(chunk)
        .map(|(&d, &c)| if d == u64::MAX { u64::MAX } else { d.div_ceil(c) })
        .collect()
}

/// The linear chunk index HDF5 uses for fixed and extensible arrays and implicit storage: row
/// major over the chunk grid of the maximum dimensions, with the unlimited dimension (if any)
/// moved to the front.
fn unlinear(mut idx: u64, max_grid: &[u64], unlim: usize) -> Vec<u64> {
    let rank = max_grid.len();
    let order: Vec<usize> = core::iter::once(unlim)
        .chain((0..rank).filter(|&d| d != unlim))
        .collect();
    let mut scaled = alloc::vec![0u64; rank];
    for &d in order.iter().skip(1).rev() {
        let n = max_grid[d].max(1);
        scaled[d] = idx % n;
        idx /= n;
    }
    if rank > 0 {
        scaled[order[0]] = idx;
    }
    scaled
}

/// Reads an entry of a fixed or extensible array: address, then (filtered) size and mask.
fn entry(e: &[u8], so: usize, filtered: bool, chunk_bytes: u64) -> Result<(u64, u64, u32), FormatError> {
    let mut c = Cur::of(e, 0);
    let addr = c.uv(so)?;
    if !filtered {
        return Ok((addr, chunk_bytes, 0));
    }
    let n = e.len().checked_sub(so + 4).filter(|n| *n <= 8).ok_or_else(|| {
        err(
            ErrorKind::Syntax,
            alloc::format!("a filtered chunk entry of {} bytes", e.len()),
        )
    })?;
    let size = c.uv(n)?;
    let mask = c.u32()?;
    Ok((addr, size, mask))
}

/// The chunks of `c` as its index lists them.
fn list<S: ReadAt + ?Sized>(ctx: &Ctx<'_, S>, c: &Chunked, chunk_bytes: u64) -> Result<Vec<ChunkRef>, FormatError> {
    let so = ctx.so as usize;
    let rank = c.chunk.len();
    let max_grid = grid(&c.max, &c.chunk);
    let unlim = c.max.iter().position(|&m| m == u64::MAX).unwrap_or(0);
    let mut out = Vec::new();
    match c.index {
        ChunkIndex::Unallocated => {}
        ChunkIndex::BTreeV1 { addr } => chunk_btree_v1(ctx, addr, &c.chunk, &mut out, u64::MAX)?,
        ChunkIndex::Single { addr, filtered } => {
            let (size, mask) = filtered.unwrap_or((chunk_bytes, 0));
            out.push(ChunkRef {
                scaled: alloc::vec![0; rank],
                addr,
                size,
                mask,
            });
        }
        ChunkIndex::Implicit { addr } => {
            let n = product(&max_grid).ok_or_else(|| err(ErrorKind::Overflow, "the chunk count overflows"))?;
            // Each chunk is stored, so the count is bounded by the file.
            if n.checked_mul(chunk_bytes).is_none_or(|b| b > ctx.size()) {
                return Err(err(
                    ErrorKind::Limit,
                    alloc::format!("{n} implicitly stored chunks of {chunk_bytes} bytes do not fit in the file"),
                ));
            }
            for i in 0..n {
                out.push(ChunkRef {
                    scaled: unlinear(i, &max_grid, 0),
                    addr: addr + i * chunk_bytes,
                    size: chunk_bytes,
                    mask: 0,
                });
            }
        }
        ChunkIndex::FixedArray { addr } => fixed_array(ctx, addr, &max_grid, chunk_bytes, &mut out)?,
        ChunkIndex::ExtensibleArray { addr } => extensible_array(ctx, addr, &max_grid, unlim, chunk_bytes, &mut out)?,
        ChunkIndex::BTreeV2 { addr } => {
            let filtered = !c.filters.is_empty();
            for r in btree2_records(ctx, addr, if filtered { 11 } else { 10 })? {
                let mut k = Cur::of(&r, 0);
                let a = k.uv(so)?;
                let (size, mask) = if filtered {
                    let n = r
                        .len()
                        .checked_sub(so + 4 + 8 * rank)
                        .filter(|n| (1..=8).contains(n))
                        .ok_or_else(|| {
                            err(
                                ErrorKind::Syntax,
                                alloc::format!("a v2 B-tree chunk record of {} bytes", r.len()),
                            )
                        })?;
                    (k.uv(n)?, k.u32()?)
                } else {
                    (chunk_bytes, 0)
                };
                let scaled = (0..rank).map(|_| k.u64()).collect::<Result<Vec<_>, _>>()?;
                out.push(ChunkRef {
                    scaled,
                    addr: a,
                    size,
                    mask,
                });
            }
        }
    }
    Ok(out)
}

fn fixed_array<S: ReadAt + ?Sized>(
    ctx: &Ctx<'_, S>,
    addr: u64,
    max_grid: &[u64],
    chunk_bytes: u64,
    out: &mut Vec<ChunkRef>,
) -> Result<(), FormatError> {
    let (so, sl) = (ctx.so as usize, ctx.sl as usize);
    let mut h = ctx.cur(addr, (4 + 1 + 1 + 1 + 1 + sl + so + 4) as u64)?;
    let at = h.offset();
    h.sig(b"FAHD", "fixed array header")?;
    h.skip(1)?;
    let client = h.u8()?;
    let esize = h.u8()? as u64;
    let page_bits = h.u8()? as u32;
    let n = h.uv(sl)?;
    let dblock = h.uv(so)?;
    h.checksum("fixed array header")?;
    let want = product(max_grid).ok_or_else(|| err(ErrorKind::Overflow, "the chunk count overflows"))?;
    if n != want || esize < so as u64 || page_bits > 32 {
        return Err(err(
            ErrorKind::Syntax,
            alloc::format!("a fixed array of {n} entries of {esize} bytes for a grid of {want} chunks"),
        )
        .at(at));
    }
    if ctx.undefined(dblock) || n == 0 {
        return Ok(());
    }
    let page = 1u64 << page_bits;
    let paged = n > page;
    let npages = n.div_ceil(page);
    let prefix = (4 + 1 + 1 + so) as u64 + if paged { npages.div_ceil(8) } else { 0 };
    // Entries (and per-page checksums) must be in the file before anything is allocated.
    let body = n
        .checked_mul(esize)
        .and_then(|b| b.checked_add(if paged { 4 * npages } else { 0 }));
    let total = body
        .and_then(|b| b.checked_add(prefix + 4))
        .ok_or_else(|| err(ErrorKind::Overflow, "fixed array size"))?;
    let d = ctx.read(dblock, total)?;
    let mut c = Cur::of(&d, ctx.abs(dblock)?);
    c.sig(b"FADB", "fixed array data block")?;
    let body = if paged {
        c.seek(prefix as usize)?;
        c.checksum("fixed array data block")?;
        &d[prefix as usize + 4..]
    } else {
        c.seek((prefix + n * esize) as usize)?;
        c.checksum("fixed array data block")?;
        &d[prefix as usize..(prefix + n * esize) as usize]
    };
    for i in 0..n {
        let pos = if paged {
            (i / page) * (page * esize + 4) + (i % page) * esize
        } else {
            i * esize
        };
        let e = &body[pos as usize..(pos + esize) as usize];
        let (a, size, mask) = entry(e, so, client == 1, chunk_bytes)?;
        if !ctx.undefined(a) {
            out.push(ChunkRef {
                scaled: unlinear(i, max_grid, 0),
                addr: a,
                size,
                mask,
            });
        }
    }
    Ok(())
}

/// What walking an extensible array's data blocks needs: its header's parameters and what its
/// elements index.
struct ExtArray<'a, 'c, S: ReadAt + ?Sized> {
    ctx: &'a Ctx<'c, S>,
    /// Size of offsets in the file.
    so: usize,
    /// Bytes per element.
    esize: u64,
    /// Elements are filtered chunks (address, size, mask) rather than addresses.
    filtered: bool,
    chunk_bytes: u64,
    /// Elements past this index were never set.
    max_set: u64,
    /// Elements per data block page.
    page: u64,
    /// Bytes of a block's offset field.
    off_size: usize,
    max_grid: &'a [u64],
    unlim: usize,
}

impl<S: ReadAt + ?Sized> ExtArray<'_, '_, S> {
    /// Adds element `idx` (bytes `e`) as a chunk, unless it is past the set elements or
    /// unallocated.
    fn push(&self, idx: u64, e: &[u8], out: &mut Vec<ChunkRef>) -> Result<(), FormatError> {
        if idx >= self.max_set {
            return Ok(());
        }
        let (a, size, mask) = entry(e, self.so, self.filtered, self.chunk_bytes)?;
        if !self.ctx.undefined(a) {
            out.push(ChunkRef {
                scaled: unlinear(idx, self.max_grid, self.unlim),
                addr: a,
                size,
                mask,
            });
        }
        Ok(())
    }

    /// Adds the elements of the data block at `a`: `n` elements, the first of index `first`.
    fn data_block(&self, a: u64, n: u64, first: u64, out: &mut Vec<ChunkRef>) -> Result<(), FormatError> {
        let (ctx, so, esize, page) = (self.ctx, self.so, self.esize, self.page);
        if ctx.undefined(a) || first >= self.max_set {
            return Ok(());
        }
        let paged = n > page;
        let prefix = (4 + 2 + so + self.off_size) as u64;
        let body = if paged {
            n.div_ceil(page).checked_mul(page * esize + 4)
        } else {
            n.checked_mul(esize)
        };
        // The block must be in the file before its elements are walked.
        let len = body
            .and_then(|b| b.checked_add(prefix + 4))
            .ok_or_else(|| err(ErrorKind::Overflow, "an extensible array data block's size overflows"))?;
        let body = len - prefix - 4;
        let d = ctx.read(a, len)?;
        let mut c = Cur::of(&d, ctx.abs(a)?);
        c.sig(b"EADB", "extensible array data block")?;
        let start = if paged {
            c.seek(prefix as usize)?;
            c.checksum("extensible array data block")?;
            prefix + 4
        } else {
            c.seek((prefix + body) as usize)?;
            c.checksum("extensible array data block")?;
            prefix
        };
        for i in 0..n {
            let pos = start
                + if paged {
                    (i / page) * (page * esize + 4) + (i % page) * esize
                } else {
                    i * esize
                };
            self.push(first + i, &d[pos as usize..(pos + esize) as usize], out)?;
        }
        Ok(())
    }
}

fn extensible_array<S: ReadAt + ?Sized>(
    ctx: &Ctx<'_, S>,
    addr: u64,
    max_grid: &[u64],
    unlim: usize,
    chunk_bytes: u64,
    out: &mut Vec<ChunkRef>,
) -> Result<(), FormatError> {
    let (so, sl) = (ctx.so as usize, ctx.sl as usize);
    let mut h = ctx.cur(addr, (4 + 1 + 1 + 6 + 6 * sl + so + 4) as u64)?;
    let at = h.offset();
    h.sig(b"EAHD", "extensible array header")?;
    h.skip(1)?;
    let client = h.u8()?;
    let esize = h.u8()? as u64;
    let max_bits = h.u8()? as u32;
    let idx_elmts = h.u8()? as u64;
    let min_elmts = h.u8()? as u64;
    let min_ptrs = h.u8()? as u64;
    let page_bits = h.u8()? as u32;
    h.skip(4 * sl)?;
    let max_set = h.uv(sl)?;
    h.skip(sl)?;
    let iblock = h.uv(so)?;
    h.checksum("extensible array header")?;
    let pow2 = |x: u64| x != 0 && x.is_power_of_two();
    if esize < so as u64
        || !(1..=64).contains(&max_bits)
        || !pow2(min_elmts)
        || !pow2(min_ptrs)
        || page_bits > 32
        || log2(min_elmts) > max_bits
    {
        return Err(err(
            ErrorKind::Syntax,
            "an extensible array header with inconsistent parameters",
        )
        .at(at));
    }
    if ctx.undefined(iblock) {
        return Ok(());
    }
    let off_size = max_bits.div_ceil(8) as usize;
    let nsblks = 1 + (max_bits - log2(min_elmts)) as u64;
    let iblock_sblks = (2 * log2(min_ptrs) as u64).min(nsblks);
    let ndblk_addrs = 2 * (min_ptrs - 1);
    let nsblk_addrs = nsblks - iblock_sblks;
    // Super block u: 2^(u/2) data blocks of 2^((u+1)/2) * min_elmts elements.
    let ndblks = |u: u64| 1u64 << (u / 2);
    let dblk_elmts = |u: u64| (1u64 << u.div_ceil(2)).saturating_mul(min_elmts);
    let ea = ExtArray {
        ctx,
        so,
        esize,
        filtered: client == 1,
        chunk_bytes,
        max_set,
        page: 1u64 << page_bits,
        off_size,
        max_grid,
        unlim,
    };
    let ilen = (4 + 2 + so) as u64 + idx_elmts * esize + (ndblk_addrs + nsblk_addrs) * so as u64 + 4;
    let ib = ctx.read(iblock, ilen)?;
    let mut c = Cur::of(&ib, ctx.abs(iblock)?);
    c.sig(b"EAIB", "extensible array index block")?;
    c.skip(2 + so)?;
    for i in 0..idx_elmts {
        let e = c.bytes(esize as usize)?.to_vec();
        ea.push(i, &e, out)?;
    }
    let dblk_addrs: Vec<u64> = (0..ndblk_addrs).map(|_| c.uv(so)).collect::<Result<_, _>>()?;
    let sblk_addrs: Vec<u64> = (0..nsblk_addrs).map(|_| c.uv(so)).collect::<Result<_, _>>()?;
    c.checksum("extensible array index block")?;
    let mut first = idx_elmts;
    let mut k = 0usize;
    for u in 0..nsblks {
        if first >= max_set {
            break;
        }
        let (nd, ne) = (ndblks(u), dblk_elmts(u));
        if u < iblock_sblks {
            for _ in 0..nd {
                let a = *dblk_addrs
                    .get(k)
                    .ok_or_else(|| err(ErrorKind::Syntax, "extensible array index block too short"))?;
                k += 1;
                ea.data_block(a, ne, first, out)?;
                first = first.saturating_add(ne);
            }
            continue;
        }
        let sb = sblk_addrs[(u - iblock_sblks) as usize];
        if ctx.undefined(sb) {
            first = first.saturating_add(nd.saturating_mul(ne));
            continue;
        }
        let paged = ne > ea.page;
        let bitmap = if paged {
            nd.saturating_mul(ne.div_ceil(ea.page).div_ceil(8))
        } else {
            0
        };
        let slen = ((4 + 2 + so + off_size + 4) as u64)
            .saturating_add(bitmap)
            .saturating_add(nd.saturating_mul(so as u64));
        let mut s = ctx.cur(sb, slen)?;
        s.sig(b"EASB", "extensible array super block")?;
        s.skip(2 + so + off_size + bitmap as usize)?;
        let addrs: Vec<u64> = (0..nd).map(|_| s.uv(so)).collect::<Result<_, _>>()?;
        s.checksum("extensible array super block")?;
        for a in addrs {
            ea.data_block(a, ne, first, out)?;
            first = first.saturating_add(ne);
        }
    }
    Ok(())
}

/// Undoes the filters of one chunk (in reverse order, skipping those the mask marks as not
/// applied); no stage may produce more than `limit` bytes.
fn unfilter(mut data: Vec<u8>, filters: &[Filter], mask: u32, limit: u64) -> Result<Vec<u8>, FormatError> {
    for (i, f) in filters.iter().enumerate().rev() {
        if i < 32 && mask & (1 << i) != 0 {
            continue;
        }
        data = match f.id {
            DEFLATE => miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(
                &data,
                usize::try_from(limit).unwrap_or(usize::MAX),
            )
            .map_err(|e| {
                err(
                    ErrorKind::Syntax,
                    alloc::format!(
                        "a deflated chunk is invalid or inflates past the chunk's {limit} bytes ({:?})",
                        e.status
                    ),
                )
            })?,
            SHUFFLE => {
                let es = f.params.first().copied().unwrap_or(1) as usize;
                if es <= 1 || es > data.len() {
                    data // HDF5 leaves such chunks as they are
                } else {
                    let n = data.len() / es;
                    let mut out = alloc::vec![0u8; data.len()];
                    for j in 0..es {
                        for k in 0..n {
                            out[k * es + j] = data[j * n + k];
                        }
                    }
                    let tail = n * es;
                    out[tail..].copy_from_slice(&data[tail..]);
                    out
                }
            }
            FLETCHER32 => {
                let n = data
                    .len()
                    .checked_sub(4)
                    .ok_or_else(|| err(ErrorKind::Checksum, "a Fletcher-32 chunk is shorter than its checksum"))?;
                let stored = u32::from_le_bytes([data[n], data[n + 1], data[n + 2], data[n + 3]]);
                let sum = fletcher32(&data[..n]);
                // HDF5 before 1.6.3 stored the sum with its bytes swapped pairwise; both are accepted.
                let b = sum.to_le_bytes();
                let old = u32::from_le_bytes([b[1], b[0], b[3], b[2]]);
                if stored != sum && stored != old {
                    return Err(err(
                        ErrorKind::Checksum,
                        alloc::format!(
                            "a chunk's Fletcher-32 checksum is {stored:#010x} but its bytes sum to {sum:#010x}; the file is corrupt"
                        ),
                    ));
                }
                data.truncate(n);
                data
            }
            id => {
                return Err(err(
                    ErrorKind::Unsupported,
                    alloc::format!("filter {} (id {id}) is not supported", filter_name(id)),
                ));
            }
        };
    }
    Ok(data)
}

/// Reads a chunked (or never-written) dataset into its C-order stored bytes.
pub(super) fn read<S: ReadAt + ?Sized>(ctx: &Ctx<'_, S>, c: &Chunked) -> Result<Vec<u8>, FormatError> {
    let limit = expand_limit(ctx.size());
    let numel = product(&c.shape).ok_or_else(|| err(ErrorKind::Overflow, "the element count overflows"))?;
    let total = numel
        .checked_mul(c.elem)
        .ok_or_else(|| err(ErrorKind::Overflow, "the size overflows"))?;
    let chunk_elems = product(&c.chunk).ok_or_else(|| err(ErrorKind::Overflow, "the chunk size overflows"))?;
    let chunk_bytes = chunk_elems
        .checked_mul(c.elem)
        .ok_or_else(|| err(ErrorKind::Overflow, "the chunk size overflows"))?;
    for (what, n) in [("the dataset", total), ("one chunk", chunk_bytes)] {
        if n > limit {
            return Err(err(
                ErrorKind::Limit,
                alloc::format!(
                    "{what} would expand to {n} bytes, over the {limit}-byte limit for this {}-byte file",
                    ctx.size()
                ),
            ));
        }
    }
    let total = usize::try_from(total).map_err(|_| {
        err(
            ErrorKind::Limit,
            alloc::format!("the dataset's {total} bytes do not fit in memory here"),
        )
    })?;
    let mut out = Vec::with_capacity(total);
    if c.fill.len() as u64 == c.elem && c.fill.iter().any(|&b| b != 0) {
        for _ in 0..numel {
            out.extend_from_slice(&c.fill);
        }
    } else {
        out.resize(total, 0);
    }
    if numel == 0 {
        return Ok(out);
    }
    let rank = c.shape.len();
    let cur_grid = grid(&c.shape, &c.chunk);
    let mut seen = BTreeSet::new();
    for r in list(ctx, c, chunk_bytes)? {
        if r.scaled.len() != rank {
            return Err(err(
                ErrorKind::Syntax,
                "a chunk index entry has the wrong number of dimensions",
            ));
        }
        if r.scaled.iter().zip(&cur_grid).any(|(s, g)| s >= g) {
            continue; // Beyond the current extent (a dataset that shrank): not part of the data.
        }
        if !seen.insert(r.scaled.clone()) {
            return Err(err(
                ErrorKind::Duplicate,
                alloc::format!("chunk {:?} is listed twice in the chunk index", r.scaled),
            ));
        }
        if r.size > limit {
            return Err(err(
                ErrorKind::Limit,
                alloc::format!("a stored chunk claims {} bytes", r.size),
            ));
        }
        let raw = ctx.read(r.addr, r.size)?.into_owned();
        let start: Vec<u64> = r.scaled.iter().zip(&c.chunk).map(|(s, d)| s * d).collect();
        let partial = start.iter().zip(&c.chunk).zip(&c.shape).any(|((o, d), n)| o + d > *n);
        let data = if c.filters.is_empty() || (partial && c.edge_unfiltered) {
            raw
        } else {
            unfilter(raw, &c.filters, r.mask, chunk_bytes.saturating_add(128))?
        };
        if data.len() as u64 != chunk_bytes {
            return Err(err(
                ErrorKind::SizeMismatch,
                alloc::format!(
                    "chunk {:?} holds {} bytes once unfiltered, not {chunk_bytes}",
                    r.scaled,
                    data.len()
                ),
            )
            .at(ctx.abs(r.addr).unwrap_or(r.addr)));
        }
        copy_chunk(&mut out, &data, &start, &c.chunk, &c.shape, c.elem as usize);
    }
    Ok(out)
}

/// Copies the part of a chunk (C order, `chunk` dims, starting at element `start`) that lies
/// inside `shape` into `out` (C order of `shape`).
fn copy_chunk(out: &mut [u8], data: &[u8], start: &[u64], chunk: &[u64], shape: &[u64], elem: usize) {
    let rank = shape.len();
    let last = rank - 1;
    let row = (chunk[last].min(shape[last] - start[last]) as usize) * elem;
    let mut idx = alloc::vec![0u64; rank];
    loop {
        // Offsets of this row in the chunk and in the output.
        let (mut src, mut dst) = (0u64, 0u64);
        for d in 0..rank {
            src = src * chunk[d] + idx[d];
            dst = dst * shape[d] + start[d] + idx[d];
        }
        let (src, dst) = (src as usize * elem, dst as usize * elem);
        out[dst..dst + row].copy_from_slice(&data[src..src + row]);
        // Next row: odometer over every dimension but the last, clipped to the shape.
        let mut d = last;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < chunk[d] && start[d] + idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}
