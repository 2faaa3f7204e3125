//! Whole objects: shards, attributes, dense tensors and objects of any layout, checked and committed.

use alloc::borrow::Cow;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use crate::dtype::DType;
use crate::zt::cbor::Value;
use crate::zt::format::ENCODING_ZSTD_SEEKABLE;
use crate::zt::format::{ALIGNMENT as ALIGN_FLOOR, FOOTER_LEN};

use super::base::Writer;
use super::blobs::align_up;
use super::checks::{
    check_attributes, check_digest, check_name, check_shape, check_shard_name, logical_dtype, storage_of,
};
use super::digest::DigestAlgo;
use super::layouts::{PartMeta, validate_layout};
use super::manifest::part_value;
use super::sink::Sink;
use super::spec::{ObjectSpec, PartData, PartSpec};
use crate::zt::Error;
use crate::zt::rule::Rule;

impl<S: Sink> Writer<S> {
    /// Sets the file attributes (a map with text keys). Once set, an `attributes` map is written
    /// even when empty (as the reference does).
    pub fn set_attributes(&mut self, attributes: Value<'static>) -> crate::zt::Result<()> {
        check_attributes(&attributes, 1)?;
        self.attributes = Some(attributes);
        Ok(())
    }

    /// Registers a shard (§12): a file of exactly `size` bytes whose whole-file digest is `digest`
    /// (`xxh3:` at least, `sha256:` for signed distribution). Non-canonical only.
    pub fn add_shard(&mut self, name: &str, size: u64, digest: &str) -> crate::zt::Result<()> {
        if self.opts.canonical {
            return Err(Error::write(
                Rule::Canonical,
                "canonical form is single-file (§10 rule 6); use Options::non_canonical() for shards",
            ));
        }
        check_shard_name(name)?;
        check_digest(digest)?;
        if size < 48 {
            return Err(Error::write(
                Rule::ShardIdentity,
                format!("shard {name:?}: size {size} is below the 48-byte minimum"),
            ));
        }
        match self.shards.get(name) {
            Some(e) if *e != (size, digest.to_string()) => Err(Error::write(
                Rule::ShardIdentity,
                format!("shard {name:?} is already registered with another identity"),
            )),
            _ => {
                self.shards.insert(name.to_string(), (size, digest.to_string()));
                Ok(())
            }
        }
    }

    /// Adds a dense tensor: one raw `data` part of `product(shape)` elements.
    pub fn add(&mut self, name: &str, dtype: DType, shape: &[u64], data: &[u8]) -> crate::zt::Result<()> {
        self.add_object(name, &ObjectSpec::dense(shape), &[PartSpec::new("data", dtype, data)])
    }

    /// [`Writer::add`] for a part whose xxh3-64 is already known, so the caller can hash the next
    /// part on another thread while this one is written (what `tensorlane::zt_write::ZtFile::add_many`
    /// does). `xxh3` must be `xxh3_64(data)`: it becomes the part's digest and dedup key (sharing
    /// still compares the bytes). Needs xxh3 part digests (the default).
    pub fn add_prehashed(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[u64],
        data: &[u8],
        xxh3: u64,
    ) -> crate::zt::Result<()> {
        if self.opts.digest != DigestAlgo::Xxh3 {
            return Err(Error::write(
                Rule::Usage,
                "add_prehashed needs xxh3 part digests; use add with sha256",
            ));
        }
        self.prehashed = Some((data.as_ptr() as usize, data.len(), xxh3));
        let r = self.add(name, dtype, shape, data);
        self.prehashed = None;
        r
    }

