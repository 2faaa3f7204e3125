//! `.zt` in the `tensorlane` CLI: `inspect`, `verify` and `convert` for `.zt` v2 (with shards),
//! legacy v1.2 / v0.1 files and Tenso packet files.
//!
//! * [`inspect_zt`] / [`inspect_legacy`] describe a file with the same JSON schema as the packet
//!   report of [`crate::inspect`] (`format`, `file`, `bytes`, `packets`, `tensors`), one entry in
//!   `tensors` per object, plus `.zt` fields: each object's `layout`, `parts` (dtype, logical
//!   `type`, `encoding`, blob `offset`/`length`, `shard`, decoded `nbytes`, `digest`, `sha256`) and
//!   `attributes`; the file's `attributes`, `shards` and `manifest`. `sha256` is over the
//!   **decoded** bytes (C order, little-endian, one byte per bool, packed f4), as the fixtures'
//!   manifest defines it; a dense object carries the digest of its `data` part.
//! * Shards are resolved next to the root file ([`resolve_shard`]): `<stem>-<name>.zt` (the
//!   reference convention), then `<name>` and `<name>.zt` in the same directory. Shard names are
//!   single safe path components by construction (spec §5), so nothing outside the directory is
//!   ever opened.
//! * [`verify_zt`] validates, verifies every digest and content rule, optionally the shards
//!   (`deep`) and canonical form ([`check_canonical`]: the file is re-encoded through the canonical
//!   writer into a sink that compares against the file byte for byte, so nothing is buffered).
//! * [`convert`]: legacy → `.zt` v2, `.zt` v2 → a Tenso bundle, Tenso packets → `.zt` v2, and
//!   `.zt` v2 → canonical `.zt` v2; `.zt` output is canonical and published atomically.

use std::borrow::Cow;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest as _, Sha256};
use tensorlane_core::DType;
use tensorlane_core::detect::Format;
use tensorlane_core::source::{ReadAt, SourceError};
use tensorlane_core::wire::{self, Bundle, EncodeOptions, Packet};
use tensorlane_core::zt::Error as ZtError;
use tensorlane_core::zt::cbor::Value;
use tensorlane_core::zt::format::LogicalType;
use tensorlane_core::zt::layout;
use tensorlane_core::zt::legacy::{self, LegacyReader};
use tensorlane_core::zt::manifest::{Object, Part};
use tensorlane_core::zt::reader::{Reader, VerifyReport};
use tensorlane_core::zt::rule::Rule;
use tensorlane_core::zt::writer::{ObjectSpec, Options, PartSpec, Sink, Writer};

use tensorlane::source::Source;
use tensorlane::zt_write::ZtFile;

use crate::error::CliError;
use crate::output::{Table, advance, finish, progress, render_table, sha256_hex, shape_str};

/// Opens a local file for `pread`, or a URL (`s3://`, `http(s)://`, ...: see
/// [`tensorlane::remote`]); an I/O failure names the path.
///
/// Local files are never mapped here: a user's file may be truncated or rewritten while the tool
/// reads it, and a map would then kill the process with SIGBUS. With `pread` a read past the new
/// end is an error (exit 2) that the caller prints with the file's name ([`truncated`]).
pub fn open_source(path: &Path) -> Result<Source, CliError> {
    crate::identify::check_not_dir(path)?;
    Source::open_with(path, false).map_err(|e| match e {
        tensorlane::core::source::SourceError::Io(m) => CliError::Io(m),
        other => CliError::Io(format!("cannot read {}: {other}", path.display())),
    })
}

/// The error for a read of `src` that failed: a file that is now shorter than when it was opened
/// (truncated or rewritten underneath) is invalid input (exit 2) and says so; anything else is an
/// I/O error (exit 1).
pub fn truncated(src: &Source, e: SourceError) -> CliError {
    match e {
        SourceError::OutOfBounds { offset, len, size } if size <= src.size() => CliError::Invalid(format!(
            "the file changed while it was read: bytes {offset}..{} are past its end ({size} bytes now, {} when \
             it was opened); it was truncated or rewritten in place, so run again once nothing writes to it",
            offset.saturating_add(len),
            src.size()
        )),
        other => CliError::Io(format!("read failed: {other}")),
    }
}

/// The whole file's bytes, read into memory, for the readers that need one slice (a Tenso packet
/// file): refused over `--max-tensor-bytes` ([`crate::limits`]) before anything is allocated, and
/// an error, not SIGBUS, when the file is truncated while it is read ([`truncated`]).
pub fn whole(src: &Source, format: &'static str) -> Result<Vec<u8>, CliError> {
    let size = src.size();
    let limit = crate::limits::max_tensor_bytes();
    if size > limit {
        return Err(CliError::Format(tensorlane::core::formats::FormatError::new(
            format,
            tensorlane::core::formats::ErrorKind::Limit,
            format!(
                "the file is decoded from memory, so it is read whole: {size} bytes ({}), over the {limit} bytes \
                 ({}) allowed by --max-tensor-bytes; raise the limit if the machine has the memory",
                tensorlane::core::formats::iec(size),
                tensorlane::core::formats::iec(limit)
            ),
        )));
    }
    tensorlane::source::read_whole(src).map_err(|e| truncated(src, e))
}

/// `e`, completed when the local file `path` no longer has the `size_at_open` bytes it had when
/// it was opened: whatever a reader made of the missing bytes, the cause is that the file was
/// truncated or rewritten in place while it was read (invalid input, exit 2), and the message
/// says so. A URL, or a file of the same size, gives `e` back as it is.
pub fn note_if_changed(path: &Path, size_at_open: u64, e: CliError) -> CliError {
    if crate::remote::is_url(path) || matches!(e, CliError::Invalid(ref m) if m.starts_with("the file changed")) {
        return e;
    }
    match std::fs::metadata(path) {
        Ok(m) if m.len() != size_at_open => CliError::Invalid(format!(
            "{e}; the file changed while it was read ({} bytes now, {size_at_open} when it was opened): it was \
             truncated or rewritten in place, so run again once nothing writes to it",
            m.len()
        )),
        _ => e,
    }
}

/// Whether the file ends with `magic`.
pub fn ends_with(src: &Source, magic: &[u8]) -> bool {
    let n = magic.len() as u64;
    src.size() >= n && src.read_vec(src.size() - n, n).is_ok_and(|t| t == magic)
}

// ---------------------------------------------------------------------------------------------
// Report types

/// What `inspect` found in a `.zt` file (v2 or legacy). The first five fields are those of the
/// packet report ([`crate::inspect::Report`]).
#[derive(Clone, Debug, Serialize)]
pub struct ZtReport {
    /// `"zt"`, `"zt-v1"` or `"zt-v0"`.
    pub format: &'static str,
    /// The file name as given.
    pub file: String,
    /// File size in bytes.
    pub bytes: u64,
    /// Tenso packets in the file: always 0 for `.zt`.
    pub packets: usize,
    /// One entry per object, in bytewise name order.
    pub tensors: Vec<ZtObjectRow>,
    /// True for a manifest-less `.zt` v2 data shard (it describes no tensors).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub data_shard: bool,
    /// Where the manifest is (`.zt` v2: the manifest blob; legacy: its offset and length).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifest: Option<BlobInfo>,
    /// The legacy manifest's `version` string (v1.2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The shard table, with the file each shard resolved to.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardInfo>,
    /// File attributes as JSON (byte strings as `{"bytes": n, "hex": ...}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attributes: Option<serde_json::Value>,
    /// Legacy v0.1 entries skipped because they are not dense.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// Problems that did not stop the inspection (an unresolved shard, a part that could not be
    /// hashed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A byte range.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct BlobInfo {
    /// Absolute offset.
    pub offset: u64,
    /// Length in bytes.
    pub length: u64,
}

