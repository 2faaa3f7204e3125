//! The indexes and heaps groups and attributes live in: local heaps and version-1 B-trees with
//! symbol table nodes (old-style groups), version-2 B-trees and fractal heaps (dense link and
//! attribute storage, v2 B-tree chunk indexes), and global heap collections (variable-length
//! strings). Every node is visited at most once and every size is checked against the file.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec::Vec;

use super::super::{ErrorKind, FormatError, MAX_DEPTH, MAX_HEADER};
use super::io::{Ctx, Cur, enc_size, err, log2};
use crate::source::ReadAt;

fn limited(len: u64, what: &str, at: u64) -> Result<(), FormatError> {
    if len > MAX_HEADER {
        return Err(err(
            ErrorKind::HeaderTooLarge,
            alloc::format!("a {what} claims {len} bytes (the limit is {MAX_HEADER})"),
        )
        .at(at));
    }
    Ok(())
}

/// The data segment of the local heap at `addr` (names of an old-style group).
pub(super) fn local_heap<S: ReadAt + ?Sized>(ctx: &Ctx<'_, S>, addr: u64) -> Result<Vec<u8>, FormatError> {
    let mut c = ctx.cur_upto(addr, 8 + 2 * ctx.sl as u64 + ctx.so as u64)?;
    let at = c.offset();
    c.sig(b"HEAP", "local heap")?;
    let version = c.u8()?;
    if version != 0 {
        return Err(err(
            ErrorKind::UnsupportedVersion,
            alloc::format!("local heap version {version}"),
        )
        .at(at));
    }
    c.skip(3)?;
    let size = c.uv(ctx.sl as usize)?;
    c.skip(ctx.sl as usize)?;
    let data = c.uv(ctx.so as usize)?;
    limited(size, "local heap", at)?;
    Ok(ctx.read(data, size)?.into_owned())
}

/// The NUL-terminated string at `offset` of a local heap.
pub(super) fn heap_str(heap: &[u8], offset: u64, at: u64) -> Result<Vec<u8>, FormatError> {
    let rest = usize::try_from(offset)
        .ok()
        .and_then(|o| heap.get(o..))
        .ok_or_else(|| {
            err(
                ErrorKind::OutOfBounds,
                alloc::format!("a name offset {offset} is past the local heap's {} bytes", heap.len()),
            )
            .at(at)
        })?;
    let n = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| err(ErrorKind::Syntax, "a name in the local heap has no terminating NUL").at(at))?;
    Ok(rest[..n].to_vec())
}

/// One node of a version-1 B-tree: its type, level, and `(key before child, child)` pairs (the
/// last key is left out).
struct V1Node {
    level: u8,
    entries: Vec<(Vec<u8>, u64)>,
}

fn v1_node<S: ReadAt + ?Sized>(ctx: &Ctx<'_, S>, addr: u64, node_type: u8, key: usize) -> Result<V1Node, FormatError> {
    let so = ctx.so as usize;
    let mut c = ctx.cur_upto(addr, 8 + 2 * so as u64)?;
    let at = c.offset();
    c.sig(b"TREE", "B-tree node")?;
    let t = c.u8()?;
    if t != node_type {
        return Err(err(
            ErrorKind::Syntax,
            alloc::format!("B-tree node type {t}, expected {node_type}"),
        )
        .at(at));
    }
    let level = c.u8()?;
    let n = c.u16()? as u64;
    let len = (8 + 2 * so as u64) + n * (key + so) as u64 + key as u64;
    let mut c = ctx.cur(addr, len)?;
    c.skip(8 + 2 * so)?;
    let mut entries = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let k = c.bytes(key)?.to_vec();
        let child = c.uv(so)?;
        entries.push((k, child));
    }
    Ok(V1Node { level, entries })
}

/// What [`v1_walk`] calls for each leaf entry: `(key, child address)`.
type LeafFn<'a> = dyn FnMut(&[u8], u64) -> Result<(), FormatError> + 'a;

