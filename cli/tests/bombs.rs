//! Bad input that costs memory or changes underneath, against the `tensorlane` binary:
//!
//! * `npz_bomb_hashes_in_bounded_memory`: a 2.9 MB `.npz` whose deflated member declares
//!   `uint8[3_000_000_000]` (built here, `tensorlane_testkit::bombs`) is hashed by
//!   `inspect --hash` under a 2 GiB address-space limit (`prlimit --as`) in under 256 MiB of RSS
//!   (`/usr/bin/time`), with the SHA-256 of 3e9 zero bytes.
//! * `npz_bomb_converts_in_bounded_memory`: a smaller bomb (512 MiB declared) converts to `.zt` and
//!   to `.safetensors` in under 256 MiB of RSS, and the outputs hold the zeros.
//! * `zt_seekable_bomb_streams_or_is_refused`: a `.zt` whose zstd-seekable part declares 3e9
//!   bytes is hashed by `inspect --hash` (the SHA-256 of 3e9 zeros) and verified by `verify`
//!   (its stored digest) frame by frame in under 256 MiB of RSS, with or without the flag; only
//!   `convert`, which needs the part whole, refuses it with the `--max-tensor-bytes` error (exit
//!   2, in bounded memory), by default under the 2 GiB limit.
//! * `lz4_packet_bomb_is_refused_with_the_limit`: a 12 MB Tenso packet whose LZ4 body declares
//!   `float32[750_000_000]` (3e9 bytes) is refused by `inspect --hash`, `convert` and `verify`
//!   with the limit's error.
//! * `truncated_while_hashing_is_an_error`: a 2 GiB model truncated while `inspect --hash` reads
//!   it ends with exit 2 and a message, not SIGBUS.
//! * `zt_truncated_while_hashing_is_an_error`: the `.zt` bomb truncated to half while
//!   `inspect --hash` and `verify --deep` read its frames (with `pread`) ends with exit 2 and a
//!   message naming the new size, not SIGBUS.
//! * `corrupt_zip_members_fail_their_crc`: a stored `.npz` and a `.pt` fixture with one data byte
//!   flipped (headers kept) still list, but `inspect --hash` and `verify` fail with the CRC-32.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use tensorlane_testkit as common;
use tensorlane_testkit::bombs;