/// A shard table entry.
#[derive(Clone, Debug, Serialize)]
pub struct ShardInfo {
    /// The shard table key.
    pub name: String,
    /// Declared file size.
    pub size: u64,
    /// Declared whole-file digest.
    pub digest: String,
    /// The file it resolved to (none found: `null`).
    pub file: Option<String>,
}

/// One object.
#[derive(Clone, Debug, Serialize)]
pub struct ZtObjectRow {
    /// Object name.
    pub name: String,
    /// `"dense"`, `"sparse"` (CSR/COO), `"quantized"` (quant_group, mx, gguf, v1 quantized_group)
    /// or `"object"` (any other layout).
    pub kind: &'static str,
    /// NumPy-style element type of a dense object (`"float32"`, `"bool"`, `"float8_e4m3fn"`,
    /// `"float4_e2m1fn"`; an unknown logical type as written); for other layouts the element type
    /// of the `values` / `data` part.
    pub dtype: String,
    /// Logical shape.
    pub shape: Vec<u64>,
    /// Decoded bytes: of the `data` part (dense), of all parts together otherwise.
    pub nbytes: u64,
    /// SHA-256 of the decoded `data` bytes of a dense object, when hashing was requested.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Layout id (`.zt` v2) or format name (legacy).
    pub layout: String,
    /// Parts in name order.
    pub parts: Vec<ZtPartRow>,
    /// Object attributes as JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attributes: Option<serde_json::Value>,
}

/// One part of an object.
#[derive(Clone, Debug, Serialize)]
pub struct ZtPartRow {
    /// Part name.
    pub name: String,
    /// NumPy name of the storage dtype.
    pub dtype: &'static str,
    /// Logical type as written (`bool`, `f4_e2m1`, ...).
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub logical: Option<String>,
    /// Encoding id; absent = raw.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoding: Option<String>,
    /// Blob offset (in `shard` when set).
    pub offset: u64,
    /// Stored length.
    pub length: u64,
    /// The shard holding the bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// Decoded bytes.
    pub nbytes: u64,
    /// The recorded digest (`.zt` v2: over the decoded bytes; legacy: over the stored bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// SHA-256 of the decoded bytes, when hashing was requested.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// CBOR attribute values as JSON (byte strings become `{"bytes": n, "hex": "..."}`, the hex cut
/// at 64 bytes; non-finite floats become strings).
pub fn cbor_to_json(v: &Value<'_>) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        Value::Uint(n) => J::from(*n),
        Value::Neg(n) => match i64::try_from(*n) {
            Ok(n) => J::from(-1 - n),
            Err(_) => J::String(format!("-{}", *n as u128 + 1)),
        },
        Value::Bytes(b) => serde_json::json!({"bytes": b.len(), "hex": hex::encode(&b[..b.len().min(64)])}),
        Value::Text(s) => J::String(s.to_string()),
        Value::Array(a) => J::Array(a.iter().map(cbor_to_json).collect()),
        Value::Map(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m {
                let key = match k {
                    Value::Text(s) => s.to_string(),
                    other => cbor_to_json(other).to_string(),
                };
                out.insert(key, cbor_to_json(v));
            }
            J::Object(out)
        }
        Value::Bool(b) => J::Bool(*b),
        Value::Null => J::Null,
        Value::Float(f) if f.is_finite() => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
        Value::Float(f) => J::String(if f.is_nan() {
            "nan".into()
        } else if *f > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        }),
    }
}

/// NumPy-style name of a `.zt` element type (the fixtures' manifest names).
pub fn element_name(dtype: DType, logical: Option<&str>) -> String {
    match logical {
        None => dtype.name().to_string(),
        Some(l) => match LogicalType::from_name(l) {
            Some(LogicalType::Bool) => "bool".into(),
            Some(LogicalType::Complex64) => "complex64".into(),
            Some(LogicalType::Complex128) => "complex128".into(),
            Some(LogicalType::F8E4M3Fn) => "float8_e4m3fn".into(),
            Some(LogicalType::F8E5M2) => "float8_e5m2".into(),
            Some(LogicalType::F8E4M3Fnuz) => "float8_e4m3fnuz".into(),
            Some(LogicalType::F8E5M2Fnuz) => "float8_e5m2fnuz".into(),
            Some(LogicalType::F8E8M0) => "float8_e8m0fnu".into(),
            Some(LogicalType::F4E2M1) => "float4_e2m1fn".into(),
            None => l.to_string(),
        },
    }
}

fn kind_of(layout: &str) -> &'static str {
    match layout {
        layout::DENSE => "dense",
        layout::SPARSE_CSR | layout::SPARSE_COO | "sparse_csr" | "sparse_coo" => "sparse",
        layout::QUANT_GROUP | layout::MX | "quantized_group" => "quantized",
        l if l.starts_with("gguf.") => "quantized",
        _ => "object",
    }
}

/// The part whose element type names a non-dense object: `values`, then `data`.
fn main_part<'a, T>(parts: impl Iterator<Item = (&'a str, T)>) -> Option<T> {
    let mut data = None;
    for (n, p) in parts {
        match n {
            "values" => return Some(p),
            "data" => data = Some(p),
            _ => {}
        }
    }
    data
}

// ---------------------------------------------------------------------------------------------
// Shards