/// Walks a version-1 B-tree from `addr`, calling `leaf(key, child)` for every leaf entry. A node
/// seen twice (a cycle or a shared subtree) and a level that does not go down are refused.
fn v1_walk<S: ReadAt + ?Sized>(
    ctx: &Ctx<'_, S>,
    addr: u64,
    node_type: u8,
    key: usize,
    leaf: &mut LeafFn<'_>,
) -> Result<(), FormatError> {
    let mut seen = BTreeSet::new();
    let mut stack: Vec<(u64, Option<u8>)> = alloc::vec![(addr, None)];
    while let Some((a, want_level)) = stack.pop() {
        if !seen.insert(a) {
            return Err(err(
                ErrorKind::Syntax,
                "a B-tree node is reached twice (a cycle); the file is corrupt or hostile",
            )
            .at(ctx.abs(a).unwrap_or(a)));
        }
        let node = v1_node(ctx, a, node_type, key)?;
        if want_level.is_some_and(|l| node.level != l) {
            return Err(err(
                ErrorKind::Syntax,
                "a B-tree child's level is not its parent's minus one",
            )
            .at(ctx.abs(a)?));
        }
        if node.level as usize > MAX_DEPTH {
            return Err(err(
                ErrorKind::Limit,
                alloc::format!("a B-tree is {} levels deep", node.level),
            )
            .at(ctx.abs(a)?));
        }
        if node.level == 0 {
            for (k, child) in &node.entries {
                leaf(k, *child)?;
            }
        } else {
            for (_, child) in node.entries.iter().rev() {
                stack.push((*child, Some(node.level - 1)));
            }
        }
    }
    Ok(())
}

/// The `(name, object header address)` entries of an old-style group (symbol table message).
pub(super) fn symbol_table<S: ReadAt + ?Sized>(
    ctx: &Ctx<'_, S>,
    btree: u64,
    heap_addr: u64,
) -> Result<Vec<(Vec<u8>, u64)>, FormatError> {
    let heap = local_heap(ctx, heap_addr)?;
    let so = ctx.so as usize;
    let mut out = Vec::new();
    v1_walk(ctx, btree, 0, ctx.sl as usize, &mut |_, snod| {
        let mut c = ctx.cur_upto(snod, 8)?;
        let at = c.offset();
        c.sig(b"SNOD", "symbol table node")?;
        let version = c.u8()?;
        if version != 1 {
            return Err(err(
                ErrorKind::UnsupportedVersion,
                alloc::format!("symbol table node version {version}"),
            )
            .at(at));
        }
        c.skip(1)?;
        let n = c.u16()? as u64;
        let entry = (2 * so + 24) as u64;
        let mut c = ctx.cur(snod, 8 + n * entry)?;
        c.skip(8)?;
        for _ in 0..n {
            let name_off = c.uv(so)?;
            let obj = c.uv(so)?;
            c.skip(24)?;
            out.push((heap_str(&heap, name_off, at)?, obj));
        }
        Ok(())
    })?;
    Ok(out)
}

/// One chunk as an index lists it: its offset in chunks (scaled), address, stored size and
/// filter mask.
#[derive(Clone, Debug)]
pub(super) struct ChunkRef {
    pub scaled: Vec<u64>,
    pub addr: u64,
    pub size: u64,
    pub mask: u32,
}

/// The chunks of a version-1 B-tree chunk index (`chunk` are the chunk dimensions without the
/// element size).
pub(super) fn chunk_btree_v1<S: ReadAt + ?Sized>(
    ctx: &Ctx<'_, S>,
    addr: u64,
    chunk: &[u64],
    out: &mut Vec<ChunkRef>,
    max: u64,
) -> Result<(), FormatError> {
    let rank = chunk.len();
    let key = 8 + 8 * (rank + 1);
    v1_walk(ctx, addr, 1, key, &mut |k, child| {
        let mut c = Cur::of(k, 0);
        let size = c.u32()? as u64;
        let mask = c.u32()?;
        let mut scaled = Vec::with_capacity(rank);
        for d in chunk {
            let off = c.u64()?;
            if off % d != 0 {
                return Err(err(
                    ErrorKind::Syntax,
                    "a chunk's offset is not a multiple of the chunk size",
                )
                .at(ctx.abs(child).unwrap_or(child)));
            }
            scaled.push(off / d);
        }
        if out.len() as u64 >= max {
            return Err(err(
                ErrorKind::Limit,
                "a chunk index lists more chunks than the dataset has",
            ));
        }
        out.push(ChunkRef {
            scaled,
            addr: child,
            size,
            mask,
        });
        Ok(())
    })
}

