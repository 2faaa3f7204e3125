//! wgpu device transfers and the f32 matmul, on whatever adapter exists (Mesa lavapipe in CI).
//! Without an adapter the tests skip with a message, except under `CI=true`, where that fails.
#![cfg(feature = "wgpu")]

use std::sync::OnceLock;

use tensorlane_offload::Error;
use tensorlane_offload::device::wgpu::GpuDevice;

/// Small staging chunks so modest test sizes wrap the ring several times.
const CHUNK: usize = 64 << 10;

fn device() -> Option<&'static GpuDevice> {
    static DEV: OnceLock<Option<GpuDevice>> = OnceLock::new();
    DEV.get_or_init(|| match GpuDevice::with_staging(3, CHUNK) {
        Ok(d) => {
            eprintln!("wgpu adapter: {:?}", d.adapter());
            Some(d)
        }
        Err(e) => {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("CI=true and no wgpu adapter: {e}");
            }
            eprintln!("skip: {e}");
            None
        }
    })
    .as_ref()
}

fn data(len: usize, seed: u32) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u32) ^ seed).wrapping_mul(2_654_435_761).rotate_right(11) as u8)
        .collect()
}

#[test]
fn round_trips_various_sizes() {
    let Some(dev) = device() else { return };
    for len in [
        0,
        1,
        2,
        3,
        4,
        5,
        7,
        255,
        1023,
        4096,
        4099,
        CHUNK - 1,
        CHUNK,
        CHUNK + 1,
        5 * CHUNK + 6,
        1 << 20,
    ] {
        let bytes = data(len, len as u32);
        let buf = dev.upload(&bytes).unwrap();
        assert_eq!(buf.size, len as u64);
        assert_eq!(dev.download(&buf).unwrap(), bytes, "len {len}");
    }
}

#[test]
fn upload_into_parts_and_ranges() {
    let Some(dev) = device() else { return };
    let len = 3 * CHUNK + 10;
    let bytes = data(len, 7);
    let buf = dev.alloc(len as u64).unwrap();
    // Zeroed on allocation.
    assert!(dev.download(&buf).unwrap().iter().all(|&b| b == 0));
    // Two parts: a ring-sized head and an unaligned tail that ends the buffer.
    let split = 2 * CHUNK + 4;
    dev.upload_into(&buf, 0, &bytes[..split]).unwrap();
    dev.upload_into(&buf, split as u64, &bytes[split..]).unwrap();
    assert_eq!(dev.download(&buf).unwrap(), bytes);
    assert_eq!(dev.download_range(&buf, 4, 100).unwrap(), &bytes[4..104]);
    assert_eq!(
        dev.download_range(&buf, CHUNK as u64, (len - CHUNK) as u64).unwrap(),
        &bytes[CHUNK..]
    );
    // Overwrite a middle piece.
    let patch = data(1000, 99);
    dev.upload_into(&buf, 4000, &patch).unwrap();
    let mut want = bytes.clone();
    want[4000..5000].copy_from_slice(&patch);
    assert_eq!(dev.download(&buf).unwrap(), want);
    // Refused: unaligned offset, unaligned length mid-buffer, past the end.
    assert!(matches!(dev.upload_into(&buf, 2, &patch), Err(Error::Range(_))));
    assert!(matches!(dev.upload_into(&buf, 0, &patch[..3]), Err(Error::Range(_))));
    assert!(matches!(
        dev.upload_into(&buf, len as u64 - 4, &patch[..8]),
        Err(Error::Range(_))
    ));
    assert!(matches!(dev.download_range(&buf, 1, 4), Err(Error::Range(_))));
    assert!(matches!(
        dev.download_range(&buf, 0, len as u64 + 1),
        Err(Error::Range(_))
    ));
}

#[test]
fn upload_from_mmap() {
    let Some(dev) = device() else { return };
    let bytes = data(CHUNK * 2 + 333, 3);
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("wgpu-mmap-{}", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let src = tensorlane::source::MmapSource::open(&path).unwrap();
    let buf = dev.upload(&src.bytes()[100..]).unwrap();
    assert_eq!(dev.download(&buf).unwrap(), &bytes[100..]);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn too_large_is_an_error() {
    let Some(dev) = device() else { return };
    let limit = dev.adapter().max_buffer_size;
    match dev.alloc(limit + 1) {
        Err(Error::TooLarge { .. }) => {}
        other => panic!("expected TooLarge, got {other:?}"),
    }
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn bytes_of(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn matmul_matches_cpu_reference() {
    let Some(dev) = device() else { return };
    for (m, k, n) in [
        (1, 1, 1),
        (2, 3, 4),
        (16, 16, 16),
        (17, 33, 5),
        (64, 64, 64),
        (100, 37, 129),
        (3, 300, 2),
    ] {
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 4.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i * 5 % 11) as f32 - 5.0) / 8.0).collect();
        let mut want = vec![0f32; m * n];
        for r in 0..m {
            for c in 0..n {
                want[r * n + c] = (0..k).map(|i| a[r * k + i] * b[i * n + c]).sum();
            }
        }
        let ga = dev.upload(&bytes_of(&a)).unwrap();
        let gb = dev.upload(&bytes_of(&b)).unwrap();
        let gc = dev.matmul_f32(&ga, &gb, m as u32, k as u32, n as u32).unwrap();
        let got = f32s(&dev.download(&gc).unwrap());
        assert_eq!(got.len(), m * n);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{m}x{k}x{n} [{i}]: {g} vs {w}");
        }
    }
}

#[test]
fn matmul_checks_shapes() {
    let Some(dev) = device() else { return };
    let a = dev.upload(&bytes_of(&[1.0; 6])).unwrap();
    let b = dev.upload(&bytes_of(&[1.0; 6])).unwrap();
    assert!(matches!(dev.matmul_f32(&a, &b, 3, 3, 2), Err(Error::Shape(_))));
    let c = dev.matmul_f32(&a, &b, 2, 3, 2).unwrap();
    assert_eq!(f32s(&dev.download(&c).unwrap()), [3.0; 4]);
}

#[test]
fn bandwidth_probe_runs() {
    let Some(dev) = device() else { return };
    let bw = dev.measure_bandwidth(1 << 20, 2).unwrap();
    assert!(bw.upload_gbps > 0.0 && bw.download_gbps > 0.0, "{bw:?}");
}
