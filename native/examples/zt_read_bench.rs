//! `.zt` open and read: `Reader::open` latency and read-all bandwidth over a memory map, against
//! page-cache baselines measured in the same run (BENCHMARKS.md, section ".zt open and read").
//!
//!     cargo run --release -p tensorlane --example zt_read_bench -- gen DIR
//!     cargo run --release -p tensorlane --example zt_read_bench -- bench DIR [ITERS]
//!
//! `gen` writes a Llama-3.2-1B-shaped model (146 bf16 tensors, 2.47 GB; tied embeddings, so no
//! `lm_head`) with deterministic pseudo-random bytes as:
//! * `DIR/llama.zt` — tensorlane's canonical writer (`ZtFile::create`, default options);
//! * `DIR/llama.safetensors` — by hand (u64 header length + JSON + data, dtype `BF16`);
//! * `DIR/npy/<name>.npy` — one `.npy` (v1.0) per tensor, dtype `<u2` (numpy has no bfloat16;
//!   the bytes are the same);
//! * `DIR/small.zt` — the same 146 names with 16 elements each (same manifest shape, 1/10^5 of
//!   the data) and `DIR/tiny.zt` — one tensor of 16 elements: open time vs data size.
//!
//! `bench` (page cache warm: it reads everything once first) prints one JSON object:
//! * `open_*`: median `Reader::open` over an already-mapped `MmapSource` (validation of the
//!   footer, manifest hash, CBOR manifest and every blob reference), and `MmapSource::open` +
//!   `Reader::open` (adds `open`+`mmap`+`munmap`), for the three files;
//! * `read_*`: every tensor's bytes touched (`checksum`: wrapping sum of u64 words over `Reader::tensor`'s
//!   zero-copy view, all 146 tensors), median of ITERS (default 7) passes, against
//!   (1) `memcpy` of the whole mapping into a preallocated buffer, (2) the same u64 sum over the
//!   whole mapping in one sequential pass, (3) `pread` of the whole file into a preallocated
//!   buffer. Steady state (`mapped`): one mapping kept across passes, so page tables are
//!   populated; `fresh_map`: a new mapping per pass (page faults included) for tensorlane
//!   (`MmapSource::open` + `Reader::open` + read-all) and for the plain sum.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use std::hint::black_box;
use tensorlane::source::MmapSource;
use tensorlane::zt_write::ZtFile;
use tensorlane_core::DType;
use tensorlane_core::zt::reader::Reader;
use tensorlane_core::zt::writer::Options;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Llama-3.2-1B: hidden 2048, intermediate 8192, 16 layers, 32 heads / 8 KV heads (head dim 64),
/// vocab 128256, tied embeddings. Sorted by name (the order `.zt` objects are written in).
fn llama_shapes() -> Vec<(String, Vec<u64>)> {
    let (h, i, kv, vocab) = (2048u64, 8192u64, 512u64, 128_256u64);
    let mut v = vec![
        ("model.embed_tokens.weight".to_string(), vec![vocab, h]),
        ("model.norm.weight".to_string(), vec![h]),
    ];
    for l in 0..16 {
        let p = format!("model.layers.{l}.");
        for (n, s) in [
            ("self_attn.q_proj.weight", vec![h, h]),
            ("self_attn.k_proj.weight", vec![kv, h]),
            ("self_attn.v_proj.weight", vec![kv, h]),
            ("self_attn.o_proj.weight", vec![h, h]),
            ("mlp.gate_proj.weight", vec![i, h]),
            ("mlp.up_proj.weight", vec![i, h]),
            ("mlp.down_proj.weight", vec![h, i]),
            ("input_layernorm.weight", vec![h]),
            ("post_attention_layernorm.weight", vec![h]),
        ] {
            v.push((format!("{p}{n}"), s));
        }
    }
    v.sort();
    v
}

fn nbytes(shape: &[u64]) -> usize {
    shape.iter().product::<u64>() as usize * 2
}

/// Deterministic, incompressible, never all-zero bytes.
fn fill(buf: &mut [u8], seed: u64) {
    let mut s = seed.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for c in buf.chunks_mut(8) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        c.copy_from_slice(&s.to_le_bytes()[..c.len()]);
    }
}

fn write_zt(path: &Path, tensors: &[(String, Vec<u64>)], data: impl Fn(usize, &mut Vec<u8>)) {
    let mut w = ZtFile::create(path, Options::default()).unwrap();
    let mut buf = Vec::new();
    for (k, (name, shape)) in tensors.iter().enumerate() {
        data(k, &mut buf);
        w.add(name, DType::BF16, shape, &buf).unwrap();
    }
    w.finish().unwrap();
}