    /// Adds an object with any number of parts, validated against its layout (for `dense`,
    /// `zt.sparse_csr/1`, `zt.sparse_coo/1`, `zt.quant_group/1`) before anything is written. Parts
    /// are written in name order.
    pub fn add_object(&mut self, name: &str, spec: &ObjectSpec, parts: &[PartSpec<'_>]) -> crate::zt::Result<()> {
        self.check_object(name, spec).map_err(|e| e.in_object(name))?;
        check_some_parts(parts.len()).map_err(|e| e.in_object(name))?;
        let mut order: Vec<&PartSpec<'_>> = parts.iter().collect();
        order.sort_by(|a, b| a.name.cmp(&b.name));
        let mut metas = Vec::with_capacity(order.len());
        let mut storages = Vec::with_capacity(order.len());
        for (i, p) in order.iter().enumerate() {
            let (dtype, logical) = self
                .check_part(
                    p.name.as_str(),
                    p.dtype,
                    p.logical.as_deref(),
                    i,
                    &order.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
                )
                .map_err(|e| e.in_object(name))?;
            let size = match &p.data {
                PartData::Bytes(b) => b.len() as u64,
                PartData::External {
                    shard,
                    offset,
                    length,
                    digest,
                } => {
                    self.check_external(shard, *offset, *length, digest.as_deref())
                        .map_err(|e| e.in_object(name).in_part(&p.name))?;
                    *length
                }
                PartData::Encoded {
                    encoding,
                    stored,
                    decoded,
                } => {
                    self.check_encoded(encoding, stored, decoded.len() as u64)
                        .map_err(|e| e.in_object(name).in_part(&p.name))?;
                    decoded.len() as u64
                }
            };
            storages.push((dtype, logical));
            metas.push(size);
        }
        {
            let pm: Vec<PartMeta<'_>> = order
                .iter()
                .zip(&storages)
                .zip(&metas)
                .map(|((p, (d, l)), s)| PartMeta {
                    name: &p.name,
                    dtype: d,
                    logical: l.as_deref(),
                    size: *s,
                })
                .collect();
            validate_layout(spec, check_shape(&spec.shape)?, &pm).map_err(|e| e.in_object(name))?;
        }
        let mut part_values = Vec::with_capacity(order.len());
        for (p, (dtype, logical)) in order.iter().zip(&storages) {
            let v = match &p.data {
                PartData::Bytes(b) => {
                    let (offset, digest) = self.write_or_share(b).map_err(|e| e.in_object(name).in_part(&p.name))?;
                    part_value(dtype, logical.as_deref(), offset, b.len() as u64, None, Some(&digest))
                }
                PartData::External {
                    shard,
                    offset,
                    length,
                    digest,
                } => part_value(
                    dtype,
                    logical.as_deref(),
                    *offset,
                    *length,
                    Some(shard),
                    digest.as_deref(),
                ),
                PartData::Encoded {
                    encoding,
                    stored,
                    decoded,
                } => {
                    let offset = align_up(self.sink.position(), self.align)?;
                    self.pad_to(offset).map_err(|e| e.in_object(name).in_part(&p.name))?;
                    self.sink
                        .write_all(stored)
                        .map_err(|e| e.in_object(name).in_part(&p.name))?;
                    let digest = self.opts.digest.digest(decoded);
                    let mut v = part_value(
                        dtype,
                        logical.as_deref(),
                        offset,
                        stored.len() as u64,
                        None,
                        Some(&digest),
                    );
                    if let Value::Map(m) = &mut v {
                        m.push((Value::text("encoding"), Value::Text(Cow::Owned(encoding.clone()))));
                        m.push((Value::text("decoded_length"), Value::Uint(decoded.len() as u64)));
                    }
                    v
                }
            };
            part_values.push((Value::Text(Cow::Owned(p.name.clone())), v));
        }
        self.commit(name, spec, part_values);
        Ok(())
    }

    pub(super) fn check_object(&self, name: &str, spec: &ObjectSpec) -> crate::zt::Result<()> {
        if self.stream.is_some() {
            return Err(Error::write(
                Rule::Usage,
                "a streamed object is open; finish it with end_object first",
            ));
        }
        check_name(name, "object", self.opts.canonical)?;
        if self.objects.contains_key(name) {
            return Err(Error::write(
                Rule::Name,
                "an object of this name already exists in the file",
            ));
        }
        if self.opts.canonical
            && let Some(last) = &self.last_object
            && name.as_bytes() <= last.as_bytes()
        {
            return Err(Error::write(
                Rule::Order,
                format!(
                    "canonical form places blobs in name order: {name:?} comes after {last:?}; add objects sorted by name (bytewise), or use Options::non_canonical()"
                ),
            ));
        }
        check_shape(&spec.shape)?;
        if spec.layout.is_empty() {
            return Err(Error::write(Rule::Schema, "the layout id is empty"));
        }
        if let Some(a) = &spec.attributes {
            check_attributes(a, 3)?;
        }
        Ok(())
    }

    pub(super) fn check_part(
        &self,
        pname: &str,
        dtype: DType,
        logical: Option<&str>,
        i: usize,
        names: &[&str],
    ) -> crate::zt::Result<(&'static str, Option<String>)> {
        check_name(pname, "part", self.opts.canonical).map_err(|e| e.in_part(pname))?;
        if i > 0 && names[i - 1] == pname {
            return Err(Error::write(Rule::Name, "two parts have this name").in_part(pname));
        }
        let (d, l) = storage_of(dtype, logical).map_err(|m| Error::write(Rule::Schema, m).in_part(pname))?;
        if let Some(l) = &l {
            if l.is_empty() {
                return Err(Error::write(Rule::Schema, "the logical type is empty").in_part(pname));
            }
            if let Some(pin) = logical_dtype(l)
                && pin != d
            {
                return Err(Error::write(
                    Rule::Schema,
                    format!("logical type {l:?} requires dtype {pin}, got {d} (§6.2)"),
                )
                .in_part(pname));
            }
        }
        Ok((d, l))
    }

    fn check_external(&self, shard: &str, offset: u64, length: u64, digest: Option<&str>) -> crate::zt::Result<()> {
        if self.opts.canonical {
            return Err(Error::write(
                Rule::Canonical,
                "canonical form is single-file (§10 rule 6); use Options::non_canonical() for parts in shards",
            ));
        }
        let (size, _) = self.shards.get(shard).ok_or_else(|| {
            Error::write(
                Rule::ShardRef,
                format!("shard {shard:?} is not registered; call add_shard first"),
            )
        })?;
        if !offset.is_multiple_of(ALIGN_FLOOR) || offset < ALIGN_FLOOR {
            return Err(Error::write(
                Rule::BlobAlignment,
                format!("offset {offset} in shard {shard:?} is not a multiple of 4096 at or above 4096"),
            ));
        }
        if offset.checked_add(length).is_none_or(|e| e > size - FOOTER_LEN) {
            return Err(Error::write(
                Rule::BlobBounds,
                format!(
                    "blob [{offset}, +{length}) runs past shard {shard:?}'s data region ({} bytes)",
                    size - FOOTER_LEN
                ),
            ));
        }
        if let Some(d) = digest {
            check_digest(d)?;
        }
        Ok(())
    }

    fn check_encoded(&self, encoding: &str, stored: &[u8], decoded_length: u64) -> crate::zt::Result<()> {
        if self.opts.canonical {
            return Err(Error::write(
                Rule::Canonical,
                "canonical form stores every part raw (§10 rule 4); use Options::non_canonical() for encodings",
            ));
        }
        if encoding.is_empty() {
            return Err(Error::write(Rule::Schema, "the encoding id is empty"));
        }
        if encoding == ENCODING_ZSTD_SEEKABLE {
            crate::zt::seekable::SeekTable::parse(stored, decoded_length)
                .map_err(|e| Error::write(Rule::Schema, format!("the stored bytes are not a valid {ENCODING_ZSTD_SEEKABLE} stream of {decoded_length} decoded bytes: {e}")))?;
        }
        Ok(())
    }

    pub(super) fn commit(&mut self, name: &str, spec: &ObjectSpec, parts: Vec<(Value<'static>, Value<'static>)>) {
        let mut obj = vec![
            (Value::text("parts"), Value::Map(parts)),
            (
                Value::text("shape"),
                Value::Array(spec.shape.iter().map(|&d| Value::Uint(d)).collect()),
            ),
            (Value::text("layout"), Value::Text(Cow::Owned(spec.layout.clone()))),
        ];
        if let Some(a) = &spec.attributes
            && a.as_map().is_some_and(|m| !m.is_empty())
        {
            obj.push((Value::text("attributes"), a.clone()));
        }
        self.objects.insert(name.to_string(), Value::Map(obj));
        self.last_object = Some(name.to_string());
    }

    // ---- blob placement ----
}

/// The schema wants at least one part per object (readers refuse an empty parts map), whatever
/// the layout: a layout the writer does not know has no required parts of its own.
pub(super) fn check_some_parts(count: usize) -> crate::zt::Result<()> {
    if count == 0 {
        return Err(Error::write(
            Rule::Schema,
            "an object needs at least one part (the .zt v2 schema refuses an empty parts map); give its data as a part",
        ));
    }
    Ok(())
}