const BIN: &str = env!("CARGO_BIN_EXE_tensorlane");
/// RSS every bomb must stay under.
const RSS_LIMIT_KIB: u64 = 256 << 10;
/// SHA-256 of 3,000,000,000 zero bytes (`head -c 3000000000 /dev/zero | sha256sum`).
const SHA256_3E9_ZEROS: &str = "16b29649590001513483bb869fd5b39a6a8d3f2aea76680cea66d3feb21a2243";

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tl-bombs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the binary under `prlimit --as=2GiB`, measuring its peak RSS with `/usr/bin/time`.
/// Returns the output and the peak RSS in KiB.
fn run_bounded(dir: &Path, args: &[&str]) -> (Output, u64) {
    for tool in ["/usr/bin/time", "/usr/bin/prlimit"] {
        assert!(
            Path::new(tool).exists() || !common::in_ci(),
            "{tool} is missing (scripts/setup.sh installs it)"
        );
    }
    let rss = dir.join("rss.txt");
    let out = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("%M")
        .arg("-o")
        .arg(&rss)
        .args(["/usr/bin/prlimit", "--as=2147483648", BIN])
        .args(args)
        .output()
        .unwrap();
    let kib = std::fs::read_to_string(&rss)
        .unwrap()
        .lines()
        .last()
        .and_then(|l| l.trim().parse::<u64>().ok())
        .unwrap_or_else(|| {
            panic!(
                "no RSS figure from /usr/bin/time: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    (out, kib)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn npz_bomb_hashes_in_bounded_memory() {
    let dir = scratch("npz-hash");
    let bomb = dir.join("bomb.npz");
    let size = bombs::npz_bomb(&bomb, 3_000_000_000);
    assert!(size < 3_000_000, "a {size}-byte bomb");
    let (out, kib) = run_bounded(&dir, &["inspect", "--hash", "--json", bomb.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &v["tensors"][0];
    assert_eq!(t["name"], "bomb");
    assert_eq!(t["nbytes"], 3_000_000_000u64);
    assert_eq!(t["sha256"], SHA256_3E9_ZEROS);
    assert!(kib < RSS_LIMIT_KIB, "inspect --hash took {kib} KiB of RSS");
    eprintln!("inspect --hash of a 3e9-byte npz bomb: {kib} KiB peak RSS");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn npz_bomb_converts_in_bounded_memory() {
    let dir = scratch("npz-convert");
    let n: u64 = 512 << 20;
    let bomb = dir.join("bomb.npz");
    bombs::npz_bomb(&bomb, n);
    for target in ["out.zt", "out.safetensors"] {
        let out_path = dir.join(target);
        let (out, kib) = run_bounded(&dir, &["convert", bomb.to_str().unwrap(), out_path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{target}: {}", text(&out.stderr));
        assert!(kib < RSS_LIMIT_KIB, "convert to {target} took {kib} KiB of RSS");
        eprintln!("convert of a {n}-byte npz bomb to {target}: {kib} KiB peak RSS");
        // Read back through the tool (streaming hash): the zeros are all there.
        let (back, _) = run_bounded(&dir, &["inspect", "--hash", "--json", out_path.to_str().unwrap()]);
        assert_eq!(back.status.code(), Some(0), "{target}: {}", text(&back.stderr));
        let v: serde_json::Value = serde_json::from_slice(&back.stdout).unwrap();
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..n >> 20 {
            h.update(&zeros);
        }
        let want = hex_of(&h.finalize());
        let got = v["tensors"][0]["sha256"].as_str().map(str::to_string);
        assert_eq!(got.as_deref(), Some(want.as_str()), "{target}");
        std::fs::remove_file(&out_path).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn zt_seekable_bomb_streams_or_is_refused() {
    let dir = scratch("zt");
    let bomb = dir.join("bomb.zt");
    let size = bombs::zt_seekable_bomb(&bomb, 3_000_000_000);
    assert!(size < 1_000_000, "a {size}-byte bomb");
    let b = bomb.to_str().unwrap();
    let out_path = dir.join("out.tenso");
    let o = out_path.to_str().unwrap();
    // Streamed: hashed and verified frame by frame, whatever the limit.
    let hashes: [&[&str]; 2] = [
        &["inspect", "--hash", "--json", b],
        &["--max-tensor-bytes", "100MiB", "inspect", "--hash", "--json", b],
    ];
    for args in hashes {
        let (out, kib) = run_bounded(&dir, args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let t = &v["tensors"][0];
        assert_eq!(t["name"], "bomb", "{v}");
        assert_eq!(t["sha256"], SHA256_3E9_ZEROS, "{v}");
        assert!(v["warnings"].as_array().is_none_or(|w| w.is_empty()), "{v}");
        assert!(kib < RSS_LIMIT_KIB, "{args:?} took {kib} KiB of RSS");
        eprintln!("{args:?} of a 3e9-byte zstd-seekable bomb: {kib} KiB peak RSS");
    }
    let verifies: [&[&str]; 2] = [&["verify", b], &["verify", "--max-tensor-bytes", "100MiB", b]];
    for args in verifies {
        let (out, kib) = run_bounded(&dir, args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(kib < RSS_LIMIT_KIB, "{args:?} took {kib} KiB of RSS");
        eprintln!("{args:?} of a 3e9-byte zstd-seekable bomb: {kib} KiB peak RSS");
    }
    // Needed whole: refused with the limit's error, not aborted.
    let (out, kib) = run_bounded(&dir, &["convert", b, o]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "convert: {stderr}");
    assert!(
        stderr.contains("bomb/data") && stderr.contains("3000000000 bytes") && stderr.contains("--max-tensor-bytes"),
        "convert: {stderr}"
    );
    assert!(kib < RSS_LIMIT_KIB, "convert took {kib} KiB of RSS");
    assert!(!out_path.exists());
    // Listing reads no data.
    let out = Command::new(BIN).args(["inspect", b]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn lz4_packet_bomb_is_refused_with_the_limit() {
    let dir = scratch("lz4");
    let bomb = dir.join("bomb.tenso");
    let size = bombs::lz4_packet_bomb(&bomb, 750_000_000);
    assert!(size < 16_000_000, "a {size}-byte bomb");
    let b = bomb.to_str().unwrap();
    let out_path = dir.join("out.zt");
    let o = out_path.to_str().unwrap();
    let cases: [&[&str]; 3] = [
        &["inspect", "--hash", b],
        &["convert", b, o],
        &["--max-tensor-bytes", "100MiB", "verify", b],
    ];
    for args in cases {
        let (out, kib) = run_bounded(&dir, args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("3000000000 bytes exceeds the limit") && stderr.contains("--max-tensor-bytes"),
            "{args:?}: {stderr}"
        );
        assert!(kib < RSS_LIMIT_KIB, "{args:?} took {kib} KiB of RSS");
    }
    assert!(!out_path.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn truncated_while_hashing_is_an_error() {
    let dir = scratch("truncate");
    let p = dir.join("big.npy");
    // A 2 GiB .npy of zeros (sparse): hashing takes seconds, so the truncation lands mid-read.
    let n: u64 = 2 << 30;
    let header = bombs::npy_header_u8(n);
    std::fs::write(&p, &header).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(header.len() as u64 + n).unwrap();
    let child = Command::new(BIN)
        .args(["inspect", "--hash", p.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the reads are under way (rchar of /proc/PID/io), then cut the file to 1 MiB.
    let io = format!("/proc/{}/io", child.id());
    let start = std::time::Instant::now();
    loop {
        let read: u64 = std::fs::read_to_string(&io)
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("rchar:"))
                    .and_then(|l| l[6..].trim().parse().ok())
            })
            .unwrap_or(0);
        if read > 64 << 20 {
            break;
        }
        assert!(start.elapsed().as_secs() < 60, "the CLI never started reading");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    f.set_len(1 << 20).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "killed by a signal? {:?} {stderr}",
        out.status
    );
    assert!(
        stderr.contains("1048576 bytes") && stderr.contains("truncated"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn zt_truncated_while_hashing_is_an_error() {
    let dir = scratch("zt-truncate");
    let p = dir.join("bomb.zt");
    // 3e9 decoded bytes in 179 frames read one by one: the truncation lands mid-read.
    let size = bombs::zt_seekable_bomb(&p, 3_000_000_000);
    for args in [["inspect", "--hash"], ["verify", "--deep"]] {
        let mut child = Command::new(BIN)
            .args(args)
            .arg(&p)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(400));
        assert!(
            child.try_wait().unwrap().is_none(),
            "{args:?} finished within 400 ms, before the truncation"
        );
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(size / 2).unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: killed by a signal? {:?} {stderr}",
            out.status
        );
        assert!(
            stderr.contains("runs past the end") && stderr.contains(&format!("{}-byte source", size / 2)),
            "{args:?}: {stderr}"
        );
        eprintln!("{args:?} of a .zt truncated mid-read: {stderr}");
        bombs::zt_seekable_bomb(&p, 3_000_000_000);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The middle byte of the first non-empty tensor's stored range.
fn flip_data_byte(src: &Path, dst: &Path) {
    let mut bytes = std::fs::read(src).unwrap();
    let cat = tensorlane_core::formats::open(&bytes[..]).unwrap();
    let at = cat
        .tensors
        .iter()
        .find_map(|t| match t.storage {
            tensorlane_core::formats::Storage::Range { offset, len, .. } if len > 0 => Some(offset + len / 2),
            _ => None,
        })
        .unwrap();
    bytes[at as usize] ^= 0x20;
    std::fs::write(dst, bytes).unwrap();
}

#[test]
fn corrupt_zip_members_fail_their_crc() {
    let dir = scratch("crc");
    for rel in ["npz/stored.npz", "pt/mlp-state-dict.pt"] {
        let src = common::data("fixtures").join(rel);
        let bad = dir.join(src.file_name().unwrap());
        flip_data_byte(&src, &bad);
        let b = bad.to_str().unwrap();
        let list = Command::new(BIN).args(["inspect", b]).output().unwrap();
        assert_eq!(
            list.status.code(),
            Some(0),
            "{rel}: listing reads no data: {}",
            text(&list.stderr)
        );
        for args in [&["inspect", "--hash", b][..], &["verify", b]] {
            let out = Command::new(BIN).args(args).output().unwrap();
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{rel} {args:?}: {stderr}");
            assert!(
                stderr.contains("CRC-32") && stderr.contains("checksum mismatch"),
                "{rel} {args:?}: {stderr}"
            );
        }
        let ok = Command::new(BIN)
            .args(["verify", src.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(ok.status.code(), Some(0), "{rel}: {}", text(&ok.stderr));
        assert!(text(&ok.stdout).contains("ok:"), "{rel}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
