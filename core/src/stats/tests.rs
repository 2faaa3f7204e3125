use super::*;
use crate::DType;
use crate::formats::ggml::groups::{Linear, q4_k_linear};
use crate::formats::ggml::{self, GgmlType};
use crate::formats::{Arrangement, Storage};
use crate::zt::format::LogicalType;
use alloc::string::ToString;
use alloc::vec;
use proptest::prelude::*;

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Summaries equal bit for bit (NaN equal to NaN).
fn same(a: &Summary, b: &Summary) -> bool {
    let f = |x: f64, y: f64| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
    (a.count, a.finite, a.zeros, a.nan, a.pos_inf, a.neg_inf)
        == (b.count, b.finite, b.zeros, b.nan, b.pos_inf, b.neg_inf)
        && f(a.min, b.min)
        && f(a.max, b.max)
        && f(a.mean, b.mean)
        && f(a.std, b.std)
}

/// A plain reference: the decoded values, then textbook formulas in f64 (two-pass).
fn reference(values: &[f64], bins: usize) -> (Summary, Histogram) {
    let fin: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let n = fin.len();
    let (min, max) = fin
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| (a.min(v), b.max(v)));
    let mean = fin.iter().sum::<f64>() / n as f64;
    let var = fin.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
    let nan = |v: f64| if n == 0 { f64::NAN } else { v };
    let s = Summary {
        count: values.len() as u64,
        finite: n as u64,
        min: nan(min),
        max: nan(max),
        mean: nan(mean),
        std: nan(var.sqrt()),
        zeros: fin.iter().filter(|v| **v == 0.0).count() as u64,
        nan: values.iter().filter(|v| v.is_nan()).count() as u64,
        pos_inf: values.iter().filter(|v| **v == f64::INFINITY).count() as u64,
        neg_inf: values.iter().filter(|v| **v == f64::NEG_INFINITY).count() as u64,
    };
    let (lo, hi) = if n == 0 { (0.0, 1.0) } else { (min, max) };
    let (lo, hi) = if lo == hi { (lo - 0.5, hi + 0.5) } else { (lo, hi) };
    let edges = kernel::linspace(lo, hi, bins);
    if edges.windows(2).any(|w| w[0] >= w[1]) {
        return (s, Histogram::single(&s));
    }
    // The definition, by search: bin i holds edges[i] <= v < edges[i + 1], the last one closed.
    let mut counts = vec![0u64; bins];
    for &v in &fin {
        let i = edges.partition_point(|e| *e <= v);
        counts[i.clamp(1, bins) - 1] += 1;
    }
    (s, Histogram { edges, counts })
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= rel * a.abs().max(b.abs()).max(1e-300)
}

/// Checks `stats_of_bytes` against [`reference`] over the decoded `values`.
fn check(ty: ElementType, elements: u64, bytes: &[u8], values: &[f64], bins: usize) {
    let (s, h) = stats_of_bytes(ty, elements, bytes, bins).unwrap();
    let (rs, rh) = reference(values, bins);
    assert_eq!(
        (s.count, s.finite, s.zeros, s.nan, s.pos_inf, s.neg_inf),
        (rs.count, rs.finite, rs.zeros, rs.nan, rs.pos_inf, rs.neg_inf),
        "{}",
        ty.name()
    );
    assert!(
        close(s.min, rs.min, 0.0) && close(s.max, rs.max, 0.0),
        "{}: {s:?} {rs:?}",
        ty.name()
    );
    assert!(
        close(s.mean, rs.mean, 1e-12),
        "{}: mean {} vs {}",
        ty.name(),
        s.mean,
        rs.mean
    );
    assert!(
        close(s.std, rs.std, 1e-12),
        "{}: std {} vs {}",
        ty.name(),
        s.std,
        rs.std
    );
    assert_eq!(h, rh, "{}", ty.name());
}

