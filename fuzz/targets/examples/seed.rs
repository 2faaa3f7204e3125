//! Writes the seed part of the saved fuzz corpus (`fuzz/corpus/NAME/seed-*`) from `tests/data`
//! (fixtures, golden vectors, the .zt conformance corpus) plus a few hand-made JavaScript plans.
//! Files over 70 kB are left out, to keep the committed corpus small and the replay fast.
//!
//!     cargo run -p tensorlane-fuzz-targets --example seed
//!
//! Existing `seed-*` files are replaced; inputs a campaign added (`crash-*`, `found-*`, libFuzzer's
//! hash names) are kept.

use std::fs;
use std::path::{Path, PathBuf};

use tensorlane_core::formats::zip;
use tensorlane_core::zt::reader::Reader;

const MAX: u64 = 70_000;

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.metadata().is_ok_and(|m| m.len() <= MAX) {
            out.push(p);
        }
    }
}

struct Seeds {
    root: PathBuf,
    data: PathBuf,
    count: usize,
    bytes: usize,
}

impl Seeds {
    /// A seed name from the fixture's path under tests/data.
    fn name(&self, p: &Path) -> String {
        let rel = p
            .strip_prefix(&self.data)
            .unwrap_or(p)
            .to_string_lossy()
            .replace(['/', '\\'], "_");
        format!("seed-{rel}")
    }

    fn put(&mut self, target: &str, name: &str, bytes: &[u8]) {
        let dir = self.root.join(target);
        fs::create_dir_all(&dir).expect("corpus folder");
        fs::write(dir.join(name), bytes).expect("corpus file");
        self.count += 1;
        self.bytes += bytes.len();
    }
}

fn ext(p: &Path) -> String {
    let n = p.file_name().unwrap_or_default().to_string_lossy().to_string();
    if n.ends_with(".index.json") {
        "index.json".into()
    } else if n.ends_with(".onnx.data") {
        "onnx.data".into()
    } else {
        p.extension().unwrap_or_default().to_string_lossy().to_string()
    }
}

