//! What the device executors share: finding a tensor the architecture names in the model (shape
//! checked), its stored bytes with their [`Matrix`] view, the f32 vectors, and the rope table.

use std::borrow::Cow;

use tensorlane::model::Model;

use crate::arch::{Spec, TensorSpec};
use crate::cpu::KvCache;
use crate::kernels::{Kind, Matrix};
use crate::plan::BATCH;
use crate::{Error, Result};

pub(crate) use crate::cpu::{find, missing};

/// A tensor's stored bytes and its [`Matrix`] view.
pub(crate) fn read<'m>(model: &'m Model, spec: &TensorSpec) -> Result<Option<(Cow<'m, [u8]>, Matrix<'m>)>> {
    // rows of a fused tensor (phi3): split at bind time, each part a matrix of its own
    if spec.part.is_some() {
        let (t, bytes) = crate::cpu::part(model, spec)?;
        let m = Matrix::new(&t, bytes.clone())?;
        return Ok(Some((bytes, m)));
    }
    let Some(t) = find(model, spec)? else { return Ok(None) };
    let bytes = model.read(t)?;
    let m = Matrix::new(t, bytes.clone())?;
    Ok(Some((bytes, m)))
}

/// A vector tensor (norm weights, biases) as f32; `None` when the model has no such tensor.
pub(crate) fn vector(model: &Model, spec: &TensorSpec) -> Result<Option<Vec<f32>>> {
    let Some((_, m)) = read(model, spec)? else {
        return Ok(None);
    };
    let mut v = vec![0f32; m.cols];
    m.row_into(0, &mut v);
    Ok(Some(v))
}

/// The rope table of `context` positions ([`Spec::rope_table`]) with the model's frequency
/// factors when it has them.
pub(crate) fn rope_table(model: &Model, spec: &Spec, context: usize) -> Result<Vec<f32>> {
    match &spec.rope_freq_values {
        Some(v) => spec.rope_table(context, Some(v)),
        None => spec.rope_table(context, vector(model, &spec.rope_freqs)?.as_deref()),
    }
}

/// The matrix-product kernels' code for `m`'s element type (`matmul.wgsl`, `kernels.cu`: 0 F32,
/// 1 F16, 2 BF16, 3 Q8_0, 4 Q4_0, 5 Q4_K, 6 Q6_K); other types are refused naming `device`.
pub(crate) fn kernel_kind(m: &Matrix<'_>, device: &str) -> Result<u32> {
    Ok(match m.kind {
        Kind::F32 => 0,
        Kind::F16 => 1,
        Kind::BF16 => 2,
        Kind::Q8_0 => 3,
        Kind::Q4_0 => 4,
        Kind::Q4_K => 5,
        Kind::Q6_K => 6,
        Kind::Other(g) => {
            return Err(Error::TensorType {
                name: m.name.clone(),
                ty: format!(
                    "{} on the {device} device (its kernels take F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K)",
                    g.name()
                ),
            });
        }
    })
}

/// Rows of `m` (stored in `len` bytes, rows of `row_bytes`) kept resident and the ring slot of
/// the rest, from its plan entry `split` (resident bytes, slot): all rows and no slot when the
/// plan keeps it whole or there is no plan; an error when the plan splits it inside a row.
pub(crate) fn resident_rows(
    m: &Matrix<'_>,
    len: usize,
    row_bytes: usize,
    split: Option<(u64, Option<u64>)>,
) -> Result<(usize, Option<u64>)> {
    match split {
        Some((resident, Some(slot))) if (resident as usize) < len => {
            if !(resident as usize).is_multiple_of(row_bytes.max(1)) {
                return Err(Error::Device(format!(
                    "the plan keeps {resident} bytes of {} resident, not whole rows of {row_bytes} bytes",
                    m.name
                )));
            }
            Ok((resident as usize / row_bytes.max(1), Some(slot)))
        }
        _ => Ok((m.rows, None)),
    }
}

/// Runs `tokens` at positions `cache.len..` in batches of [`BATCH`] positions (a device
/// executor's activation buffers hold one batch): `batch(tokens, first position, rows wanted
/// within the batch)` returns the logits of those rows; all of them, in order, are returned and
/// the cache counts the positions.
pub(crate) fn in_batches(
    tokens: &[u32],
    cache: &mut KvCache,
    want: &dyn Fn(usize) -> bool,
    mut batch: impl FnMut(&[u32], usize, &[usize]) -> Result<Vec<Vec<f32>>>,
) -> Result<Vec<Vec<f32>>> {
    let pos0 = cache.len;
    let mut out = Vec::new();
    for (ci, chunk) in tokens.chunks(BATCH).enumerate() {
        let base = ci * BATCH;
        let rows: Vec<usize> = (0..chunk.len()).filter(|&i| want(base + i)).collect();
        out.extend(batch(chunk, pos0 + base, &rows)?);
    }
    cache.len = pos0 + tokens.len();
    Ok(out)
}
