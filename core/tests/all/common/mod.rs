//! Shared by the integration tests: where the reference data lives.

use std::path::PathBuf;

/// The repository's test data folder (`tests/data`, see its README for where each file came
/// from), checked to contain `needed` (a path inside it): the data is part of the repository, so a
/// missing file is a failure, never a skip.
pub fn data(needed: &str) -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data"));
    assert!(
        p.join(needed).exists(),
        "test data missing at {} (it is part of the repository: is the checkout complete?)",
        p.join(needed).display()
    );
    p
}

/// One file of `tests/data/fixtures/` with its `manifest.json` entry.
#[allow(dead_code)]
pub struct Fixture {
    /// Absolute path of the file.
    pub path: PathBuf,
    /// Its manifest entry (`file`, `format`, `expect`, `tensors`, `reason`, ...).
    pub entry: serde_json::Value,
}

#[allow(dead_code)]
impl Fixture {
    /// `expect` of the entry (`read`, `reject`, `companion`, `no-tensors`).
    pub fn expect(&self) -> &str {
        self.entry["expect"].as_str().unwrap_or("")
    }

    /// The manifest's relative file name.
    pub fn file(&self) -> &str {
        self.entry["file"].as_str().unwrap_or("")
    }

    /// The file's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        std::fs::read(&self.path).unwrap_or_else(|e| panic!("{}: {e}", self.path.display()))
    }
}

/// The fixtures of the given manifest formats (`"safetensors"`, `"gguf"`, `"pt"`, ...).
#[allow(dead_code)]
pub fn fixtures(formats: &[&str]) -> Vec<Fixture> {
    let root = data("fixtures/manifest.json").join("fixtures");
    let text = std::fs::read_to_string(root.join("manifest.json")).unwrap();
    let m: serde_json::Value = serde_json::from_str(&text).unwrap();
    let out: Vec<Fixture> = m["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| formats.contains(&f["format"].as_str().unwrap_or("")))
        .map(|f| Fixture {
            path: root.join(f["file"].as_str().unwrap()),
            entry: f.clone(),
        })
        .collect();
    assert!(!out.is_empty(), "no fixtures of formats {formats:?} in the manifest");
    out
}

/// Checks a catalog against a `read` fixture: exactly the manifest's tensors, in its order, each
/// with the manifest's dtype, shape, nbytes and the sha256 of [`tensorlane_core::formats::read`]'s
/// bytes. `sources` are the catalog's sources, in order.
#[allow(dead_code)]
pub fn check_catalog(fx: &Fixture, cat: &tensorlane_core::formats::Catalog, sources: &[&[u8]]) {
    let want = fx.entry["tensors"].as_array().unwrap();
    let names: Vec<&str> = cat.tensors.iter().map(|t| t.name.as_str()).collect();
    let want_names: Vec<&str> = want.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, want_names, "{}: tensor names", fx.file());
    for (t, w) in cat.tensors.iter().zip(want) {
        let what = format!("{} / {}", fx.file(), t.name);
        assert_eq!(t.ty.name(), w["dtype"].as_str().unwrap(), "{what}: dtype");
        assert_eq!(t.shape, u64s(&w["shape"]), "{what}: shape");
        assert_eq!(t.nbytes(), w["nbytes"].as_u64(), "{what}: nbytes");
        let bytes = tensorlane_core::formats::read(cat.format.name(), t, sources)
            .unwrap_or_else(|e| panic!("{what}: read failed: {e}"));
        assert_eq!(sha256_hex(&bytes), w["sha256"].as_str().unwrap(), "{what}: sha256");
    }
}

/// The lowercase hex SHA-256 of `b`, as the manifests write it.
#[allow(dead_code)]
pub fn sha256_hex(b: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(b))
}

/// A JSON array of unsigned integers (a shape, offsets) as `Vec<u64>`.
#[allow(dead_code)]
pub fn u64s(v: &serde_json::Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|d| d.as_u64().unwrap_or_else(|| panic!("not an unsigned integer: {d}")))
        .collect()
}

/// Little-endian bytes of `v`.
#[allow(dead_code)]
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The attribute `key` of a tensor.
#[allow(dead_code)]
pub fn attr<'a>(t: &'a tensorlane_core::formats::TensorInfo, key: &str) -> Option<&'a tensorlane_core::formats::Meta> {
    t.attributes.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// A metadata value as the JSON the manifests write (bytes as an array of numbers).
#[allow(dead_code)]
pub fn meta_json(m: &tensorlane_core::formats::Meta) -> serde_json::Value {
    use serde_json::Value as J;
    use tensorlane_core::formats::Meta;
    match m {
        Meta::Null => J::Null,
        Meta::Bool(b) => J::Bool(*b),
        Meta::Int(i) => J::from(*i),
        Meta::UInt(u) => J::from(*u),
        Meta::Float(f) => J::from(*f),
        Meta::Str(s) => J::String(s.clone()),
        Meta::Bytes(b) => J::from(b.clone()),
        Meta::List(l) => J::Array(l.iter().map(meta_json).collect()),
        Meta::Map(m) => J::Object(m.iter().map(|(k, v)| (k.clone(), meta_json(v))).collect()),
    }
}

/// The kind of a refusal, checking that it says something; panics when the file was accepted.
#[allow(dead_code)]
pub fn refusal_kind(
    r: Result<tensorlane_core::formats::Catalog, tensorlane_core::formats::FormatError>,
) -> tensorlane_core::formats::ErrorKind {
    match r {
        Ok(c) => panic!("accepted: {:?}", c.tensors.iter().map(|t| &t.name).collect::<Vec<_>>()),
        Err(e) => {
            assert!(!e.message.is_empty(), "an empty message: {e:?}");
            e.kind
        }
    }
}

/// The kind a `reject` fixture must be refused with, from a test's table of (file, kind).
#[allow(dead_code)]
pub fn expected_refusal(
    table: &[(&str, tensorlane_core::formats::ErrorKind)],
    fx: &Fixture,
) -> tensorlane_core::formats::ErrorKind {
    table
        .iter()
        .find(|(f, _)| *f == fx.file())
        .unwrap_or_else(|| {
            panic!(
                "{}: a reject fixture without an expected kind in the test's table",
                fx.file()
            )
        })
        .1
}

/// A global allocator that records the largest single allocation of each thread, for "no
/// allocation while opening a file is larger than the file" checks. The test binary installs it
/// with `install_counting_allocator!();` (main.rs).
#[allow(dead_code)]
pub mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    /// The counting allocator (over [`System`]).
    pub struct Counting;

    thread_local! {
        static LARGEST: Cell<usize> = const { Cell::new(0) };
    }

    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(layout.size())));
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(new_size)));
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    /// Runs `f` and returns its result with the largest single allocation it made (on this
    /// thread; only meaningful where [`Counting`] is the global allocator).
    pub fn largest_alloc<T>(f: impl FnOnce() -> T) -> (T, usize) {
        LARGEST.with(|l| l.set(0));
        let out = f();
        (out, LARGEST.with(|l| l.get()))
    }
}

/// Installs [`counting::Counting`] as the test binary's global allocator, with a test that it
/// sees allocations (so a check against it cannot pass by measuring nothing).
#[macro_export]
macro_rules! install_counting_allocator {
    () => {
        #[global_allocator]
        static ALLOC: common::counting::Counting = common::counting::Counting;

        #[test]
        fn allocation_counter_sees_allocations() {
            let (v, largest) = common::counting::largest_alloc(|| vec![1u8; 100_000]);
            assert!(largest >= v.len());
        }
    };
}
