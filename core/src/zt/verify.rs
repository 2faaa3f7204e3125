//! Integrity and content checks (spec §4 digests, §6.2 logical-type content rules, §7 layout data
//! rules, §12 shard identities).
//!
//! All functions work on bytes the caller has already read and decoded; [`super::reader::Reader`]
//! wires them to parts and objects.

use alloc::string::String;
use alloc::vec::Vec;

use sha2::Digest as _;

use super::format::{LogicalType, parse_digest};
use super::layout::DENSE;
use super::manifest::Part;
use super::rule::Rule;
use super::{Error, Result};
use crate::source::ReadAt;

/// Digest algorithms this crate computes.
pub const DIGEST_ALGORITHMS: [&str; 2] = ["xxh3", "sha256"];

fn hex(bytes: &[u8]) -> String {
    const H: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(H[(b >> 4) as usize] as char);
        s.push(H[(b & 15) as usize] as char);
    }
    s
}

/// A streaming digest of one of the [`DIGEST_ALGORITHMS`].
pub enum Hasher {
    /// XXH3-64, seed 0, printed as 16 lowercase hex digits.
    Xxh3(alloc::boxed::Box<crate::hash::Xxh3>),
    /// SHA-256, printed as 64 lowercase hex digits.
    Sha256(sha2::Sha256),
}

impl Hasher {
    /// A hasher for `algo`, or `None` when this crate cannot compute it.
    pub fn new(algo: &str) -> Option<Hasher> {
        match algo {
            "xxh3" => Some(Hasher::Xxh3(alloc::boxed::Box::default())),
            "sha256" => Some(Hasher::Sha256(sha2::Sha256::new())),
            _ => None,
        }
    }

    /// Feeds bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Xxh3(h) => h.update(bytes),
            Hasher::Sha256(h) => h.update(bytes),
        }
    }

    /// The digest as `"<algo>:<lowercase hex>"`.
    pub fn finish(self) -> String {
        match self {
            Hasher::Xxh3(h) => alloc::format!("xxh3:{:016x}", h.digest()),
            Hasher::Sha256(h) => alloc::format!("sha256:{}", hex(&h.finalize())),
        }
    }
}

/// The digest of `bytes` as `"<algo>:<hex>"`, or `None` for an algorithm this crate cannot compute.
pub fn compute_digest(algo: &str, bytes: &[u8]) -> Option<String> {
    let mut h = Hasher::new(algo)?;
    h.update(bytes);
    Some(h.finish())
}

/// Checks `bytes` against `digest` (`"<algo>:<hex>"`): `Digest` when malformed or different,
/// `Unsupported` when the algorithm is unknown.
pub fn check_digest(digest: &str, bytes: &[u8]) -> Result<()> {
    let mut h = digest_hasher(digest)?;
    h.update(bytes);
    check_digest_of(digest, h.finish())
}

/// A [`Hasher`] for the algorithm of `digest` (`"<algo>:<hex>"`), to check it over bytes fed in
/// pieces ([`check_digest_of`]): `Digest` when malformed, `Unsupported` for an unknown algorithm.
pub fn digest_hasher(digest: &str) -> Result<Hasher> {
    let (algo, _) = parse_digest(digest).map_err(|e| Error::new(Rule::Digest, e.message))?;
    Hasher::new(algo).ok_or_else(|| {
        Error::new(
            Rule::Unsupported,
            alloc::format!("digest algorithm {algo:?} is not supported (xxh3, sha256)"),
        )
    })
}

/// Compares `got` ([`Hasher::finish`] of a [`digest_hasher`]) with `digest`: `Digest` when different.
pub fn check_digest_of(digest: &str, got: String) -> Result<()> {
    if got == digest {
        Ok(())
    } else {
        Err(Error::new(
            Rule::Digest,
            alloc::format!("the bytes hash to {got}, the manifest says {digest}"),
        ))
    }
}

/// Whole-file digest of a source, read in 1 MiB chunks (for shard identities); `Unsupported` for
/// an unknown algorithm.
pub fn digest_source<S: ReadAt + ?Sized>(algo: &str, source: &S) -> Result<String> {
    let mut h = Hasher::new(algo).ok_or_else(|| {
        Error::new(
            Rule::Unsupported,
            alloc::format!("digest algorithm {algo:?} is not supported (xxh3, sha256)"),
        )
    })?;
    let size = source.size();
    if let Some(all) = source.slice(0, size) {
        h.update(all);
        return Ok(h.finish());
    }
    let mut buf = alloc::vec![0u8; size.min(1 << 20) as usize];
    let mut off = 0u64;
    while off < size {
        let n = (size - off).min(buf.len() as u64) as usize;
        source.read_at(off, &mut buf[..n]).map_err(Error::from_source)?;
        h.update(&buf[..n]);
        off += n as u64;
    }
    Ok(h.finish())
}

/// Whether [`check_content`] has rules for `part` (a `bool` or `f4_e2m1` logical type), so that
/// its decoded bytes must be looked at, not only hashed.
pub fn has_content_rules(part: &Part) -> bool {
    matches!(part.logical_type(), Some(LogicalType::Bool | LogicalType::F4E2M1))
}

