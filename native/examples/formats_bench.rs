//! Foreign formats, list and load: `tensorlane_core::formats::open` latency and the bytes it reads,
//! and read-all bandwidth over memory maps, against page-cache baselines measured in the same run
//! (BENCHMARKS.md, section "Foreign formats: list and load"; driven by `scripts/bench_formats.py`).
//!
//!     cargo run --release -p tensorlane --example formats_bench -- bench PATH [ITERS]
//!
//! PATH is a model file (`.safetensors`, `.gguf`, `.npz`, `.onnx`, `.h5`, ...) or a folder of
//! them (one `.npy` per tensor: every file in it, by name, is one part of the model). Companion
//! files a catalog names (`Catalog::sources[1..]`, e.g. an ONNX model's `.onnx.data`) are mapped
//! from the part's folder. Page cache warm: everything is read once first. Prints one JSON object
//! (`{"path", "error"}` if the model cannot be listed or read):
//! * `list_*`: listing = `formats::open` of every part. `list_mapped_us`: median over many
//!   listings of already-mapped `MmapSource`s; `list_mmap_us`: `MmapSource::open`, `formats::open`
//!   and the companions' sizes checked (`Catalog::check_ranges`); `list_pread_us`: the same through
//!   `FileSource` (positioned reads, nothing mapped). `list_bytes_read` / `list_read_calls`: what
//!   one listing through `FileSource` asked for, summed over every `read_at` call — what a browser
//!   `File` or HTTP Range reader would fetch; `list_fraction` = bytes read / `file_bytes` (all
//!   files of the model, companions included).
//! * `read_*`: every tensor's `formats::read` bytes touched (`checksum`: the wrapping sum of the
//!   little-endian u64 words from each tensor's first byte, trailing bytes added one by one — the
//!   same sum the Python workers compute), median of ITERS (default 7) passes, interleaved with
//!   the baselines over all files of the model: (1) `memcpy` of each mapped file into a
//!   preallocated buffer, (2) the same u64 sum over each whole mapping, (3) `pread` of each file
//!   into a preallocated buffer. `mapped`: one set of mappings kept across passes; `fresh_map`: a
//!   new mapping per pass (`MmapSource::open` + `formats::open` + read-all, page faults included)
//!   against the sum over fresh mappings. `borrowed_tensors`: tensors `formats::read` handed out
//!   as a view of the mapping (zero-copy); the others were decoded into a new buffer.

use std::borrow::Cow;
use std::cell::Cell;
use std::fs::{self, File};
use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{Map, Value, json};
use tensorlane::source::{FileSource, MmapSource};
use tensorlane_core::formats::{self, Catalog};
use tensorlane_core::source::{ReadAt, SourceError};

/// A `ReadAt` that counts what is asked of it.
struct Counting<S> {
    inner: S,
    bytes: Cell<u64>,
    calls: Cell<u64>,
}

impl<S: ReadAt> ReadAt for Counting<S> {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        self.bytes.set(self.bytes.get() + buf.len() as u64);
        self.calls.set(self.calls.get() + 1);
        self.inner.read_at(offset, buf)
    }
}

