//! `.zt` v2 and legacy `.zt` files through [`Model`], checked against the container's own reader.
//!
//! * every `.zt` file of the fixtures and of the conformance corpus's `valid/` folder opens as a
//!   `Model`; every tensor's bytes ([`Model::read`], [`Model::read_chunks`]) and every part's
//!   ([`Model::read_part`]) equal what [`Reader::read`] (or [`LegacyReader::read`]) gives for the
//!   same object and part, and reading fails exactly where the reader's read fails;
//! * a `.zt` written from a safetensors file lists the same tensors, dtypes, shapes, bytes and
//!   statistics as the safetensors file;
//! * a flipped byte in a part with a digest fails [`Model::read`] and [`Model::verify`] with a
//!   checksum error that names the object.

use std::path::{Path, PathBuf};

use tensorlane::model::Model;
use tensorlane::source::Source;
use tensorlane_core::detect::Format;
use tensorlane_core::formats::{ErrorKind, Storage};
use tensorlane_core::stats::StatsOptions;
use tensorlane_core::zt::legacy::LegacyReader;
use tensorlane_core::zt::reader::Reader;
use tensorlane_testkit as common;

fn zt_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for sub in ["fixtures", "conformance/zt/valid"] {
        let dir = common::data(sub);
        for rel in common::files_under(&dir) {
            if rel.extension().is_some_and(|e| e == "zt") {
                out.push(dir.join(rel));
            }
        }
    }
    assert!(out.len() > 20, "expected the .zt fixtures, found {}", out.len());
    out
}

/// Compares every tensor of `m` with `read(object, part)` of the container's reader.
fn compare(path: &Path, m: &Model, read: &dyn Fn(&str, &str) -> Option<Vec<u8>>) -> usize {
    let mut compared = 0;
    for t in &m.catalog().tensors {
        let ctx = format!("{} {}", path.display(), t.name);
        match &t.storage {
            Storage::Parts(p) => {
                for part in &p.parts {
                    let want = read(&t.name, &part.name);
                    let got = m.read_part(t, &part.name).ok().map(|b| b.into_owned());
                    assert_eq!(got, want, "{ctx} part {}", part.name);
                    compared += 1;
                }
                assert!(m.read(t).is_err(), "{ctx}: a tensor of parts is not read whole");
            }
            _ => {
                let part = match m.format() {
                    Format::Zt | Format::ZtV1 | Format::ZtV0 => "data",
                    _ => unreachable!(),
                };
                let want = read(&t.name, part);
                let got = m.read(t).ok().map(|b| b.into_owned());
                assert_eq!(got, want, "{ctx}");
                if let Some(want) = want {
                    let mut streamed = Vec::new();
                    m.read_chunks(t, 4096, &mut |p| {
                        streamed.extend_from_slice(p);
                        Ok(())
                    })
                    .unwrap_or_else(|e| panic!("{ctx}: read_chunks: {e}"));
                    assert_eq!(streamed, want, "{ctx}: read_chunks");
                }
                compared += 1;
            }
        }
    }
    compared
}

#[test]
fn every_zt_file_reads_as_its_own_reader_reads_it() {
    let mut compared = 0;
    for path in zt_files() {
        let m = Model::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let src = Source::open(&path).unwrap();
        compared += match m.format() {
            Format::Zt => {
                // Catalog source k (k >= 1) is the k-th shard of the table, in its (name) order,
                // resolved to a file next to the root; a shard not found is left unsupplied.
                let mut r = Reader::open(&src).unwrap();
                let names: Vec<String> = r.shard_table().map(|t| t.keys().cloned().collect()).unwrap_or_default();
                let files: Vec<(String, Source)> = names
                    .into_iter()
                    .zip(m.sources().skip(1))
                    .filter(|(_, (p, _))| p.is_file())
                    .map(|(n, (p, _))| (n, Source::open(p).unwrap()))
                    .collect();
                for (shard, s) in &files {
                    r = r.with_shard(shard, s).unwrap();
                }
                compare(&path, &m, &|o, p| r.read(o, p).ok().map(|b| b.into_owned()))
            }
            Format::ZtV1 | Format::ZtV0 => {
                let r = LegacyReader::open(&src).unwrap();
                compare(&path, &m, &|o, p| r.read(o, p).ok().map(|b| b.into_owned()))
            }
            other => panic!("{}: opened as {other:?}", path.display()),
        };
    }
    assert!(compared > 50, "compared {compared} tensors and parts");
}