#[test]
fn every_dense_dtype() {
    let ints: Vec<i64> = vec![0, 1, -1, 7, 100, -100, 127, -128, 0, 42];
    for d in DType::ALL {
        let (bytes, values): (Vec<u8>, Vec<f64>) = match d {
            DType::F32 => (
                f32_bytes(&[1.5, -2.0, 0.0, -0.0, 3.25]),
                vec![1.5, -2.0, 0.0, -0.0, 3.25],
            ),
            DType::F64 => (
                [1e300, -1e-300, 0.5]
                    .iter()
                    .flat_map(|v: &f64| v.to_le_bytes())
                    .collect(),
                vec![1e300, -1e-300, 0.5],
            ),
            DType::F16 => (vec![0x00, 0x3c, 0x00, 0xc0, 0x00, 0x7c], vec![1.0, -2.0, f64::INFINITY]),
            DType::BF16 => (vec![0x80, 0x3f, 0xc0, 0x7f, 0x00, 0x80], vec![1.0, f64::NAN, -0.0]),
            DType::I8 => (
                ints.iter().map(|v| *v as i8 as u8).collect(),
                ints.iter().map(|v| *v as f64).collect(),
            ),
            DType::U8 => (
                ints.iter().map(|v| *v as u8).collect(),
                ints.iter().map(|v| *v as u8 as f64).collect(),
            ),
            DType::I16 => (
                ints.iter().flat_map(|v| (*v as i16 * 250).to_le_bytes()).collect(),
                ints.iter().map(|v| (*v * 250) as f64).collect(),
            ),
            DType::U16 => (
                ints.iter().flat_map(|v| (*v as u16).to_le_bytes()).collect(),
                ints.iter().map(|v| *v as u16 as f64).collect(),
            ),
            DType::I32 => (
                ints.iter()
                    .flat_map(|v| (*v as i32 * 1_000_000).to_le_bytes())
                    .collect(),
                ints.iter().map(|v| (*v * 1_000_000) as f64).collect(),
            ),
            DType::U32 => (
                ints.iter().flat_map(|v| (*v as u32).to_le_bytes()).collect(),
                ints.iter().map(|v| *v as u32 as f64).collect(),
            ),
            DType::I64 => {
                // Beyond 2^53: rounded to nearest, ties to even.
                let v = [i64::MAX, i64::MIN, (1 << 53) + 1, -3];
                (
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                    vec![9223372036854775807.0, -9223372036854775808.0, 9007199254740992.0, -3.0],
                )
            }
            DType::U64 => {
                let v = [u64::MAX, (1 << 53) + 3, 0];
                (
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                    vec![18446744073709551616.0, 9007199254740996.0, 0.0],
                )
            }
            DType::Bool => (vec![0, 1, 1, 0, 2], vec![0.0, 1.0, 1.0, 0.0, 1.0]),
            DType::C64 => (f32_bytes(&[1.0, -1.0, 2.0, 0.5]), vec![1.0, -1.0, 2.0, 0.5]),
            DType::C128 => (
                [3.0f64, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect(),
                vec![3.0, 4.0],
            ),
        };
        let elements = (bytes.len() / d.itemsize()) as u64;
        check(ElementType::Dense(d), elements, &bytes, &values, 7);
    }
}

#[test]
fn logical_types() {
    let all: Vec<u8> = (0..=255).collect();
    for (l, t) in [
        (LogicalType::F8E4M3Fn, &decode::F8E4M3FN),
        (LogicalType::F8E4M3Fnuz, &decode::F8E4M3FNUZ),
        (LogicalType::F8E5M2, &decode::F8E5M2),
        (LogicalType::F8E5M2Fnuz, &decode::F8E5M2FNUZ),
        (LogicalType::F8E8M0, &decode::F8E8M0FNU),
    ] {
        let values: Vec<f64> = all.iter().map(|b| t[*b as usize]).collect();
        check(ElementType::Logical(l), 256, &all, &values, 16);
    }
    // float4: 3 elements in 2 bytes, low nibble first; the padding nibble (0xF = -6) is ignored.
    let bytes = [0x72u8, 0xF3];
    check(
        ElementType::Logical(LogicalType::F4E2M1),
        3,
        &bytes,
        &[1.0, 6.0, 1.5],
        4,
    );
    check(
        ElementType::Logical(LogicalType::Bool),
        3,
        &[0, 5, 1],
        &[0.0, 1.0, 1.0],
        2,
    );
}

/// Random Q4_K blocks: small f16 scales (so that values are finite), random nibbles.
fn q4k_blocks(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut out = Vec::with_capacity(n * 144);
    for _ in 0..n {
        let d = half::f16::from_f32(((next() % 1000) as f32 + 1.0) * 1e-4).to_bits();
        let m = half::f16::from_f32(((next() % 1000) as f32) * 1e-4).to_bits();
        out.extend_from_slice(&d.to_le_bytes());
        out.extend_from_slice(&m.to_le_bytes());
        for _ in 0..140 {
            out.push(next() as u8);
        }
    }
    out
}

#[test]
fn ggml_blocks_through_dequantize() {
    let q4k = GgmlType(12);
    let bytes = q4k_blocks(9, 7);
    let values: Vec<f64> = ggml::dequantize(q4k, &bytes)
        .unwrap()
        .into_iter()
        .map(f64::from)
        .collect();
    check(ElementType::Ggml(q4k), values.len() as u64, &bytes, &values, 64);
    // Q8_0 with a NaN scale in the second block.
    let mut q8 = vec![0u8; 34 * 3];
    for (i, b) in q8.iter_mut().enumerate() {
        *b = (i * 37) as u8;
    }
    q8[34..36].copy_from_slice(&half::f16::NAN.to_bits().to_le_bytes());
    let values: Vec<f64> = ggml::dequantize(GgmlType(8), &q8)
        .unwrap()
        .into_iter()
        .map(f64::from)
        .collect();
    check(ElementType::Ggml(GgmlType(8)), 96, &q8, &values, 5);
    // Plain ggml ids are read as their dtypes.
    check(
        ElementType::Ggml(GgmlType(0)),
        2,
        &f32_bytes(&[1.0, 2.0]),
        &[1.0, 2.0],
        3,
    );
    // Q1_0 and unknown ids are refused.
    for id in [41, 4, 999] {
        assert!(matches!(
            Stats::new(ElementType::Ggml(GgmlType(id))),
            Err(StatsError::Unsupported { .. })
        ));
    }
}

/// The 4-bit types are summarised as groups of weighted values (`ggml::groups`): the same counts,
/// extremes and histogram as their dequantized elements, also where the element limit cuts a block
/// and where a scale is NaN or infinite.
#[test]
fn grouped_ggml_types_match_their_dequantized_values() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for id in [2u32, 3, 12, 20] {
        let ty = GgmlType(id);
        let (block, size) = (ty.block_size().unwrap() as usize, ty.type_size().unwrap() as usize);
        let blocks = 4096 / block + 3;
        let mut bytes: Vec<u8> = (0..blocks * size).map(|_| next() as u8).collect();
        for b in bytes.chunks_exact_mut(size) {
            // Finite f16 scales of both signs (exponent below all-ones), some of them zero.
            b[1] &= 0xBB;
            b[3] &= 0xBB;
        }
        bytes[4] = 0; // a zero scale somewhere: a group of zeros
        bytes[5] = 0;
        let values: Vec<f64> = ggml::dequantize(ty, &bytes)
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect();
        let et = ElementType::Ggml(ty);
        check(et, values.len() as u64, &bytes, &values, 64);
        // The element limit inside the last block: the cut block is decoded element by element.
        let cut = values.len() - block / 2 - 3;
        check(et, cut as u64, &bytes, &values[..cut], 17);
        // An infinite, then a NaN scale in the second block.
        for special in [half::f16::INFINITY, half::f16::NAN] {
            let mut b = bytes.clone();
            b[size..size + 2].copy_from_slice(&special.to_bits().to_le_bytes());
            let v: Vec<f64> = ggml::dequantize(ty, &b).unwrap().into_iter().map(f64::from).collect();
            check(et, v.len() as u64, &b, &v, 9);
        }
    }
}