fn npy_header(shape: &[u64]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let tuple = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut dict = format!("{{'descr': '<u2', 'fortran_order': False, 'shape': {tuple}, }}");
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut h = b"\x93NUMPY\x01\x00".to_vec();
    h.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    h.extend_from_slice(dict.as_bytes());
    h
}

fn generate(dir: &Path) {
    fs::create_dir_all(dir.join("npy")).unwrap();
    let tensors = llama_shapes();
    let t = Instant::now();
    let mut st = BufWriter::with_capacity(8 << 20, File::create(dir.join("llama.safetensors")).unwrap());
    let mut header = String::from("{");
    let mut off = 0usize;
    for (k, (name, shape)) in tensors.iter().enumerate() {
        let n = nbytes(shape);
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        if k > 0 {
            header.push(',');
        }
        header.push_str(&format!(
            "\"{name}\":{{\"dtype\":\"BF16\",\"shape\":[{}],\"data_offsets\":[{off},{}]}}",
            dims.join(","),
            off + n
        ));
        off += n;
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    st.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
    st.write_all(header.as_bytes()).unwrap();
    let mut zt = ZtFile::create(dir.join("llama.zt"), Options::default()).unwrap();
    let mut buf = Vec::new();
    for (k, (name, shape)) in tensors.iter().enumerate() {
        buf.resize(nbytes(shape), 0);
        fill(&mut buf, k as u64);
        zt.add(name, DType::BF16, shape, &buf).unwrap();
        st.write_all(&buf).unwrap();
        let mut f = File::create(dir.join("npy").join(format!("{name}.npy"))).unwrap();
        f.write_all(&npy_header(shape)).unwrap();
        f.write_all(&buf).unwrap();
    }
    zt.finish().unwrap();
    st.into_inner().unwrap().sync_all().unwrap();
    let small: Vec<(String, Vec<u64>)> = tensors.iter().map(|(n, _)| (n.clone(), vec![16])).collect();
    write_zt(&dir.join("small.zt"), &small, |k, b| {
        b.resize(32, 0);
        fill(b, k as u64)
    });
    write_zt(&dir.join("tiny.zt"), &small[..1], |k, b| {
        b.resize(32, 0);
        fill(b, k as u64)
    });
    eprintln!(
        "wrote {} tensors, {} payload bytes, in {:.1} s",
        tensors.len(),
        off,
        t.elapsed().as_secs_f64()
    );
}

/// Wrapping sum of the u64 words (trailing bytes added one by one): touches every byte.
#[inline(never)]
fn touch(b: &[u8]) -> u64 {
    // SAFETY: any bit pattern is a valid u64.
    let (head, mid, tail) = unsafe { b.align_to::<u64>() };
    let mut s = mid.iter().fold(0u64, |a, &x| a.wrapping_add(x));
    for &x in head.iter().chain(tail) {
        s = s.wrapping_add(x as u64);
    }
    s
}

fn read_all(r: &Reader<MmapSource>) -> (u64, usize) {
    let (mut s, mut n) = (0u64, 0usize);
    for name in r.objects() {
        let t = r.tensor(name).unwrap();
        s = s.wrapping_add(touch(t.data()));
        n += t.nbytes();
    }
    (s, n)
}

fn time<T>(iters: usize, mut f: impl FnMut() -> T) -> f64 {
    black_box(f());
    let v: Vec<f64> = (0..iters)
        .map(|_| {
            let t = Instant::now();
            black_box(f());
            t.elapsed().as_secs_f64()
        })
        .collect();
    median(v)
}

fn bench(dir: &Path, iters: usize) {
    let path = dir.join("llama.zt");
    let file_bytes = fs::metadata(&path).unwrap().len() as usize;
    let src = MmapSource::open(&path).unwrap();
    // Warm the page cache and the mapping.
    black_box(touch(src.bytes()));

    let mut out = serde_json::Map::new();
    let mut put = |k: &str, v: serde_json::Value| {
        out.insert(k.to_string(), v);
    };
    put("file_bytes", file_bytes.into());
    // Open latency.
    for (label, p) in [
        ("llama", path.clone()),
        ("small", dir.join("small.zt")),
        ("tiny", dir.join("tiny.zt")),
    ] {
        let s = MmapSource::open(&p).unwrap();
        let objects = Reader::open(s.clone()).unwrap().len();
        let size = fs::metadata(&p).unwrap().len();
        let reader_open = time(2001, || Reader::open(s.clone()).unwrap());
        let map_and_open = time(501, || Reader::open(MmapSource::open(&p).unwrap()).unwrap());
        put(&format!("open_{label}_file_bytes"), size.into());
        put(&format!("open_{label}_objects"), objects.into());
        put(&format!("open_{label}_reader_open_us"), (reader_open * 1e6).into());
        put(
            &format!("open_{label}_mmap_plus_reader_open_us"),
            (map_and_open * 1e6).into(),
        );
    }

    // Read-all, steady state: one mapping.
    let reader = Reader::open(src.clone()).unwrap();
    let (checksum, payload) = read_all(&reader);
    let mut dst = vec![0u8; file_bytes];
    dst.fill(1); // fault the destination in before timing
    let file = File::open(&path).unwrap();
    // Interleave the four measurements, ITERS rounds.
    let (mut zt, mut sum, mut cpy, mut pread) = (vec![], vec![], vec![], vec![]);
    for _ in 0..iters + 1 {
        let t = Instant::now();
        black_box(read_all(&reader));
        zt.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        black_box(touch(src.bytes()));
        sum.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        dst.copy_from_slice(black_box(src.bytes()));
        black_box(&dst);
        cpy.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        file.read_exact_at(&mut dst, 0).unwrap();
        black_box(&dst);
        pread.push(t.elapsed().as_secs_f64());
    }
    // Fresh mapping per pass (page faults included).
    let (mut zt_fresh, mut sum_fresh) = (vec![], vec![]);
    for _ in 0..iters + 1 {
        let t = Instant::now();
        black_box(read_all(&Reader::open(MmapSource::open(&path).unwrap()).unwrap()));
        zt_fresh.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        black_box(touch(MmapSource::open(&path).unwrap().bytes()));
        sum_fresh.push(t.elapsed().as_secs_f64());
    }
    let m = |mut v: Vec<f64>| {
        v.remove(0); // first round is a warm-up
        median(v)
    };
    let (zt, sum, cpy, pread, zt_fresh, sum_fresh) = (m(zt), m(sum), m(cpy), m(pread), m(zt_fresh), m(sum_fresh));
    let gbs = |bytes: usize, s: f64| bytes as f64 / s / 1e9;
    put("payload_bytes", payload.into());
    put("checksum", format!("{checksum:016x}").into());
    put("iters", iters.into());
    put("read_zt_mapped_s", zt.into());
    put("read_zt_mapped_gbps", gbs(payload, zt).into());
    put("baseline_sum_mapped_s", sum.into());
    put("baseline_sum_mapped_gbps", gbs(file_bytes, sum).into());
    put("baseline_memcpy_s", cpy.into());
    put("baseline_memcpy_gbps", gbs(file_bytes, cpy).into());
    put("baseline_pread_s", pread.into());
    put("baseline_pread_gbps", gbs(file_bytes, pread).into());
    put("read_zt_fresh_map_s", zt_fresh.into());
    put("read_zt_fresh_map_gbps", gbs(payload, zt_fresh).into());
    put("baseline_sum_fresh_map_s", sum_fresh.into());
    put("baseline_sum_fresh_map_gbps", gbs(file_bytes, sum_fresh).into());
    let r = |a: f64, b: f64| a / b;
    put(
        "ratio_zt_vs_sum_mapped",
        r(gbs(payload, zt), gbs(file_bytes, sum)).into(),
    );
    put("ratio_zt_vs_memcpy", r(gbs(payload, zt), gbs(file_bytes, cpy)).into());
    put("ratio_zt_vs_pread", r(gbs(payload, zt), gbs(file_bytes, pread)).into());
    put(
        "ratio_zt_vs_sum_fresh_map",
        r(gbs(payload, zt_fresh), gbs(file_bytes, sum_fresh)).into(),
    );
    println!("{}", serde_json::Value::Object(out));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: zt_read_bench gen DIR | bench DIR [ITERS]";
    let dir = PathBuf::from(args.get(2).expect(usage));
    match args.get(1).map(String::as_str) {
        Some("gen") => generate(&dir),
        Some("bench") => bench(&dir, args.get(3).and_then(|s| s.parse().ok()).unwrap_or(7)),
        _ => panic!("{usage}"),
    }
}