/// One file of the model, listed, with its sources (`[0]` the file, then its companions) mapped.
struct Part {
    cat: Catalog,
    maps: Vec<MmapSource>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Wrapping sum of the little-endian u64 words from the first byte (trailing bytes added one by
/// one): touches every byte, and does not depend on where the bytes sit in memory.
#[inline(never)]
fn touch(b: &[u8]) -> u64 {
    let words = b.chunks_exact(8);
    let tail = words.remainder();
    let s = words.fold(0u64, |a, w| a.wrapping_add(u64::from_le_bytes(w.try_into().unwrap())));
    tail.iter().fold(s, |a, &x| a.wrapping_add(x as u64))
}

fn companion(part: &Path, rel: &str) -> PathBuf {
    part.parent().unwrap_or(Path::new(".")).join(rel)
}

/// `MmapSource::open` + `formats::open` + the companions' sizes checked against the catalog.
fn list_mapped_from_disk(path: &Path) -> Result<Catalog, String> {
    let src = MmapSource::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let cat = formats::open(&src).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut sizes = vec![src.size()];
    for rel in cat.sources.iter().skip(1) {
        let p = companion(path, rel);
        sizes.push(fs::metadata(&p).map_err(|e| format!("{}: {e}", p.display()))?.len());
    }
    cat.check_ranges(&sizes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(cat)
}

/// The same through positioned reads, counting them.
fn list_pread(path: &Path) -> Result<(Catalog, u64, u64), String> {
    let f = FileSource::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let src = Counting {
        inner: f,
        bytes: Cell::new(0),
        calls: Cell::new(0),
    };
    let cat = formats::open(&src).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut sizes = vec![src.size()];
    for rel in cat.sources.iter().skip(1) {
        let p = companion(path, rel);
        sizes.push(fs::metadata(&p).map_err(|e| format!("{}: {e}", p.display()))?.len());
    }
    cat.check_ranges(&sizes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((cat, src.bytes.get(), src.calls.get()))
}

/// Maps a part and its companions and lists it.
fn open_part(path: &Path) -> Result<Part, String> {
    let src = MmapSource::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let cat = formats::open(&src).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut maps = vec![src];
    for rel in cat.sources.iter().skip(1) {
        let p = companion(path, rel);
        maps.push(MmapSource::open(&p).map_err(|e| format!("{}: {e}", p.display()))?);
    }
    let sizes: Vec<u64> = maps.iter().map(|m| m.size()).collect();
    cat.check_ranges(&sizes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Part { cat, maps })
}

/// Every tensor's bytes through `formats::read`, touched: (checksum, bytes, borrowed tensors).
fn read_all(parts: &[Part]) -> Result<(u64, u64, usize), String> {
    let (mut s, mut n, mut borrowed) = (0u64, 0u64, 0usize);
    for p in parts {
        let refs: Vec<&MmapSource> = p.maps.iter().collect();
        for t in &p.cat.tensors {
            let b = formats::read(p.cat.format.name(), t, &refs).map_err(|e| e.to_string())?;
            s = s.wrapping_add(touch(&b));
            n += b.len() as u64;
            borrowed += matches!(b, Cow::Borrowed(_)) as usize;
        }
    }
    Ok((s, n, borrowed))
}

/// Median seconds of `f` over enough runs to fill about `budget` seconds (at least 5, at most `max`).
fn time_adaptive<T>(budget: f64, max: usize, mut f: impl FnMut() -> T) -> (f64, usize) {
    let t = Instant::now();
    black_box(f());
    let once = t.elapsed().as_secs_f64().max(1e-7);
    let n = ((budget / once) as usize).clamp(5, max);
    let v: Vec<f64> = (0..n)
        .map(|_| {
            let t = Instant::now();
            black_box(f());
            t.elapsed().as_secs_f64()
        })
        .collect();
    (median(v), n)
}

/// The files of the model: PATH itself, or every file in the folder PATH, by name.
fn model_parts(path: &Path) -> Result<Vec<PathBuf>, String> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut v: Vec<PathBuf> = fs::read_dir(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    if v.is_empty() {
        return Err(format!("{}: an empty folder", path.display()));
    }
    Ok(v)
}

fn bench(path: &Path, iters: usize) -> Result<Map<String, Value>, String> {
    let paths = model_parts(path)?;
    let parts = paths.iter().map(|p| open_part(p)).collect::<Result<Vec<_>, _>>()?;
    // Every file of the model once (parts and companions), for the baselines.
    let mut files: Vec<PathBuf> = vec![];
    for (p, part) in paths.iter().zip(&parts) {
        files.push(p.clone());
        files.extend(part.cat.sources.iter().skip(1).map(|rel| companion(p, rel)));
    }
    let maps: Vec<MmapSource> = files
        .iter()
        .map(|f| MmapSource::open(f).map_err(|e| format!("{}: {e}", f.display())))
        .collect::<Result<_, _>>()?;
    let file_bytes: u64 = maps.iter().map(|m| m.size()).sum();
    // Warm the page cache and the mappings.
    for m in &maps {
        black_box(touch(m.bytes()));
    }

    let mut out = Map::new();
    out.insert("path".into(), json!(path.display().to_string()));
    out.insert("format".into(), json!(parts[0].cat.format.name()));
    out.insert("parts".into(), json!(parts.len()));
    out.insert("files".into(), json!(files.len()));
    out.insert("file_bytes".into(), json!(file_bytes));
    let tensors: usize = parts.iter().map(|p| p.cat.tensors.len()).sum();
    let zero_copy = parts
        .iter()
        .flat_map(|p| &p.cat.tensors)
        .filter(|t| t.is_zero_copy())
        .count();
    out.insert("tensors".into(), json!(tensors));
    out.insert("zero_copy_tensors".into(), json!(zero_copy));
    out.insert(
        "skipped".into(),
        json!(parts.iter().map(|p| p.cat.skipped.len()).sum::<usize>()),
    );

    // Listing.
    let mains: Vec<MmapSource> = parts.iter().map(|p| p.maps[0].clone()).collect();
    let (list_mapped, list_iters) = time_adaptive(0.5, 2001, || {
        mains
            .iter()
            .map(|m| formats::open(m).unwrap().tensors.len())
            .sum::<usize>()
    });
    let (list_mmap, _) = time_adaptive(0.5, 2001, || {
        paths
            .iter()
            .map(|p| list_mapped_from_disk(p).unwrap().tensors.len())
            .sum::<usize>()
    });
    let (list_pread_t, _) = time_adaptive(0.5, 2001, || {
        paths
            .iter()
            .map(|p| list_pread(p).unwrap().0.tensors.len())
            .sum::<usize>()
    });
    let (mut read_bytes, mut read_calls) = (0u64, 0u64);
    for (p, part) in paths.iter().zip(&parts) {
        let (cat, b, c) = list_pread(p)?;
        if cat != part.cat {
            return Err(format!(
                "{}: the catalogs through pread and through the mapping differ",
                p.display()
            ));
        }
        read_bytes += b;
        read_calls += c;
    }
    out.insert("list_iters".into(), json!(list_iters));
    out.insert("list_mapped_us".into(), json!(list_mapped * 1e6));
    out.insert("list_mmap_us".into(), json!(list_mmap * 1e6));
    out.insert("list_pread_us".into(), json!(list_pread_t * 1e6));
    out.insert("list_bytes_read".into(), json!(read_bytes));
    out.insert("list_read_calls".into(), json!(read_calls));
    out.insert("list_fraction".into(), json!(read_bytes as f64 / file_bytes as f64));

    // Read-all, steady state: the mappings kept.
    let (checksum, payload, borrowed) = read_all(&parts)?;
    let mut dst = vec![1u8; maps.iter().map(|m| m.size() as usize).max().unwrap_or(0)];
    let handles: Vec<File> = files
        .iter()
        .map(|f| File::open(f).map_err(|e| format!("{}: {e}", f.display())))
        .collect::<Result<_, _>>()?;
    let (mut rd, mut sum, mut cpy, mut pread) = (vec![], vec![], vec![], vec![]);
    for _ in 0..iters + 1 {
        let t = Instant::now();
        black_box(read_all(&parts)?);
        rd.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        black_box(maps.iter().fold(0u64, |a, m| a.wrapping_add(touch(m.bytes()))));
        sum.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for m in &maps {
            let b = black_box(m.bytes());
            dst[..b.len()].copy_from_slice(b);
            black_box(&dst);
        }
        cpy.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for (f, m) in handles.iter().zip(&maps) {
            f.read_exact_at(&mut dst[..m.size() as usize], 0)
                .map_err(|e| e.to_string())?;
            black_box(&dst);
        }
        pread.push(t.elapsed().as_secs_f64());
    }
    // Fresh mappings per pass (page faults included).
    let (mut rd_fresh, mut sum_fresh) = (vec![], vec![]);
    for _ in 0..iters + 1 {
        let t = Instant::now();
        let fresh = paths.iter().map(|p| open_part(p)).collect::<Result<Vec<_>, _>>()?;
        black_box(read_all(&fresh)?);
        drop(fresh);
        rd_fresh.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for f in &files {
            let m = MmapSource::open(f).map_err(|e| e.to_string())?;
            black_box(touch(m.bytes()));
        }
        sum_fresh.push(t.elapsed().as_secs_f64());
    }
    let m = |mut v: Vec<f64>| {
        v.remove(0); // the first round is a warm-up
        median(v)
    };
    let (rd, sum, cpy, pread, rd_fresh, sum_fresh) = (m(rd), m(sum), m(cpy), m(pread), m(rd_fresh), m(sum_fresh));
    let gbs = |bytes: u64, s: f64| bytes as f64 / s / 1e9;
    out.insert("payload_bytes".into(), json!(payload));
    out.insert("checksum".into(), json!(format!("{checksum:016x}")));
    out.insert("borrowed_tensors".into(), json!(borrowed));
    out.insert("iters".into(), json!(iters));
    for (k, bytes, s) in [
        ("read_mapped", payload, rd),
        ("read_fresh_map", payload, rd_fresh),
        ("baseline_memcpy", file_bytes, cpy),
        ("baseline_sum_mapped", file_bytes, sum),
        ("baseline_pread", file_bytes, pread),
        ("baseline_sum_fresh_map", file_bytes, sum_fresh),
    ] {
        out.insert(format!("{k}_s"), json!(s));
        out.insert(format!("{k}_gbps"), json!(gbs(bytes, s)));
    }
    let ratio = |a: (u64, f64), b: (u64, f64)| gbs(a.0, a.1) / gbs(b.0, b.1);
    out.insert(
        "ratio_read_vs_memcpy".into(),
        json!(ratio((payload, rd), (file_bytes, cpy))),
    );
    out.insert(
        "ratio_read_vs_sum_mapped".into(),
        json!(ratio((payload, rd), (file_bytes, sum))),
    );
    out.insert(
        "ratio_read_vs_pread".into(),
        json!(ratio((payload, rd), (file_bytes, pread))),
    );
    out.insert(
        "ratio_fresh_vs_sum_fresh_map".into(),
        json!(ratio((payload, rd_fresh), (file_bytes, sum_fresh))),
    );
    Ok(out)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: formats_bench bench PATH [ITERS]";
    if args.get(1).map(String::as_str) != Some("bench") || args.len() < 3 {
        eprintln!("{usage}");
        std::process::exit(2);
    }
    let path = PathBuf::from(&args[2]);
    let iters = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(7);
    let out = bench(&path, iters).unwrap_or_else(|e| {
        let mut m = Map::new();
        m.insert("path".into(), json!(path.display().to_string()));
        m.insert("error".into(), json!(e));
        m
    });
    println!("{}", Value::Object(out));
}