#[test]
fn no_finite_values_and_constant_values() {
    let ty = ElementType::Dense(DType::F32);
    let (s, h) = stats_of_bytes(ty, 3, &f32_bytes(&[f32::NAN, f32::INFINITY, f32::NEG_INFINITY]), 4).unwrap();
    assert_eq!((s.count, s.finite, s.nan, s.pos_inf, s.neg_inf), (3, 0, 1, 1, 1));
    assert!(s.min.is_nan() && s.max.is_nan() && s.mean.is_nan() && s.std.is_nan());
    assert_eq!(h.edges, [0.0, 0.25, 0.5, 0.75, 1.0]);
    assert_eq!(h.counts, [0; 4]);
    let (s, h) = stats_of_bytes(ty, 0, &[], 2).unwrap();
    assert_eq!((s.count, s.finite), (0, 0));
    assert_eq!(h.counts, [0, 0]);
    // min == max: NumPy's (min - 0.5, max + 0.5).
    let (s, h) = stats_of_bytes(ty, 3, &f32_bytes(&[2.0; 3]), 2).unwrap();
    assert_eq!((s.mean, s.std), (2.0, 0.0));
    assert_eq!(h.edges, [1.5, 2.0, 2.5]);
    assert_eq!(h.counts, [0, 3]);
    // A constant beyond 2^53: +-0.5 is lost, NumPy refuses ("Too many bins"); one bin instead.
    let big = (1i64 << 60) + 1;
    let i64ty = ElementType::Dense(DType::I64);
    let bytes: Vec<u8> = [big, big].iter().flat_map(|v| v.to_le_bytes()).collect();
    let (s, h) = stats_of_bytes(i64ty, 2, &bytes, 8).unwrap();
    assert_eq!(h, Histogram::single(&s));
    assert_eq!(
        (h.edges.as_slice(), h.counts.as_slice()),
        (&[big as f64, big as f64][..], &[2u64][..])
    );
    assert!(matches!(
        HistogramAccumulator::from_summary(i64ty, &s, 8),
        Err(StatsError::NarrowRange { bins: 8, .. })
    ));
    // A range of fewer ulps than bins.
    let lo = 1.0f64;
    let hi = f64::from_bits(lo.to_bits() + 3);
    assert!(HistogramAccumulator::new(ty, lo, hi, 3).is_ok());
    assert!(matches!(
        HistogramAccumulator::new(ty, lo, hi, 4),
        Err(StatsError::NarrowRange { .. })
    ));
}

