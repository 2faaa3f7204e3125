//! Files truncated while the `tensorlane` binary reads them (issue 15, "files that change
//! underneath"): every command reads a user's file with `pread`, so a cut in the middle of a read
//! ends with exit 2 and a message naming the file and saying it changed, never SIGBUS.
//!
//! Each case starts the command on a 128 MiB file, waits until it has read part of it (its
//! `rchar` in `/proc/PID/io`), stops it (`SIGSTOP`), cuts the file, and lets it go on. A command
//! that finished before it could be stopped is run again (at most three times).
//!
//! * `tenso_file_cut_mid_read`: `inspect --hash`, `verify` and `convert` of a Tenso packet file
//!   (its body streamed in pieces); and a body over `--max-tensor-bytes`, which streaming still
//!   lists and hashes.
//! * `zt_file_cut_mid_read`: `verify --canonical` (cut during the byte-for-byte comparison), and
//!   `convert` of a `.zt` to `.zt`, `.safetensors` and Tenso; no output is left behind.
//!
//! * `safetensors_rewritten_in_place_mid_read` (issue 25): the same size, bytes overwritten in
//!   the middle: `inspect --hash`, `stats`, `verify` and `convert` end with exit 2 naming the
//!   file and saying it was written in place (its identity, `FileId`, moved), rather than a
//!   hash, a count or an output of neither version.
//!
//! The listing (`inspect` of a `.zt`) reads only the manifest, too quickly to cut in the middle:
//! `zt_tools`'s unit tests cut its file between the open and the reads.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tensorlane_core::wire::{self, EncodeOptions, Packet};
use tensorlane_core::zt::writer::{ObjectSpec, Options, PartSpec};
use tensorlane_core::{DType, Tensor};

const BIN: &str = env!("CARGO_BIN_EXE_tensorlane");
const MIB: u64 = 1 << 20;

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tl-changing-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Bytes the process has read so far (`rchar`), 0 once it is gone.
fn rchar(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("rchar:"))
                .and_then(|l| l[6..].trim().parse().ok())
        })
        .unwrap_or(0)
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// Runs the tool with `args`; once it has read `after` bytes, stops it, cuts `file` to `keep`
/// bytes and lets it go on. `None` when it finished before it could be stopped.
fn cut_while_reading(args: &[&str], file: &Path, after: u64, keep: u64) -> Option<Output> {
    change_while_reading(args, after, &|| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(file)
            .unwrap()
            .set_len(keep)
            .unwrap()
    })
}