/// Logical-type content rules (§6.2) over a part's decoded bytes: `bool` bytes must be 0 or 1;
/// an `f4_e2m1` part of a `dense` object with an odd element count must have a zero final high
/// nibble. Violations are `LayoutData`. `elements` is the object's element count.
pub fn check_content(layout: &str, elements: u64, part: &Part, bytes: &[u8]) -> Result<()> {
    match part.logical_type() {
        Some(LogicalType::Bool) => {
            if let Some(i) = bytes.iter().position(|&b| b > 1) {
                return Err(Error::new(
                    Rule::LayoutData,
                    alloc::format!("bool element {i} is byte {:#04x}, not 0 or 1", bytes[i]),
                ));
            }
        }
        Some(LogicalType::F4E2M1) if layout == DENSE && elements % 2 == 1 => {
            if let Some(&last) = bytes.last()
                && last >> 4 != 0
            {
                return Err(Error::new(
                    Rule::LayoutData,
                    alloc::format!(
                        "f4_e2m1 with {elements} elements: the unused high nibble of the last byte is {:#x}, not 0",
                        last >> 4
                    ),
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

/// Reads little-endian unsigned indices of width 4 or 8.
pub fn read_indices(bytes: &[u8], width: u64) -> Vec<u64> {
    if width == 4 {
        bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as u64)
            .collect()
    } else {
        bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect()
    }
}

/// A data-rule violation in one part (the object is named by the caller).
fn data_in(part: &str, msg: String) -> Error {
    let mut e = Error::new(Rule::LayoutData, msg);
    e.part = Some(part.into());
    e
}

/// CSR data rules (§7.2), in the spec's order: `indptr[0] == 0`; `indptr` non-decreasing;
/// `indptr[R] == nnz`; then per row: indices strictly increasing, every index `< C`.
pub fn check_csr_data(rows: u64, cols: u64, indptr: &[u64], indices: &[u64]) -> Result<()> {
    let nnz = indices.len() as u64;
    if indptr.len() as u64 != rows.saturating_add(1) {
        return Err(data_in(
            "indptr",
            alloc::format!(
                "indptr has {} entries, not rows + 1 = {}",
                indptr.len(),
                rows.saturating_add(1)
            ),
        ));
    }
    if indptr[0] != 0 {
        return Err(data_in("indptr", alloc::format!("indptr[0] is {}, not 0", indptr[0])));
    }
    if let Some(i) = indptr.windows(2).position(|w| w[1] < w[0]) {
        return Err(data_in(
            "indptr",
            alloc::format!("indptr decreases at row {i}: {} then {}", indptr[i], indptr[i + 1]),
        ));
    }
    let last = indptr[indptr.len() - 1];
    if last != nnz {
        return Err(data_in(
            "indptr",
            alloc::format!("indptr[{rows}] is {last}, but there are {nnz} indices"),
        ));
    }
    for r in 0..indptr.len() - 1 {
        let row = &indices[indptr[r] as usize..indptr[r + 1] as usize];
        for (k, &c) in row.iter().enumerate() {
            if k > 0 && c <= row[k - 1] {
                return Err(data_in(
                    "indices",
                    alloc::format!(
                        "row {r}: column indices are not strictly increasing ({} then {c})",
                        row[k - 1]
                    ),
                ));
            }
            if c >= cols {
                return Err(data_in(
                    "indices",
                    alloc::format!("row {r}: column index {c} is not below the {cols} columns"),
                ));
            }
        }
    }
    Ok(())
}

/// COO data rules (§7.3): every coordinate in dimension `d` is `< shape[d]`, and no two elements
/// share a coordinate tuple. `coords` is structure-of-arrays: `coords[d * nnz + i]`.
pub fn check_coo_data(shape: &[u64], coords: &[u64]) -> Result<()> {
    let ndim = shape.len();
    if ndim == 0 || !coords.len().is_multiple_of(ndim) {
        return Err(data_in(
            "coords",
            alloc::format!("{} coordinates do not split into {ndim} dimensions", coords.len()),
        ));
    }
    let nnz = coords.len() / ndim;
    for (d, &extent) in shape.iter().enumerate() {
        if let Some(i) = coords[d * nnz..(d + 1) * nnz].iter().position(|&c| c >= extent) {
            return Err(data_in(
                "coords",
                alloc::format!(
                    "element {i}: coordinate {} in dimension {d} is not below {extent}",
                    coords[d * nnz + i]
                ),
            ));
        }
    }
    let mut order: Vec<usize> = (0..nnz).collect();
    let key = |i: usize| (0..ndim).map(move |d| coords[d * nnz + i]);
    order.sort_unstable_by(|&a, &b| key(a).cmp(key(b)));
    if let Some(w) = order.windows(2).find(|w| key(w[0]).eq(key(w[1]))) {
        return Err(data_in(
            "coords",
            alloc::format!(
                "elements {} and {} have the same coordinates",
                w[0].min(w[1]),
                w[0].max(w[1])
            ),
        ));
    }
    Ok(())
}