#[test]
fn errors() {
    let ty = ElementType::Dense(DType::F32);
    assert_eq!(
        HistogramAccumulator::new(ty, 0.0, 1.0, 0).unwrap_err(),
        StatsError::Bins { bins: 0 }
    );
    assert!(HistogramAccumulator::new(ty, 0.0, 1.0, MAX_BINS + 1).is_err());
    assert!(HistogramAccumulator::new(ty, 1.0, 0.0, 4).is_err());
    assert!(HistogramAccumulator::new(ty, f64::NAN, 0.0, 4).is_err());
    assert!(HistogramAccumulator::new(ty, 0.0, f64::INFINITY, 4).is_err());
    let e = StatsError::Bins { bins: 0 }.to_format_error("npy");
    assert_eq!(e.kind, ErrorKind::Limit);
    assert!(e.to_string().contains("bins"), "{e}");
}

/// The pieces `bytes` is cut into at `cuts` (sorted, deduplicated, in range).
fn pieces<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut c: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    c.sort_unstable();
    c.dedup();
    let mut out = Vec::new();
    let mut at = 0;
    for x in c {
        out.push(&bytes[at..x]);
        at = x;
    }
    out.push(&bytes[at..]);
    out
}

/// Typed random data: (type, elements, bytes).
fn typed(kind: u8, raw: &[u8]) -> (ElementType, u64, Vec<u8>) {
    match kind % 6 {
        0 => {
            let n = raw.len() / 4;
            (ElementType::Dense(DType::F32), n as u64, raw[..n * 4].to_vec())
        }
        1 => {
            let n = raw.len() / 2;
            (ElementType::Dense(DType::BF16), n as u64, raw[..n * 2].to_vec())
        }
        2 => (
            ElementType::Logical(LogicalType::F8E5M2),
            raw.len() as u64,
            raw.to_vec(),
        ),
        3 => {
            let n = raw.len() / 8;
            (ElementType::Dense(DType::I64), n as u64, raw[..n * 8].to_vec())
        }
        4 => {
            // Odd element count of packed float4.
            let n = (raw.len() * 2).saturating_sub(1);
            (ElementType::Logical(LogicalType::F4E2M1), n as u64, raw.to_vec())
        }
        _ => {
            let blocks = raw.len() / 144 + 1;
            let b = q4k_blocks(blocks, raw.len() as u64 + 3);
            (ElementType::Ggml(GgmlType(12)), blocks as u64 * 256, b)
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn chunked_push_is_one_push(kind in 0u8..6, raw in proptest::collection::vec(any::<u8>(), 0..12000),
                                cuts in proptest::collection::vec(any::<usize>(), 0..12)) {
        let (ty, n, bytes) = typed(kind, &raw);
        let mut one = Stats::new(ty).unwrap().with_elements(n);
        one.push(&bytes);
        let mut many = Stats::new(ty).unwrap().with_elements(n);
        for p in pieces(&bytes, &cuts) {
            many.push(p);
        }
        prop_assert!(same(&one.summary(), &many.summary()), "{:?} vs {:?}", one.summary(), many.summary());
        prop_assert_eq!(many.pending_bytes(), 0);
        let s = one.summary();
        if matches!(HistogramAccumulator::from_summary(ty, &s, 13), Err(StatsError::NarrowRange { .. })) {
            return Ok(()); // e.g. one int64 beyond 2^53: no NumPy bins
        }
        let mut h1 = HistogramAccumulator::from_summary(ty, &s, 13).unwrap().with_elements(n);
        h1.push(&bytes);
        let mut h2 = HistogramAccumulator::from_summary(ty, &s, 13).unwrap().with_elements(n);
        for p in pieces(&bytes, &cuts) {
            h2.push(p);
        }
        let (h1, h2) = (h1.finish(), h2.finish());
        prop_assert_eq!(&h1, &h2);
        prop_assert_eq!(h1.counts.iter().sum::<u64>(), s.finite);
    }

    #[test]
    fn merge_of_parts_is_the_whole(kind in 0u8..6, raw in proptest::collection::vec(any::<u8>(), 0..12000),
                                   cuts in proptest::collection::vec(any::<usize>(), 0..6)) {
        let (ty, n, bytes) = typed(kind, &raw);
        if kind % 6 == 4 {
            // Parts of packed float4 would each need their own padding rule: not a merge case.
            return Ok(());
        }
        let mut whole = Stats::new(ty).unwrap();
        whole.push(&bytes);
        let unit = whole.unit_bytes();
        let cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1) / unit * unit).collect();
        let mut merged = Stats::new(ty).unwrap();
        // The same parts carried as numbers (as between Workers), merged by StatsPart alone.
        let mut carried = StatsPart::EMPTY;
        let parts = pieces(&bytes, &cuts);
        for p in &parts {
            let mut s = Stats::new(ty).unwrap();
            s.push(p);
            prop_assert_eq!(s.pending_bytes(), 0);
            merged.merge(&s);
            let back = StatsPart::from_array(&s.part().to_array()).unwrap();
            prop_assert_eq!(back.summary().count, s.summary().count);
            carried = carried.merge(&back);
        }
        let (a, b) = (whole.summary(), merged.summary());
        let c = carried.summary();
        prop_assert!(c.count == b.count && c.finite == b.finite && c.zeros == b.zeros && c.nan == b.nan);
        prop_assert!([(c.min, b.min), (c.max, b.max), (c.mean, b.mean), (c.std, b.std)].iter().all(|&(x, y)| x.to_bits() == y.to_bits()), "{c:?} {b:?}");
        prop_assert_eq!((a.count, a.finite, a.zeros, a.nan, a.pos_inf, a.neg_inf),
                        (b.count, b.finite, b.zeros, b.nan, b.pos_inf, b.neg_inf));
        prop_assert_eq!(a.count, n);
        prop_assert!(close(a.min, b.min, 0.0) && close(a.max, b.max, 0.0));
        prop_assert!(close(a.mean, b.mean, 1e-12) || (a.mean - b.mean).abs() < 1e-12 * a.std.max(1e-300), "{a:?} {b:?}");
        prop_assert!(close(a.std, b.std, 1e-10), "{a:?} {b:?}");
        // Histograms of parts add up.
        if matches!(HistogramAccumulator::from_summary(ty, &a, 9), Err(StatsError::NarrowRange { .. })) {
            return Ok(());
        }
        let mut hw = HistogramAccumulator::from_summary(ty, &a, 9).unwrap();
        hw.push(&bytes);
        let mut hm = HistogramAccumulator::from_summary(ty, &a, 9).unwrap();
        for p in &parts {
            let mut h = HistogramAccumulator::from_summary(ty, &a, 9).unwrap();
            h.push(p);
            prop_assert!(hm.merge(&h));
        }
        prop_assert_eq!(hw.finish(), hm.finish());
    }

    #[test]
    fn histogram_is_the_edge_rule(values in proptest::collection::vec(
        prop_oneof![any::<f64>(), -1e3f64..1e3, (0u32..64).prop_map(|i| f64::from(i) / 7.0)], 1..3000),
        bins in 1usize..100) {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let ty = ElementType::Dense(DType::F64);
        let (s, h) = stats_of_bytes(ty, values.len() as u64, &bytes, bins).unwrap();
        let (rs, rh) = reference(&values, bins);
        prop_assert_eq!((s.count, s.finite, s.nan, s.zeros), (rs.count, rs.finite, rs.nan, rs.zeros));
        // A range wider than f64 (max - min overflows) has no finite bins in NumPy either.
        if (rs.max - rs.min).is_finite() {
            prop_assert_eq!(h, rh);
        }
    }
}

