//! Fuzz every foreign-format parser (safetensors, GGUF, PyTorch zip and legacy, npy, npz, ONNX,
//! HDF5): open the input as each format in turn (so every parser sees every input, whatever its
//! magic bytes), then read every tensor it lists. Never panic, never hang, never allocate what
//! the input merely claims.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorlane_core::detect::Format;
use tensorlane_core::formats::{self, ggml};

const FORMATS: [Format; 8] = [
    Format::Safetensors,
    Format::Gguf,
    Format::PyTorch,
    Format::PyTorchLegacy,
    Format::Npy,
    Format::Npz,
    Format::Onnx,
    Format::Hdf5,
];

fuzz_target!(|data: &[u8]| {
    let _ = formats::open(data);
    for f in FORMATS {
        let Ok(cat) = formats::open_as(f, data) else { continue };
        // Companion files are stood in for by the input itself.
        let sources: Vec<&[u8]> = cat.sources.iter().map(|_| data).collect();
        for t in &cat.tensors {
            if t.nbytes().is_some_and(|n| n <= 64 << 20) {
                if let Ok(bytes) = formats::read(f.name(), t, &sources) {
                    if let formats::ElementType::Ggml(g) = t.ty {
                        let _ = ggml::dequantize(g, &bytes);
                    }
                }
            }
        }
    }
});