/// The file shard `name` of the root file `root` resolves to: `<stem>-<name>.zt` (the reference
/// convention), else `<name>`, else `<name>.zt`, all in the root's directory. `None` when none
/// exists. `name` has been validated as a shard name (a single path component).
pub fn resolve_shard(root: &Path, name: &str) -> Option<PathBuf> {
    let dir = root.parent().unwrap_or(Path::new("."));
    let stem = root
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    [
        dir.join(format!("{stem}-{name}.zt")),
        dir.join(name),
        dir.join(format!("{name}.zt")),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// An opened root: the reader (with the shards that resolved), the shard table as found, and
/// warnings about shards that did not resolve.
pub type Opened = (Reader<Source>, Vec<ShardInfo>, Vec<String>);

/// Opens a `.zt` v2 root and supplies every shard that resolves. With `required`, a shard that
/// does not resolve is an error; otherwise it is listed in the returned warnings (its parts stay
/// unresolved). A shard that resolves to the wrong file is always an error (`ShardIdentity`).
pub fn open_zt(path: &Path, src: Source, required: bool) -> Result<Opened, CliError> {
    let mut reader = Reader::open(src)?;
    let mut infos = Vec::new();
    let mut warnings = Vec::new();
    let table: Vec<(String, u64, String)> = reader
        .shard_table()
        .map(|t| t.iter().map(|(n, e)| (n.clone(), e.size, e.digest.clone())).collect())
        .unwrap_or_default();
    for (name, size, digest) in table {
        let found = crate::remote::resolve_shard(path, &name)?;
        let file = found.as_ref().map(|(f, _)| f.clone());
        match found {
            Some((f, s)) => {
                reader = reader.with_shard(&name, s).map_err(|e| {
                    let mut e = e;
                    e.message = format!("{} (file {})", e.message, f.display());
                    e
                })?;
            }
            None if required => {
                return Err(CliError::Io(format!(
                    "shard {name:?} of {}: no file found (looked for {}, {name} and {name}.zt next to it)",
                    path.display(),
                    path.file_stem()
                        .map(|s| format!("{}-{name}.zt", s.to_string_lossy()))
                        .unwrap_or_default()
                )));
            }
            None => warnings.push(format!(
                "shard {name:?}: no file found next to {}; its parts are not resolved",
                path.display()
            )),
        }
        infos.push(ShardInfo {
            name,
            size,
            digest,
            file: file.map(|f| f.display().to_string()),
        });
    }
    Ok((reader, infos, warnings))
}

// ---------------------------------------------------------------------------------------------
// inspect

fn part_info(name: &str, p: &Part) -> ZtPartRow {
    ZtPartRow {
        name: name.to_string(),
        dtype: p.dtype.name(),
        logical: p.logical.clone(),
        encoding: p.encoding.clone(),
        offset: p.blob.offset,
        length: p.blob.length,
        shard: p.shard.clone(),
        nbytes: p.decoded_size(),
        digest: p.digest.clone(),
        sha256: None,
    }
}

fn object_info(name: &str, o: &Object) -> ZtObjectRow {
    let parts: Vec<ZtPartRow> = o.parts.iter().map(|(n, p)| part_info(n, p)).collect();
    let dense = o.layout == layout::DENSE;
    let main = if dense {
        o.parts.get("data")
    } else {
        main_part(o.parts.iter().map(|(n, p)| (n.as_str(), p)))
    };
    ZtObjectRow {
        name: name.to_string(),
        kind: kind_of(&o.layout),
        dtype: main
            .map(|p| element_name(p.dtype, p.logical.as_deref()))
            .unwrap_or_default(),
        shape: o.shape.clone(),
        nbytes: if dense {
            main.map_or(0, |p| p.decoded_size())
        } else {
            parts.iter().map(|p| p.nbytes).sum()
        },
        sha256: None,
        layout: o.layout.clone(),
        parts,
        attributes: o.attributes.as_ref().map(cbor_to_json),
    }
}

/// Inspects a `.zt` v2 file at `path` (already opened as `src`: [`open_source`]). Shards that resolve next to it
/// are opened; with `hash`, every part's decoded bytes are hashed (parts in unresolved shards are
/// listed in `warnings`).
pub fn inspect_zt(path: &Path, file: &str, src: Source, hash: bool) -> Result<ZtReport, CliError> {
    let bytes = src.size();
    let (reader, shards, mut warnings) = open_zt(path, src, false)?;
    let mut report = ZtReport {
        format: "zt",
        file: file.to_string(),
        bytes,
        packets: 0,
        tensors: Vec::new(),
        data_shard: reader.is_data_shard(),
        manifest: reader.manifest().filter(|_| !reader.is_data_shard()).map(|m| BlobInfo {
            offset: m.manifest_blob.offset,
            length: m.manifest_blob.length,
        }),
        version: None,
        shards,
        attributes: reader.attributes().map(cbor_to_json),
        skipped: Vec::new(),
        warnings: Vec::new(),
    };
    let Some(m) = reader.manifest() else {
        report.warnings = warnings;
        return Ok(report);
    };
    for (name, o) in &m.objects {
        report.tensors.push(object_info(name, o));
    }
    if hash {
        let total: u64 = m
            .objects
            .values()
            .flat_map(|o| o.parts.values())
            .map(|p| p.decoded_size())
            .sum();
        let bar = progress(total, "hashing");
        for (t, (name, o)) in report.tensors.iter_mut().zip(&m.objects) {
            for (pi, pname) in t.parts.iter_mut().zip(o.parts.keys()) {
                if pi.shard.as_ref().is_some_and(|s| reader.shard_source(s).is_none()) {
                    warnings.push(format!(
                        "{name:?}/{pname:?} lives in unresolved shard {:?}: not hashed",
                        pi.shard.as_deref().unwrap_or("")
                    ));
                    continue;
                }
                // Hashed piece by piece (a zstd-seekable part frame by frame): memory is one
                // frame, whatever the part declares, so nothing here is refused by the limit.
                let mut sha = Sha256::new();
                let mut stored = o
                    .parts
                    .get(pname)
                    .and_then(|p| p.digest.as_deref())
                    .map(|d| (d, tensorlane_core::zt::verify::digest_hasher(d)));
                let read = reader.read_chunks(name, pname, &mut |b| {
                    sha.update(b);
                    if let Some((_, Ok(h))) = stored.as_mut() {
                        h.update(b);
                    }
                    advance(bar.as_ref(), b.len() as u64);
                    Ok(())
                });
                match read {
                    Ok(()) => {
                        pi.sha256 = Some(hex::encode(sha.finalize()));
                        // The bytes are at hand: say when the stored digest does not match them.
                        if let Some((d, h)) = stored
                            && let Err(e) = h.and_then(|h| tensorlane_core::zt::verify::check_digest_of(d, h.finish()))
                            && e.rule == Rule::Digest
                        {
                            warnings.push(format!(
                                "{name:?}/{pname:?}: the stored digest does not match the bytes ({}); \
                                 `tensorlane verify` rejects this file",
                                e.message
                            ));
                        }
                    }
                    Err(e) if e.rule.is_rejection() => return Err(e.into()),
                    Err(e) => warnings.push(format!("{name:?}/{pname:?} not hashed: {e}")),
                }
            }
            if o.layout == layout::DENSE {
                t.sha256 = t.parts.iter().find(|p| p.name == "data").and_then(|p| p.sha256.clone());
            }
        }
        if let Some(b) = bar {
            b.finish_and_clear();
        }
    }
    report.warnings = warnings;
    Ok(report)
}

fn legacy_digest(d: &legacy::Digest) -> String {
    match d {
        legacy::Digest::Crc32c(n) => format!("crc32c:0x{n:08X}"),
        legacy::Digest::Sha256(h) => format!("sha256:{}", hex::encode(h)),
        legacy::Digest::Other(s) | legacy::Digest::Malformed(s) => s.clone(),
    }
}

/// Inspects a legacy v1.2 / v0.1 file. With `hash`, every component is read (its digest over the
/// stored bytes verified) and its decoded bytes hashed.
pub fn inspect_legacy(file: &str, src: Source, hash: bool) -> Result<ZtReport, CliError> {
    let bytes = src.size();
    let r = LegacyReader::open(src)?;
    let format = match r.version() {
        legacy::LegacyVersion::V1_2 => "zt-v1",
        legacy::LegacyVersion::V0_1 => "zt-v0",
    };
    let total: u64 = r
        .objects()
        .iter()
        .flat_map(|o| &o.components)
        .map(|c| c.uncompressed_length.unwrap_or(c.length))
        .sum();
    let bar = if hash { progress(total, "hashing") } else { None };
    let mut tensors = Vec::new();
    for o in r.objects() {
        let mut parts = Vec::new();
        for c in &o.components {
            let logical = c.logical_type.as_ref().map(|t| t.name().to_string());
            let nbytes = match c.encoding {
                legacy::Encoding::Raw => c.length,
                _ => c.uncompressed_length.unwrap_or(c.length),
            };
            let sha256 = if hash {
                Some(sha256_hex(&r.read_component(o, c)?, bar.as_ref()))
            } else {
                None
            };
            parts.push(ZtPartRow {
                name: c.role.clone(),
                dtype: c.dtype.name(),
                logical,
                encoding: match &c.encoding {
                    legacy::Encoding::Raw => None,
                    legacy::Encoding::Zstd => Some("zstd".into()),
                    legacy::Encoding::Other(s) => Some(s.clone()),
                },
                offset: c.offset,
                length: c.length,
                shard: None,
                nbytes,
                digest: c.digest.as_ref().map(legacy_digest),
                sha256,
            });
        }
        let dense = o.format == legacy::Format::Dense;
        let main = if dense {
            parts.iter().find(|p| p.name == "data")
        } else {
            main_part(parts.iter().map(|p| (p.name.as_str(), p)))
        };
        let dtype = main
            .map(|p| match (&p.logical, p.dtype) {
                (None, d) => d.to_string(),
                (Some(l), _) => element_name(DType::U8, Some(l)),
            })
            .unwrap_or_default();
        tensors.push(ZtObjectRow {
            name: o.name.clone(),
            kind: kind_of(o.format.name()),
            dtype,
            shape: o.shape.clone(),
            nbytes: if dense {
                main.map_or(0, |p| p.nbytes)
            } else {
                parts.iter().map(|p| p.nbytes).sum()
            },
            sha256: if dense {
                main.and_then(|p| p.sha256.clone())
            } else {
                None
            },
            layout: o.format.name().to_string(),
            parts,
            attributes: o.attributes.as_ref().map(cbor_to_json),
        });
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(ZtReport {
        format,
        file: file.to_string(),
        bytes,
        packets: 0,
        tensors,
        data_shard: false,
        manifest: Some(BlobInfo {
            offset: r.manifest_offset(),
            length: bytes.saturating_sub(r.manifest_offset()).saturating_sub(16),
        }),
        version: r.manifest_version().map(str::to_string),
        shards: Vec::new(),
        attributes: r.attributes().map(cbor_to_json),
        skipped: r.skipped().to_vec(),
        warnings: Vec::new(),
    })
}

impl Table for ZtReport {
    fn to_table(&self) -> String {
        let mut out = format!(
            "{}: {} file, {}, {} object{}{}\n",
            self.file,
            self.format,
            crate::output::size(self.bytes),
            self.tensors.len(),
            if self.tensors.len() == 1 { "" } else { "s" },
            if self.data_shard {
                " (a data shard: blobs without a manifest)"
            } else {
                ""
            }
        );
        if let Some(v) = &self.version {
            out.push_str(&format!("manifest version {v}\n"));
        }
        for s in &self.shards {
            out.push_str(&format!(
                "shard {:?}: {}, {} -> {}\n",
                s.name,
                crate::output::size(s.size),
                s.digest,
                s.file.as_deref().unwrap_or("(not found)")
            ));
        }
        if let Some(a) = &self.attributes {
            out.push_str(&format!("attributes: {a}\n"));
        }
        let hashed = self.tensors.iter().any(|t| t.parts.iter().any(|p| p.sha256.is_some()));
        let mut rows: Vec<Vec<String>> = vec![
            [
                "NAME", "LAYOUT", "DTYPE", "SHAPE", "NBYTES", "BLOB", "ENCODING", "DIGEST",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ];
        if hashed {
            rows[0].push("SHA256".into());
        }
        for t in &self.tensors {
            let single = t.parts.len() == 1;
            let blob = |p: &ZtPartRow| match &p.shard {
                Some(s) => format!("{s}@{}+{}", p.offset, p.length),
                None => format!("@{}+{}", p.offset, p.length),
            };
            let mut r = vec![
                t.name.clone(),
                t.layout.clone(),
                t.dtype.clone(),
                shape_str(&t.shape),
                t.nbytes.to_string(),
            ];
            if single {
                let p = &t.parts[0];
                r.extend([
                    blob(p),
                    p.encoding.clone().unwrap_or("-".into()),
                    p.digest.clone().unwrap_or("-".into()),
                ]);
                if hashed {
                    r.push(p.sha256.clone().unwrap_or_default());
                }
            } else {
                r.extend(["".into(), "".into(), "".into()]);
                if hashed {
                    r.push(String::new());
                }
            }
            rows.push(r);
            if !single {
                for p in &t.parts {
                    let ty = match &p.logical {
                        Some(l) => format!("{} ({l})", p.dtype),
                        None => p.dtype.to_string(),
                    };
                    let mut r = vec![
                        format!("  .{}", p.name),
                        String::new(),
                        ty,
                        String::new(),
                        p.nbytes.to_string(),
                        blob(p),
                    ];
                    r.push(p.encoding.clone().unwrap_or("-".into()));
                    r.push(p.digest.clone().unwrap_or("-".into()));
                    if hashed {
                        r.push(p.sha256.clone().unwrap_or_default());
                    }
                    rows.push(r);
                }
            }
            if let Some(a) = &t.attributes {
                rows.push(vec![format!("  attributes: {a}")]);
            }
        }
        for w in &self.warnings {
            rows.push(vec![format!("warning: {w}")]);
        }
        out.push_str(&render_table(&rows, &[4]));
        out
    }
}

// ---------------------------------------------------------------------------------------------
// verify

/// What `verify` checked.
#[derive(Clone, Debug, Default)]
pub struct VerifySummary {
    /// The format verified.
    pub format: &'static str,
    /// Objects (or tensors) in the file.
    pub objects: usize,
    /// The core's report (`.zt` v2).
    pub report: VerifyReport,
    /// Parts / components read and checked (legacy, Tenso).
    pub parts: u64,
    /// A data shard (frame only).
    pub data_shard: bool,
    /// Canonical form was checked and holds.
    pub canonical: bool,
}

impl fmt::Display for VerifySummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.data_shard {
            write!(
                f,
                "ok: a valid {} data shard (container frame; no manifest)",
                self.format
            )?;
        } else if self.format == "zt" {
            let r = &self.report;
            write!(
                f,
                "ok: {} object{}, {} part digest{} verified, {} part{} without digest (content rules checked)",
                self.objects,
                if self.objects == 1 { "" } else { "s" },
                r.parts_digest_checked,
                if r.parts_digest_checked == 1 { "" } else { "s" },
                r.parts_without_digest,
                if r.parts_without_digest == 1 { "" } else { "s" },
            )?;
            if r.shards_checked > 0 {
                write!(
                    f,
                    ", {} shard file digest{} verified",
                    r.shards_checked,
                    if r.shards_checked == 1 { "" } else { "s" }
                )?;
            }
            if !r.unresolved.is_empty() {
                write!(
                    f,
                    "; {} part{} in shards not checked (use --deep)",
                    r.unresolved.len(),
                    if r.unresolved.len() == 1 { "" } else { "s" }
                )?;
            }
        } else {
            write!(
                f,
                "ok: {} {} tensor{}, {} component{} checked",
                self.objects,
                self.format,
                if self.objects == 1 { "" } else { "s" },
                self.parts,
                if self.parts == 1 { "" } else { "s" }
            )?;
        }
        if self.canonical {
            write!(f, "; canonical")?;
        }
        Ok(())
    }
}

/// Verifies a `.zt` v2 file: validation (spec §13), then every object's layout profile, content
/// rules and digests. `deep` resolves and checks the shards (their parts and whole-file digests);
/// without it parts in shards are listed as unresolved. `canonical` also checks §10.
pub fn verify_zt(path: &Path, src: Source, deep: bool, canonical: bool) -> Result<VerifySummary, CliError> {
    let (reader, _, _) = if deep {
        open_zt(path, src, true)?
    } else {
        (Reader::open(src)?, Vec::new(), Vec::new())
    };
    let mut s = VerifySummary {
        format: "zt",
        objects: reader.len(),
        data_shard: reader.is_data_shard(),
        ..Default::default()
    };
    if !reader.is_data_shard() {
        if let Some(m) = reader.manifest() {
            crate::limits::check_zt_verify(m)?;
        }
        s.report = reader.verify().map_err(|e| reader.with_location(e))?;
    }
    if canonical {
        check_canonical(&reader)?;
        s.canonical = true;
    }
    Ok(s)
}

/// Verifies a legacy file: every component is read, its digest (over the stored bytes) checked
/// and zstd components decoded to their exact length.
pub fn verify_legacy(src: Source, canonical: bool) -> Result<VerifySummary, CliError> {
    let r = LegacyReader::open(src)?;
    let mut parts = 0;
    for o in r.objects() {
        for c in &o.components {
            r.read_component(o, c)?;
            parts += 1;
        }
        r.to_v2_object(o)?;
    }
    if canonical {
        return Err(CliError::NotCanonical(
            "a legacy .zt file is never in .zt v2 canonical form (convert it first)".into(),
        ));
    }
    let format = if r.version() == legacy::LegacyVersion::V1_2 {
        "zt-v1"
    } else {
        "zt-v0"
    };
    Ok(VerifySummary {
        format,
        objects: r.objects().len(),
        parts,
        ..Default::default()
    })
}

/// A [`Sink`] that compares what a writer produces with the file's bytes (read with `pread`, a
/// piece at a time) instead of storing it.
struct CompareSink<'a> {
    original: &'a Source,
    pos: u64,
    mismatch: Option<u64>,
    /// A read of the original that failed (the file truncated underneath): reported instead of
    /// the writer's error it causes.
    failed: Option<CliError>,
    scratch: Vec<u8>,
}

impl CompareSink<'_> {
    /// Compares `buf` with the original at `self.pos`: the first differing offset, if any.
    fn compare(&mut self, buf: &[u8]) -> Result<Option<u64>, SourceError> {
        const PIECE: usize = 1 << 20;
        let size = self.original.size();
        let mut done = 0usize;
        while done < buf.len() {
            let at = self.pos + done as u64;
            if at >= size {
                return Ok(Some(at));
            }
            let n = (buf.len() - done).min(PIECE).min((size - at) as usize);
            self.scratch.resize(n, 0);
            self.original.read_at(at, &mut self.scratch)?;
            if let Some(i) = (0..n).find(|&i| self.scratch[i] != buf[done + i]) {
                return Ok(Some(at + i as u64));
            }
            done += n;
        }
        Ok(None)
    }
}

