//! Emitting the manifest and footer, and the §11 content digest.

use alloc::borrow::Cow;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use crate::hash::xxh3_64;

use crate::zt::cbor::{self, Value};
use crate::zt::format::{FOOTER_LEN, MAGIC, MAX_MANIFEST_LEN, VERSION};

use super::base::Writer;
use super::blobs::align_up;
use super::digest::DigestAlgo;
use super::sink::Sink;
use super::spec::Finished;
use crate::zt::Error;
use crate::zt::rule::Rule;

impl<S: Sink> Writer<S> {
    /// The manifest as it would be written now.
    pub fn manifest(&self) -> Value<'static> {
        let mut root = vec![(
            Value::text("objects"),
            Value::Map(
                self.objects
                    .iter()
                    .map(|(k, v)| (Value::Text(Cow::Owned(k.clone())), v.clone()))
                    .collect(),
            ),
        )];
        if !self.shards.is_empty() {
            root.push((
                Value::text("shards"),
                Value::Map(
                    self.shards
                        .iter()
                        .map(|(k, (s, d))| {
                            (
                                Value::Text(Cow::Owned(k.clone())),
                                Value::Map(vec![
                                    (Value::text("size"), Value::Uint(*s)),
                                    (Value::text("digest"), Value::Text(Cow::Owned(d.clone()))),
                                ]),
                            )
                        })
                        .collect(),
                ),
            ));
        }
        if let Some(a) = &self.attributes {
            root.push((Value::text("attributes"), a.clone()));
        }
        Value::Map(root)
    }

    /// Writes the manifest at the next aligned offset and the footer after it.
    pub fn finish(mut self) -> crate::zt::Result<Finished<S>> {
        if self.stream.is_some() {
            return Err(Error::write(
                Rule::Usage,
                "a streamed object is still open; call end_object before finish",
            ));
        }
        let manifest = cbor::encode(&self.manifest())
            .map_err(|e| Error::write(Rule::Schema, format!("manifest: {}", e.message)))?;
        let len = manifest.len() as u64;
        if len > MAX_MANIFEST_LEN {
            return Err(Error::write(
                Rule::ManifestTooLarge,
                format!("the manifest is {len} bytes; §2.1 allows at most 1 GiB"),
            ));
        }
        let offset = align_up(self.sink.position(), self.align)?;
        self.pad_to(offset)?;
        self.sink.write_all(&manifest)?;
        let hash = xxh3_64(&manifest);
        self.write_footer(offset, len, hash)?;
        Ok(Finished {
            size: self.sink.position(),
            sink: self.sink,
            manifest_offset: offset,
            manifest_length: len,
            manifest,
        })
    }

    /// Ends a **data shard** (§12): blobs written with [`put_blob`](Self::put_blob), then a footer
    /// with zero manifest offset, length and hash. Non-canonical, no objects, not an append.
    pub fn finish_data_shard(mut self) -> crate::zt::Result<Finished<S>> {
        if self.opts.canonical || !self.objects.is_empty() || self.appending || self.stream.is_some() {
            return Err(Error::write(
                Rule::Usage,
                "a data shard is a fresh non-canonical file holding only put_blob blobs (no objects)",
            ));
        }
        self.write_footer(0, 0, 0)?;
        Ok(Finished {
            size: self.sink.position(),
            sink: self.sink,
            manifest_offset: 0,
            manifest_length: 0,
            manifest: Vec::new(),
        })
    }

    fn write_footer(&mut self, offset: u64, len: u64, hash: u64) -> crate::zt::Result<()> {
        let mut footer = [0u8; FOOTER_LEN as usize];
        footer[0..8].copy_from_slice(&offset.to_le_bytes());
        footer[8..16].copy_from_slice(&len.to_le_bytes());
        footer[16..24].copy_from_slice(&hash.to_le_bytes());
        footer[24..28].copy_from_slice(&VERSION.to_le_bytes());
        footer[32..40].copy_from_slice(&MAGIC);
        self.sink.write_all(&footer)?;
        Ok(())
    }
}

pub(super) fn part_value(
    dtype: &str,
    logical: Option<&str>,
    offset: u64,
    length: u64,
    shard: Option<&str>,
    digest: Option<&str>,
) -> Value<'static> {
    let mut m = vec![
        (
            Value::text("blob"),
            Value::Array(vec![Value::Uint(offset), Value::Uint(length)]),
        ),
        (Value::text("dtype"), Value::Text(Cow::Owned(dtype.to_string()))),
    ];
    if let Some(l) = logical {
        m.push((Value::text("type"), Value::Text(Cow::Owned(l.to_string()))));
    }
    if let Some(s) = shard {
        m.push((Value::text("shard"), Value::Text(Cow::Owned(s.to_string()))));
    }
    if let Some(d) = digest {
        m.push((Value::text("digest"), Value::Text(Cow::Owned(d.to_string()))));
    }
    Value::Map(m)
}

/// The §11 content digest (`"<algo>:<hex>"`) of a manifest (deterministic CBOR bytes, e.g.
/// [`Finished::manifest`]): the digest of `["zt.content/1", {object: {shape, layout, attributes?,
/// parts: {part: {dtype, type?, digest}}}}]`. Independent of placement, alignment, encodings and
/// shards. Fails if any part lacks a digest.
pub fn content_digest(manifest: &[u8], algo: DigestAlgo) -> crate::zt::Result<String> {
    let bad = |m: String| Error::write(Rule::Schema, m);
    let root = cbor::decode(manifest, cbor::Mode::Deterministic).map_err(|e| bad(format!("manifest CBOR: {e}")))?;
    let objects = root
        .get("objects")
        .and_then(Value::as_map)
        .ok_or_else(|| bad("the manifest has no objects map".into()))?;
    let mut out = Vec::with_capacity(objects.len());
    for (name, obj) in objects {
        let oname = name.as_text().unwrap_or("?");
        let mut o = Vec::new();
        for key in ["shape", "layout", "attributes"] {
            if let Some(v) = obj.get(key) {
                o.push((Value::text(key), v.clone()));
            }
        }
        let parts = obj
            .get("parts")
            .and_then(Value::as_map)
            .ok_or_else(|| bad(format!("object {oname:?} has no parts")))?;
        let mut pm = Vec::with_capacity(parts.len());
        for (pname, part) in parts {
            let mut e = Vec::new();
            for key in ["dtype", "type"] {
                if let Some(v) = part.get(key) {
                    e.push((Value::text(key), v.clone()));
                }
            }
            let d = part.get("digest").ok_or_else(|| {
                bad(format!(
                    "object {oname:?} part {:?} has no digest, so the content digest is undefined (§11)",
                    pname.as_text().unwrap_or("?")
                ))
            })?;
            e.push((Value::text("digest"), d.clone()));
            pm.push((pname.clone(), Value::Map(e)));
        }
        o.push((Value::text("parts"), Value::Map(pm)));
        out.push((name.clone(), Value::Map(o)));
    }
    let doc = Value::Array(vec![Value::text("zt.content/1"), Value::Map(out)]);
    let bytes = cbor::encode(&doc).map_err(|e| bad(e.message))?;
    Ok(algo.digest(&bytes))
}
