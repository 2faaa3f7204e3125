//! A small sample packet, generated in code, for the README quick start (`tensorlane demo`).

use tensorlane_core::Tensor;
use tensorlane_core::wire::{
    self, Bundle, EncodeOptions, Packet, QDType, QuantizeParams, Quantized, Sparse, SparseFormat, Strings,
};

/// A bundle holding one of each packet kind:
///
/// * `weight` — float32 `[64, 32]`, a deterministic ramp;
/// * `bias` — float32 `[64]`;
/// * `weight_q` — the weight quantized to qint8 per channel (axis 0);
/// * `adjacency` — a CSR float32 `[8, 8]` sparse matrix (a ring graph);
/// * `labels` — four UTF-8 strings;
/// * `meta/step` (nested bundle) — an int64 scalar.
pub fn sample_packet() -> Packet<'static> {
    let w: Vec<f32> = (0..64 * 32).map(|i| ((i % 97) as f32 - 48.0) / 64.0).collect();
    let weight = Tensor::from_values(vec![64, 32], &w).expect("shape matches");
    let bias_values: Vec<f32> = (0..64).map(|i| i as f32 * 0.01).collect();
    let bias = Tensor::from_values(vec![64], &bias_values).expect("shape matches");
    let q = Quantized::quantize(&w, &[64, 32], QDType::QInt8, QuantizeParams::PerChannel { axis: 0 })
        .expect("valid quantization parameters");
    let n = 8u64;
    let data: Vec<f32> = (0..n).map(|i| 1.0 + i as f32).collect();
    let indices: Vec<i32> = (0..n as i32).map(|i| (i + 1) % n as i32).collect();
    let indptr: Vec<i32> = (0..=n as i32).collect();
    let adjacency = Sparse {
        format: SparseFormat::Csr,
        shape: vec![n, n],
        components: [
            Tensor::from_values(vec![n], &data).expect("shape matches"),
            Tensor::from_values(vec![n], &indices).expect("shape matches"),
            Tensor::from_values(vec![n + 1], &indptr).expect("shape matches"),
        ],
    };
    let labels = Strings::from_items(&["cat", "dog", "🦀 crab", "tensor"]);
    let step = Tensor::from_values(Vec::<u64>::new(), &[1234i64]).expect("scalar");
    Packet::Bundle(
        Bundle::new()
            .with("weight", Packet::Dense(weight))
            .with("bias", Packet::Dense(bias))
            .with("weight_q", Packet::from(q))
            .with("adjacency", Packet::from(adjacency))
            .with("labels", Packet::Strings(labels))
            .with("meta", Packet::Bundle(Bundle::new().with("step", Packet::Dense(step)))),
    )
}

/// The sample packet's bytes (default options, with an integrity footer on every leaf).
pub fn sample_bytes() -> Vec<u8> {
    let opts = EncodeOptions {
        integrity: true,
        ..EncodeOptions::default()
    };
    wire::encode(&sample_packet(), &opts).expect("the sample is encodable")
}

#[cfg(test)]
mod tests {
    #[test]
    fn sample_round_trips() {
        let b = super::sample_bytes();
        let p = tensorlane_core::wire::decode(&b).unwrap();
        assert_eq!(p, super::sample_packet());
    }
}
