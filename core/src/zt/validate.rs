//! Image validation in exactly the order of spec §13, so every rejection carries the rule the
//! reference (and the conformance corpus) expects.
//!
//! [`validate`] reads only the header magic, the footer and the manifest blob through
//! [`ReadAt`]: one range read for files up to 64 KiB, two for larger files whose manifest sits in
//! the last 64 KiB (the usual place), three otherwise; none at all when the source hands out
//! borrowed slices. No size the file merely declares is allocated before it is bounds-checked.

use alloc::borrow::Cow;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use super::cbor::{self, Mode};
use super::format::{
    FOOTER_LEN, Footer, MAGIC, MAX_MANIFEST_LEN, MAX_RANK, MIN_FILE_SIZE, VERSION, offset_aligned, xxh3_64,
};
use super::layout::{Profiles, check_layout};
use super::manifest::{Blob, Manifest};
use super::rule::Rule;
use super::{Error, Result};
use crate::source::ReadAt;

/// Bytes read from the end of the file in the first range read.
pub const TAIL_WINDOW: u64 = 64 * 1024;

/// Borrows `[offset, offset + len)` when the source is in memory, else reads it (after a bounds
/// check, so nothing is allocated for a range that does not exist).
pub(crate) fn fetch<S: ReadAt + ?Sized>(source: &S, offset: u64, len: u64) -> Result<Cow<'_, [u8]>> {
    if let Some(s) = source.slice(offset, len) {
        return Ok(Cow::Borrowed(s));
    }
    source.read_vec(offset, len).map(Cow::Owned).map_err(Error::from_source)
}

/// What an image is: a model (with its manifest) or a bare data shard.
#[derive(Clone, Debug, PartialEq)]
pub enum Image {
    /// A file with a manifest.
    Model(Manifest),
    /// A data shard: magic, blobs and a footer with a zero manifest.
    DataShard,
}

impl Image {
    /// The manifest, or `None` for a data shard.
    pub fn manifest(&self) -> Option<&Manifest> {
        match self {
            Image::Model(m) => Some(m),
            Image::DataShard => None,
        }
    }

    /// The manifest, or `None` for a data shard.
    pub fn into_manifest(self) -> Option<Manifest> {
        match self {
            Image::Model(m) => Some(m),
            Image::DataShard => None,
        }
    }
}

/// Validates a whole `.zt` v2 image (spec §13, all 14 steps) **without resolving shards**:
/// references into shards are checked against the shard table alone. This is the corpus's
/// `open` operation.
pub fn validate<S: ReadAt + ?Sized>(source: &S) -> Result<Image> {
    let size = source.size();
    // 1. size
    if size < MIN_FILE_SIZE {
        return Err(Error::new(
            Rule::FileTooSmall,
            alloc::format!("the file is {size} bytes; a .zt v2 file has at least 48"),
        ));
    }
    let tail_start = size.saturating_sub(TAIL_WINDOW);
    let tail = fetch(source, tail_start, size - tail_start)?;
    let head: Cow<'_, [u8]> = if tail_start == 0 {
        Cow::Borrowed(&tail[..8])
    } else {
        fetch(source, 0, 8)?
    };
    // 2. header magic
    if head[..] != MAGIC {
        return Err(Error::new(
            Rule::HeaderMagic,
            "the first 8 bytes are not the .zt v2 magic \\x89ZT2\\r\\n\\x1a\\n",
        )
        .at(0));
    }
    // 3. footer magic
    let fb = &tail[tail.len() - FOOTER_LEN as usize..];
    let mut fa = [0u8; 40];
    fa.copy_from_slice(fb);
    let footer = Footer::parse(&fa).map_err(|e| e.at(size - 8))?;
    // 4. version
    if footer.version != VERSION {
        return Err(Error::new(
            Rule::Version,
            alloc::format!("footer version {} is not implemented (only 2)", footer.version),
        )
        .at(size - 16));
    }
    let footer_at = size - FOOTER_LEN;
    // 5. data shard
    if footer.manifest_length == 0 {
        if footer.manifest_offset != 0 || footer.manifest_hash != 0 {
            return Err(Error::new(
                Rule::ManifestBounds,
                alloc::format!(
                    "manifest length is 0 (a data shard) but the footer's offset is {} and hash {:#x}; both must be 0",
                    footer.manifest_offset,
                    footer.manifest_hash
                ),
            )
            .at(footer_at));
        }
        return Ok(Image::DataShard);
    }
    let (mo, ml) = (footer.manifest_offset, footer.manifest_length);
    // 6. manifest size limit
    if ml > MAX_MANIFEST_LEN {
        return Err(Error::new(
            Rule::ManifestTooLarge,
            alloc::format!("manifest length {ml} exceeds 1 GiB"),
        )
        .at(footer_at + 8));
    }
    // 7. manifest alignment
    if !offset_aligned(mo) {
        return Err(Error::new(
            Rule::BlobAlignment,
            alloc::format!("manifest offset {mo} is not a multiple of 4096 at or above 4096"),
        )
        .at(footer_at));
    }
    // 8. manifest bounds
    match mo.checked_add(ml) {
        Some(end) if end <= footer_at => {}
        _ => {
            return Err(Error::new(
                Rule::ManifestBounds,
                alloc::format!("manifest [{mo}, +{ml}) runs past the data region, which ends at {footer_at}"),
            )
            .at(footer_at));
        }
    }
    let manifest_bytes: Cow<'_, [u8]> = if mo >= tail_start {
        let s = (mo - tail_start) as usize;
        Cow::Borrowed(&tail[s..s + ml as usize])
    } else {
        fetch(source, mo, ml)?
    };
    // 9. manifest hash
    let h = xxh3_64(&manifest_bytes);
    if h != footer.manifest_hash {
        return Err(Error::new(
            Rule::ManifestHash,
            alloc::format!(
                "manifest hashes to {h:016x}, the footer says {:016x}",
                footer.manifest_hash
            ),
        )
        .at(mo));
    }
    // 10. CBOR
    let root = cbor::decode(&manifest_bytes, Mode::Deterministic).map_err(|e| Error::from_cbor(e, mo))?;
    // 11, 12. schema walk
    let manifest = Manifest::from_value(&root, Blob { offset: mo, length: ml }, size)?;
    check_blobs(&manifest)?;
    Ok(Image::Model(manifest))
}

