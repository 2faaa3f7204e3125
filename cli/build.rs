//! Compiles the web inspector into the `tensorlane` binary: writes `$OUT_DIR/inspector.rs`, a
//! table of `tensorlane::serve::Asset`s (`include_bytes!` of each file, a strong ETag from its
//! hash) that `tensorlane serve` serves from memory.
//!
//! The files come from:
//! 1. in a package made by `cargo package`/`cargo publish` (it has `Cargo.toml.orig`): its
//!    `inspector/` folder (`web-demo/`, `js/`, `wasm/pkg/`), which `scripts/stage-inspector.sh`
//!    stages into `cli/inspector/` first: a published crate builds from its package alone, and a
//!    package without it fails to build, saying so;
//! 2. in a checkout: `../web-demo/`, the page's modules of `../js/` and all of `../wasm/pkg/`, once
//!    `scripts/build-js.sh` has built the wasm (a staged `cli/inspector/` is not used there: the
//!    pages being worked on are);
//! 3. else nothing: the binary then finds a checkout at run time (`tensorlane serve --web`).
//!
//! The wasm must carry this crate's version (`tensorlane X.Y.Z`, its `version()` export): a wasm
//! of another version is not embedded in a checkout (a warning says to rebuild it) and fails the
//! build of a package. `TENSORLANE_EMBED_INSPECTOR=0` embeds nothing (a smaller, faster debug
//! build).

use std::collections::hash_map::DefaultHasher;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

/// The files to embed: `(URL path, file on disk)`, sorted by URL path.
fn collect(root: &Path, staged: bool) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let add_dir = |dir: &str, url: &str, all: bool, out: &mut Vec<(String, PathBuf)>| {
        let mut stack = vec![(root.join(dir), url.to_string())];
        while let Some((d, u)) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else { continue };
            for e in entries.flatten() {
                let p = e.path();
                let name = e.file_name().to_string_lossy().into_owned();
                if p.is_dir() {
                    if all {
                        stack.push((p, format!("{u}/{name}")));
                    }
                } else if all || name.ends_with(".js") {
                    out.push((format!("{u}/{name}"), p));
                }
            }
        }
    };
    add_dir("web-demo", "web-demo", true, &mut out);
    // A checkout's js/ also holds the addon and type definitions: its modules only there.
    add_dir("js", "js", staged, &mut out);
    // wasm/pkg/ whole: the pages import more than the wasm and its glue (js/run-worker.js imports
    // llm_wgsl.js, the WebGPU runner's kernels), and files picked by name here made a Run view
    // that 404ed on the one not picked.
    add_dir("wasm/pkg", "wasm/pkg", true, &mut out);
    out.retain(|(u, _)| !(u.starts_with("wasm/pkg/") && (u.ends_with(".d.ts") || u.ends_with("/.gitignore"))));
    // Not the inspector: the checkout's development server and the package's Node-only modules.
    let not_served = [
        "web-demo/serve.mjs",
        "js/cli.js",
        "js/node.js",
        "js/wasm-node.js",
        "js/esbuild.js",
    ];
    out.retain(|(u, _)| !not_served.contains(&u.as_str()));
    out.sort();
    out
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let version = std::env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=TENSORLANE_EMBED_INSPECTOR");
    // A package made by `cargo package` has Cargo.toml.orig next to its Cargo.toml.
    let packaged = manifest.join("Cargo.toml.orig").is_file();
    let staged = manifest.join("inspector");
    let checkout = manifest.join("..");

    let mut files = Vec::new();
    let mut source = String::new();
    let mut why_none = String::from("this binary was built before the wasm (scripts/build-js.sh)");
    if std::env::var("TENSORLANE_EMBED_INSPECTOR").is_ok_and(|v| v == "0") {
        why_none = "this binary was built with TENSORLANE_EMBED_INSPECTOR=0".into();
    } else if packaged {
        if !staged.join("web-demo/index.html").is_file() {
            panic!(
                "{}: this package has no inspector/web-demo/index.html: the `tensorlane` binary embeds the web \
                 inspector, so run scripts/stage-inspector.sh before cargo package / cargo publish",
                manifest.display()
            );
        }
        println!("cargo::rerun-if-changed=inspector");
        files = collect(&staged, true);
        source = "inspector/ (the package's)".into();
    } else {
        // Each file the checkout's inspector has (folders would also watch the addon in js/),
        // and wasm/ itself until its pkg/ is built.
        for (u, p) in collect(&checkout, false) {
            if !u.starts_with("wasm/") {
                println!("cargo::rerun-if-changed={}", p.display());
            }
        }
        println!("cargo::rerun-if-changed={}", checkout.join("web-demo").display());
        let wasm = checkout.join("wasm/pkg/tensorlane_wasm_bg.wasm");
        if wasm.is_file() && checkout.join("web-demo/index.html").is_file() {
            // A folder is watched file by file, recursively (llm_wgsl.js is rebuilt apart from
            // the wasm, when a WGSL kernel changes).
            println!("cargo::rerun-if-changed={}", checkout.join("wasm/pkg").display());
            files = collect(&checkout, false);
            source = "the checkout (web-demo/, js/, wasm/pkg/)".into();
        } else {
            println!("cargo::rerun-if-changed={}", checkout.join("wasm").display());
        }
    }

    // The wasm must be this version's.
    let marker = format!("tensorlane {version}");
    if let Some((_, wasm)) = files.iter().find(|(u, _)| u == "wasm/pkg/tensorlane_wasm_bg.wasm") {
        let bytes = std::fs::read(wasm).unwrap_or_default();
        if !bytes.windows(marker.len()).any(|w| w == marker.as_bytes()) {
            let msg = format!(
                "{}: this wasm is not version {version} (no `{marker}` in it): rebuild it with scripts/build-js.sh",
                wasm.display()
            );
            if packaged {
                panic!("{msg}, then restage it with scripts/stage-inspector.sh");
            }
            println!("cargo::warning=not embedding the web inspector: {msg}");
            why_none = format!("its wasm was not version {version} when it was built (scripts/build-js.sh)");
            files.clear();
        }
    } else if !files.is_empty() {
        panic!("{source}: no wasm/pkg/tensorlane_wasm_bg.wasm among the inspector's files");
    }

    let mut code = String::from("/// The web inspector compiled into this binary (generated by build.rs).\n");
    code.push_str("pub static ASSETS: &[tensorlane::serve::Asset] = &[\n");
    let mut total = 0u64;
    for (url, path) in &files {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: cannot read it ({e})", path.display()));
        total += bytes.len() as u64;
        let mut h = DefaultHasher::new();
        bytes.hash(&mut h);
        let etag = format!("\\\"{:x}-{:016x}\\\"", bytes.len(), h.finish());
        let abs = path.canonicalize().unwrap_or_else(|_| path.clone());
        writeln!(
            code,
            "    tensorlane::serve::Asset {{ path: {url:?}, bytes: include_bytes!({:?}), etag: \"{etag}\" }},",
            abs.display().to_string()
        )
        .expect("writing to a String");
    }
    code.push_str("];\n");
    writeln!(code, "/// Why nothing is embedded (when [`ASSETS`] is empty).").unwrap();
    writeln!(code, "pub const WHY_NONE: &str = {why_none:?};").unwrap();
    writeln!(code, "/// The embedded files' total size in bytes.").unwrap();
    writeln!(code, "pub const BYTES: u64 = {total};").unwrap();
    std::fs::write(out_dir.join("inspector.rs"), code).expect("writing $OUT_DIR/inspector.rs");
}
