//! Live cross-check of `core::stats` with NumPy (float64 reference) on every tensor of every
//! readable model fixture (tests/data/fixtures/manifest.json, `expect: read`), on the GGUF files
//! `formats_gen_gguf.py` writes (every type `gguf.quants` dequantizes, random blocks and
//! quantized data, big-endian, splits), and on files `stats_ref.py gen` writes to test statistics
//! (NaN, ±Inf, ±0, no finite value, min == max, empty, large offset, big-endian, Fortran order,
//! deflated members, integers beyond 2^53, complex, every bfloat16 and float8 bit pattern).
//!
//! Each tensor is summarised by `Model::stats` (`tensor_stats` in 1000-byte pieces, so pieces cut
//! elements and ggml blocks), and where it is stored as-is also by `Model::stats_in_threads` (3
//! spans on 3 threads, merged), which must agree with it, its bytes are handed to `stats_ref.py ref`, which makes the values
//! with the reference libraries (numpy, ml_dtypes, gguf.quants.dequantize) and computes NumPy's
//! results. Must hold: count, finite, zeros, nan, pos_inf, neg_inf and min, max exactly; mean and
//! std within 1e-6 relative (1e-12 absolute near 0); histogram edges bit for bit and counts
//! exactly (bins alternate between 64 and 7).
//!
//! The seed is `STATS_LIVE_SEED` or the clock (printed). The venv comes from
//! tests/python/setup_formats_venv.sh; the test skips only when `python3` is missing and `CI` is
//! not `true`.

use tensorlane_testkit as common;

use std::path::{Path, PathBuf};

use serde_json::Value as Json;
use tensorlane::model::Model;
use tensorlane_core::stats::{StatsOptions, TensorStats};

/// A tensor whose statistics were computed, waiting for the reference.
struct Job {
    what: String,
    stats: TensorStats,
}

fn f(bits: &Json) -> f64 {
    f64::from_bits(bits.as_u64().unwrap())
}

fn close(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-6 * a.abs().max(b.abs()) || (a - b).abs() <= 1e-12
}