#[test]
fn accurate_on_large_offset_data() {
    // x_i = 1e6 + (i mod 1000) / 1024: exact sums in integers (units of 2^-10).
    let n: u64 = 3_000_000;
    let ty = ElementType::Dense(DType::F64);
    let mut s = Stats::new(ty).unwrap();
    let mut buf = Vec::with_capacity(1 << 16);
    let (mut sy, mut syy) = (0i128, 0i128);
    for i in 0..n {
        let y = 1_000_000i128 * 1024 + (i % 1000) as i128;
        sy += y;
        syy += y * y;
        buf.extend_from_slice(&((y as f64) / 1024.0).to_le_bytes());
        if buf.len() >= 1 << 16 {
            s.push(&buf);
            buf.clear();
        }
    }
    s.push(&buf);
    let sum = s.summary();
    let nf = n as f64;
    let mean = sy as f64 / 1024.0 / nf;
    // n^2 var = n * syy - sy^2 (exact in i128), in units of 2^-20.
    let var = (n as i128 * syy - sy * sy) as f64 / (1024.0 * 1024.0) / (nf * nf);
    assert!(
        (sum.mean - mean).abs() <= 2.0 * f64::EPSILON * mean,
        "{} vs {mean}",
        sum.mean
    );
    assert!(
        (sum.std - var.sqrt()).abs() <= 1e-12 * var.sqrt(),
        "{} vs {}",
        sum.std,
        var.sqrt()
    );
}

