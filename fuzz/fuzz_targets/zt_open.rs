//! Fuzz the `.zt` v2 validator and every read path of the Reader: never panic, never hang,
//! never allocate what the input merely claims. Each input runs twice: as is, and with the
//! footer's manifest hash recomputed, so mutated manifests get past the hash check and reach
//! the CBOR decoder, the schema walk and the blob/layout checks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorlane_core::zt::reader::Reader;

fn exercise(data: &[u8]) {
    let Ok(r) = Reader::open(data) else { return };
    let objects: Vec<String> = r.objects().map(String::from).collect();
    for o in &objects {
        let _ = r.check_object(o);
        let parts: Vec<String> = r.object(o).map(|x| x.parts.keys().cloned().collect()).unwrap_or_default();
        for p in &parts {
            let _ = r.view(o, p);
            let _ = r.locate(o, p);
            if r.part(o, p).map(|x| x.decoded_size() <= 64 << 20).unwrap_or(false) {
                let _ = r.verify_part(o, p);
            }
        }
        let _ = r.read_csr(o);
        let _ = r.read_coo(o);
        let _ = r.tensor(o);
    }
}

fuzz_target!(|data: &[u8]| {
    exercise(data);
    let n = data.len();
    if n >= 48 {
        let f = n - 40;
        let off = u64::from_le_bytes(data[f..f + 8].try_into().unwrap());
        let len = u64::from_le_bytes(data[f + 8..f + 16].try_into().unwrap());
        if let Some(end) = off.checked_add(len) {
            if len > 0 && end <= f as u64 {
                let mut fixed = data.to_vec();
                let h = xxhash_rust::xxh3::xxh3_64(&data[off as usize..end as usize]);
                fixed[f + 16..f + 24].copy_from_slice(&h.to_le_bytes());
                exercise(&fixed);
            }
        }
    }
});
