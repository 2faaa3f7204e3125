//! What only `.zt` files have, in the `tensorlane` CLI: the file-level facts `inspect` shows
//! under `zt` (shard table with the files the shards resolved to, manifest blob, data shard,
//! legacy manifest version), the attributes a `.zt` → `.zt` conversion keeps as they are, and the
//! format's checks `verify` runs ([`verify`]: layout profiles, content rules and digests named by
//! the spec's rules, shards with `--deep`, canonical form with `--canonical`). Everything else —
//! listing, reading, hashing, statistics, conversion — goes through [`Model`] like every format.

use std::path::Path;

use serde::Serialize;
use tensorlane_core::detect::Format;
use tensorlane_core::source::{ReadAt, SourceError};
use tensorlane_core::zt::Error as ZtError;
use tensorlane_core::zt::cbor::Value;
use tensorlane_core::zt::legacy::LegacyReader;
use tensorlane_core::zt::reader::Reader;
use tensorlane_core::zt::rule::Rule;
use tensorlane_core::zt::writer::{ObjectSpec, Options, PartSpec, Sink, Writer};

use tensorlane::model::Model;
use tensorlane::source::Source;

use crate::error::CliError;
use crate::identify::truncated;

/// What only a `.zt` file has at file level (`inspect`'s `zt` key).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ZtInfo {
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

impl ZtInfo {
    /// Lines for `inspect`'s table.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        if self.data_shard {
            out.push_str("a data shard: blobs without a manifest\n");
        }
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
        out
    }
}

/// The file `model` was opened from (source 0).
fn root(model: &Model) -> Result<&Source, CliError> {
    model
        .source(0)
        .ok_or_else(|| CliError::Io(format!("{}: the file is not open", model.path().display())))
}

/// The `.zt` v2 reader of `model`'s root (validated again: the catalog keeps no reader).
fn reader(model: &Model) -> Result<Reader<&Source>, CliError> {
    Ok(Reader::open(root(model)?)?)
}

/// The file-level facts of a `.zt` file (`None` for every other format).
pub fn zt_info(model: &Model) -> Result<Option<ZtInfo>, CliError> {
    match model.format() {
        Format::Zt => {
            let r = reader(model)?;
            let paths: Vec<&Path> = model.sources().map(|(p, _)| p).collect();
            let shards = r
                .shard_table()
                .into_iter()
                .flatten()
                .zip(1..)
                .map(|((name, e), k)| ShardInfo {
                    name: name.clone(),
                    size: e.size,
                    digest: e.digest.clone(),
                    file: (!model.is_missing(k)).then(|| paths[k].display().to_string()),
                })
                .collect();
            Ok(Some(ZtInfo {
                data_shard: r.is_data_shard(),
                manifest: r.manifest().filter(|_| !r.is_data_shard()).map(|m| BlobInfo {
                    offset: m.manifest_blob.offset,
                    length: m.manifest_blob.length,
                }),
                version: None,
                shards,
            }))
        }
        Format::ZtV1 | Format::ZtV0 => {
            let src = root(model)?;
            let r = LegacyReader::open(src)?;
            Ok(Some(ZtInfo {
                manifest: Some(BlobInfo {
                    offset: r.manifest_offset(),
                    length: src.size().saturating_sub(r.manifest_offset()).saturating_sub(16),
                }),
                version: r.manifest_version().map(str::to_string),
                ..Default::default()
            }))
        }
        _ => Ok(None),
    }
}

/// The attributes of a `.zt` (or legacy `.zt`) file exactly as it stores them (`Some(None)`: it
/// has none), for a conversion to `.zt` to keep; `None` for every other format.
pub fn file_attributes(model: &Model) -> Result<Option<Option<Value<'static>>>, CliError> {
    Ok(match model.format() {
        Format::Zt => Some(reader(model)?.attributes().cloned()),
        Format::ZtV1 | Format::ZtV0 => Some(LegacyReader::open(root(model)?)?.attributes().cloned()),
        _ => None,
    })
}

/// What [`verify`] checked.
pub struct ZtVerify {
    /// The sentence `verify` prints.
    pub sentence: String,
    /// A data shard (container frame only).
    pub data_shard: bool,
    /// Some shards were not found (their parts are not checked).
    pub unresolved: bool,
}