/// The records of the version-2 B-tree at `addr`, which must be of type `want`.
pub(super) fn btree2_records<S: ReadAt + ?Sized>(
    ctx: &Ctx<'_, S>,
    addr: u64,
    want: u8,
) -> Result<Vec<Vec<u8>>, FormatError> {
    let so = ctx.so as usize;
    let mut c = ctx.cur(addr, 4 + 1 + 1 + 4 + 2 + 2 + 1 + 1 + so as u64 + 2 + ctx.sl as u64 + 4)?;
    let at = c.offset();
    c.sig(b"BTHD", "v2 B-tree header")?;
    let version = c.u8()?;
    if version != 0 {
        return Err(err(
            ErrorKind::UnsupportedVersion,
            alloc::format!("v2 B-tree version {version}"),
        )
        .at(at));
    }
    let t = c.u8()?;
    let node_size = c.u32()? as u64;
    let rsize = c.u16()? as u64;
    let depth = c.u16()? as usize;
    c.skip(2)?;
    let root = c.uv(so)?;
    let root_n = c.u16()? as u64;
    let _total = c.uv(ctx.sl as usize)?;
    c.checksum("v2 B-tree header")?;
    if t != want {
        return Err(err(
            ErrorKind::Syntax,
            alloc::format!("v2 B-tree of type {t}, expected type {want}"),
        )
        .at(at));
    }
    if rsize == 0 || node_size < 10 + rsize || node_size > MAX_HEADER || depth > MAX_DEPTH {
        return Err(err(
            ErrorKind::Syntax,
            alloc::format!("v2 B-tree with node size {node_size}, record size {rsize}, depth {depth}"),
        )
        .at(at));
    }
    // Per level: most records in a node, and the encoded widths of child record counts
    // (H5B2__hdr_init).
    let leaf_max = (node_size - 10) / rsize;
    let nrec_size = enc_size(leaf_max);
    let mut info: Vec<(u64, u64, usize)> = alloc::vec![(leaf_max, leaf_max, 0)];
    for d in 1..=depth {
        let ptr = so as u64 + nrec_size as u64 + if d > 1 { info[d - 1].2 as u64 } else { 0 };
        let max = node_size.saturating_sub(10 + ptr) / (rsize + ptr);
        if max == 0 {
            return Err(err(ErrorKind::Syntax, "a v2 B-tree's nodes are too small for its depth").at(at));
        }
        let cum = (max + 1).saturating_mul(info[d - 1].1).saturating_add(max);
        info.push((max, cum, enc_size(cum)));
    }
    let mut out = Vec::new();
    if ctx.undefined(root) || root_n == 0 {
        return Ok(out);
    }
    let mut seen = BTreeSet::new();
    let mut stack = alloc::vec![(root, depth, root_n)];
    while let Some((a, d, n)) = stack.pop() {
        if !seen.insert(a) {
            return Err(err(
                ErrorKind::Syntax,
                "a v2 B-tree node is reached twice (a cycle); the file is corrupt or hostile",
            )
            .at(ctx.abs(a).unwrap_or(a)));
        }
        if n > info[d].0 {
            return Err(err(
                ErrorKind::Syntax,
                alloc::format!("a v2 B-tree node claims {n} records, more than fit"),
            )
            .at(ctx.abs(a)?));
        }
        let mut c = ctx.cur(a, node_size)?;
        let nat = c.offset();
        c.sig(if d == 0 { b"BTLF" } else { b"BTIN" }, "v2 B-tree node")?;
        c.skip(2)?;
        for _ in 0..n {
            out.push(c.bytes(rsize as usize)?.to_vec());
        }
        if d > 0 {
            let mut kids = Vec::new();
            for _ in 0..=n {
                let child = c.uv(so)?;
                let cn = c.uv(nrec_size)?;
                if d > 1 {
                    c.skip(info[d - 1].2)?;
                }
                kids.push((child, d - 1, cn));
            }
            stack.extend(kids.into_iter().rev());
        }
        c.checksum("v2 B-tree node")?;
        let _ = nat;
    }
    Ok(out)
}

/// A fractal heap (dense link and attribute storage).
pub(super) struct FractalHeap {
    id_len: usize,
    checksummed: bool,
    width: u64,
    start: u64,
    max_direct: u64,
    root: u64,
    rows: u64,
    off_size: usize,
    len_size: usize,
}