impl Sink for CompareSink<'_> {
    fn write_all(&mut self, buf: &[u8]) -> Result<(), ZtError> {
        if self.mismatch.is_none() {
            match self.compare(buf) {
                Ok(m) => self.mismatch = m,
                Err(e) => {
                    self.failed = Some(truncated(self.original, e));
                    return Err(ZtError::sink("the file could not be read back for the comparison"));
                }
            }
        }
        self.pos += buf.len() as u64;
        Ok(())
    }
    fn position(&self) -> u64 {
        self.pos
    }
    fn read_back(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), ZtError> {
        // Everything before `mismatch` equals the original; after it the comparison is already
        // lost, so the original bytes are as good an answer as any.
        self.original.read_at(offset, buf).map_err(|e| {
            let m = format!("read back at {offset}: {e}");
            self.failed = Some(truncated(self.original, e));
            ZtError::sink(m)
        })
    }
    fn truncate(&mut self, len: u64) -> Result<(), ZtError> {
        if self.mismatch.is_some_and(|m| m >= len) {
            self.mismatch = None;
        }
        self.pos = len;
        Ok(())
    }
}

/// Checks canonical form (spec §10) of an opened, valid file: rule 6 (single file), then rule 4
/// (every part raw with an `xxh3` digest), then rules 5 and 1–3 by re-encoding the objects
/// through the canonical writer into a sink that compares with the file byte for byte. The file
/// is read with `pread` (one object's parts in memory at a time, each under `--max-tensor-bytes`),
/// so a file truncated meanwhile is an error naming the range, not SIGBUS.
pub fn check_canonical(reader: &Reader<Source>) -> Result<(), CliError> {
    let nc = |m: String| Err(CliError::NotCanonical(m));
    let Some(m) = reader.manifest() else {
        return nc("rule 1: a data shard has no manifest".into());
    };
    if let Some(t) = &m.shards {
        return nc(format!(
            "rule 6: canonical form is single-file, but the manifest declares {} shard(s)",
            t.len()
        ));
    }
    for (o, obj) in &m.objects {
        for (p, part) in &obj.parts {
            if part.encoding.is_some() {
                return nc(format!("rule 4: {o:?}/{p:?} is stored under an encoding"));
            }
            match &part.digest {
                Some(d) if d.starts_with("xxh3:") => {}
                Some(d) => return nc(format!("rule 4: {o:?}/{p:?} has digest {d:?}, not xxh3")),
                None => return nc(format!("rule 4: {o:?}/{p:?} has no digest")),
            }
        }
    }
    let original = reader.source();
    let mut sink = CompareSink {
        original,
        pos: 0,
        mismatch: None,
        failed: None,
        scratch: Vec::new(),
    };
    // The writer's errors, unless a read of the file failed first (that is the real cause).
    let write_result = (|| {
        let mut w = Writer::new(&mut sink, Options::canonical()).map_err(|e| CliError::Refused(e.to_string()))?;
        if let Some(a) = &m.attributes {
            w.set_attributes(a.clone())
                .map_err(|e| CliError::NotCanonical(format!("file attributes: {e}")))?;
        }
        for (name, o) in &m.objects {
            let mut spec = ObjectSpec::new(&o.shape, o.layout.clone());
            spec.attributes = o.attributes.clone();
            // One object's parts in memory at a time, each read with pread under the limit.
            let mut bytes = Vec::with_capacity(o.parts.len());
            for (pn, p) in &o.parts {
                crate::limits::check_zt_part(name, p, pn)?;
                bytes.push(reader.read(name, pn)?);
            }
            let parts: Vec<PartSpec<'_>> = o
                .parts
                .iter()
                .zip(&bytes)
                .map(|((pn, p), b)| {
                    let s = PartSpec::new(pn.clone(), p.dtype, b);
                    match &p.logical {
                        Some(l) => s.logical(l.clone()),
                        None => s,
                    }
                })
                .collect();
            if let Err(e) = w.add_object(name, &spec, &parts) {
                return Err(CliError::NotCanonical(match e.rule {
                    Rule::Name => format!("rule 5: {e}"),
                    _ => format!("the canonical writer refuses {name:?}: {e}"),
                }));
            }
        }
        w.finish()
            .map_err(|e| CliError::NotCanonical(format!("the canonical writer refuses the manifest: {e}")))?;
        Ok(())
    })();
    if let Some(e) = sink.failed.take() {
        return Err(e);
    }
    write_result?;
    let end = sink.pos;
    match sink.mismatch {
        Some(at) => nc(format!(
            "rules 1-3: the file differs from its canonical encoding at byte {at} (blob placement, order, sharing or manifest)"
        )),
        None if end != original.size() => nc(format!(
            "rule 1: the canonical encoding is {end} bytes, the file {} (unreferenced bytes or an appended generation)",
            original.size()
        )),
        None => Ok(()),
    }
}