/// The `.zt` v2 checks of `verify`, run before [`Model::verify`] reads every tensor: every
/// object's layout profile, content rules and digests (errors named by the spec's rule, with
/// object, part and byte offset); with `deep`, the shards (all must be found: their parts and
/// whole-file digests); with `canonical`, canonical form (spec §10).
pub fn verify(model: &Model, deep: bool, canonical: bool) -> Result<ZtVerify, CliError> {
    let missing = model.warnings();
    if deep && let Some(w) = missing.first() {
        return Err(CliError::Io(w.clone()));
    }
    let mut reader = reader(model)?;
    if deep {
        let names: Vec<String> = reader
            .shard_table()
            .into_iter()
            .flatten()
            .map(|(n, _)| n.clone())
            .collect();
        for (name, k) in names.iter().zip(1..) {
            let src = model
                .source(k)
                .ok_or_else(|| CliError::Io(format!("shard {name:?} is not open")))?;
            reader = reader.with_shard(name, src)?;
        }
    }
    let data_shard = reader.is_data_shard();
    let mut report = Default::default();
    if !data_shard {
        if let Some(m) = reader.manifest() {
            crate::limits::check_zt_verify(m)?;
        }
        report = reader.verify().map_err(|e| reader.with_location(e))?;
    }
    let r: &tensorlane_core::zt::reader::VerifyReport = &report;
    let plural = |n: u64| if n == 1 { "" } else { "s" };
    let mut s = if data_shard {
        "ok: a valid zt data shard (container frame; no manifest)".to_string()
    } else {
        let n = reader.len() as u64;
        format!(
            "ok: {n} object{}, {} part digest{} verified, {} part{} without digest (content rules checked)",
            plural(n),
            r.parts_digest_checked,
            plural(r.parts_digest_checked),
            r.parts_without_digest,
            plural(r.parts_without_digest),
        )
    };
    if r.shards_checked > 0 {
        s.push_str(&format!(
            ", {} shard file digest{} verified",
            r.shards_checked,
            plural(r.shards_checked)
        ));
    }
    if !r.unresolved.is_empty() {
        let n = r.unresolved.len() as u64;
        s.push_str(&format!("; {n} part{} in shards not checked (use --deep)", plural(n)));
    }
    if canonical {
        check_canonical(&reader)?;
        s.push_str("; canonical");
    }
    Ok(ZtVerify {
        sentence: s,
        data_shard,
        unresolved: !missing.is_empty(),
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
pub fn check_canonical(reader: &Reader<&Source>) -> Result<(), CliError> {
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
    let original: &Source = reader.source();
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

#[cfg(test)]
mod tests {
    //! Files truncated after they were opened, while a command reads them: each path gives an
    //! error (exit 2, saying the file changed where the reader can tell), never SIGBUS. The file
    //! is opened for `pread`, as the commands open it, then cut, then read.

    use super::*;
    use crate::convert::{ConvertOptions, Target, convert_model};
    use crate::identify::{note_if_changed, open_source};
    use std::borrow::Cow;
    use std::path::PathBuf;
    use tensorlane::zt_write::ZtFile;
    use tensorlane_core::DType;
    use tensorlane_core::wire::{self, Bundle, EncodeOptions, Packet};

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
        let (model, _) = crate::limits::open_model(&p).unwrap();
        cut(&p, size / 2);
        let e = crate::model_tools::inspect(&model, "m.zt", true).err().unwrap();
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
            let src = open_source(&p).unwrap();
            let reader = Reader::open(&src).unwrap();
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
        let src = open_source(&p).unwrap();
        check_canonical(&Reader::open(&src).unwrap()).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn conversions_of_a_file_cut_while_it_is_read() {
        let d = scratch("convert");
        for (input, write) in [("m.zt", write_zt as fn(&Path) -> u64), ("t.tenso", write_tenso)] {
            let p = d.join(input);
            for target in [Target::Zt, Target::Tenso, Target::Safetensors] {
                let size = write(&p);
                let (model, _) = crate::limits::open_model(&p).unwrap();
                cut(&p, size / 2);
                let out = d.join("out");
                let e = convert_model(&model, &out, target, &ConvertOptions::default()).unwrap_err();
                check(&format!("{input} -> {target:?}"), note_if_changed(&p, size, e));
                assert!(!out.exists(), "a failed conversion leaves no output");
            }
        }
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
            let e = crate::inspect::whole(&src, "tenso").unwrap_err();
            let m = e.to_string();
            check(&format!("read whole, cut to {keep}"), e);
            assert!(
                m.contains(&format!("{keep} bytes now, {size} when it was opened")) && m.contains("truncated"),
                "{m}"
            );
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
