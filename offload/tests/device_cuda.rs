//! The CUDA path. Without an NVIDIA driver (the build machines) every entry point must return an
//! error, never panic. With one, the staged upload and the bandwidth probe run for real.
//! `TENSORLANE_EXPECT_CUDA=1` turns a missing driver into a failure (for GPU machines).
#![cfg(feature = "cuda")]

use tensorlane_offload::Error;
use tensorlane_offload::device::cuda::{CudaDevice, HostMem, driver_available};

fn expect_cuda() -> bool {
    std::env::var("TENSORLANE_EXPECT_CUDA").as_deref() == Ok("1")
}

#[test]
fn missing_driver_is_a_clean_error() {
    match driver_available() {
        Ok(n) => eprintln!("CUDA driver present, {n} device(s)"),
        Err(e) => {
            assert!(!expect_cuda(), "TENSORLANE_EXPECT_CUDA=1 but: {e}");
            assert!(matches!(e, Error::NoDevice(_) | Error::Device(_)), "{e:?}");
            assert!(e.to_string().contains("CUDA"), "{e}");
            let err = CudaDevice::new(0).expect_err("no driver, yet a device opened");
            assert_eq!(err, e);
        }
    }
}

#[test]
fn device_out_of_range_is_an_error() {
    assert!(CudaDevice::new(usize::MAX).is_err());
}

#[test]
fn staged_upload_and_probe_on_a_gpu() {
    let dev = match CudaDevice::new(0) {
        Ok(d) => d,
        Err(e) => {
            assert!(!expect_cuda(), "{e}");
            eprintln!("skip: {e}");
            return;
        }
    };
    eprintln!("CUDA device: {}", dev.name().unwrap());
    let stream = dev.new_stream().unwrap();
    let src: Vec<u8> = (0..(10 << 20) + 13).map(|i: usize| (i * 31 % 251) as u8).collect();
    for kind in [HostMem::Pinned, HostMem::WriteCombined, HostMem::Pageable] {
        let mut ring = [
            dev.alloc_staging(1 << 20, kind).unwrap(),
            dev.alloc_staging(1 << 20, kind).unwrap(),
        ];
        let mut dst = dev.alloc_device(&stream, src.len() + 8).unwrap();
        let t = dev.upload_staged(&stream, &src, &mut dst, 8, &mut ring).unwrap();
        t.wait().unwrap();
        assert!(t.is_complete());
        let back = stream.clone_dtoh(&dst).unwrap();
        assert_eq!(&back[8..], &src[..], "{kind:?}");
    }
    let rows = dev
        .probe_h2d(
            64 << 20,
            &[1 << 20, 16 << 20],
            &[HostMem::Pinned, HostMem::WriteCombined, HostMem::Pageable],
        )
        .unwrap();
    for r in rows {
        eprintln!("{:>14} {:>9} B chunks: {:.2} GB/s", r.kind.name(), r.chunk, r.gbps);
        assert!(r.gbps > 0.0);
    }
}