fn info(ty: ElementType, shape: Vec<u64>, storage: Storage, arrangement: Arrangement) -> TensorInfo {
    TensorInfo {
        name: "t".into(),
        ty,
        shape,
        storage,
        arrangement,
        attributes: Vec::new(),
    }
}

#[test]
fn tensor_stats_reads_in_pieces() {
    let values: Vec<f32> = (0..10_000).map(|i| ((i * 7919) % 1000) as f32 - 400.0).collect();
    let body = f32_bytes(&values);
    let mut file = vec![9u8; 100];
    file.extend_from_slice(&body);
    let ty = ElementType::Dense(DType::F32);
    let t = info(
        ty,
        vec![100, 100],
        Storage::Range {
            source: 0,
            offset: 100,
            len: body.len() as u64,
        },
        Arrangement::default(),
    );
    let opts = StatsOptions {
        bins: 10,
        chunk_bytes: 1001,
    };
    let mut calls = Vec::new();
    let ts = tensor_stats("test", &t, &[&file[..]], &opts, &mut |d, tot| calls.push((d, tot))).unwrap();
    let (s, h) = stats_of_bytes(ty, 10_000, &body, 10).unwrap();
    assert_eq!((ts.summary, &ts.histogram), (s, &h));
    assert_eq!(
        (ts.name.as_str(), ts.dtype.as_str(), &ts.shape[..]),
        ("t", "float32", &[100, 100][..])
    );
    assert!(calls.windows(2).all(|w| w[0].0 <= w[1].0));
    assert_eq!(calls.last(), Some(&(80_000, 80_000)));
    // Pieces are whole elements: 1001 bytes is rounded down to 1000.
    assert_eq!(calls[0], (1000, 80_000));
    // The same tensor stored big-endian goes through formats::read.
    let be: Vec<u8> = values.iter().flat_map(|v| v.to_be_bytes()).collect();
    let t2 = info(
        ty,
        vec![10_000],
        Storage::Inline(be),
        Arrangement {
            big_endian: true,
            view: None,
        },
    );
    let ts2 = tensor_stats::<[u8]>("test", &t2, &[], &opts, &mut |_, _| {}).unwrap();
    assert_eq!((ts2.summary, ts2.histogram), (s, h));
    // A range past the end of the source, a missing source, no bins.
    let short = info(
        ty,
        vec![10_001],
        Storage::Range {
            source: 0,
            offset: 100,
            len: 40_004,
        },
        Arrangement::default(),
    );
    let e = tensor_stats("test", &short, &[&file[..]], &opts, &mut |_, _| {}).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Truncated, "{e}");
    let e = tensor_stats::<[u8]>("test", &t, &[], &opts, &mut |_, _| {}).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Companion, "{e}");
    let e = tensor_stats(
        "test",
        &t,
        &[&file[..]],
        &StatsOptions {
            bins: 0,
            chunk_bytes: 1,
        },
        &mut |_, _| {},
    )
    .unwrap_err();
    assert_eq!((e.kind, e.tensor.as_deref()), (ErrorKind::Limit, Some("t")));
}

/// A source that is not in memory (no `slice`), so pieces are read into the reused buffer.
struct Remote(Vec<u8>);

impl ReadAt for Remote {
    fn size(&self) -> u64 {
        self.0.len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), crate::source::SourceError> {
        self.0.as_slice().read_at(offset, buf)
    }
}