/// Steps 13 and 14 over an already parsed manifest: shapes, blob alignment, shard references,
/// bounds, logical-type pins, layout profiles (reference coverage), then identical-or-disjoint.
pub fn check_blobs(m: &Manifest) -> Result<()> {
    // 13. objects in bytewise name order, parts likewise
    for (name, obj) in &m.objects {
        if obj.shape.len() > MAX_RANK {
            return Err(Error::new(Rule::Shape, alloc::format!("rank {} exceeds 64", obj.shape.len())).object(name));
        }
        if obj.shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).is_none() {
            return Err(Error::new(
                Rule::Shape,
                alloc::format!("the element count of shape {:?} overflows u64", obj.shape),
            )
            .object(name));
        }
        for (pname, p) in &obj.parts {
            let b = p.blob;
            if !offset_aligned(b.offset) {
                return Err(Error::new(
                    Rule::BlobAlignment,
                    alloc::format!("blob offset {} is not a multiple of 4096 at or above 4096", b.offset),
                )
                .part(name, pname)
                .at(b.offset));
            }
            let target_size = match &p.shard {
                None => m.file_size,
                Some(s) => match m.shards.as_ref().and_then(|t| t.get(s)) {
                    Some(e) => e.size,
                    None => {
                        let why = if m.shards.is_none() {
                            "there is no shard table"
                        } else {
                            "it is not in the shard table"
                        };
                        return Err(
                            Error::new(Rule::ShardRef, alloc::format!("part names shard {s:?}, but {why}"))
                                .part(name, pname),
                        );
                    }
                },
            };
            let data_end = target_size.saturating_sub(FOOTER_LEN);
            if !matches!(b.offset.checked_add(b.length), Some(e) if e <= data_end) {
                let mut e = Error::new(
                    Rule::BlobBounds,
                    alloc::format!(
                        "blob [{}, +{}) runs past the data region, which ends at {data_end}",
                        b.offset,
                        b.length
                    ),
                )
                .part(name, pname)
                .at(b.offset);
                e.shard = p.shard.clone();
                return Err(e);
            }
            if let Some(t) = p.logical_type()
                && t.dtype() != p.dtype
            {
                return Err(Error::new(
                    Rule::Schema,
                    alloc::format!(
                        "logical type {} must be stored as {}, not {}",
                        t.name(),
                        t.dtype(),
                        p.dtype
                    ),
                )
                .part(name, pname));
            }
        }
        check_layout(name, obj, Profiles::Reference)?;
    }
    // 14. identical-or-disjoint, per file
    let mut files: BTreeMap<Option<&str>, Vec<(Blob, &str, &str)>> = BTreeMap::new();
    files.entry(None).or_default().push((m.manifest_blob, "", ""));
    for (name, obj) in &m.objects {
        for (pname, p) in &obj.parts {
            if p.blob.length > 0 {
                files.entry(p.shard.as_deref()).or_default().push((p.blob, name, pname));
            }
        }
    }
    for (file, mut refs) in files {
        refs.sort_by_key(|r| r.0);
        let mut end = 0u64;
        let mut prev: Option<Blob> = None;
        for (b, o, p) in refs {
            if prev == Some(b) {
                continue;
            }
            if b.offset < end {
                let what = if o.is_empty() {
                    alloc::string::String::from("the manifest")
                } else {
                    alloc::format!("blob [{}, +{}]", b.offset, b.length)
                };
                let mut e = Error::new(
                    Rule::BlobOverlap,
                    alloc::format!("{what} partially overlaps another blob that ends at {end}"),
                )
                .at(b.offset);
                if !o.is_empty() {
                    e = e.part(o, p);
                }
                if let Some(f) = file {
                    e = e.shard(f);
                }
                return Err(e);
            }
            end = end.max(b.offset + b.length);
            prev = Some(b);
        }
    }
    Ok(())
}
