//! quantize() and dequantize(), reproducing tenso 0.24.0's float32 arithmetic (spec §11.2).

use alloc::borrow::Cow;
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use super::error::{Error, ErrorKind, Result};
use super::packet::{QDType, QuantScheme, Quantized};

/// How to slice a tensor for [`Quantized::quantize`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantizeParams {
    /// One scale for everything.
    PerTensor,
    /// One scale per index along `axis`; negative axes count from the end (tenso writes
    /// `axis & 0xFF` and cannot dequantize its own -1; tensorlane normalises it).
    PerChannel {
        /// The channel axis.
        axis: i64,
    },
    /// One scale per run of `group_size` consecutive C-order elements.
    PerGroup {
        /// Elements per group (> 0).
        group_size: u32,
    },
}

/// Round half to even in float32, without `std` (exact under IEEE round-to-nearest-even).
fn round_even(x: f32) -> f32 {
    const BIG: f32 = 8_388_608.0; // 2^23: above it every f32 is an integer
    if x.is_nan() || x.abs() >= BIG {
        return x;
    }
    let r = (x.abs() + BIG) - BIG;
    if x.is_sign_negative() { -r } else { r }
}

/// For each slice, the flat C-order element indices in tenso's order.
fn slices(shape: &[u64], scheme: QuantScheme, axis: usize, group: u64, n: usize) -> Vec<Vec<usize>> {
    match scheme {
        QuantScheme::PerChannel => {
            let c = shape[axis] as usize;
            let inner: usize = shape[axis + 1..].iter().product::<u64>() as usize;
            let mut out = vec![Vec::new(); c];
            for i in 0..n {
                out[(i / inner.max(1)) % c.max(1)].push(i);
            }
            out
        }
        QuantScheme::PerGroup => {
            let g = group as usize;
            (0..n.div_ceil(g))
                .map(|k| (k * g..((k + 1) * g).min(n)).collect())
                .collect()
        }
        _ => vec![(0..n).collect()],
    }
}