#[test]
fn tensor_stats_over_a_source_without_slices() {
    let bytes = q4k_blocks(5, 11);
    let ty = ElementType::Ggml(GgmlType(12));
    let t = info(
        ty,
        vec![5, 256],
        Storage::Range {
            source: 0,
            offset: 0,
            len: bytes.len() as u64,
        },
        Arrangement::default(),
    );
    let src = Remote(bytes.clone());
    let opts = StatsOptions {
        bins: 64,
        chunk_bytes: 100, // less than one block: one block at a time
    };
    let ts = tensor_stats("gguf", &t, &[&src], &opts, &mut |_, _| {}).unwrap();
    let (s, h) = stats_of_bytes(ty, 1280, &bytes, 64).unwrap();
    assert_eq!((ts.summary, ts.histogram), (s, h));
    assert_eq!(ts.dtype, "Q4_K");
}

/// A grouped feed hands any sink but the histogram its groups' values repeated (the default
/// `Sink::weighted`): the same multiset as the dequantized elements.
#[test]
fn a_grouped_feed_gives_other_sinks_the_dequantized_values() {
    let ty = GgmlType(12);
    let bytes = q4k_blocks(9, 5);
    let mut feed = Feed::grouped(ElementType::Ggml(ty)).unwrap();
    let mut got: Vec<f64> = Vec::new();
    feed.push(&bytes, &mut got);
    feed.pending_into(&mut got);
    let mut want: Vec<f64> = ggml::dequantize(ty, &bytes)
        .unwrap()
        .into_iter()
        .map(f64::from)
        .collect();
    got.sort_by(f64::total_cmp);
    want.sort_by(f64::total_cmp);
    assert_eq!(got, want);
}