fn main() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let data = repo.join("tests/data");
    let root = repo.join("fuzz/corpus");
    // Replace earlier seeds only.
    if let Ok(rd) = fs::read_dir(&root) {
        for d in rd.flatten() {
            for f in fs::read_dir(d.path()).into_iter().flatten().flatten() {
                if f.file_name().to_string_lossy().starts_with("seed-") {
                    fs::remove_file(f.path()).expect("remove old seed");
                }
            }
        }
    }
    let mut files = Vec::new();
    walk(&data, &mut files);
    files.sort();
    let mut s = Seeds {
        root,
        data: data.clone(),
        count: 0,
        bytes: 0,
    };
    for p in &files {
        let bytes = fs::read(p).expect("fixture");
        let name = s.name(p);
        let model = |t: &str| -> Option<&'static str> {
            Some(match t {
                "safetensors" | "index.json" => "format_safetensors",
                "gguf" => "format_gguf",
                "pt" => "format_pt",
                "npy" => "format_npy",
                "npz" => "format_npz",
                "onnx" => "format_onnx",
                "h5" => "format_hdf5",
                _ => return None,
            })
        };
        match ext(p).as_str() {
            "tenso" => {
                s.put("wire_decode", &name, &bytes);
                // formats_tenso: the packet alone, and twice back to back (two packets, `#0`, `#1`).
                s.put("formats_tenso", &name, &bytes);
                s.put(
                    "formats_tenso",
                    &format!("{name}-twice"),
                    &[&bytes[..], &bytes[..]].concat(),
                );
                // wire_stream: the first byte picks the chunk size; two packets back to back.
                let mut st = vec![(bytes.len() % 17) as u8];
                st.extend_from_slice(&bytes);
                st.extend_from_slice(&bytes);
                s.put("wire_stream", &name, &st);
                // bindings_packets: even first byte = decode, option bits above it.
                let mut bp = vec![0u8];
                bp.extend_from_slice(&bytes);
                s.put("bindings_packets", &name, &bp);
            }
            "zt" => {
                let legacy = bytes.starts_with(b"ZTEN");
                if p.to_string_lossy().contains("/v1/") || legacy {
                    s.put("zt_legacy", &name, &bytes);
                }
                s.put("zt_open", &name, &bytes);
                s.put("bindings_zt", &name, &bytes);
                // zt_seekable: every zstd-seekable part, behind the 16 bytes the target reads
                // (odd first word: decoded length from the seek table; a 1000-byte range at 100).
                if let Ok(r) = Reader::open(&bytes[..]) {
                    let objects: Vec<String> = r.objects().map(String::from).collect();
                    for o in objects {
                        let parts: Vec<String> = r
                            .object(&o)
                            .map(|x| x.parts.keys().cloned().collect())
                            .unwrap_or_default();
                        for part in parts {
                            let Ok(loc) = r.locate(&o, &part) else { continue };
                            if !loc.encoded || loc.shard.is_some() {
                                continue;
                            }
                            let stored = &bytes[loc.offset as usize..(loc.offset + loc.length) as usize];
                            let mut seed = Vec::new();
                            for w in [1u32, 0, 100, 1000] {
                                seed.extend_from_slice(&w.to_le_bytes());
                            }
                            seed.extend_from_slice(stored);
                            s.put("zt_seekable", &format!("{name}-{o}-{part}"), &seed);
                            let decoded = r.part(&o, &part).map(|x| x.decoded_size()).unwrap_or(0) as u32;
                            let mut bz = decoded.to_le_bytes().to_vec();
                            bz.extend_from_slice(stored);
                            s.put("bindings_zt", &format!("{name}-{o}-{part}"), &bz);
                        }
                    }
                }
            }
            t => {
                if let Some(target) = model(t) {
                    s.put(target, &name, &bytes);
                    s.put("formats_open", &name, &bytes);
                    let mut bf = vec![0u8];
                    bf.extend_from_slice(&bytes);
                    s.put("bindings_formats", &name, &bf);
                }
                if t == "pt" {
                    // The pickle machine alone: legacy files start with pickles; zip files hold
                    // `*/data.pkl` (stored).
                    if let Ok(a) = zip::open("pt", &bytes[..]) {
                        for m in a.members.iter().filter(|m| m.name.ends_with(".pkl")) {
                            if m.method == zip::Method::Stored {
                                let start = m.data_offset as usize;
                                s.put("pickle", &name, &bytes[start..start + m.compressed as usize]);
                            }
                        }
                    } else {
                        s.put("pickle", &name, &bytes);
                    }
                }
                if t == "npy" {
                    // bindings_stats: element type, slice size, then stored bytes.
                    for (pick, step) in [(0u8, 7u8), (1, 3), (2, 0), (0x85, 5)] {
                        let mut st = vec![pick, step];
                        st.extend_from_slice(&bytes[bytes.len().min(128)..]);
                        s.put("bindings_stats", &format!("{name}-{pick}"), &st);
                    }
                }
            }
        }
    }
    // JavaScript plans: encode/dequantize (bindings_packets, odd first byte) and .zt write
    // (bindings_zt, starting with `{`). Buffers follow the plan's NUL, cut at 0xFF 0x00.
    let f32s: Vec<u8> = [1.0f32, -2.5, 0.0, 3.25].iter().flat_map(|x| x.to_le_bytes()).collect();
    let plans: &[(&str, &str, Vec<&[u8]>)] = &[
        (
            "dense",
            r#"{"value":{"kind":"dense","dtype":"float32","shape":[2,2],"b":0},"options":{"integrity":true}}"#,
            vec![&f32s],
        ),
        (
            "bundle",
            r#"{"value":{"kind":"bundle","entries":[["w",{"kind":"dense","dtype":"int8","shape":[4],"b":0}],["s",{"kind":"string","lengths":[2,1],"b":1}]]},"options":{"compress":true}}"#,
            vec![b"\x01\x02\x03\x04", b"abc"],
        ),
        (
            "sparse",
            r#"{"value":{"kind":"sparse","format":"csr","shape":[2,3],"components":[{"kind":"dense","dtype":"float32","shape":[2],"b":0},{"kind":"dense","dtype":"int64","shape":[2],"b":1},{"kind":"dense","dtype":"int64","shape":[3],"b":2}]}}"#,
            vec![
                &f32s[..8],
                b"\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00",
                b"\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00",
            ],
        ),
        (
            "quantized",
            r#"{"value":{"kind":"quantized","qdtype":"qint8","shape":[4],"schemeCode":0,"axis":0,"groupSize":0,"scales":0,"zeroPoints":1,"b":2}}"#,
            vec![&f32s[..4], &f32s[8..12], b"\x01\x80\x7f\x00"],
        ),
    ];
    for (name, plan, bufs) in plans {
        let mut b = vec![1u8];
        b.extend_from_slice(plan.as_bytes());
        b.push(0);
        for (i, x) in bufs.iter().enumerate() {
            if i > 0 {
                b.extend_from_slice(&[0xFF, 0x00]);
            }
            b.extend_from_slice(x);
        }
        s.put("bindings_packets", &format!("seed-plan-{name}"), &b);
    }
    let zt_plan = r#"{"canonical":true,"attributes":{"k":"v"},"objects":[{"name":"w","shape":[2,2],"layout":"dense","parts":[{"name":"data","dtype":"float32","buf":0}]},{"name":"b","shape":[4],"parts":[{"name":"data","dtype":"float8_e4m3fn","buf":1}]}]}"#;
    let mut b = zt_plan.as_bytes().to_vec();
    b.push(0);
    b.extend_from_slice(&f32s);
    b.extend_from_slice(&[0xFF, 0x00]);
    b.extend_from_slice(b"\x01\x02\x03\x04");
    s.put("bindings_zt", "seed-plan-write", &b);
    println!("wrote {} seeds, {} bytes, under {}", s.count, s.bytes, s.root.display());
}