/// Verifies a Tenso packet file: every packet decodes (integrity footers checked).
pub fn verify_tenso(file: &str, src: &Source, canonical: bool) -> Result<VerifySummary, CliError> {
    let r = crate::inspect::inspect_bytes(&whole(src, "tenso")?, file, &Default::default())?;
    if canonical {
        return Err(CliError::NotCanonical(
            "canonical form is defined for .zt v2 files only".into(),
        ));
    }
    let parts = r.tensors.len() as u64;
    Ok(VerifySummary {
        format: "tenso",
        objects: r.tensors.len(),
        parts,
        ..Default::default()
    })
}

// ---------------------------------------------------------------------------------------------
// convert

/// What a conversion may produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// `.zt` v2, canonical form.
    Zt,
    /// A Tenso packet file: one bundle.
    Tenso,
}

impl Target {
    /// Parses `zt` / `tenso`.
    pub fn parse(s: &str) -> Option<Target> {
        match s {
            "zt" => Some(Target::Zt),
            "tenso" => Some(Target::Tenso),
            _ => None,
        }
    }
}

/// What [`convert`] did.
#[derive(Clone, Debug)]
pub struct Converted {
    /// Input format.
    pub from: &'static str,
    /// Output format.
    pub to: &'static str,
    /// Tensors / objects written.
    pub objects: usize,
    /// Output size in bytes.
    pub bytes: u64,
    /// What was not carried over (printed as warnings).
    pub warnings: Vec<String>,
}