#[test]
fn malformed_parts_are_refused_with_the_rule() {
    let mut s = Stats::new(ElementType::Dense(DType::F32)).unwrap();
    let bytes: Vec<u8> = [1.0f32, -2.0, f32::NAN, 0.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    s.push(&bytes);
    let good = s.part().to_array();
    assert_eq!(StatsPart::from_array(&good).unwrap(), s.part());
    let with = |i: usize, v: f64| {
        let mut a = good;
        a[i] = v;
        StatsPart::from_array(&a)
    };
    let rule = |r: Result<StatsPart, StatsError>| match r {
        Err(StatsError::Part { rule }) => rule,
        other => panic!("accepted: {other:?}"),
    };
    assert!(rule(StatsPart::from_array(&good[..9])).contains("10 numbers"));
    assert!(rule(with(0, 2.5)).contains("whole number"));
    assert!(rule(with(0, -1.0)).contains("whole number"));
    assert!(rule(with(0, 1e300)).contains("whole number"));
    assert!(rule(with(7, 5.0)).contains("must equal count"));
    assert!(rule(with(6, 4.0)).contains("zeros"));
    assert!(rule(with(4, f64::NAN)).contains("min and max"));
    assert!(rule(with(4, 5.0)).contains("min <= max"));
    assert!(rule(with(3, -1.0)).contains("m2"));
    let msg = StatsError::Part { rule: "x" }.to_format_error("stats");
    assert_eq!(msg.kind, ErrorKind::Syntax);
    // No finite values: the moments are EMPTY's, whatever came.
    let empty = StatsPart::from_array(&[2.0, 0.0, 7.0, 7.0, 7.0, 7.0, 0.0, 2.0, 0.0, 0.0]).unwrap();
    assert_eq!(
        (empty.min, empty.max, empty.mean),
        (f64::INFINITY, f64::NEG_INFINITY, 0.0)
    );
    assert!(empty.summary().min.is_nan());
}

#[test]
fn split_cuts_whole_units_in_order() {
    let f32t = ElementType::Dense(DType::F32);
    let s = split(f32t, 10, 3).unwrap();
    assert_eq!(
        s.iter().map(|p| (p.offset, p.bytes, p.elements)).collect::<Vec<_>>(),
        [(0, 12, 3), (12, 12, 3), (24, 16, 4)]
    );
    assert_eq!(split(f32t, 2, 8).unwrap().len(), 2);
    assert_eq!(
        split(f32t, 0, 4).unwrap(),
        [Span {
            offset: 0,
            bytes: 0,
            elements: 0
        }]
    );
    // Packed float4, odd count: byte pairs of elements, the last span takes the padding nibble.
    let f4 = ElementType::Logical(LogicalType::F4E2M1);
    let s = split(f4, 7, 2).unwrap();
    assert_eq!(
        s.iter().map(|p| (p.offset, p.bytes, p.elements)).collect::<Vec<_>>(),
        [(0, 2, 4), (2, 2, 3)]
    );
    // ggml: whole blocks (Q4_K: 256 elements in 144 bytes).
    let q4k = ElementType::Ggml(GgmlType(12));
    let s = split(q4k, 256 * 5, 2).unwrap();
    assert_eq!(
        s.iter().map(|p| (p.offset, p.bytes, p.elements)).collect::<Vec<_>>(),
        [(0, 288, 512), (288, 432, 768)]
    );
    assert_eq!(split(q4k, 100, 2), None);
    // Parts merged equal the whole (exact counts, min, max).
    let bytes: Vec<u8> = (0..1000u32)
        .flat_map(|i| ((i as f32 * 0.37).sin()).to_le_bytes())
        .collect();
    let mut whole = Stats::new(f32t).unwrap();
    whole.push(&bytes);
    let mut merged = StatsPart::EMPTY;
    for p in split(f32t, 1000, 7).unwrap() {
        let mut s = Stats::new(f32t).unwrap().with_elements(p.elements);
        s.push(&bytes[p.offset as usize..(p.offset + p.bytes) as usize]);
        merged = merged.merge(&s.part());
    }
    let (a, b) = (whole.summary(), merged.summary());
    assert_eq!((a.count, a.finite, a.min, a.max), (b.count, b.finite, b.min, b.max));
    assert!((a.mean - b.mean).abs() < 1e-15 && (a.std - b.std).abs() < 1e-15);
}

/// Q4_K summaries come from each block's index sums ([`kernel::linear_block`]) where its values are
/// linear in the index, and from the dequantized block where they are not (scales far apart, Inf,
/// NaN): the same counts and extremes as the dequantized values, mean and std to rounding, and
/// bit-identical whatever pieces the bytes come in.
#[test]
fn q4_k_summaries_from_index_sums() {
    let ty = GgmlType(12);
    let mut bytes = q4k_blocks(64, 99);
    // Block 3: dmin far below d (its groups are not exactly linear: dequantized instead).
    bytes[3 * 144..3 * 144 + 4].copy_from_slice(&[0x00, 0x70, 0x01, 0x00]);
    // Block 5: zero mins (zeros where q = 0); block 6: NaN d; block 7: zero d (constant groups).
    bytes[5 * 144 + 2..5 * 144 + 4].copy_from_slice(&[0, 0]);
    bytes[6 * 144..6 * 144 + 2].copy_from_slice(&half::f16::NAN.to_bits().to_le_bytes());
    bytes[7 * 144..7 * 144 + 2].copy_from_slice(&[0, 0x80]);
    let mut lin = [Linear::default(); 8];
    assert!(!q4_k_linear(&bytes[3 * 144..4 * 144], &mut lin) && q4_k_linear(&bytes[5 * 144..6 * 144], &mut lin));
    let values: Vec<f64> = ggml::dequantize(ty, &bytes)
        .unwrap()
        .into_iter()
        .map(f64::from)
        .collect();
    assert!(values.iter().filter(|v| **v == 0.0).count() > 32);
    check(ElementType::Ggml(ty), values.len() as u64, &bytes, &values, 64);
    // Any pieces, bit-identical.
    let whole = {
        let mut s = Stats::new(ElementType::Ggml(ty)).unwrap();
        s.push(&bytes);
        s.summary()
    };
    for step in [1usize, 7, 143, 144, 1000, 4096] {
        let mut s = Stats::new(ElementType::Ggml(ty)).unwrap();
        for c in bytes.chunks(step) {
            s.push(c);
        }
        let p = s.summary();
        assert_eq!(
            [p.mean, p.std, p.min, p.max].map(f64::to_bits),
            [whole.mean, whole.std, whole.min, whole.max].map(f64::to_bits),
            "pieces of {step}"
        );
        assert_eq!(
            (p.count, p.finite, p.zeros, p.nan),
            (whole.count, whole.finite, whole.zeros, whole.nan)
        );
    }
    // Against the dequantized values summarised as float32 (the plain kernel): mean and std to
    // a few ulps of each other.
    let f32s: Vec<u8> = values.iter().flat_map(|v| (*v as f32).to_le_bytes()).collect();
    let mut plain = Stats::new(ElementType::Dense(DType::F32)).unwrap();
    plain.push(&f32s);
    let p = plain.summary();
    assert_eq!(
        (p.count, p.finite, p.zeros, p.nan, p.min, p.max),
        (whole.count, whole.finite, whole.zeros, whole.nan, whole.min, whole.max)
    );
    assert!(
        (p.mean - whole.mean).abs() <= 1e-14 * p.std && (p.std - whole.std).abs() <= 1e-14 * p.std,
        "{p:?} {whole:?}"
    );
}
