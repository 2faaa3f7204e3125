//! Live cross-check of the safetensors reader with safetensors 0.8.0 from PyPI (tests/python/).
//!
//! formats_gen_safetensors.py writes random files with `safetensors.numpy.save_file` (every dtype
//! it writes, bfloat16 and the float8 types through ml_dtypes, 0-d and zero-size tensors, random
//! `__metadata__`), packed float4 through `serialize_file`, and a sharded set with its index; it
//! reports each tensor's bytes as a sha256. tensorlane's reader must list the same tensors in
//! data-offset order (the index: weight_map order), with the same dtype, shape, metadata and
//! bytes.
//!
//! The venv comes from tests/python/setup_formats_venv.sh (pinned). The test skips only when
//! `python3` is missing and `CI` is not `true`. `FORMATS_LIVE_SEED` fixes the seed.

use std::path::PathBuf;
use tensorlane_testkit as common;

use serde_json::Value as Json;
use tensorlane_core::formats::{self, Catalog, ErrorKind, FormatError, Meta, safetensors};

/// The generator's tensors (in order) as `common::check_tensors` compares them, and the
/// safetensors attributes: the stored dtype and, in a sharded set, the shard.
fn compare(what: &str, cat: &Catalog, want: &[Json], sources: &[&[u8]]) {
    common::check_tensors(what, cat, want, sources);
    for (t, w) in cat.tensors.iter().zip(want) {
        let at = format!("{what} / {}", t.name);
        let st = t.attributes.iter().find(|(k, _)| k == "st_dtype").map(|(_, v)| v);
        if let Some(s) = w["st_dtype"].as_str() {
            assert_eq!(st, Some(&Meta::Str(s.into())), "{at}: st_dtype");
        }
        if let Some(s) = w["shard"].as_str() {
            let shard = t.attributes.iter().find(|(k, _)| k == "shard").map(|(_, v)| v);
            assert_eq!(shard, Some(&Meta::Str(s.into())), "{at}: shard");
        }
    }
}

#[test]
fn files_written_by_safetensors_read_identically() {
    let Some(py) = common::venv_python("setup_formats_venv.sh", "safetensors") else {
        return;
    };
    let seed = common::live_seed("FORMATS_LIVE_SEED", 100_000);
    let dir = common::live_dir("tensorlane-formats-live-safetensors");
    let report = common::run_json(
        py,
        "formats_gen_safetensors.py",
        &[dir.to_str().unwrap(), &seed.to_string()],
    );
    for f in report["files"].as_array().unwrap() {
        let path = f["path"].as_str().unwrap();
        let what = format!("seed {seed}: {path}");
        let bytes = std::fs::read(path).unwrap();
        let cat = safetensors::open(&bytes[..]).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(
            formats::open(&bytes[..]).as_ref(),
            Ok(&cat),
            "{what}: detected and opened"
        );
        compare(&what, &cat, f["tensors"].as_array().unwrap(), &[&bytes[..]]);
        let mut meta: Vec<(String, Meta)> = f["metadata"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), Meta::Str(v.as_str().unwrap().into())))
            .collect();
        let mut got = cat.metadata.clone();
        meta.sort_by(|a, b| a.0.cmp(&b.0));
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(got, meta, "{what}: __metadata__");
        assert!(cat.tensors.iter().all(|t| t.is_zero_copy()), "{what}: zero-copy");
    }

    // The sharded set, shards opened from the files beside the index.
    let index = &report["index"];
    let path = PathBuf::from(index["path"].as_str().unwrap());
    let folder = path.parent().unwrap().to_path_buf();
    let what = format!("seed {seed}: {}", path.display());
    let index_bytes = std::fs::read(&path).unwrap();
    let cat = safetensors::open_index(&index_bytes[..], &mut |name: &str| {
        let b = std::fs::read(folder.join(name))
            .map_err(|e| FormatError::new("safetensors", ErrorKind::Companion, format!("{name}: {e}")))?;
        safetensors::open(&b[..])
    })
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    let shards: Vec<Vec<u8>> = cat.sources[1..]
        .iter()
        .map(|s| std::fs::read(folder.join(s)).unwrap())
        .collect();
    let mut sources: Vec<&[u8]> = vec![&index_bytes[..]];
    sources.extend(shards.iter().map(Vec::as_slice));
    let sizes: Vec<u64> = sources.iter().map(|s| s.len() as u64).collect();
    cat.check_ranges(&sizes).unwrap();
    compare(&what, &cat, index["tensors"].as_array().unwrap(), &sources);
    assert_eq!(
        cat.metadata,
        [(
            "total_size".to_string(),
            Meta::Int(index["total_size"].as_i64().unwrap())
        )]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