/// Summarises every tensor of `path`, writes its bytes to `bytes_dir`, and queues the job.
fn summarise(
    path: &Path,
    bytes_dir: &Path,
    jobs: &mut Vec<Job>,
    list: &mut Vec<Json>,
    sha: Option<&Json>,
    threaded: &mut usize,
) {
    let model = Model::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for t in &model.catalog().tensors {
        let what = format!("{} / {}", path.display(), t.name);
        let id = jobs.len();
        let bins = if id.is_multiple_of(2) { 64 } else { 7 };
        let opts = StatsOptions {
            bins,
            chunk_bytes: 1000,
        };
        let mut last = (0, 0);
        let stats = model
            .stats(t, &opts, &mut |d, total| {
                assert!(
                    d >= last.0 && d <= total,
                    "{what}: progress {d} of {total} after {last:?}"
                );
                last = (d, total);
            })
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let nbytes = t.nbytes().unwrap();
        assert_eq!(last, (2 * nbytes, 2 * nbytes), "{what}: progress ends at the total");
        // The same in spans on 3 threads, where the tensor is stored as-is: one pass's counts,
        // extremes and histogram, mean and std to rounding.
        let mut ends = (0, 0);
        if let Some(p) = model
            .stats_in_threads(t, &opts, 3, &mut |d, total| ends = (d, total))
            .unwrap_or_else(|e| panic!("{what} in threads: {e}"))
        {
            let (a, b) = (&p.summary, &stats.summary);
            assert_eq!(
                (a.count, a.finite, a.zeros, a.nan, a.pos_inf, a.neg_inf),
                (b.count, b.finite, b.zeros, b.nan, b.pos_inf, b.neg_inf),
                "{what} in threads"
            );
            // Mean and std to rounding, measured against the values' magnitude (a merge of parts
            // rounds relative to |mean| + std, as one pass does, not relative to std alone).
            let scale = b.mean.abs() + b.std;
            let same = |x: f64, y: f64, tol: f64| (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= tol * scale;
            assert!(
                same(a.min, b.min, 0.0) && same(a.max, b.max, 0.0),
                "{what} in threads: {a:?} {b:?}"
            );
            assert!(
                same(a.mean, b.mean, 1e-12) && same(a.std, b.std, 1e-12),
                "{what} in threads: {a:?} {b:?}"
            );
            assert_eq!(p.histogram, stats.histogram, "{what} in threads");
            assert_eq!(
                ends,
                (2 * nbytes, 2 * nbytes),
                "{what} in threads: progress ends at the total"
            );
            *threaded += 1;
        }
        let bytes = model.read(t).unwrap_or_else(|e| panic!("{what}: {e}"));
        if let Some(want) = sha.and_then(|m| m.get(&t.name)).and_then(Json::as_str) {
            assert_eq!(
                common::sha256_hex(&bytes),
                want,
                "{what}: bytes are not the reference's"
            );
        }
        let file = bytes_dir.join(format!("{id}.bin"));
        std::fs::write(&file, &bytes).unwrap();
        list.push(serde_json::json!({
            "id": id,
            "dtype": t.ty.name(),
            "numel": t.numel().unwrap(),
            "bins": bins,
            "path": file,
        }));
        jobs.push(Job { what, stats });
    }
}

#[test]
fn stats_match_numpy_on_every_fixture_tensor() {
    let Some(py) = common::venv_python("setup_formats_venv.sh", "stats") else {
        return;
    };
    let seed = common::live_seed("STATS_LIVE_SEED", 1_000_000);
    eprintln!("stats live seed {seed} (STATS_LIVE_SEED={seed} to replay)");
    let dir = common::live_dir("tl-stats-live");
    let bytes_dir = dir.join("bytes");
    std::fs::create_dir_all(&bytes_dir).unwrap();
    let gen_dir = dir.join("gen");
    let gguf_dir = dir.join("gguf");
    let (gen_s, gguf_s) = (gen_dir.to_str().unwrap(), gguf_dir.to_str().unwrap());
    let seed_s = seed.to_string();

    let mut files: Vec<(PathBuf, Option<Json>)> = Vec::new();
    // The fixtures, with each tensor's sha256 from the manifest.
    let fixtures = common::data("fixtures");
    let manifest: Json = serde_json::from_slice(&std::fs::read(fixtures.join("manifest.json")).unwrap()).unwrap();
    for e in manifest["files"].as_array().unwrap() {
        let format = e["format"].as_str().unwrap();
        if e["expect"] != "read" || !common::MODEL_FORMATS.contains(&format) {
            continue;
        }
        let sha: serde_json::Map<String, Json> = e["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| Some((t["name"].as_str()?.to_string(), t.get("sha256")?.clone())))
            .collect();
        files.push((fixtures.join(e["file"].as_str().unwrap()), Some(Json::Object(sha))));
    }
    let n_fixtures = files.len();
    assert!(n_fixtures >= 40, "only {n_fixtures} readable fixture files");
    // Files made for statistics.
    let made = common::run_json(py, "stats_ref.py", &["gen", gen_s, &seed_s]);
    for name in made.as_array().unwrap() {
        files.push((gen_dir.join(name.as_str().unwrap()), None));
    }
    // Every GGUF type the reference package dequantizes.
    let gguf = common::run_json(py, "formats_gen_gguf.py", &[gguf_s, &seed_s]);
    for e in gguf["files"].as_array().unwrap() {
        let sha: serde_json::Map<String, Json> = e["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| Some((t["name"].as_str()?.to_string(), t.get("sha256")?.clone())))
            .collect();
        files.push((gguf_dir.join(e["file"].as_str().unwrap()), Some(Json::Object(sha))));
    }

    let mut jobs = Vec::new();
    let mut list = Vec::new();
    let mut threaded = 0;
    for (path, sha) in &files {
        summarise(path, &bytes_dir, &mut jobs, &mut list, sha.as_ref(), &mut threaded);
    }
    assert!(threaded >= 200, "only {threaded} tensors went through stats_in_threads");
    let jobs_file = dir.join("jobs.json");
    std::fs::write(&jobs_file, serde_json::to_vec(&list).unwrap()).unwrap();
    let want = common::run_json(py, "stats_ref.py", &["ref", jobs_file.to_str().unwrap()]);

    let mut dtypes = std::collections::BTreeSet::new();
    for (id, job) in jobs.iter().enumerate() {
        let (what, s, h) = (&job.what, &job.stats.summary, &job.stats.histogram);
        let w = &want[id.to_string()];
        let counts = |k: &str| w[k].as_u64().unwrap();
        assert_eq!(
            (s.count, s.finite, s.zeros, s.nan, s.pos_inf, s.neg_inf),
            (
                counts("count"),
                counts("finite"),
                counts("zeros"),
                counts("nan"),
                counts("pos_inf"),
                counts("neg_inf")
            ),
            "{what}: counts (count, finite, zeros, nan, +inf, -inf)"
        );
        let exact = |a: f64, b: f64| (a.is_nan() && b.is_nan()) || a == b;
        assert!(
            exact(s.min, f(&w["min"])),
            "{what}: min {} vs numpy {}",
            s.min,
            f(&w["min"])
        );
        assert!(
            exact(s.max, f(&w["max"])),
            "{what}: max {} vs numpy {}",
            s.max,
            f(&w["max"])
        );
        assert!(
            close(s.mean, f(&w["mean"])),
            "{what}: mean {} vs numpy {}",
            s.mean,
            f(&w["mean"])
        );
        assert!(
            close(s.std, f(&w["std"])),
            "{what}: std {} vs numpy {}",
            s.std,
            f(&w["std"])
        );
        let edges: Vec<f64> = w["edges"].as_array().unwrap().iter().map(f).collect();
        assert_eq!(h.edges.len(), edges.len(), "{what}: edges");
        for (a, b) in h.edges.iter().zip(&edges) {
            assert!(
                a.to_bits() == b.to_bits() || a == b,
                "{what}: edges {:?} vs numpy {edges:?}",
                h.edges
            );
        }
        let hc: Vec<u64> = w["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .collect();
        assert_eq!(h.counts, hc, "{what}: histogram counts");
        dtypes.insert(job.stats.dtype.clone());
    }
    eprintln!(
        "stats: {} tensors in {} files ({n_fixtures} fixtures) match NumPy; dtypes: {dtypes:?}",
        jobs.len(),
        files.len()
    );
    // The cross-check covers what the brief names: bf16, float8, float4, GGUF quantized, complex.
    for d in [
        "bfloat16",
        "float8_e4m3fn",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
        "float4_e2m1fn",
        "Q4_K",
        "Q6_K",
        "IQ2_XXS",
        "MXFP4",
        "complex64",
        "complex128",
        "uint64",
        "bool",
    ] {
        assert!(dtypes.contains(d), "no {d} tensor was checked");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