/// Reads the fractal heap header at `addr`.
pub(super) fn fractal_heap<S: ReadAt + ?Sized>(ctx: &Ctx<'_, S>, addr: u64) -> Result<FractalHeap, FormatError> {
    let (so, sl) = (ctx.so as u64, ctx.sl as u64);
    let len = 4 + 1 + 2 + 2 + 1 + 4 + sl + so + sl + so + 8 * sl + 2 + 2 * sl + 2 + 2 + so + 2;
    let mut c = ctx.cur(addr, len + 4)?;
    let at = c.offset();
    c.sig(b"FRHP", "fractal heap header")?;
    let version = c.u8()?;
    if version != 0 {
        return Err(err(
            ErrorKind::UnsupportedVersion,
            alloc::format!("fractal heap version {version}"),
        )
        .at(at));
    }
    let id_len = c.u16()? as usize;
    let filter_len = c.u16()?;
    let flags = c.u8()?;
    let max_man = c.u32()? as u64;
    c.skip((sl + so + sl + so + 8 * sl) as usize)?;
    let width = c.u16()? as u64;
    let start = c.uv(sl as usize)?;
    let max_direct = c.uv(sl as usize)?;
    let max_bits = c.u16()? as u32;
    let _start_rows = c.u16()?;
    let root = c.uv(so as usize)?;
    let rows = c.u16()? as u64;
    if filter_len > 0 {
        return Err(err(
            ErrorKind::Unsupported,
            "a fractal heap with I/O filters (compressed link or attribute storage) is not supported",
        )
        .at(at));
    }
    c.checksum("fractal heap header")?;
    let pow2 = |x: u64| x != 0 && x.is_power_of_two();
    if !pow2(width) || !pow2(start) || !pow2(max_direct) || max_direct < start || !(1..=64).contains(&max_bits) {
        return Err(err(
            ErrorKind::Syntax,
            alloc::format!(
                "fractal heap with table width {width}, block sizes {start}..{max_direct}, {max_bits} offset bits"
            ),
        )
        .at(at));
    }
    let off_size = max_bits.div_ceil(8) as usize;
    let len_size = (log2(max_direct).div_ceil(8) as usize).min(enc_size(max_man));
    Ok(FractalHeap {
        id_len,
        checksummed: flags & 2 != 0,
        width,
        start,
        max_direct,
        root,
        rows,
        off_size,
        len_size,
    })
}

impl FractalHeap {
    fn row_size(&self, r: u64) -> Option<u64> {
        if r == 0 {
            Some(self.start)
        } else {
            let shift = r - 1;
            (shift < self.start.leading_zeros() as u64).then(|| self.start << shift)
        }
    }

    /// The object with heap ID `id`.
    pub fn get<S: ReadAt + ?Sized>(&self, ctx: &Ctx<'_, S>, id: &[u8]) -> Result<Vec<u8>, FormatError> {
        let mut c = Cur::of(id, 0);
        let b0 = c.u8()?;
        if b0 >> 6 != 0 {
            return Err(err(
                ErrorKind::UnsupportedVersion,
                alloc::format!("fractal heap ID version {}", b0 >> 6),
            ));
        }
        match (b0 >> 4) & 3 {
            0 => {
                let off = c.uv(self.off_size)?;
                let len = c.uv(self.len_size)?;
                let (block, block_off, block_size) = self.locate(ctx, off)?;
                let inside = off - block_off;
                if inside.checked_add(len).is_none_or(|e| e > block_size) {
                    return Err(err(ErrorKind::OutOfBounds, "a fractal heap object runs past its block"));
                }
                let _ = self.checksummed;
                Ok(ctx
                    .read(
                        block
                            .checked_add(inside)
                            .ok_or_else(|| err(ErrorKind::Overflow, "heap address"))?,
                        len,
                    )?
                    .into_owned())
            }
            2 => {
                let (len, skip) = if self.id_len <= 18 {
                    ((b0 & 0x0f) as usize + 1, 1)
                } else {
                    ((((b0 & 0x0f) as usize) << 8 | c.u8()? as usize) + 1, 2)
                };
                id.get(skip..skip + len)
                    .map(|s| s.to_vec())
                    .ok_or_else(|| err(ErrorKind::Syntax, "a tiny fractal heap object is longer than its ID"))
            }
            1 => Err(err(
                ErrorKind::Unsupported,
                "a 'huge' fractal heap object (a link or attribute stored outside the heap's blocks) is not supported",
            )),
            t => Err(err(ErrorKind::Syntax, alloc::format!("fractal heap ID type {t}"))),
        }
    }

