//! Issue 15's messages and rough edges, each pinned against the real binary: the shared format
//! detection (`tests/data/detect/identify.json`, also checked from JS), the one exit-code rule
//! and its `--help` text, IEC sizes, a closed pipe, `verify` on model files, the `offload`
//! messages, a directory, converting the demo sample, the alignment note, zstd and GGUF messages,
//! a stored digest that does not match, and a damaged file given to `convert`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use tensorlane_testkit as common;

const BIN: &str = env!("CARGO_BIN_EXE_tensorlane");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("the binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn fixture(name: &str) -> PathBuf {
    common::data("fixtures").join(name)
}

/// Asserts the exit code, with the output in the message.
fn code(o: &Output, want: i32, what: &str) {
    assert_eq!(
        o.status.code(),
        Some(want),
        "{what}: stdout:\n{}\nstderr:\n{}",
        stdout(o),
        stderr(o)
    );
}

fn json(o: &Output) -> Value {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `bytes` with `bytes[at] ^= x`.
fn flipped(src: &Path, at: usize, x: u8) -> Vec<u8> {
    let mut b = std::fs::read(src).unwrap();
    b[at] ^= x;
    b
}

#[test]
fn the_shared_detection_table_gives_the_same_answers_as_js() {
    let table: Value =
        serde_json::from_str(&std::fs::read_to_string(common::data("detect").join("identify.json")).unwrap()).unwrap();
    let d = common::live_dir("tl-detect");
    let cases = table["cases"].as_array().unwrap();
    assert!(cases.len() >= 8);
    for c in cases {
        let name = c["name"].as_str().unwrap();
        let bytes = match (c["text"].as_str(), c["hex"].as_str()) {
            (Some(t), _) => t.as_bytes().to_vec(),
            (_, Some(h)) => hex::decode(h).unwrap(),
            _ => panic!("{name}: no bytes"),
        };
        let f = d.join(name);
        std::fs::write(&f, &bytes).unwrap();
        for cmd in ["inspect", "verify", "stats"] {
            let o = run(&[cmd, p(&f)]);
            let err = stderr(&o);
            let what = format!("{cmd} {name}");
            // The path is printed once, at the start.
            assert_eq!(err.matches(p(&f)).count(), 1, "{what}: {err}");
            if let Some(fragment) = c["message"].as_str() {
                // Nothing this tool reads: valid input it cannot handle (1), or an empty file (2).
                code(&o, if c["unrecognised"] == "empty" { 2 } else { 1 }, &what);
                assert!(err.contains(fragment), "{what}: {err}");
                assert!(err.contains("not a model file this tool reads"), "{what}: {err}");
                for wrong in ["pickle opcode", "memo", "tenso packet", ".zt v2 magic"] {
                    assert!(!err.contains(wrong), "{what}: {err}");
                }
            } else {
                // A damaged file of the format its name gives: that reader's error, exit 2.
                code(&o, 2, &what);
                let format = c["format"].as_str().unwrap();
                assert!(err.contains(&format!(": {format}: ")), "{what}: {err}");
            }
        }
        // convert agrees with inspect, prints the path once and leaves nothing behind.
        let out = d.join("out.zt");
        let o = run(&["convert", p(&f), p(&out)]);
        let want = if c["message"].is_string() && c["unrecognised"] != "empty" {
            1
        } else {
            2
        };
        code(&o, want, &format!("convert {name}"));
        assert_eq!(stderr(&o).matches(p(&f)).count(), 1, "convert {name}: {}", stderr(&o));
        assert!(!out.exists());
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn help_documents_the_exit_codes_and_usage_errors_exit_1() {
    let o = run(&["--help"]);
    code(&o, 0, "--help");
    let help = stdout(&o);
    assert!(help.contains("Exit codes:"), "{help}");
    for line in ["0  success", "1  bad usage", "2  invalid, damaged or hostile input"] {
        assert!(help.contains(line), "{line:?} in {help}");
    }
    code(&run(&["convert", "--bogus"]), 1, "an unknown option");
    code(&run(&["inspect"]), 1, "inspect without a file");
    code(
        &run(&["stats", p(&fixture("sample.safetensors")), "--bins", "0"]),
        1,
        "--bins 0",
    );
    code(&run(&["--version"]), 0, "--version");
}

#[test]
fn a_closed_pipe_ends_quietly() {
    for args in [
        &["offload", "plan", "tiny", "--budget", "4GiB"][..],
        &["offload", "sim", "tiny", "--budget", "64MiB"][..],
        &["verify", p(&fixture("basic-canonical.zt"))][..],
        &["inspect", p(&fixture("basic-canonical.zt"))][..],
    ] {
        // The reading end is closed before the tool starts, so its first write meets EPIPE.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = Command::new(BIN)
            .args(args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = stderr(&o);
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "{args:?}: {err}"
        );
        code(&o, 0, &format!("{args:?}"));
    }
}

#[test]
fn sizes_print_in_iec_units() {
    let o = run(&["inspect", p(&fixture("basic-canonical.zt"))]);
    assert!(
        stdout(&o).contains("zt file, 384.7 KiB (393910 bytes), 6 objects"),
        "{}",
        stdout(&o)
    );
    let o = run(&["inspect", p(&fixture("sample.safetensors"))]);
    assert!(
        stdout(&o).contains("safetensors file, 286 B, 3 tensors"),
        "{}",
        stdout(&o)
    );
    let o = run(&["offload", "plan", "tiny", "--budget", "4GiB"]);
    let out = stdout(&o);
    assert!(out.contains("budget 4.0 GiB"), "{out}");
    // No SI byte sizes beside the IEC ones (rates stay GB/s).
    assert!(
        !out.replace("GB/s", "").contains(" GB") && !out.contains("4.295"),
        "{out}"
    );
    assert!(out.contains("MiB"), "{out}");
}

#[test]
fn verify_reads_every_model_format() {
    let manifest: Value = serde_json::from_str(&std::fs::read_to_string(fixture("manifest.json")).unwrap()).unwrap();
    let mut checked = 0;
    for e in manifest["files"].as_array().unwrap() {
        let format = e["format"].as_str().unwrap();
        if !common::MODEL_FORMATS.contains(&format) {
            continue;
        }
        let f = fixture(e["file"].as_str().unwrap());
        let o = run(&["verify", p(&f)]);
        let what = format!("verify {}", f.display());
        match e["expect"].as_str() {
            Some("read") => {
                code(&o, 0, &what);
                let n = e["tensors"].as_array().unwrap().len();
                let plural = if n == 1 { "" } else { "s" };
                assert!(
                    stdout(&o).contains(&format!("{n} tensor{plural} (")),
                    "{what}: {}",
                    stdout(&o)
                );
                assert!(stdout(&o).contains("read in full"), "{what}: {}", stdout(&o));
                checked += 1;
            }
            Some("reject") => {
                assert!(!o.status.success(), "{what} must fail");
                assert!(!stderr(&o).contains("HeaderMagic"), "{what}: {}", stderr(&o));
            }
            _ => {}
        }
    }
    assert!(checked >= 10, "{checked} model files verified");
    // --canonical is for .zt and Tenso: a usage error on a model file.
    let o = run(&["verify", "--canonical", p(&fixture("sample.safetensors"))]);
    code(&o, 1, "verify --canonical on safetensors");
    assert!(stderr(&o).contains("convert it to .zt first"), "{}", stderr(&o));
}

#[test]
fn offload_messages_point_the_right_way() {
    let st = fixture("sample.safetensors");
    // Every format plans through the one Model: no "convert it first".
    let o = run(&["offload", "plan", p(&st), "--budget", "4GiB"]);
    code(&o, 0, "offload plan on safetensors");
    assert!(!stderr(&o).contains("convert it first"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("HeaderMagic"), "{}", stderr(&o));

    let d = common::live_dir("tl-offload");
    let text = d.join("notes.txt");
    std::fs::write(&text, "not a model\n").unwrap();
    let o = run(&["offload", "plan", p(&text), "--budget", "4GiB"]);
    code(&o, 1, "offload plan on text");
    assert!(stderr(&o).contains("it is plain text"), "{}", stderr(&o));
    std::fs::remove_dir_all(&d).unwrap();

    let zt = fixture("basic-canonical.zt");
    let o = run(&["offload", "plan", p(&zt), "--budget", "4GiB"]);
    code(&o, 0, "offload plan on .zt");
    let o = run(&["offload", "run", p(&zt), "--budget", "4GiB"]);
    code(&o, 1, "offload run on .zt");
    assert!(
        stderr(&o).contains("cannot execute a model file yet") && stderr(&o).contains("offload plan"),
        "{}",
        stderr(&o)
    );
    let o = run(&["offload", "run", "--help"]);
    assert!(
        stdout(&o).contains("`run` takes the `tiny` preset only"),
        "{}",
        stdout(&o)
    );

    let o = run(&["offload", "plan", "tiny", "--budget", "4GiB", "--profile", "rtx4090"]);
    code(&o, 1, "unknown profile");
    assert!(stderr(&o).contains("h100, pcie4"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("No such file"), "{}", stderr(&o));

    let o = run(&["offload", "plan", "tiny", "--budget", "lots"]);
    code(&o, 1, "bad budget");
    for form in ["4GiB", "512MiB", "4GB", "plain byte count"] {
        assert!(stderr(&o).contains(form), "{form}: {}", stderr(&o));
    }
    let o = run(&["offload", "run", "tiny", "--budget", "lots"]);
    code(&o, 1, "bad budget (run)");
    assert!(stderr(&o).contains("4GiB"), "{}", stderr(&o));
}

#[test]
fn a_directory_is_named_as_one() {
    let dir = common::data("fixtures").join("gguf");
    let o = run(&["inspect", p(&dir)]);
    code(&o, 1, "inspect DIR");
    let err = stderr(&o);
    assert!(
        err.contains("a directory, not a file") && err.contains("tiny-llama.gguf"),
        "{err}"
    );
    assert!(!err.contains("os error"), "{err}");
    for cmd in ["verify", "stats"] {
        let o = run(&[cmd, p(&dir)]);
        code(&o, 1, cmd);
        assert!(stderr(&o).contains("a directory"), "{}", stderr(&o));
    }
}

fn stats_of(zt: &Path) -> Value {
    json(&run(&["stats", "--json", p(zt)]))
}

fn find<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    v.as_array().unwrap().iter().find(|t| t["name"] == name)
}

#[test]
fn the_demo_sample_converts() {
    let d = common::live_dir("tl-demo");
    let sample = d.join("sample.tenso");
    code(&run(&["demo", "--out", p(&sample)]), 0, "demo");
    let zt = d.join("s.zt");
    // Without options: refused, naming the packet and the options.
    let o = run(&["convert", p(&sample), p(&zt)]);
    code(&o, 1, "convert the sample");
    assert!(stderr(&o).contains("\"weight_q\"") && stderr(&o).contains("--quantized dequantize"));
    assert!(!zt.exists());

    // Dequantized, strings left out.
    let o = run(&[
        "convert",
        "--quantized",
        "dequantize",
        "--skip-unsupported",
        p(&sample),
        p(&zt),
    ]);
    code(&o, 0, "convert --quantized dequantize --skip-unsupported");
    assert!(
        stderr(&o).contains("\"labels\" (a string packet) was left out"),
        "{}",
        stderr(&o)
    );
    code(
        &run(&["verify", "--canonical", p(&zt)]),
        0,
        "verify the converted sample",
    );
    let report = json(&run(&["inspect", "--json", "--hash", p(&zt)]));
    let objects = report["tensors"].as_array().unwrap();
    let wq = objects.iter().find(|t| t["name"] == "weight_q").unwrap();
    assert_eq!(wq["dtype"], "float32");
    assert_eq!(wq["shape"], serde_json::json!([64, 32]));
    // The CSR matrix keeps its components (Tenso `data` = `values`).
    let adjacency = objects.iter().find(|t| t["name"] == "adjacency").unwrap();
    assert_eq!(adjacency["layout"], "zt.sparse_csr/1");
    let packet = json(&run(&["inspect", "--json", "--hash", p(&sample)]));
    let a = packet["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "adjacency")
        .unwrap();
    for (c, part) in [("data", "values"), ("indices", "indices"), ("indptr", "indptr")] {
        let sha = |v: &Value, key: &str, n: &str| {
            v[key].as_array().unwrap().iter().find(|x| x["name"] == n).unwrap()["sha256"].clone()
        };
        // The packet's wire component `data` is its `values` part, as in the `.zt` layout.
        let tenso_part = if c == "data" { "values" } else { c };
        assert_eq!(sha(a, "parts", tenso_part), sha(adjacency, "parts", part), "{c}");
    }
    // The dequantized weight is the weight, within the per-channel int8 step.
    let s = stats_of(&zt);
    let (w, q) = (find(&s, "weight").unwrap(), find(&s, "weight_q").unwrap());
    let range = w["max"].as_f64().unwrap() - w["min"].as_f64().unwrap();
    for k in ["min", "max", "mean"] {
        let diff = (w[k].as_f64().unwrap() - q[k].as_f64().unwrap()).abs();
        assert!(diff <= range / 127.0, "{k}: weight {} vs weight_q {}", w[k], q[k]);
    }

    // Skipped instead.
    let zt2 = d.join("skip.zt");
    let o = run(&[
        "convert",
        "--quantized",
        "skip",
        "--skip-unsupported",
        p(&sample),
        p(&zt2),
    ]);
    code(&o, 0, "convert --quantized skip");
    assert!(
        stderr(&o).contains("\"weight_q\" (a quantized packet) was left out"),
        "{}",
        stderr(&o)
    );
    assert!(find(&stats_of(&zt2), "weight_q").is_none());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn convert_says_when_alignment_makes_the_zt_large() {
    let d = common::live_dir("tl-align");
    let st = fixture("sample.safetensors");
    let zt = d.join("a.zt");
    let o = run(&["convert", p(&st), p(&zt)]);
    code(&o, 0, "convert");
    let err = stderr(&o);
    assert!(
        err.contains("aligns every blob to 64 KiB") && err.contains("--align 4096"),
        "{err}"
    );
    assert!(err.contains("256.4 KiB (262550 bytes)"), "{err}");
    let small = d.join("small.zt");
    let o = run(&["convert", "--align", "4096", p(&st), p(&small)]);
    code(&o, 0, "convert --align 4096");
    assert!(!stderr(&o).contains("aligns every blob"), "{}", stderr(&o));
    let size = std::fs::metadata(&small).unwrap().len();
    assert!(size < 64 << 10, "{size}");
    code(&run(&["verify", p(&small)]), 0, "verify the 4 KiB-aligned file");
    code(&run(&["verify", "--canonical", p(&small)]), 2, "not canonical");
    // The same tensors, parts and digests; only the blob offsets differ.
    let without_offsets = |f: &Path| {
        let mut v = json(&run(&["inspect", "--json", "--hash", p(f)]))["tensors"].clone();
        for t in v.as_array_mut().unwrap() {
            t["offset"] = Value::Null;
            for part in t["parts"].as_array_mut().unwrap() {
                part["offset"] = Value::Null;
            }
        }
        v
    };
    let (a, b) = (without_offsets(&zt), without_offsets(&small));
    assert_eq!(a.as_array().unwrap().len(), 3);
    assert_eq!(a, b);
    code(
        &run(&["convert", "--align", "100", p(&st), p(&small)]),
        1,
        "--align 100",
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn zstd_errors_are_sentences() {
    let d = common::live_dir("tl-zstd");
    let f = d.join("z.zt");
    // A byte inside the `ramp` object's zstd frame (blob at 4096, 2378 bytes).
    std::fs::write(&f, flipped(&fixture("compressed-zstd-seekable.zt"), 4096 + 973, 0x55)).unwrap();
    for cmd in [&["inspect", "--hash"][..], &["verify"][..]] {
        let mut args = cmd.to_vec();
        args.push(p(&f));
        let o = run(&args);
        code(&o, 2, &format!("{cmd:?}"));
        let err = stderr(&o);
        assert!(err.contains("zstd: a block is corrupt"), "{err}");
        assert!(err.contains("object \"ramp\""), "{err}");
        for debug in ["Error(", " { ", "DecodedLiteralCountMismatch"] {
            assert!(!err.contains(debug), "{debug:?} in {err}");
        }
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn inspect_hash_flags_a_stored_digest_that_does_not_match() {
    let d = common::live_dir("tl-digest");
    let f = d.join("flip.zt");
    // The first byte of `a.bf16`'s blob (at 65536); the manifest still has the old xxh3.
    std::fs::write(&f, flipped(&fixture("basic-canonical.zt"), 65536, 0x01)).unwrap();
    let o = run(&["inspect", "--hash", p(&f)]);
    code(&o, 0, "inspect --hash");
    let err = stderr(&o);
    assert!(
        err.contains("\"a.bf16\"/\"data\": the stored digest does not match the bytes") && err.contains("xxh3:"),
        "{err}"
    );
    let o = run(&["inspect", "--hash", "--json", p(&f)]);
    let warnings = json(&o)["warnings"].to_string();
    assert!(warnings.contains("does not match"), "{warnings}");
    // Without --hash the bytes are not read, so nothing is claimed.
    assert!(!stderr(&run(&["inspect", p(&f)])).contains("does not match"));
    let o = run(&["verify", p(&f)]);
    code(&o, 2, "verify");
    assert!(stderr(&o).contains("Digest"), "{}", stderr(&o));
    std::fs::remove_dir_all(&d).unwrap();
}

/// A GGUF v3 file with one key/value (`general.name` = "x") and one f32 tensor `w` of 4
/// elements; returns it with the offsets of the key's value type, the value's length and the
/// tensor name's length.
fn tiny_gguf() -> (Vec<u8>, usize, usize, usize) {
    let s = |b: &[u8]| [(b.len() as u64).to_le_bytes().as_slice(), b].concat();
    let mut f = b"GGUF".to_vec();
    f.extend(3u32.to_le_bytes());
    f.extend(1u64.to_le_bytes());
    f.extend(1u64.to_le_bytes());
    f.extend(s(b"general.name"));
    let ty = f.len();
    f.extend(8u32.to_le_bytes());
    let vlen = f.len();
    f.extend(s(b"x"));
    let name = f.len();
    f.extend(s(b"w"));
    f.extend(1u32.to_le_bytes());
    f.extend(4u64.to_le_bytes());
    f.extend(0u32.to_le_bytes());
    f.extend(0u64.to_le_bytes());
    while !f.len().is_multiple_of(32) {
        f.push(0);
    }
    for v in [1f32, 2., 3., 4.] {
        f.extend(v.to_le_bytes());
    }
    (f, ty, vlen, name)
}

#[test]
fn gguf_errors_name_the_key_or_the_name_length() {
    let d = common::live_dir("tl-gguf");
    let (good, ty, vlen, name) = tiny_gguf();
    let f = d.join("m.gguf");
    std::fs::write(&f, &good).unwrap();
    code(&run(&["inspect", p(&f)]), 0, "the base file reads");

    let mut bad = good.clone();
    bad[ty..ty + 4].copy_from_slice(&99u32.to_le_bytes());
    std::fs::write(&f, &bad).unwrap();
    let o = run(&["inspect", p(&f)]);
    code(&o, 2, "bad value type");
    assert!(stderr(&o).contains("metadata key 'general.name'"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("tensor '"), "{}", stderr(&o));

    let mut bad = good.clone();
    bad[vlen..vlen + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    std::fs::write(&f, &bad).unwrap();
    let o = run(&["inspect", p(&f)]);
    code(&o, 2, "huge value length");
    assert!(
        stderr(&o).contains("metadata key 'general.name': a string value's length is 1099511627776 bytes"),
        "{}",
        stderr(&o)
    );

    let mut bad = good.clone();
    bad[name..name + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    std::fs::write(&f, &bad).unwrap();
    let o = run(&["inspect", p(&f)]);
    code(&o, 2, "huge tensor name length");
    let err = stderr(&o);
    assert!(err.contains("a tensor name's length is 1099511627776 bytes"), "{err}");
    assert!(!err.contains("tensor infos"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_tenso_packet_with_a_damaged_magic_is_explained_as_tenso() {
    let d = common::live_dir("tl-tenso-magic");
    let sample = d.join("s.tenso");
    code(&run(&["demo", "--out", p(&sample)]), 0, "demo");
    for name in ["x.tenso", "x.bin", "x"] {
        let f = d.join(name);
        std::fs::write(&f, flipped(&sample, 3, b'O' ^ b'X')).unwrap();
        let o = run(&["verify", p(&f)]);
        code(&o, 2, name);
        let err = stderr(&o);
        assert!(
            err.contains("not a tenso packet") && err.contains("TNSO"),
            "{name}: {err}"
        );
        assert!(
            !err.contains(".zt v2 magic") && !err.contains("pickle"),
            "{name}: {err}"
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn convert_on_a_damaged_file_exits_2_like_inspect_and_verify() {
    let d = common::live_dir("tl-damaged");
    let cases = [
        ("magic.zt", flipped(&fixture("basic-canonical.zt"), 0, 0xff)),
        (
            "truncated.zt",
            std::fs::read(fixture("basic-canonical.zt")).unwrap()[..1000].to_vec(),
        ),
        ("short.safetensors", vec![0xff, 0, 0, 0, 0, 0, 0, 0, b'{', b'}']),
    ];
    for (name, bytes) in cases {
        let f = d.join(name);
        std::fs::write(&f, bytes).unwrap();
        for args in [
            vec!["inspect", p(&f)],
            vec!["verify", p(&f)],
            vec!["convert", p(&f), p(&d.join("out.tenso"))],
            vec!["convert", p(&f), p(&d.join("out.zt"))],
        ] {
            let o = run(&args);
            code(&o, 2, &format!("{args:?}"));
            assert_eq!(stderr(&o).matches(p(&f)).count(), 1, "{args:?}: {}", stderr(&o));
        }
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// `offload sim --trace FILE` writes the simulated schedule as a Chrome/Perfetto trace (named
/// tracks, complete events) and says so; a trace it cannot write is an error naming the path.
#[test]
fn offload_sim_writes_a_trace() {
    let dir = std::env::temp_dir().join(format!("tensorlane-sim-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sim.json");
    let o = run(&["offload", "sim", "tiny", "--budget", "2MiB", "--profile", "pcie4", "--trace", p(&path)]);
    code(&o, 0, "offload sim --trace");
    assert!(stdout(&o).contains("trace: "), "{}", stdout(&o));
    let (trace, tracks) = common::llm::read_trace(&path);
    let events = trace["traceEvents"].as_array().unwrap();
    assert_eq!(tracks[..2], ["compute", "h2d copies"]);
    let ops: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X" && e["cat"] == "compute").collect();
    assert!(!ops.is_empty() && ops.iter().all(|e| e["dur"].as_f64().unwrap() >= 0.0));
    let o = run(&["offload", "sim", "tiny", "--budget", "2MiB", "--trace", p(&dir.join("no/such/dir/t.json"))]);
    code(&o, 1, "a trace path that cannot be written");
    assert!(stderr(&o).contains("cannot write the trace to"), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}