/// Runs the tool with `args`; once it has read `after` bytes, stops it, runs `change` and lets
/// it go on. `None` when it finished before it could be stopped.
fn change_while_reading(args: &[&str], after: u64, change: &dyn Fn()) -> Option<Output> {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = Instant::now();
    while rchar(pid) <= after {
        if child.try_wait().unwrap().is_some() {
            return None;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{args:?} never read {after} bytes"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    signal(pid, "-STOP");
    if child.try_wait().unwrap().is_some() {
        return None;
    }
    change();
    signal(pid, "-CONT");
    Some(child.wait_with_output().unwrap())
}

/// Writes the file with `make`, then cuts it mid-read (retrying a run that finished first), and
/// checks the exit code and message.
fn check_cut(make: &dyn Fn(), args: &[&str], file: &Path, after: u64, keep: u64) {
    for _ in 0..3 {
        make();
        let Some(out) = cut_while_reading(args, file, after, keep) else {
            eprintln!("{args:?} finished before the cut; again");
            continue;
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!("{args:?}, cut to {keep} bytes mid-read: {stderr}");
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: killed by a signal? {:?} {stderr}",
            out.status
        );
        let name = file.display().to_string();
        assert!(
            stderr.contains(&format!("error: {name}: "))
                && stderr.contains(&format!("({keep} bytes now,"))
                && stderr.contains("truncated or rewritten in place"),
            "{args:?}: {stderr}"
        );
        return;
    }
    panic!("{args:?} finished before the cut three times");
}

#[test]
fn tenso_file_cut_mid_read() {
    let dir = scratch("tenso");
    let p = dir.join("big.tenso");
    let zeros = vec![0u8; (128 * MIB) as usize];
    let t = Tensor::new(DType::F32, vec![32 * MIB], Cow::Borrowed(&zeros[..])).unwrap();
    let bytes = wire::encode(&Packet::Dense(t), &EncodeOptions::default()).unwrap();
    let make = || std::fs::write(&p, &bytes).unwrap();
    let f = p.to_str().unwrap();
    let out = dir.join("out.zt");
    let o = out.to_str().unwrap();
    // `inspect` lists a Tenso file from its headers; `--hash` reads the body.
    for args in [vec!["inspect", "--hash", f], vec!["verify", f], vec!["convert", f, o]] {
        check_cut(&make, &args, &p, 32 * MIB, MIB);
        assert!(!out.exists(), "{args:?} left an output");
    }
    // Streamed, not read whole: a tensor over --max-tensor-bytes is listed and hashed.
    make();
    let r = Command::new(BIN)
        .args(["--max-tensor-bytes", "64MiB", "inspect", "--json", "--hash", f])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let t = &report["tensors"][0];
    assert_eq!(t["nbytes"], 128 * MIB, "{report}");
    assert_eq!(
        t["sha256"].as_str().unwrap(),
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&zeros)),
        "{report}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn zt_file_cut_mid_read() {
    let dir = scratch("zt");
    let p = dir.join("big.zt");
    // Eight objects of 16 MiB, each its own bytes (equal blobs would be stored once):
    // conversions read one object at a time.
    let data: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; (16 * MIB) as usize]).collect();
    let make = || {
        let mut w = tensorlane::zt_write::ZtFile::publish(&p, Options::canonical()).unwrap();
        for (i, d) in data.iter().enumerate() {
            w.add_object(
                &format!("w{i}"),
                &ObjectSpec::dense(&[4 * MIB]),
                &[PartSpec::new("data", DType::F32, d)],
            )
            .unwrap();
        }
        w.finish().unwrap();
    };
    make();
    let size = std::fs::metadata(&p).unwrap().len();
    assert!(size > 128 * MIB, "{size}");
    let f = p.to_str().unwrap();
    let ok = Command::new(BIN).args(["verify", "--canonical", f]).output().unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    // verify hashes every part first, then compares the file with its canonical encoding: cut
    // during the comparison.
    check_cut(&make, &["verify", "--canonical", f], &p, size + 32 * MIB, size / 2);
    for out in ["out.zt", "out.safetensors", "out.tenso"] {
        let out = dir.join(out);
        let mut args = vec!["convert", f, out.to_str().unwrap()];
        if out.extension().is_some_and(|e| e == "zt") {
            args.extend(["--to", "zt"]);
        }
        check_cut(&make, &args, &p, 48 * MIB, 40 * MIB);
        assert!(!out.exists(), "{args:?} left an output");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn safetensors_rewritten_in_place_mid_read() {
    let dir = scratch("rewrite");
    let p = dir.join("big.safetensors");
    // Four 32 MiB f32 tensors of zeros.
    let mut header = String::from("{");
    for i in 0..4u64 {
        let (a, b) = (i * 32 * MIB, (i + 1) * 32 * MIB);
        if i > 0 {
            header.push(',');
        }
        header.push_str(&format!(r#""t{i}":{{"dtype":"F32","shape":[{}],"data_offsets":[{a},{b}]}}"#, 8 * MIB));
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.resize(bytes.len() + (128 * MIB) as usize, 0);
    let make = || std::fs::write(&p, &bytes).unwrap();
    let f = p.to_str().unwrap();
    let out = dir.join("out.zt");
    // Overwrite 1 MiB in the last tensor, the size unchanged.
    let rewrite = || {
        use std::io::{Seek, SeekFrom, Write};
        let mut w = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        w.seek(SeekFrom::Start(bytes.len() as u64 - 16 * MIB)).unwrap();
        w.write_all(&vec![0xff; MIB as usize]).unwrap();
    };
    let runs: [Vec<&str>; 4] = [
        vec!["inspect", "--hash", f],
        vec!["stats", f],
        vec!["verify", f],
        vec!["convert", f, out.to_str().unwrap()],
    ];
    for args in runs {
        let mut done = false;
        for _ in 0..3 {
            make();
            let Some(o) = change_while_reading(&args, 16 * MIB, &rewrite) else {
                eprintln!("{args:?} finished before the rewrite; again");
                continue;
            };
            let stderr = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {:?} {stderr}", o.status);
            assert!(
                stderr.contains(f) && stderr.contains("changed while it was read") && stderr.contains("written in place"),
                "{args:?}: {stderr}"
            );
            assert!(!out.exists(), "{args:?} published an output");
            done = true;
            break;
        }
        assert!(done, "{args:?} finished before the rewrite three times");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