#[test]
fn a_zt_from_safetensors_lists_and_summarises_like_the_safetensors_file() {
    let dir = common::live_dir("tensorlane-model-zt-from-st");
    for st in ["safetensors/dtypes.safetensors", "safetensors/numpy-writer.safetensors"] {
        let src = common::data("fixtures").join(st);
        let a = Model::open(&src).unwrap();
        let zt = dir.join("out.zt");
        let mut w =
            tensorlane::zt_write::ZtFile::create(&zt, tensorlane_core::zt::writer::Options::non_canonical()).unwrap();
        for t in &a.catalog().tensors {
            let Some(dtype) = (match t.ty {
                tensorlane_core::formats::ElementType::Dense(d)
                    if tensorlane_core::zt::format::dtype_zt_name(d).is_some() =>
                {
                    Some(d)
                }
                _ => None,
            }) else {
                continue;
            };
            let bytes = a.read(t).unwrap();
            w.add(&t.name, dtype, &t.shape, &bytes).unwrap();
        }
        w.finish().unwrap();
        let b = Model::open(&zt).unwrap();
        let opts = StatsOptions::default();
        let mut n = 0;
        for tb in &b.catalog().tensors {
            let ta = a.catalog().get(&tb.name).unwrap();
            assert_eq!((ta.ty, &ta.shape), (tb.ty, &tb.shape), "{st} {}", tb.name);
            assert_eq!(a.read(ta).unwrap(), b.read(tb).unwrap(), "{st} {}", tb.name);
            let sa = a.stats(ta, &opts, &mut |_, _| {}).unwrap();
            let sb = b.stats(tb, &opts, &mut |_, _| {}).unwrap();
            assert_eq!(format!("{sa:?}"), format!("{sb:?}"), "{st} {}", tb.name);
            n += 1;
        }
        assert!(n >= 3, "{st}: {n} tensors compared");
    }
}

#[test]
fn a_corrupt_part_fails_read_and_verify_with_a_checksum_error() {
    let dir = common::live_dir("tensorlane-model-zt-corrupt");
    let path = dir.join("digests.zt");
    let opts =
        tensorlane_core::zt::writer::Options::non_canonical().digest(tensorlane_core::zt::writer::DigestAlgo::Sha256);
    let mut w = tensorlane::zt_write::ZtFile::create(&path, opts).unwrap();
    let values: Vec<u8> = (0..4096u32).flat_map(|v| (v as f32).to_le_bytes()).collect();
    w.add("w", tensorlane_core::DType::F32, &[64, 64], &values).unwrap();
    w.finish().unwrap();
    let m = Model::open(&path).unwrap();
    let t = m.catalog().get("w").unwrap().clone();
    assert_eq!(m.read(&t).unwrap().as_ref(), &values[..]);
    let Storage::Range { offset, .. } = t.storage else {
        panic!("{:?}", t.storage)
    };
    drop(m);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[offset as usize + 100] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let m = Model::open(&path).unwrap();
    let e = m.read(&t).unwrap_err().to_string();
    assert!(e.contains("checksum") && e.contains("'w'"), "{e}");
    let e = m.verify(&mut |_, _| {}).unwrap_err();
    match e {
        tensorlane::Error::Format(f) => assert_eq!(f.kind, ErrorKind::Checksum, "{f}"),
        other => panic!("{other}"),
    }
}
