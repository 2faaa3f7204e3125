//! Any bytes as a legacy `.zt` (v1.2 / v0.1) file: open, read every component, convert to the v2
//! structure. Nothing may panic; errors are fine. zstd output is bounded by each component's
//! declared length (capped here at 64 MiB by skipping larger declarations to stay within the
//! fuzzer's memory limit).
#![no_main]
use libfuzzer_sys::fuzz_target;
use tensorlane_core::zt::legacy::LegacyReader;

fuzz_target!(|data: &[u8]| {
    let Ok(r) = LegacyReader::open(data) else { return };
    let mut small = true;
    for o in r.objects() {
        for c in &o.components {
            if c.uncompressed_length.is_some_and(|u| u > 64 << 20) {
                small = false;
                continue;
            }
            if let Ok(b) = r.read(&o.name, &c.role) {
                if let Some(u) = c.uncompressed_length.filter(|_| c.encoding != tensorlane_core::zt::legacy::Encoding::Raw) {
                    assert_eq!(b.len() as u64, u, "zstd output must be exactly uncompressed_length");
                }
            }
        }
    }
    if small {
        let _ = r.to_v2();
    }
});