impl Quantized<'_> {
    /// Quantizes float32 values (C order) the way `tenso.QuantizedTensor.quantize` does under
    /// NumPy 2, so the packet bytes match tenso's.
    pub fn quantize(
        values: &[f32],
        shape: &[u64],
        qdtype: QDType,
        params: QuantizeParams,
    ) -> Result<Quantized<'static>> {
        let n = crate::tensor::numel(shape)
            .filter(|&n| n == values.len() as u64)
            .ok_or_else(|| Error::encode(format!("{} values do not fill shape {shape:?}", values.len())))?
            as usize;
        let (scheme, axis, group_size) = match params {
            QuantizeParams::PerTensor => (QuantScheme::PerTensor, 0usize, 0u32),
            QuantizeParams::PerChannel { axis } => {
                let nd = shape.len() as i64;
                let a = if axis < 0 { axis + nd } else { axis };
                if a < 0 || a >= nd || a > 255 {
                    return Err(Error::encode(format!("axis {axis} is outside a tensor of rank {nd}")));
                }
                (QuantScheme::PerChannel, a as usize, 0)
            }
            QuantizeParams::PerGroup { group_size } => {
                if group_size == 0 {
                    return Err(Error::encode("group_size must be positive"));
                }
                (QuantScheme::PerGroup, 0, group_size)
            }
        };
        let (qmin, qmax) = qdtype.range();
        let groups = slices(shape, scheme, axis, group_size as u64, n);
        let mut q = vec![0i32; n];
        let mut scales = Vec::with_capacity(groups.len());
        let mut zps = Vec::with_capacity(groups.len());
        for g in &groups {
            let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
            for &i in g {
                lo = lo.min(values[i]);
                hi = hi.max(values[i]);
            }
            let (scale, zp) = if g.is_empty() || lo == hi {
                (1.0f32, 0.0f32)
            } else {
                // tenso takes min and max as Python floats: the scale is divided in float64,
                // then rounded to float32; the zero point is computed in float32 (NEP 50).
                let scale = ((hi as f64 - lo as f64) / (qmax - qmin) as f64) as f32;
                (scale, qmin as f32 - lo / scale)
            };
            for &i in g {
                let v = round_even(values[i] / scale + zp);
                q[i] = if v.is_nan() {
                    0
                } else {
                    (v.max(qmin as f32).min(qmax as f32)) as i32
                };
            }
            scales.push(scale);
            zps.push(zp);
        }
        let data = if qdtype.is_4bit() {
            let mut d = vec![0u8; n.div_ceil(2)];
            for (i, v) in q.iter().enumerate() {
                d[i / 2] |= ((*v as u8) & 0x0F) << (4 * (i % 2));
            }
            d
        } else {
            q.iter().map(|&v| v as u8).collect()
        };
        Ok(Quantized {
            qdtype,
            shape: shape.to_vec(),
            scheme,
            axis: axis as u8,
            group_size,
            scales,
            zero_points: zps,
            data: Cow::Owned(data),
        })
    }

    /// The quantized integers, unpacked and sign-extended.
    pub fn values(&self) -> Vec<i32> {
        let n = crate::tensor::numel(&self.shape).unwrap_or(0) as usize;
        (0..n.min(self.data.len() * if self.qdtype.is_4bit() { 2 } else { 1 }))
            .map(|i| match self.qdtype {
                QDType::QInt8 => self.data[i] as i8 as i32,
                QDType::QUInt8 => self.data[i] as i32,
                QDType::QInt4 => (((self.data[i / 2] >> (4 * (i % 2))) << 4) as i8 >> 4) as i32,
                QDType::QUInt4 => ((self.data[i / 2] >> (4 * (i % 2))) & 0x0F) as i32,
            })
            .collect()
    }

    /// `(q - zero_point) * scale` in float32, C order. Checks the scale count against the
    /// scheme first. A per-channel axis of 255 with one scale per last-axis index is read as the
    /// last axis (what tenso's `axis=-1` meant); any other axis outside the rank is refused.
    pub fn dequantize(&self) -> Result<Vec<f32>> {
        let fail = |m: alloc::string::String| Err(Error::new(ErrorKind::Quant(m), 0));
        let n = match crate::tensor::numel(&self.shape) {
            Some(n) if n <= super::MAX_ELEMENTS => n as usize,
            _ => return fail(format!("shape {:?} has too many elements", self.shape)),
        };
        if self.data.len() as u64 != self.qdtype.packed_len(n as u64) {
            return fail(format!(
                "body has {} bytes; shape {:?} needs {}",
                self.data.len(),
                self.shape,
                self.qdtype.packed_len(n as u64)
            ));
        }
        if self.scales.len() != self.zero_points.len() {
            return fail(format!(
                "{} scales but {} zero points",
                self.scales.len(),
                self.zero_points.len()
            ));
        }
        let nd = self.shape.len();
        let mut axis = self.axis as usize;
        let expected = match self.scheme {
            QuantScheme::PerTensor => 1,
            QuantScheme::PerChannel => {
                if axis >= nd && self.axis == 255 && nd > 0 && self.scales.len() as u64 == self.shape[nd - 1] {
                    axis = nd - 1;
                }
                if axis >= nd {
                    return fail(format!(
                        "per-channel axis {} is outside a tensor of rank {nd}",
                        self.axis
                    ));
                }
                self.shape[axis] as usize
            }
            QuantScheme::PerGroup => {
                if self.group_size == 0 {
                    return fail("per-group scheme with group_size 0".into());
                }
                n.div_ceil(self.group_size as usize)
            }
            QuantScheme::Other(c) => return fail(format!("unknown quantization scheme {c}")),
        };
        if self.scales.len() != expected {
            return fail(format!(
                "{} scheme needs {expected} scales, the packet has {}",
                self.scheme.name(),
                self.scales.len()
            ));
        }
        let q = self.values();
        let mut out = vec![0f32; n];
        for (k, g) in slices(&self.shape, self.scheme, axis, self.group_size as u64, n)
            .iter()
            .enumerate()
        {
            for &i in g {
                out[i] = (q[i] as f32 - self.zero_points[k]) * self.scales[k];
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_half_even() {
        assert_eq!(round_even(0.5), 0.0);
        assert_eq!(round_even(1.5), 2.0);
        assert_eq!(round_even(2.5), 2.0);
        assert_eq!(round_even(-2.5), -2.0);
        assert_eq!(round_even(-0.4), -0.0);
        assert_eq!(round_even(1e10), 1e10);
    }

    #[test]
    fn quantize_round_trips_within_a_step() {
        let v: Vec<f32> = (0..12).map(|i| i as f32 * 0.25 - 1.0).collect();
        for qd in [QDType::QInt8, QDType::QUInt8, QDType::QInt4, QDType::QUInt4] {
            for p in [
                QuantizeParams::PerTensor,
                QuantizeParams::PerChannel { axis: -1 },
                QuantizeParams::PerGroup { group_size: 5 },
            ] {
                let q = Quantized::quantize(&v, &[3, 4], qd, p).unwrap();
                let d = q.dequantize().unwrap();
                for (k, (a, b)) in v.iter().zip(&d).enumerate() {
                    let step = q.scales.iter().cloned().fold(0f32, f32::max);
                    assert!((a - b).abs() <= step * 0.51 + 1e-6, "{qd:?} {p:?} [{k}] {a} vs {b}");
                }
            }
        }
    }

    #[test]
    fn scale_is_divided_in_float64_like_tenso() {
        // tenso 0.24.0 + NumPy 2 writes scale bytes 50 e9 82 3d for this input.
        let q = Quantized::quantize(&[3.3, -13.0], &[2], QDType::QInt8, QuantizeParams::PerTensor).unwrap();
        assert_eq!(q.scales[0].to_le_bytes(), [0x50, 0xe9, 0x82, 0x3d]);
    }

    #[test]
    fn bad_axis_refused() {
        assert!(
            Quantized::quantize(
                &[1.0; 4],
                &[2, 2],
                QDType::QInt8,
                QuantizeParams::PerChannel { axis: 2 }
            )
            .is_err()
        );
        assert!(
            Quantized::quantize(
                &[1.0; 4],
                &[2, 2],
                QDType::QInt8,
                QuantizeParams::PerChannel { axis: -3 }
            )
            .is_err()
        );
    }
}