    /// The direct block holding heap offset `off`: its address, heap offset and size.
    fn locate<S: ReadAt + ?Sized>(&self, ctx: &Ctx<'_, S>, off: u64) -> Result<(u64, u64, u64), FormatError> {
        let missing = || {
            err(
                ErrorKind::OutOfBounds,
                alloc::format!("fractal heap offset {off} is in no allocated block"),
            )
        };
        let (mut iblock, mut nrows, mut base) = if self.rows == 0 {
            if off >= self.start || ctx.undefined(self.root) {
                return Err(missing());
            }
            return self.direct(ctx, self.root, 0, self.start);
        } else {
            (self.root, self.rows, 0u64)
        };
        let max_direct_rows = (log2(self.max_direct) - log2(self.start) + 2) as u64;
        let first_bits = log2(self.start) + log2(self.width);
        let so = ctx.so as u64;
        for _ in 0..MAX_DEPTH {
            if nrows > 64 {
                return Err(err(
                    ErrorKind::Syntax,
                    alloc::format!("a fractal heap indirect block has {nrows} rows"),
                ));
            }
            let entries = nrows * self.width;
            let prefix = 4 + 1 + so + self.off_size as u64;
            let mut c = ctx.cur(iblock, prefix + entries * so + 4)?;
            c.sig(b"FHIB", "fractal heap indirect block")?;
            c.skip(1 + so as usize)?;
            let block_off = c.uv(self.off_size)?;
            if block_off != base {
                return Err(err(
                    ErrorKind::Syntax,
                    "a fractal heap indirect block is not where its parent says",
                )
                .at(c.offset()));
            }
            let mut pos = base;
            let mut found = None;
            'rows: for r in 0..nrows {
                let size = self.row_size(r).ok_or_else(missing)?;
                for _ in 0..self.width {
                    let a = c.uv(so as usize)?;
                    if off >= pos && off - pos < size {
                        found = Some((a, r, pos, size));
                        break 'rows;
                    }
                    pos = pos.checked_add(size).ok_or_else(missing)?;
                }
            }
            let (a, r, pos, size) = found.ok_or_else(missing)?;
            if ctx.undefined(a) {
                return Err(missing());
            }
            if r < max_direct_rows {
                return self.direct(ctx, a, pos, size);
            }
            iblock = a;
            nrows = (log2(size) + 1).checked_sub(first_bits).ok_or_else(|| {
                err(
                    ErrorKind::Syntax,
                    "a fractal heap indirect block is smaller than one row of direct blocks",
                )
            })? as u64;
            base = pos;
        }
        Err(err(ErrorKind::Limit, "fractal heap indirect blocks nest too deep"))
    }

    fn direct<S: ReadAt + ?Sized>(
        &self,
        ctx: &Ctx<'_, S>,
        addr: u64,
        base: u64,
        size: u64,
    ) -> Result<(u64, u64, u64), FormatError> {
        let mut c = ctx.cur(addr, 4 + 1 + ctx.so as u64 + self.off_size as u64)?;
        c.sig(b"FHDB", "fractal heap direct block")?;
        c.skip(1 + ctx.so as usize)?;
        if c.uv(self.off_size)? != base {
            return Err(err(
                ErrorKind::Syntax,
                "a fractal heap direct block is not where its parent says",
            )
            .at(c.offset()));
        }
        Ok((addr, base, size))
    }
}

/// Reads objects of global heap collections (variable-length strings), caching collections.
#[derive(Default)]
pub(super) struct GlobalHeap {
    cache: BTreeMap<u64, Vec<u8>>,
}

impl GlobalHeap {
    /// Object `index` of the collection at `addr`.
    pub fn get<S: ReadAt + ?Sized>(&mut self, ctx: &Ctx<'_, S>, addr: u64, index: u32) -> Result<Vec<u8>, FormatError> {
        let sl = ctx.sl as usize;
        if !self.cache.contains_key(&addr) {
            if self.cache.len() > 1024 {
                self.cache.clear();
            }
            let mut c = ctx.cur(addr, 8 + sl as u64)?;
            let at = c.offset();
            c.sig(b"GCOL", "global heap collection")?;
            c.skip(4)?;
            let size = c.uv(sl)?;
            limited(size, "global heap collection", at)?;
            self.cache.insert(addr, ctx.read(addr, size)?.into_owned());
        }
        let data = &self.cache[&addr];
        let mut c = Cur::of(data, 0);
        c.skip(8 + sl)?;
        while c.remaining() >= 8 + sl {
            let i = c.u16()?;
            c.skip(6)?;
            let n = c.uv(sl)? as usize;
            if i == 0 {
                break;
            }
            let obj = c.bytes(n)?;
            if i as u32 == index {
                return Ok(obj.to_vec());
            }
            c.skip(n.div_ceil(8) * 8 - n).ok();
        }
        Err(err(
            ErrorKind::OutOfBounds,
            alloc::format!("global heap object {index} is not in its collection"),
        ))
    }
}