/// One object on its way into a canonical `.zt` file.
struct ZtEntry<'a> {
    name: String,
    shape: Vec<u64>,
    layout: String,
    attributes: Option<Value<'static>>,
    parts: EntryParts<'a>,
}

/// An entry's parts: at hand, or read from a `.zt` v2 file when the object is written (so that
/// one object's parts are in memory at a time, not the whole file's).
enum EntryParts<'a> {
    /// Decoded already (or borrowed from bytes in memory).
    Ready(Vec<EntryPart<'a>>),
    /// The object of the same name in this file, read (`pread`) just before it is written.
    Zt(&'a Reader<Source>),
}

impl<'a> ZtEntry<'a> {
    /// Decoded bytes of all parts.
    fn nbytes(&self) -> u64 {
        match &self.parts {
            EntryParts::Ready(v) => v.iter().map(|p| p.3.len() as u64).sum(),
            EntryParts::Zt(r) => r
                .object(&self.name)
                .map_or(0, |o| o.parts.values().map(|p| p.decoded_size()).sum()),
        }
    }

    /// The parts, read now when they come from a `.zt` file (each under `--max-tensor-bytes`).
    fn load(&self) -> Result<Cow<'_, [EntryPart<'a>]>, CliError> {
        match &self.parts {
            EntryParts::Ready(v) => Ok(Cow::Borrowed(v)),
            EntryParts::Zt(r) => {
                let o = r.object(&self.name)?;
                let mut parts = Vec::with_capacity(o.parts.len());
                for (pn, p) in &o.parts {
                    crate::limits::check_zt_part(&self.name, p, pn)?;
                    parts.push((pn.clone(), p.dtype, p.logical.clone(), r.read(&self.name, pn)?));
                }
                Ok(Cow::Owned(parts))
            }
        }
    }
}

/// A part on its way into a `.zt` file: name, storage dtype, logical type, decoded bytes.
type EntryPart<'a> = (String, DType, Option<String>, Cow<'a, [u8]>);

/// Writes `entries` (in bytewise name order) as a canonical `.zt` file, published atomically.
fn write_canonical(
    dest: &Path,
    mut entries: Vec<ZtEntry<'_>>,
    attributes: Option<Value<'static>>,
    options: Options,
) -> Result<u64, CliError> {
    entries.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    if let Some(w) = entries.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(CliError::Refused(format!(
            "two tensors are named {:?}; .zt object names are unique",
            w[0].name
        )));
    }
    let total: u64 = entries.iter().map(ZtEntry::nbytes).sum();
    let bar = progress(total, "writing");
    let mut w = ZtFile::publish(dest, options)?;
    if let Some(a) = attributes {
        w.set_attributes(a)?;
    }
    for e in &entries {
        let mut spec = ObjectSpec::new(&e.shape, e.layout.clone());
        spec.attributes = e.attributes.clone();
        let loaded = e.load()?;
        let parts: Vec<PartSpec<'_>> = loaded
            .iter()
            .map(|(n, d, l, b)| {
                let s = PartSpec::new(n.clone(), *d, b);
                match l {
                    Some(l) => s.logical(l.clone()),
                    None => s,
                }
            })
            .collect();
        w.add_object(&e.name, &spec, &parts)?;
        advance(bar.as_ref(), loaded.iter().map(|p| p.3.len() as u64).sum());
    }
    let size = w.finish()?.size;
    finish(bar);
    Ok(size)
}

/// What `convert` does with a quantized Tenso packet (`--quantized`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Quantized {
    /// Refuse the conversion, naming the packet and the options (the default).
    #[default]
    Error,
    /// Leave the packet out, with a warning.
    Skip,
    /// Write `(q - zero_point) * scale` as a float32 tensor.
    Dequantize,
}

impl Quantized {
    /// `error`, `skip` or `dequantize`.
    pub fn parse(s: &str) -> Option<Quantized> {
        Some(match s {
            "error" => Quantized::Error,
            "skip" => Quantized::Skip,
            "dequantize" => Quantized::Dequantize,
            _ => return None,
        })
    }
}

/// The options of `tensorlane convert`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConvertOptions {
    /// Write ggml block-quantized tensors (GGUF) as float32 (`--dequantize`).
    pub dequantize: bool,
    /// Quantized packets (`--quantized`).
    pub quantized: Quantized,
    /// Leave out, with a warning, packets `.zt` has no layout for (strings, COO and CSC sparse
    /// matrices) instead of refusing the file (`--skip-unsupported`).
    pub skip_unsupported: bool,
    /// `.zt` blob alignment (`--align`): `None` is canonical form's 64 KiB; a smaller power of
    /// two (4096 at least) gives a smaller, non-canonical file.
    pub align: Option<u64>,
}

impl ConvertOptions {
    /// The `.zt` writer options: canonical form, or non-canonical with `align`.
    pub fn zt_options(&self) -> Options {
        match self.align {
            None | Some(65536) => Options::canonical(),
            Some(a) => Options::non_canonical().alignment(a),
        }
    }
}

/// A note for a `.zt` output much larger than its input because of blob alignment (`None` when
/// the growth is small or `--align` was given).
pub fn alignment_note(input_bytes: u64, output_bytes: u64, opts: &ConvertOptions) -> Option<String> {
    if opts.align.is_some() || output_bytes < input_bytes.saturating_mul(2) || output_bytes - input_bytes < 64 << 10 {
        return None;
    }
    Some(format!(
        "the .zt file is {} where the input is {}: canonical .zt aligns every blob to 64 KiB; pass --align 4096 \
         for a smaller (non-canonical) file",
        crate::output::human_bytes(output_bytes),
        crate::output::human_bytes(input_bytes)
    ))
}

