//! Generational append (§2.3): continuing an existing `.zt` file.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};

use crate::hash::xxh3_64;

use crate::source::ReadAt;
use crate::zt::cbor::{self, Value};
use crate::zt::format::{
    ALIGNMENT as ALIGN_FLOOR, CANONICAL_ALIGNMENT as ALIGN_CANONICAL, FOOTER_LEN, MAGIC, MAX_MANIFEST_LEN, VERSION,
};

use super::base::Writer;
use super::sink::Sink;
use super::spec::Options;
use crate::zt::Error;
use crate::zt::rule::Rule;

impl<S: Sink> Writer<S> {
    /// Adds to an existing `.zt` (generational append, §2.3): `existing` is the file as it is now and
    /// `sink` writes at its end (`sink.position() == existing.size()`). The old objects, shards and
    /// attributes are kept, new blobs, a new manifest and a new footer go past the old EOF, and
    /// nothing is truncated or overwritten. Without [`Options::alignment`] the file's own alignment
    /// is inherited from its offsets. Needs [`Options::non_canonical`] (an append leaves the old
    /// manifest as an unreferenced blob). New blobs are not shared with old ones.
    pub fn append(sink: S, existing: &impl ReadAt, opts: Options) -> crate::zt::Result<Self> {
        if opts.canonical {
            return Err(Error::write(
                Rule::Canonical,
                "canonical form is written in one pass; append with Options::non_canonical()",
            ));
        }
        let align = Self::check_options(&opts)?;
        let size = existing.size();
        if sink.position() != size {
            return Err(Error::write(
                Rule::Usage,
                format!(
                    "the sink is at {}, but the existing file ends at {size}: append writes from EOF",
                    sink.position()
                ),
            ));
        }
        let bad = |m: String| Error::write(Rule::Existing, m);
        let read = |off: u64, len: u64| {
            existing
                .read_vec(off, len)
                .map_err(|e| bad(format!("cannot read the existing file: {e}")))
        };
        if size < 48 {
            return Err(bad(format!("{size} bytes is too small for a .zt file")));
        }
        if read(0, 8)? != MAGIC {
            return Err(bad("the existing file does not start with the .zt v2 magic".into()));
        }
        let footer = read(size - FOOTER_LEN, FOOTER_LEN)?;
        let u64_at = |i: usize| u64::from_le_bytes(footer[i..i + 8].try_into().unwrap());
        if footer[32..40] != MAGIC {
            return Err(bad(
                "the existing file's footer magic is missing (a crashed append is not recoverable, §2.3)".into(),
            ));
        }
        let version = u32::from_le_bytes(footer[24..28].try_into().unwrap());
        if version != VERSION {
            return Err(bad(format!(
                "footer version {version}; only version 2 can be appended to"
            )));
        }
        let (moff, mlen, mhash) = (u64_at(0), u64_at(8), u64_at(16));
        if mlen == 0 {
            return Err(bad(
                "the existing file is a data shard: it has no manifest to add to".into()
            ));
        }
        if mlen > MAX_MANIFEST_LEN || moff.checked_add(mlen).is_none_or(|e| e > size - FOOTER_LEN) {
            return Err(bad(format!("manifest [{moff}, +{mlen}) lies outside the file")));
        }
        let mbytes = read(moff, mlen)?;
        if xxh3_64(&mbytes) != mhash {
            return Err(bad("the manifest does not hash to the footer's XXH3 value".into()));
        }
        let root = cbor::decode(&mbytes, cbor::Mode::Deterministic)
            .map_err(|e| bad(format!("manifest CBOR: {e}")))?
            .into_owned();
        let mut objects = BTreeMap::new();
        let mut shards = BTreeMap::new();
        let mut attributes = None;
        let mut gcd = moff;
        let Some(root_map) = root.as_map() else {
            return Err(bad("the manifest is not a map".into()));
        };
        for (k, v) in root_map {
            match k.as_text() {
                Some("objects") => {
                    let m = v.as_map().ok_or_else(|| bad("\"objects\" is not a map".into()))?;
                    for (name, obj) in m {
                        let name = name.as_text().ok_or_else(|| bad("an object name is not text".into()))?;
                        if let Some(parts) = obj.get("parts").and_then(Value::as_map) {
                            for (_, p) in parts {
                                let local = p.get("shard").is_none();
                                let off = p
                                    .get("blob")
                                    .and_then(Value::as_array)
                                    .and_then(|b| b.first())
                                    .and_then(Value::as_u64);
                                if let (true, Some(off)) = (local, off) {
                                    gcd = gcd_u64(gcd, off);
                                }
                            }
                        }
                        objects.insert(name.to_string(), obj.clone());
                    }
                }
                Some("shards") => {
                    let m = v.as_map().ok_or_else(|| bad("\"shards\" is not a map".into()))?;
                    for (name, e) in m {
                        let name = name.as_text().ok_or_else(|| bad("a shard name is not text".into()))?;
                        let sz = e
                            .get("size")
                            .and_then(Value::as_u64)
                            .ok_or_else(|| bad(format!("shard {name:?} has no size")))?;
                        let d = e
                            .get("digest")
                            .and_then(Value::as_text)
                            .ok_or_else(|| bad(format!("shard {name:?} has no digest")))?;
                        shards.insert(name.to_string(), (sz, d.to_string()));
                    }
                }
                Some("attributes") => attributes = Some(v.clone()),
                _ => {}
            }
        }
        let align = if opts.alignment.is_some() {
            align
        } else {
            let p = if gcd == 0 {
                ALIGN_FLOOR
            } else {
                1u64 << gcd.trailing_zeros().min(63)
            };
            p.clamp(ALIGN_FLOOR, ALIGN_CANONICAL)
        };
        Ok(Writer {
            sink,
            opts,
            align,
            objects,
            shards,
            attributes,
            dedup: BTreeMap::new(),
            last_object: None,
            stream: None,
            appending: true,
            prehashed: None,
        })
    }
}

fn gcd_u64(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd_u64(b, a % b) }
}
