//! Weight tiers: RAM, page cache (mmap) and disk (O_DIRECT, with the buffered fallback) return the
//! same bytes for aligned and unaligned requests; the throughput probe runs.

use std::path::PathBuf;

use tensorlane_offload::Error;
use tensorlane_offload::device::tiers::{AlignedBuf, DIRECT_ALIGN, DirectFile, Tier, WeightSource, probe, probe_disk};

fn data(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_right(13) as u8)
        .collect()
}

fn temp_file(dir: &str, name: &str, bytes: &[u8]) -> PathBuf {
    let path = PathBuf::from(dir).join(format!("tensorlane-tiers-{}-{name}", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    path
}

const REQUESTS: &[(u64, usize)] = &[
    (0, 1),
    (0, 4096),
    (0, 8192),
    (1, 4095),
    (4095, 2),
    (4096, 4096),
    (5000, 10_000),
    (12_288, 65_536),
    (100_000, 1),
];

fn check_all_tiers(path: &PathBuf, bytes: &[u8]) {
    let size = bytes.len() as u64;
    for tier in [Tier::Ram, Tier::PageCache, Tier::Disk] {
        let mut src = WeightSource::open(path, tier).unwrap();
        assert_eq!(src.tier(), tier);
        assert_eq!(src.size(), size);
        let mut reqs: Vec<(u64, usize)> = REQUESTS.to_vec();
        reqs.push((size - 3, 3)); // the unaligned tail
        reqs.push((0, bytes.len())); // everything
        for (off, len) in reqs {
            let mut dst = vec![0u8; len];
            src.read_into(off, &mut dst)
                .unwrap_or_else(|e| panic!("{tier:?} {off}+{len}: {e}"));
            assert_eq!(dst, bytes[off as usize..off as usize + len], "{tier:?} {off}+{len}");
        }
        // Aligned destination, aligned request: the zero-bounce O_DIRECT path.
        let mut a = AlignedBuf::zeroed(2 * DIRECT_ALIGN);
        src.read_into(DIRECT_ALIGN as u64, a.as_mut_slice()).unwrap();
        assert_eq!(a.as_slice(), &bytes[DIRECT_ALIGN..3 * DIRECT_ALIGN]);
        // Past the end is an error, not a panic.
        let mut dst = vec![0u8; 10];
        for off in [size - 5, u64::MAX - 2] {
            let e = src.read_into(off, &mut dst);
            assert!(matches!(e, Err(Error::Range(_))), "{tier:?} at {off}: {e:?}");
        }
    }
}

#[test]
fn tiers_agree_on_disk() {
    let bytes = data(300_001);
    let path = temp_file(env!("CARGO_TARGET_TMPDIR"), "disk", &bytes);
    check_all_tiers(&path, &bytes);
    let d = DirectFile::open(&path).unwrap();
    eprintln!("O_DIRECT on CARGO_TARGET_TMPDIR: {} {:?}", d.is_direct(), d.note());
    std::fs::remove_file(path).unwrap();
}

#[test]
fn tmpfs_falls_back_to_buffered() {
    let dir = "/dev/shm";
    if !std::path::Path::new(dir).is_dir() {
        eprintln!("skip: no {dir}");
        return;
    }
    let bytes = data(200_000);
    let path = temp_file(dir, "shm", &bytes);
    let d = DirectFile::open(&path).unwrap();
    // tmpfs refuses O_DIRECT before Linux 6.6; either way the bytes must come back, and a
    // refusal is explained.
    assert_eq!(d.is_direct(), d.note().is_none());
    eprintln!("O_DIRECT on {dir}: {} {:?}", d.is_direct(), d.note());
    check_all_tiers(&path, &bytes);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn aligned_buf_is_aligned() {
    for len in [0, 1, 4095, 4096, 4097, 1 << 20] {
        let mut b = AlignedBuf::zeroed(len);
        assert_eq!(b.len(), len);
        assert_eq!(b.as_slice().as_ptr().align_offset(DIRECT_ALIGN), 0);
        assert!(b.as_mut_slice().iter().all(|&x| x == 0));
    }
}

#[test]
fn views_borrow_in_memory_tiers() {
    let bytes = data(10_000);
    let path = temp_file(env!("CARGO_TARGET_TMPDIR"), "view", &bytes);
    for tier in [Tier::Ram, Tier::PageCache] {
        let src = WeightSource::open(&path, tier).unwrap();
        assert_eq!(src.view(10, 20).unwrap(), &bytes[10..30]);
        assert!(src.view(9_990, 20).is_none());
    }
    assert!(WeightSource::open(&path, Tier::Disk).unwrap().view(0, 1).is_none());
    std::fs::remove_file(path).unwrap();
}

#[test]
fn probe_reports_every_tier() {
    let bytes = data(4 << 20);
    let path = temp_file(env!("CARGO_TARGET_TMPDIR"), "probe", &bytes);
    let rows = probe(&path, 1 << 20).unwrap();
    assert_eq!(
        rows.iter().map(|r| r.tier).collect::<Vec<_>>(),
        [Tier::Ram, Tier::PageCache, Tier::Disk]
    );
    for r in &rows {
        assert_eq!(r.bytes, bytes.len() as u64);
        assert!(r.gbps > 0.0 && r.gbps.is_finite(), "{r:?}");
    }
    std::fs::remove_file(path).unwrap();
}

#[test]
fn probe_disk_reads_at_most_its_limit() {
    let bytes = data(3 << 20);
    let path = temp_file(env!("CARGO_TARGET_TMPDIR"), "probe-disk", &bytes);
    let r = probe_disk(&path, 1000, 2 << 20).unwrap();
    assert_eq!((r.tier, r.bytes, r.chunk), (Tier::Disk, 2 << 20, DIRECT_ALIGN));
    assert!(r.gbps > 0.0 && r.gbps.is_finite(), "{r:?}");
    let whole = probe_disk(&path, 1 << 20, u64::MAX).unwrap();
    assert_eq!(whole.bytes, bytes.len() as u64);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn missing_file_is_an_io_error_naming_it() {
    let path = std::env::temp_dir().join(format!("tl-tiers-missing-{}.bin", std::process::id()));
    for tier in [Tier::Ram, Tier::PageCache, Tier::Disk] {
        match WeightSource::open(&path, tier) {
            Err(Error::Io(m)) => assert!(m.contains(&*path.to_string_lossy()), "{tier:?}: {m}"),
            other => panic!("{tier:?}: {other:?}"),
        }
    }
    assert!(matches!(DirectFile::open(&path), Err(Error::Io(_))));
}