/// Collects the leaves of a packet as `.zt` objects, named like `inspect` names them: dense
/// tensors as `dense`, CSR matrices as `zt.sparse_csr/1`, quantized tensors per `opts`; what is
/// left out goes to `skipped` (as warnings).
fn tenso_leaves<'a>(
    p: &'a Packet<'a>,
    name: String,
    out: &mut Vec<ZtEntry<'a>>,
    opts: ConvertOptions,
    skipped: &mut Vec<String>,
) -> Result<(), CliError> {
    match p {
        Packet::Dense(t) => {
            out.push(ZtEntry {
                name,
                shape: t.shape().to_vec(),
                layout: layout::DENSE.into(),
                attributes: None,
                parts: EntryParts::Ready(vec![("data".into(), t.dtype(), None, Cow::Borrowed(t.data()))]),
            });
            Ok(())
        }
        Packet::Bundle(b) => {
            for (k, v) in &b.entries {
                let sub = if name.is_empty() {
                    k.to_string()
                } else {
                    format!("{name}/{k}")
                };
                tenso_leaves(v, sub, out, opts, skipped)?;
            }
            Ok(())
        }
        Packet::Sparse(sp) if sp.format == wire::SparseFormat::Csr => {
            let [values, indices, indptr] = &sp.components;
            // .zt indices are unsigned; a valid CSR matrix's signed indices are all ≥ 0, so the
            // same bytes read as unsigned hold the same values.
            sp.validate()
                .map_err(|e| CliError::Invalid(format!("tenso entry {name:?}: {e}")))?;
            let unsigned = |d: DType| match d {
                DType::I32 => DType::U32,
                DType::I64 => DType::U64,
                other => other,
            };
            out.push(ZtEntry {
                name,
                shape: sp.shape.clone(),
                layout: layout::SPARSE_CSR.into(),
                attributes: None,
                parts: EntryParts::Ready(vec![
                    (
                        "indices".into(),
                        unsigned(indices.dtype()),
                        None,
                        Cow::Borrowed(indices.data()),
                    ),
                    (
                        "indptr".into(),
                        unsigned(indptr.dtype()),
                        None,
                        Cow::Borrowed(indptr.data()),
                    ),
                    ("values".into(), values.dtype(), None, Cow::Borrowed(values.data())),
                ]),
            });
            Ok(())
        }
        Packet::Quantized(q) => match opts.quantized {
            Quantized::Skip => {
                skipped.push(format!(
                    "tenso entry {name:?} (a quantized packet) was left out (--quantized skip)"
                ));
                Ok(())
            }
            Quantized::Dequantize => {
                let values = q
                    .dequantize()
                    .map_err(|e| CliError::Invalid(format!("tenso entry {name:?} does not dequantize: {e}")))?;
                let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                out.push(ZtEntry {
                    name,
                    shape: q.shape.clone(),
                    layout: layout::DENSE.into(),
                    attributes: None,
                    parts: EntryParts::Ready(vec![("data".into(), DType::F32, None, Cow::Owned(bytes))]),
                });
                Ok(())
            }
            Quantized::Error => Err(CliError::Refused(format!(
                "tenso entry {name:?} is a quantized packet, which .zt has no lossless form for here: pass \
                 --quantized dequantize (write it as float32) or --quantized skip (leave it out)"
            ))),
        },
        other if opts.skip_unsupported => {
            skipped.push(format!(
                "tenso entry {name:?} (a {} packet) was left out (--skip-unsupported)",
                describe(other)
            ));
            Ok(())
        }
        other => Err(CliError::Refused(format!(
            "tenso entry {name:?} is a {} packet; converting to .zt supports dense tensors, CSR sparse matrices, \
             quantized tensors (with --quantized) and bundles of them: pass --skip-unsupported to leave it out",
            describe(other)
        ))),
    }
}

/// `strings`, `sparse (COO)`, ...
fn describe(p: &Packet<'_>) -> String {
    match p {
        Packet::Sparse(sp) => format!("sparse ({:?})", sp.format).to_lowercase(),
        other => other.kind_name().to_string(),
    }
}

/// Decodes the packets of a Tenso file: the first must decode; after it, bytes that do not start
/// with the magic end the stream (as `inspect` treats them).
pub fn decode_packets(data: &[u8]) -> Result<Vec<Packet<'_>>, CliError> {
    let mut packets = Vec::new();
    let mut off = 0usize;
    while off < data.len() {
        if !packets.is_empty() && !data[off..].starts_with(&wire::MAGIC) {
            break;
        }
        let d = wire::decode_with(&data[off..], &crate::limits::decode_options()).map_err(|error| CliError::Tenso {
            packet: packets.len(),
            packet_offset: off as u64,
            error,
        })?;
        if d.len == 0 {
            break;
        }
        off += d.len;
        packets.push(d.packet);
    }
    Ok(packets)
}

/// The `.zt` objects of decoded Tenso packets: a single bundle's entries by their key paths,
/// otherwise every name prefixed with its packet index (`#i`).
fn tenso_entries<'a>(
    packets: &'a [Packet<'a>],
    opts: ConvertOptions,
    skipped: &mut Vec<String>,
) -> Result<Vec<ZtEntry<'a>>, CliError> {
    let multi = packets.len() > 1;
    let mut entries = Vec::new();
    for (i, p) in packets.iter().enumerate() {
        let prefix = match (p, multi) {
            (Packet::Bundle(_), false) => String::new(),
            _ => format!("#{i}"),
        };
        tenso_leaves(p, prefix, &mut entries, opts, skipped)?;
    }
    Ok(entries)
}

/// The objects of a legacy file, as `.zt` v2 objects, and its attributes.
fn legacy_entries(r: &LegacyReader<Source>) -> Result<(Vec<ZtEntry<'_>>, Option<Value<'static>>), CliError> {
    let mut entries = Vec::new();
    for o in r.objects() {
        let v = r.to_v2_object(o)?;
        entries.push(ZtEntry {
            name: v.name,
            shape: v.shape,
            layout: v.layout,
            attributes: v.attributes,
            parts: EntryParts::Ready(
                v.parts
                    .into_iter()
                    .map(|p| (p.name, p.dtype, p.logical_type, p.bytes))
                    .collect(),
            ),
        });
    }
    Ok((entries, r.attributes().cloned()))
}

/// The objects of a `.zt` v2 file and its attributes; each object's parts are read when it is
/// written ([`EntryParts::Zt`]).
fn zt_entries(reader: &Reader<Source>) -> Result<(Vec<ZtEntry<'_>>, Option<Value<'static>>), CliError> {
    let m = convertible(reader)?;
    let entries = m
        .objects
        .iter()
        .map(|(name, o)| ZtEntry {
            name: name.clone(),
            shape: o.shape.clone(),
            layout: o.layout.clone(),
            attributes: o.attributes.clone(),
            parts: EntryParts::Zt(reader),
        })
        .collect();
    Ok((entries, m.attributes.clone()))
}

/// Writes the dense objects of a `.zt` v2 file as one Tenso bundle, published atomically.
/// Returns the objects and bytes written.
fn zt_to_tenso(reader: &Reader<Source>, output: &Path) -> Result<(usize, u64), CliError> {
    let m = convertible(reader)?;
    let total: u64 = m
        .objects
        .values()
        .flat_map(|o| o.parts.values())
        .map(|p| p.decoded_size())
        .sum();
    let bar = progress(total, "reading");
    let mut bundle = Bundle::new();
    for (name, o) in &m.objects {
        if o.layout != layout::DENSE {
            return Err(CliError::Refused(format!(
                "object {name:?} has layout {:?}; a Tenso bundle holds dense tensors only, so this file cannot be converted",
                o.layout
            )));
        }
        // The tensor is assembled whole: refuse what is over the limit before decoding it.
        for (pn, p) in &o.parts {
            crate::limits::check_zt_part(name, p, pn)?;
        }
        let t = reader.tensor(name).map_err(|e| match e.rule {
            Rule::Unsupported => {
                CliError::Refused(format!("object {name:?} cannot be represented in Tenso: {}", e.message))
            }
            _ => CliError::Zt(e),
        })?;
        advance(bar.as_ref(), t.nbytes() as u64);
        bundle.entries.push((Cow::Owned(name.clone()), Packet::Dense(t)));
    }
    finish(bar);
    let n = bundle.entries.len();
    let bytes = wire::encode(&Packet::Bundle(bundle), &EncodeOptions::default())
        .map_err(|e| CliError::Refused(format!("Tenso cannot encode the bundle: {e}")))?;
    tensorlane::publish::write_file(output, &bytes)?;
    Ok((n, bytes.len() as u64))
}

/// Converts `input` (opened as `src`, read as `format`: [`crate::identify::identify`]) to
/// `output`. The target defaults to `.zt` v2 for Tenso and legacy input and to Tenso for `.zt` v2
/// input; `quantized` says what becomes of quantized Tenso packets.
pub fn convert(
    input: &Path,
    src: Source,
    format: Format,
    output: &Path,
    to: Option<Target>,
    opts: ConvertOptions,
) -> Result<Converted, CliError> {
    let mut warnings = Vec::new();
    let target = to.unwrap_or(if format == Format::Zt {
        Target::Tenso
    } else {
        Target::Zt
    });
    let done = |to, objects, bytes, warnings| Converted {
        from: format.name(),
        to,
        objects,
        bytes,
        warnings,
    };
    match (format, target) {
        (Format::Zt, Target::Tenso) => {
            let (reader, _, _) = open_zt(input, src, true)?;
            let (n, bytes) = zt_to_tenso(&reader, output)?;
            Ok(done("tenso", n, bytes, Vec::new()))
        }
        (Format::Tenso | Format::Zt | Format::ZtV1 | Format::ZtV0, Target::Zt) => {
            // Each reader lives here, so the entries can borrow from it.
            let packets;
            let whole_bytes;
            let legacy;
            let zt;
            let (entries, attributes) = match format {
                Format::Tenso => {
                    whole_bytes = whole(&src, "tenso")?;
                    packets = decode_packets(&whole_bytes)?;
                    (tenso_entries(&packets, opts, &mut warnings)?, None)
                }
                Format::Zt => {
                    zt = open_zt(input, src.clone(), true)?.0;
                    zt_entries(&zt)?
                }
                _ => {
                    legacy = LegacyReader::open(src.clone())?;
                    legacy_entries(&legacy)?
                }
            };
            let n = entries.len();
            let bytes = write_canonical(output, entries, attributes, opts.zt_options())?;
            Ok(done("zt", n, bytes, warnings))
        }
        (f, Target::Tenso) => Err(CliError::Refused(format!(
            "converting {} to Tenso is not supported (convert it to .zt first)",
            f.name()
        ))),
        (f, _) => Err(CliError::Refused(format!("converting {} is not supported", f.name()))),
    }
}

/// The manifest of a file that describes tensors (a data shard has none to convert).
fn convertible<S: ReadAt>(reader: &Reader<S>) -> Result<&tensorlane_core::zt::manifest::Manifest, CliError> {
    reader
        .manifest()
        .ok_or_else(|| CliError::Refused("a data shard describes no tensors; there is nothing to convert".into()))
}

#[cfg(test)]
mod tests {
    //! Files truncated after they were opened, while a command reads them: each path gives an
    //! error (exit 2, saying the file changed where the reader can tell), never SIGBUS. The file
    //! is opened for `pread`, as the commands open it, then cut, then read.

    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tl-cut-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A canonical `.zt` with three dense float32 objects of 64 KiB each.
    fn write_zt(path: &Path) -> u64 {
        let data = vec![7u8; 64 << 10];
        let mut w = ZtFile::publish(path, Options::canonical()).unwrap();
        for name in ["a", "b", "c"] {
            w.add_object(
                name,
                &ObjectSpec::dense(&[16 << 10]),
                &[PartSpec::new("data", DType::F32, &data)],
            )
            .unwrap();
        }
        w.finish().unwrap().size
    }

    /// A Tenso file: one bundle of two float32 tensors.
    fn write_tenso(path: &Path) -> u64 {
        let mut b = Bundle::new();
        for name in ["x", "y"] {
            let t = tensorlane_core::Tensor::from_values(vec![4096], &[1.5f32; 4096]).unwrap();
            b.entries.push((Cow::Borrowed(name), Packet::Dense(t)));
        }
        let bytes = wire::encode(&Packet::Bundle(b), &EncodeOptions::default()).unwrap();
        std::fs::write(path, &bytes).unwrap();
        bytes.len() as u64
    }

    fn cut(path: &Path, len: u64) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .unwrap()
            .set_len(len)
            .unwrap();
    }

    /// An error a truncated file may give: exit 2, and a message that says where the read failed.
    fn check(what: &str, e: CliError) {
        let m = e.to_string();
        assert_eq!(e.exit_code(), 2, "{what}: {m}");
        assert!(
            m.contains("runs past the end") || m.contains("the file changed"),
            "{what}: {m}"
        );
    }

    #[test]
    fn zt_listing_of_a_file_cut_after_it_was_opened() {
        let d = scratch("list");
        let p = d.join("m.zt");
        let size = write_zt(&p);
        let src = open_source(&p).unwrap();
        cut(&p, size / 2);
        let e = inspect_zt(&p, "m.zt", src, false).unwrap_err();
        check("inspect", note_if_changed(&p, size, e));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn zt_canonical_check_of_a_file_cut_while_it_is_compared() {
        let d = scratch("canon");
        let p = d.join("m.zt");
        // Cut in the blobs (a part read fails) and in the manifest (the comparison's read fails).
        for keep in [100 << 10, 1 << 16 | 1, u64::MAX] {
            let size = write_zt(&p);
            let reader = Reader::open(open_source(&p).unwrap()).unwrap();
            let keep = if keep == u64::MAX { size - 8 } else { keep };
            cut(&p, keep);
            let e = check_canonical(&reader).unwrap_err();
            check(
                &format!("verify --canonical, cut to {keep}"),
                note_if_changed(&p, size, e),
            );
        }
        // The file intact: canonical.
        write_zt(&p);
        check_canonical(&Reader::open(open_source(&p).unwrap()).unwrap()).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn zt_conversions_of_a_file_cut_while_it_is_read() {
        let d = scratch("convert");
        let p = d.join("m.zt");
        // .zt -> .zt: the objects are listed, then each read as it is written.
        let size = write_zt(&p);
        let reader = Reader::open(open_source(&p).unwrap()).unwrap();
        let (entries, attributes) = zt_entries(&reader).unwrap();
        cut(&p, size / 2);
        let out = d.join("out.zt");
        let e = write_canonical(&out, entries, attributes, Options::canonical()).unwrap_err();
        check(".zt -> .zt", note_if_changed(&p, size, e));
        assert!(!out.exists(), "a failed conversion leaves no output");
        // .zt -> Tenso.
        let size = write_zt(&p);
        let reader = Reader::open(open_source(&p).unwrap()).unwrap();
        cut(&p, size / 2);
        let out = d.join("out.tenso");
        let e = zt_to_tenso(&reader, &out).unwrap_err();
        check(".zt -> Tenso", note_if_changed(&p, size, e));
        assert!(!out.exists());
        // .zt -> .zt through `convert`, cut before the reader validates it.
        let size = write_zt(&p);
        let src = open_source(&p).unwrap();
        cut(&p, size - 1);
        let e = convert(&p, src, Format::Zt, &out, Some(Target::Zt), ConvertOptions::default()).unwrap_err();
        check("convert", note_if_changed(&p, size, e));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn tenso_file_cut_after_it_was_opened() {
        let d = scratch("tenso");
        let p = d.join("t.tenso");
        for keep in [0, 100, 20_000] {
            let size = write_tenso(&p);
            let src = open_source(&p).unwrap();
            cut(&p, keep);
            let e = whole(&src, "tenso").unwrap_err();
            let m = e.to_string();
            check(&format!("read whole, cut to {keep}"), e);
            assert!(
                m.contains(&format!("{keep} bytes now, {size} when it was opened")) && m.contains("truncated"),
                "{m}"
            );
            let e = verify_tenso("t.tenso", &src, false).unwrap_err();
            check("verify", e);
            let e = convert(&p, src, Format::Tenso, &d.join("o.zt"), None, ConvertOptions::default()).unwrap_err();
            check("convert", e);
            assert!(!d.join("o.zt").exists());
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
