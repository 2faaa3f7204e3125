//! The CPU executor: binds an [`arch::Spec`](crate::arch::Spec) to a model's stored tensors and
//! runs the forward pass (RMSNorm, RoPE, grouped-query attention with a causal mask over a KV
//! cache, SwiGLU, final norm, logits) in f32, following llama.cpp's order of operations.

use crate::par::prelude::*;
#[cfg(feature = "native")]
use tensorlane::model::Model;

use crate::arch::{Activation, RopeStyle, Spec, TensorSpec};
use crate::plan::CacheType;
use crate::kernels::Matrix;
use crate::{Error, Result};

/// One transformer block's weights.
struct Layer<'m> {
    attn_norm: Vec<f32>,
    wq: Matrix<'m>,
    wk: Matrix<'m>,
    wv: Matrix<'m>,
    bias: Option<[Vec<f32>; 3]>,
    /// Per-head RMSNorm weights of the queries and keys (qwen3).
    qk_norm: Option<[Vec<f32>; 2]>,
    wo: Matrix<'m>,
    ffn_norm: Vec<f32>,
    /// The dense SwiGLU (absent in a mixture-of-experts layer).
    gate: Option<Matrix<'m>>,
    up: Option<Matrix<'m>>,
    down: Option<Matrix<'m>>,
    /// The mixture of experts in place of the dense SwiGLU.
    moe: Option<Moe<'m>>,
    /// RMSNorm weights of the attention and feed-forward outputs (Gemma).
    post_norms: Option<[Vec<f32>; 2]>,
}

impl<'m> Layer<'m> {
    /// The layer's weight matrices: the attention's, the dense SwiGLU's or the router and every
    /// expert's.
    fn matrices(&self) -> Vec<&Matrix<'m>> {
        let mut v = vec![&self.wq, &self.wk, &self.wv, &self.wo];
        v.extend(self.gate.as_ref());
        v.extend(self.up.as_ref());
        v.extend(self.down.as_ref());
        if let Some(m) = &self.moe {
            v.push(&m.router);
            v.extend(m.experts.iter().flatten());
        }
        v
    }

    /// [`Layer::matrices`], mutable; without the experts unless `experts` (what a forward pass
    /// stages for the whole layer: the routed experts are staged one by one as they run).
    fn matrices_mut(&mut self, experts: bool) -> Vec<&mut Matrix<'m>> {
        let mut v = vec![&mut self.wq, &mut self.wk, &mut self.wv, &mut self.wo];
        v.extend(self.gate.as_mut());
        v.extend(self.up.as_mut());
        v.extend(self.down.as_mut());
        if let Some(m) = &mut self.moe {
            v.push(&mut m.router);
            if experts {
                v.extend(m.experts.iter_mut().flatten());
            }
        }
        v
    }
}

/// A product of the executor's over its row segments: `out = W · x` for each row of `x`.
type Product<'a> = dyn Fn(&Matrix<'_>, &[f32], &mut [f32]) + 'a;

/// One layer's mixture of experts ([`MoeSpec`](crate::arch::MoeSpec)): the router and each
/// expert's gate, up and down as a matrix of its own (a stacked tensor's experts are views of
/// their contiguous blocks), so that only the routed experts' rows are read and, under a
/// budget, streamed.
struct Moe<'m> {
    router: Matrix<'m>,
    /// Expert `e`'s gate `[ff, embd]`, up `[ff, embd]`, down `[embd, ff]`.
    experts: Vec<[Matrix<'m>; 3]>,
    n_used: usize,
    norm_weights: bool,
}

/// The `e`-th of `n` equal contiguous blocks of a stacked tensor's stored bytes as a matrix of
/// its own, named `name[e]`, with the shape `shape` (`[rows, cols]` of one block).
#[cfg(feature = "native")]
fn block_matrix<'m>(
    t: &tensorlane_core::formats::TensorInfo,
    data: &std::borrow::Cow<'m, [u8]>,
    e: usize,
    n: usize,
    shape: [u64; 2],
) -> Result<Matrix<'m>> {
    let each = data.len() / n.max(1);
    let mut info = t.clone();
    info.name = crate::arch::expert_name(&t.name, e);
    info.shape = shape.to_vec();
    let bytes = match data {
        std::borrow::Cow::Borrowed(b) => std::borrow::Cow::Borrowed(&b[e * each..(e + 1) * each]),
        std::borrow::Cow::Owned(v) => std::borrow::Cow::Owned(v[e * each..(e + 1) * each].to_vec()),
    };
    Matrix::new(&info, bytes)
}

impl<'m> Moe<'m> {
    /// Binds a layer's experts from `src` (one binding path for a model file and for a host's
    /// bytes, [`Weights::bind_from`]): a stacked tensor's experts are the blocks
    /// [`Source::expert_blocks`] cuts it into, a Hugging Face checkpoint's each its own tensors.
    fn bind(src: &mut dyn Source<'m>, spec: &crate::arch::MoeSpec) -> Result<Moe<'m>> {
        let experts = match &spec.experts {
            crate::arch::ExpertTensors::Stacked(specs) => {
                let mut per: Vec<Vec<Matrix<'m>>> = (0..spec.n_expert).map(|_| Vec::with_capacity(3)).collect();
                for s in specs {
                    for (p, m) in per.iter_mut().zip(src.expert_blocks(s, spec.n_expert)?) {
                        p.push(m);
                    }
                }
                per.into_iter()
                    .map(|v| <[Matrix<'m>; 3]>::try_from(v).map_err(|_| Error::Options("three projections per expert".into())))
                    .collect::<Result<Vec<_>>>()?
            }
            crate::arch::ExpertTensors::PerExpert(specs) => specs
                .iter()
                .map(|[g, u, d]| Ok([src.matrix(g)?, src.matrix(u)?, src.matrix(d)?]))
                .collect::<Result<Vec<_>>>()?,
        };
        Ok(Moe {
            router: src.matrix(&spec.router)?,
            experts,
            n_used: spec.n_expert_used,
            norm_weights: spec.norm_weights,
        })
    }

    /// The mixture of experts of `n` rows `xn` (`n × embd`) into `out` (`n × embd`), as
    /// llama.cpp's `build_moe_ffn` with a softmax router: per row the router's logits
    /// (`matmul`, the executor's product over its row segments), their softmax, the `n_used`
    /// most probable experts (highest first), their probabilities as weights (divided by their
    /// sum, at least 2⁻¹⁴, when `norm_weights`), and the chosen experts' SwiGLU outputs times
    /// their weights summed in that order. Each expert routed to by any row is staged once,
    /// computes its rows together (each row as alone: [`Matrix::matmul_each`], so a row's
    /// result does not depend on the rows batched with it) and is dropped. Returns the bytes
    /// staged and the experts routed to, ascending.
    fn forward(
        &mut self,
        xn: &[f32],
        out: &mut [f32],
        matmul: &Product<'_>,
        pool: &crate::par::ThreadPool,
    ) -> (u64, Vec<usize>) {
        let n_expert = self.experts.len();
        let d = self.router.cols;
        let n = xn.len() / d.max(1);
        let k = self.n_used.min(n_expert);
        let mut logits = vec![0f32; n * n_expert];
        matmul(&self.router, xn, &mut logits);
        // (row, slot) -> (expert, weight)
        let mut chosen: Vec<(usize, f32)> = Vec::with_capacity(n * k);
        for row in logits.chunks_exact(n_expert) {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut p: Vec<f32> = row.iter().map(|&a| (a - max).exp()).collect();
            let sum: f64 = p.iter().map(|&a| f64::from(a)).sum();
            let inv = (1.0 / sum) as f32;
            for a in &mut p {
                *a *= inv;
            }
            let mut order: Vec<usize> = (0..n_expert).collect();
            // highest first; ties to the lower index
            order.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
            let mut w: Vec<f32> = order[..k].iter().map(|&e| p[e]).collect();
            if self.norm_weights {
                let s = w.iter().map(|&a| f64::from(a)).sum::<f64>() as f32;
                let s = s.max(6.103_515_6e-5);
                for a in &mut w {
                    *a /= s;
                }
            }
            chosen.extend(order[..k].iter().copied().zip(w));
        }
        let mut routed: Vec<usize> = chosen.iter().map(|&(e, _)| e).collect();
        routed.sort_unstable();
        routed.dedup();
        // Each (row, slot)'s weighted expert output.
        let mut each = vec![0f32; n * k * d];
        let mut streamed = 0;
        for m in self.experts.iter_mut().flatten() {
            m.staged_in = std::time::Duration::ZERO;
        }
        for &e in &routed {
            let slots: Vec<usize> = (0..n * k).filter(|&i| chosen[i].0 == e).collect();
            let [gate, up, down] = &mut self.experts[e];
            let mut copy = std::time::Duration::ZERO;
            for m in [&mut *gate, &mut *up, &mut *down] {
                streamed += m.stage();
                copy += m.staged_in;
            }
            let ff = gate.rows;
            let rows = slots.len();
            let mut x = Vec::with_capacity(rows * d);
            for &i in &slots {
                x.extend_from_slice(&xn[(i / k) * d..(i / k + 1) * d]);
            }
            let mut g = vec![0f32; rows * ff];
            let mut u = vec![0f32; rows * ff];
            gate.matmul_each(&x, &mut g, pool);
            up.matmul_each(&x, &mut u, pool);
            for (a, b) in g.iter_mut().zip(&u) {
                *a = *a / (1.0 + (-*a).exp()) * b;
            }
            let mut y = vec![0f32; rows * d];
            down.matmul_each(&g, &mut y, pool);
            for (j, &i) in slots.iter().enumerate() {
                let w = chosen[i].1;
                for (o, &a) in each[i * d..(i + 1) * d].iter_mut().zip(&y[j * d..(j + 1) * d]) {
                    *o = a * w;
                }
            }
            for m in [&mut *gate, &mut *up, &mut *down] {
                m.unstage();
            }
            // the copy time of this use, kept on the gate alone for the pass's total
            gate.staged_in = copy;
            up.staged_in = std::time::Duration::ZERO;
            down.staged_in = std::time::Duration::ZERO;
        }
        for (r, o) in out.chunks_exact_mut(d).enumerate() {
            o.copy_from_slice(&each[r * k * d..r * k * d + d]);
            for j in 1..k {
                for (a, &b) in o.iter_mut().zip(&each[(r * k + j) * d..(r * k + j + 1) * d]) {
                    *a += b;
                }
            }
        }
        (streamed, routed)
    }
}

/// Every weight of a model, in stored form (vectors are decoded to f32: they are small).
pub(crate) struct Weights<'m> {
    token_embd: Matrix<'m>,
    output_norm: Vec<f32>,
    /// `None`: tied to `token_embd`.
    output: Option<Matrix<'m>>,
    /// Rope frequency factors (`rope_freqs.weight`), if the file has them.
    rope_freqs: Option<Vec<f32>>,
    layers: Vec<Layer<'m>>,
}

#[cfg(feature = "native")]
pub(crate) fn find<'c>(model: &'c Model, spec: &TensorSpec) -> Result<Option<&'c tensorlane_core::formats::TensorInfo>> {
    find_in(model.catalog(), spec)
}

#[cfg(feature = "native")]
fn matrix<'m>(model: &'m Model, spec: &TensorSpec) -> Result<Matrix<'m>> {
    if spec.part.is_some() {
        let (t, bytes) = part(model, spec)?;
        return Matrix::new(&t, bytes);
    }
    let t = find(model, spec)?.ok_or_else(|| missing(spec))?;
    Matrix::new(t, model.read(t)?)
}

/// The rows of a fused tensor that `spec` names ([`TensorSpec::part`](crate::arch::Part): phi3's
/// Q, K, V in `attn_qkv` and gate, up in `ffn_up`) as a tensor of their own: the fused tensor
/// found and its whole shape checked (errors name it), its stored rows sliced (a view of a mapped
/// file; a copy of those rows otherwise). `TensorInfo` is the fused tensor's with the part's name
/// and shape.
#[cfg(feature = "native")]
pub(crate) fn part<'m>(
    model: &'m Model,
    spec: &TensorSpec,
) -> Result<(tensorlane_core::formats::TensorInfo, std::borrow::Cow<'m, [u8]>)> {
    use std::borrow::Cow;
    let Some(p) = &spec.part else {
        return Err(missing(spec));
    };
    let whole = TensorSpec {
        name: p.tensor.clone(),
        shape: p.shape.clone(),
        part: None,
    };
    let t = find(model, &whole)?.ok_or_else(|| missing(&whole))?;
    let bytes = model.read(t)?;
    let total = p.shape.first().copied().unwrap_or(0) as usize;
    let rows = spec.shape.first().copied().unwrap_or(0) as usize;
    let first = p.first_row as usize;
    if total == 0 || !bytes.len().is_multiple_of(total) || first + rows > total {
        return Err(Error::TensorType {
            name: p.tensor.clone(),
            ty: format!(
                "{} with {} stored bytes, not {total} whole rows to take rows {first}..{} of",
                t.ty.name(),
                bytes.len(),
                first + rows
            ),
        });
    }
    let row_bytes = bytes.len() / total;
    let range = first * row_bytes..(first + rows) * row_bytes;
    let sliced = match bytes {
        Cow::Borrowed(b) => Cow::Borrowed(&b[range]),
        Cow::Owned(v) => Cow::Owned(v[range].to_vec()),
    };
    let mut info = t.clone();
    info.name = spec.name.clone();
    info.shape = spec.shape.clone();
    Ok((info, sliced))
}

pub(crate) fn missing(spec: &TensorSpec) -> Error {
    Error::MissingTensor {
        name: spec.name.clone(),
        expected: spec.shape.clone(),
    }
}

/// Where binding reads the tensors a [`Spec`] names from: a model file ([`Weights::bind`]) or
/// the bytes a host hands in ([`Weights::bind_hosted`]).
trait Source<'m> {
    /// The tensor `spec` names, its shape checked; `None` when absent.
    fn find(&self, spec: &TensorSpec) -> Result<Option<&tensorlane_core::formats::TensorInfo>>;
    /// The matrix `spec` names (an error when absent).
    fn matrix(&mut self, spec: &TensorSpec) -> Result<Matrix<'m>>;
    /// The `n` experts of the stacked tensor `spec` names (`[n, rows, cols]`, a mixture of
    /// experts' `ffn_*_exps`), each its contiguous block as a `[rows, cols]` matrix of its own
    /// named [`expert_name`](crate::arch::expert_name) (an error when absent).
    fn expert_blocks(&mut self, spec: &TensorSpec, n: usize) -> Result<Vec<Matrix<'m>>>;

    /// The vector `spec` names, decoded to f32; `None` when absent.
    fn vector_opt(&mut self, spec: &TensorSpec) -> Result<Option<Vec<f32>>> {
        if self.find(spec)?.is_none() {
            return Ok(None);
        }
        let m = self.matrix(spec)?;
        let mut v = vec![0f32; m.cols];
        m.row_into(0, &mut v);
        Ok(Some(v))
    }

    /// An RMSNorm weight with `shift` added ([`Spec::norm_shift`]: 1 for Hugging Face Gemma).
    fn norm(&mut self, spec: &TensorSpec, shift: f32) -> Result<Vec<f32>> {
        let mut v = self.vector_opt(spec)?.ok_or_else(|| missing(spec))?;
        if shift != 0.0 {
            v.iter_mut().for_each(|x| *x += shift);
        }
        Ok(v)
    }
}

/// A model file: matrices borrow its mapped bytes; a fused tensor's part is a view of its rows.
#[cfg(feature = "native")]
impl<'m> Source<'m> for &'m Model {
    fn find(&self, spec: &TensorSpec) -> Result<Option<&tensorlane_core::formats::TensorInfo>> {
        find(self, spec)
    }

    fn matrix(&mut self, spec: &TensorSpec) -> Result<Matrix<'m>> {
        matrix(self, spec)
    }

    fn expert_blocks(&mut self, spec: &TensorSpec, n: usize) -> Result<Vec<Matrix<'m>>> {
        let t = find(self, spec)?.ok_or_else(|| missing(spec))?;
        let data = self.read(t)?;
        let shape = [spec.shape[1], spec.shape[2]];
        (0..n).map(|e| block_matrix(t, &data, e, n, shape)).collect()
    }
}

/// A catalog whose tensors a host hands in through `load`.
struct Hosted<'c, 'l> {
    catalog: &'c tensorlane_core::formats::Catalog,
    load: &'l mut dyn FnMut(&tensorlane_core::formats::TensorInfo) -> Result<Matrix<'static>>,
}

/// The tensor `spec` names in `catalog`, its shape checked; `None` when absent.
fn find_in<'c>(
    catalog: &'c tensorlane_core::formats::Catalog,
    spec: &TensorSpec,
) -> Result<Option<&'c tensorlane_core::formats::TensorInfo>> {
    match catalog.get(&spec.name) {
        None => Ok(None),
        Some(t) if t.shape == spec.shape => Ok(Some(t)),
        Some(t) => Err(Error::TensorShape {
            name: spec.name.clone(),
            expected: spec.shape.clone(),
            found: t.shape.clone(),
        }),
    }
}

impl Source<'static> for Hosted<'_, '_> {
    fn find(&self, spec: &TensorSpec) -> Result<Option<&tensorlane_core::formats::TensorInfo>> {
        find_in(self.catalog, spec)
    }

    fn matrix(&mut self, spec: &TensorSpec) -> Result<Matrix<'static>> {
        if let Some(p) = &spec.part {
            return Err(Error::TensorType {
                name: p.tensor.clone(),
                ty: "a fused tensor (phi3), which the hosted executor does not split yet".into(),
            });
        }
        let t = find_in(self.catalog, spec)?.ok_or_else(|| missing(spec))?;
        (self.load)(t)
    }

    fn expert_blocks(&mut self, spec: &TensorSpec, _n: usize) -> Result<Vec<Matrix<'static>>> {
        Err(Error::TensorType {
            name: spec.name.clone(),
            ty: "a mixture of experts' stacked expert tensor (qwen3moe, olmoe, mixtral), which the hosted \
                 executor does not run yet (the native cpu executor does)"
                .into(),
        })
    }
}

impl<'m> Weights<'m> {
    /// Finds every tensor `spec` needs in `model` and checks its shape and element type; the
    /// matrices borrow the model's mapped bytes.
    #[cfg(feature = "native")]
    pub(crate) fn bind(model: &'m Model, spec: &Spec) -> Result<Weights<'m>> {
        Weights::bind_from(&mut { model }, spec)
    }

    /// Every tensor `spec` needs, from `src`.
    fn bind_from(src: &mut dyn Source<'m>, spec: &Spec) -> Result<Weights<'m>> {
        let shift = spec.norm_shift;
        let mut layers = Vec::with_capacity(spec.layers.len());
        for l in &spec.layers {
            let b: Vec<Option<Vec<f32>>> = l.biases.iter().map(|s| src.vector_opt(s)).collect::<Result<_>>()?;
            let bias = match (&b[0], &b[1], &b[2]) {
                (Some(q), Some(k), Some(v)) => Some([q.clone(), k.clone(), v.clone()]),
                (None, None, None) if !l.biases_required => None,
                _ => {
                    let which = l.biases.iter().zip(&b).find(|(_, v)| v.is_none()).map(|(s, _)| s);
                    return Err(missing(which.unwrap_or(&l.biases[0])));
                }
            };
            layers.push(Layer {
                attn_norm: src.norm(&l.attn_norm, shift)?,
                wq: src.matrix(&l.wq)?,
                wk: src.matrix(&l.wk)?,
                wv: src.matrix(&l.wv)?,
                bias,
                qk_norm: match &l.qk_norm {
                    Some([q, k]) => Some([src.norm(q, shift)?, src.norm(k, shift)?]),
                    None => None,
                },
                wo: src.matrix(&l.wo)?,
                ffn_norm: src.norm(&l.ffn_norm, shift)?,
                gate: l.moe.is_none().then(|| src.matrix(&l.gate)).transpose()?,
                up: l.moe.is_none().then(|| src.matrix(&l.up)).transpose()?,
                down: l.moe.is_none().then(|| src.matrix(&l.down)).transpose()?,
                moe: l.moe.as_ref().map(|m| Moe::bind(src, m)).transpose()?,
                post_norms: match &l.post_norms {
                    Some([a, f]) => Some([src.norm(a, shift)?, src.norm(f, shift)?]),
                    None => None,
                },
            });
        }
        let output = match src.find(&spec.output)? {
            Some(_) => Some(src.matrix(&spec.output)?),
            None => None,
        };
        Ok(Weights {
            token_embd: src.matrix(&spec.token_embd)?,
            output_norm: src.norm(&spec.output_norm, spec.norm_shift)?,
            output,
            rope_freqs: match &spec.rope_freq_values {
                Some(v) => Some(v.clone()),
                None => src.vector_opt(&spec.rope_freqs)?,
            },
            layers,
        })
    }

    fn output(&self) -> &Matrix<'m> {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }

    /// Every weight matrix once (the embedding, each layer's seven, the output unless tied).
    pub(crate) fn matrices(&self) -> Vec<&Matrix<'m>> {
        let mut v = vec![&self.token_embd];
        for l in &self.layers {
            v.extend(l.matrices());
        }
        v.extend(self.output.as_ref());
        v
    }

    fn matrices_mut(&mut self) -> Vec<&mut Matrix<'m>> {
        let mut v = vec![&mut self.token_embd];
        for l in &mut self.layers {
            v.extend(l.matrices_mut(true));
        }
        v.extend(self.output.as_mut());
        v
    }

    /// Bytes of the f32 vectors (norms, biases, rope factors) held resident.
    pub(crate) fn vector_bytes(&self) -> u64 {
        let mut n = self.output_norm.len() + self.rope_freqs.as_ref().map_or(0, Vec::len);
        for l in &self.layers {
            n += l.attn_norm.len() + l.ffn_norm.len() + l.bias.as_ref().map_or(0, |b| b.iter().map(Vec::len).sum());
            n += l.qk_norm.as_ref().map_or(0, |b| b.iter().map(Vec::len).sum::<usize>());
            n += l.post_norms.as_ref().map_or(0, |b| b.iter().map(Vec::len).sum::<usize>());
        }
        4 * n as u64
    }

    /// Keeps `resident(name)` bytes of each matrix resident and streams the rest at each use.
    pub(crate) fn split(&mut self, resident: &dyn Fn(&str) -> Option<u64>) {
        for m in self.matrices_mut() {
            if let Some(r) = resident(&m.name)
                && (r as usize) < m.stored_bytes()
            {
                m.split_at(r as usize);
            }
        }
    }

    /// Puts the weights on the disk tier ([`crate::disk`]) under a budget: each matrix keeps
    /// `resident(name)` bytes in memory, read now from `model`'s file with positioned reads
    /// (never through its map, so the map's pages are not made resident as well), and reads the
    /// rest from the file at each use; a matrix the plan does not place (the embedding looked up
    /// by row, when the output is not tied to it) reads its rows one at a time where they are
    /// looked up. `progress(bytes)` as resident bytes are read. Matrices not viewed from the
    /// model's mapped file (a source read into memory) keep copying from memory
    /// ([`Weights::split`]).
    #[cfg(feature = "native")]
    pub(crate) fn put_on_disk(
        &mut self,
        model: &Model,
        resident: &dyn Fn(&str) -> Option<u64>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        if let Some(l) = self.layers.iter().find(|l| l.moe.is_some()) {
            return Err(Error::Options(format!(
                "the disk tier reads weights in a fixed order, and a mixture of experts' reads depend \
                 on its router ({} has experts): keep such a model on the memory-map path",
                l.wq.name
            )));
        }
        let path = model.path().to_path_buf();
        let map = model.source(0).and_then(|s| s.mapped()).map(|m| {
            let b = m.bytes();
            (b.as_ptr() as usize, b.len())
        });
        let mut file = None;
        for m in self.matrices_mut() {
            let keep = resident(&m.name);
            // The matrix's first byte in the file, from its view of the map.
            let offset = match (map, m.mapped_bytes()) {
                (Some((base, len)), Some(b))
                    if (b.as_ptr() as usize) >= base && (b.as_ptr() as usize) + b.len() <= base + len =>
                {
                    Some((b.as_ptr() as usize - base) as u64)
                }
                _ => None,
            };
            let Some(offset) = offset else {
                if let Some(r) = keep
                    && (r as usize) < m.stored_bytes()
                {
                    m.split_at(r as usize);
                }
                continue;
            };
            let keep = keep.map_or(0, |r| (r as usize).min(m.stored_bytes()));
            let f = match &mut file {
                Some(f) => f,
                None => file.insert(tensorlane_offload::device::tiers::DirectFile::open(&path).map_err(|e| {
                    Error::Device(format!(
                        "the disk tier cannot open {} ({e}); run without --budget or check that the file is readable",
                        path.display()
                    ))
                })?),
            };
            let mut bytes = vec![0u8; keep];
            for (i, chunk) in bytes.chunks_mut(16 << 20).enumerate() {
                let at = offset + (i * (16 << 20)) as u64;
                f.read_into(at, chunk).map_err(|e| {
                    Error::Device(format!(
                        "reading the resident bytes of {} from {} failed ({e}); check that the file is readable and complete",
                        m.name,
                        path.display()
                    ))
                })?;
                progress(chunk.len() as u64);
            }
            m.put_on_disk(offset, bytes, resident(&m.name).is_none());
        }
        Ok(())
    }

    /// The reads of one forward pass on the disk tier, in the order it stages the matrices
    /// (each layer's seven, then the output, or the embedding when the output is tied to it:
    /// on the disk tier the embedding's rows are read one by one where they are looked up):
    /// each streamed matrix's bytes past its resident prefix. Matrices read by row (`gather`)
    /// and all-resident ones are absent.
    #[cfg(feature = "native")]
    pub(crate) fn disk_schedule(&self) -> Vec<crate::disk::Piece> {
        let mut v = Vec::new();
        let mut add = |m: &Matrix<'_>| {
            if let Some(d) = m.disk()
                && !d.gather
                && m.streamed_bytes() > 0
            {
                v.push(crate::disk::Piece {
                    offset: d.offset + (d.len - m.streamed_bytes()) as u64,
                    len: m.streamed_bytes(),
                });
            }
        };
        for l in &self.layers {
            for m in l.matrices() {
                add(m);
            }
        }
        add(self.output());
        v
    }

    /// Bytes streamed by one forward pass.
    pub(crate) fn streamed_bytes(&self) -> u64 {
        self.matrices().iter().map(|m| m.streamed_bytes() as u64).sum()
    }

    /// Stored bytes of every matrix (the bytes a token's forward pass reads).
    pub(crate) fn stored_bytes(&self) -> u64 {
        let mut n = self.token_embd.stored_bytes() + self.output.as_ref().map_or(0, |m| m.stored_bytes());
        for l in &self.layers {
            for m in l.matrices() {
                n += m.stored_bytes();
            }
        }
        n as u64
    }
}

/// One layer's cached keys or values, `[pos][kv_heads * head_dim]`, as [`CacheType`] says.
pub(crate) enum Rows {
    F32(Vec<f32>),
    F16(Vec<half::f16>),
    /// ggml Q8_0 blocks, 34 bytes per 32 values (a row is whole blocks: heads are multiples of
    /// 32 wide, [`CacheType::check`]).
    Q8_0(Vec<u8>),
}

impl Rows {
    fn new(cache: CacheType) -> Rows {
        match cache {
            CacheType::F32 => Rows::F32(Vec::new()),
            CacheType::F16 => Rows::F16(Vec::new()),
            CacheType::Q8_0 => Rows::Q8_0(Vec::new()),
        }
    }

    /// Values held.
    fn len(&self) -> usize {
        match self {
            Rows::F32(v) => v.len(),
            Rows::F16(v) => v.len(),
            Rows::Q8_0(v) => v.len() / 34 * 32,
        }
    }

    fn clear(&mut self) {
        self.truncate(0);
    }

    /// Keeps the first `n` values (a multiple of 32 for a q8_0 cache: whole rows).
    fn truncate(&mut self, n: usize) {
        match self {
            Rows::F32(v) => v.truncate(n),
            Rows::F16(v) => v.truncate(n),
            Rows::Q8_0(v) => v.truncate(n / 32 * 34),
        }
    }

    /// Appends `x`, rounded to f16 for an f16 cache, quantized for a q8_0 one.
    fn extend(&mut self, x: &[f32]) {
        match self {
            Rows::F32(v) => v.extend_from_slice(x),
            Rows::F16(v) => v.extend(x.iter().map(|&a| half::f16::from_f32(a))),
            Rows::Q8_0(v) => crate::kernels::append_q8_0(x, v),
        }
    }

    /// Every value as f32: a view of an f32 cache, or an f16 or q8_0 one converted (exactly)
    /// once, so that attention reads each cached row as f32 without converting it again for
    /// every query row and head that reads it.
    fn as_f32(&self) -> std::borrow::Cow<'_, [f32]> {
        use half::slice::HalfFloatSliceExt as _;
        match self {
            Rows::F32(v) => v.as_slice().into(),
            Rows::F16(v) => {
                let mut out = vec![0f32; v.len()];
                v.convert_to_f32_slice(&mut out);
                out.into()
            }
            Rows::Q8_0(v) => {
                let mut out = vec![0f32; self.len()];
                crate::kernels::dequantize_row(crate::kernels::Kind::Q8_0, v, &mut out);
                out.into()
            }
        }
    }

    /// How attention rounds what it multiplies these keys (or values) with.
    fn rounding(&self) -> Rounding {
        match self {
            Rows::F32(_) => Rounding::None,
            Rows::F16(_) => Rounding::F16,
            Rows::Q8_0(_) => Rounding::Q8_0,
        }
    }
}

/// How attention rounds its operands for the cache it reads, as llama.cpp's CPU path does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rounding {
    /// An f32 cache: nothing rounded.
    None,
    /// An f16 cache (llama.cpp without flash attention): the query and the softmax weights
    /// rounded to f16 for their products with f16 keys and values.
    F16,
    /// A q8_0 cache (llama.cpp's flash attention, which a quantized V cache needs there): each
    /// query head quantized to Q8_0 blocks for its product with the keys (the product of the
    /// dequantized values is the integer dot product to float rounding); the softmax weights
    /// stay f32.
    Q8_0,
}

impl Rounding {
    /// One query head as the product with the keys takes it, into `out`.
    fn query(self, q: &[f32], out: &mut [f32]) {
        match self {
            Rounding::None => out.copy_from_slice(q),
            Rounding::F16 => {
                for (b, &a) in out.iter_mut().zip(q) {
                    *b = half::f16::from_f32(a).to_f32();
                }
            }
            Rounding::Q8_0 => {
                out.copy_from_slice(&crate::kernels::round_activations(crate::kernels::Kind::Q8_0, q))
            }
        }
    }

    /// A softmax weight as the product with the values takes it.
    fn weight(self, p: f32) -> f32 {
        if self == Rounding::F16 { half::f16::from_f32(p).to_f32() } else { p }
    }
}

/// One sequence's keys and values of a layer as f32 ([`Rows::as_f32`]) and how attention
/// rounds its operands for them.
type LayerKv<'a> = (std::borrow::Cow<'a, [f32]>, std::borrow::Cow<'a, [f32]>, Rounding);

/// Keys and values of every position so far, per layer.
#[derive(Default)]
pub(crate) struct KvCache {
    k: Vec<Rows>,
    v: Vec<Rows>,
    /// Positions held.
    pub len: usize,
}

impl KvCache {
    pub(crate) fn clear(&mut self) {
        for x in self.k.iter_mut().chain(self.v.iter_mut()) {
            x.clear();
        }
        self.len = 0;
    }

    /// Keeps the first `len` positions (at most the ones held). A device executor's cache
    /// (no rows here) only counts them: its next positions are written over the old ones.
    pub(crate) fn truncate(&mut self, len: usize) {
        let len = len.min(self.len);
        for x in self.k.iter_mut().chain(self.v.iter_mut()) {
            if let Some(per) = x.len().checked_div(self.len) {
                x.truncate(len * per);
            }
        }
        self.len = len;
    }
}

/// The CPU executor over bound weights.
pub(crate) struct Cpu<'m> {
    spec: Spec,
    w: Weights<'m>,
    /// How the KV caches it makes store keys and values.
    cache: CacheType,
    /// The worker pool (shared so that a forward pass can run inside it while it borrows the
    /// rest of the executor mutably).
    pool: std::sync::Arc<crate::par::ThreadPool>,
    /// Rope `(cos, sin)` per position, `rope_dim / 2` pairs each, grown on demand: one table per
    /// distinct rope `(base, scale)` of the layers ([`Spec::layer_rope`]), the model's first.
    ropes: Vec<((f32, f32), Vec<(f32, f32)>)>,
    /// Each layer's table in `ropes`.
    layer_rope: Vec<usize>,
    rope_positions: usize,
    /// Weight bytes streamed (copied in from the model) by the last forward pass.
    pub(crate) streamed_last: u64,
    /// Time the last forward pass spent copying those bytes (on the disk tier: waiting for
    /// the reader, the part of the reads not hidden behind compute).
    pub(crate) copy_last: std::time::Duration,
    /// Per layer, the experts the last forward pass routed any row to, ascending (empty for a
    /// dense layer).
    pub(crate) routed_last: Vec<Vec<usize>>,
    /// The disk tier, under a budget ([`Cpu::attach_disk`]).
    disk: Option<DiskState>,
    /// Where the forward passes' spans go while a trace is on ([`Cpu::start_trace`]).
    trace: Option<Recorder>,
}

/// A measured schedule, span by span (`run --trace`): each product's copy-in (or wait for the
/// disk tier's reader, and the reader's read of its bytes, ahead, on its own thread) and
/// compute, each layer, each forward pass, in seconds from the start.
struct Recorder {
    t0: std::time::Instant,
    forward: usize,
    spans: Vec<tensorlane_offload::TraceSpan>,
}

impl Recorder {
    fn span(&mut self, track: &str, name: &str, start: std::time::Instant, end: std::time::Instant) {
        self.spans.push(tensorlane_offload::TraceSpan {
            track: track.to_string(),
            name: name.to_string(),
            forward: self.forward,
            start_s: start.duration_since(self.t0).as_secs_f64(),
            end_s: end.duration_since(self.t0).as_secs_f64(),
        });
    }
}

/// Now, where a trace is on (only native code turns one on: wasm32 has no clock here).
fn stamp(on: bool) -> Option<std::time::Instant> {
    on.then(std::time::Instant::now)
}

/// The tracks of a measured CPU trace, in the order it shows them.
pub const CPU_TRACKS: [&str; 6] = ["forward passes", "layers", "compute", "copies", "disk waits", "disk reads"];

/// The CPU executor's disk tier: the reader running ahead of the forward pass, and a file for
/// the rows read one at a time.
#[cfg(feature = "native")]
pub(crate) struct DiskState {
    reader: crate::disk::Reader,
    rows: tensorlane_offload::device::tiers::DirectFile,
    /// The first failed read since the last [`Cpu::take_disk_error`].
    error: Option<String>,
    /// When the reader read the piece last staged (for a trace).
    last_read: Option<(std::time::Instant, std::time::Instant)>,
}

/// No disk tier without a host OS.
#[cfg(not(feature = "native"))]
pub(crate) enum DiskState {}

/// Stages `m`'s streamed bytes for a use: the disk tier's next piece when `m` is on it (the wait
/// for it added to `wait`), a copy from memory otherwise. Returns the bytes staged.
#[cfg_attr(not(feature = "native"), allow(unused_variables))]
fn stage(m: &mut Matrix<'_>, disk: &mut Option<DiskState>, wait: &mut std::time::Duration) -> u64 {
    #[cfg(feature = "native")]
    if let Some(d) = disk
        && let Some(dm) = m.disk()
    {
        if dm.gather || m.streamed_bytes() == 0 {
            return 0;
        }
        let (f, waited) = d.reader.take();
        *wait += waited;
        d.last_read = f.read;
        if let Some(e) = &f.error {
            d.error.get_or_insert_with(|| format!("reading the streamed bytes of {}: {e}", m.name));
        }
        return m.stage_filled(f);
    }
    m.stage()
}

/// Row `tok` of the embedding `m` as f32 into `out`: read from the file on the disk tier (its
/// bytes added to `read`), from memory otherwise.
#[cfg_attr(not(feature = "native"), allow(unused_variables))]
fn embed_row(m: &Matrix<'_>, disk: &mut Option<DiskState>, tok: usize, out: &mut [f32], read: &mut u64) {
    #[cfg(feature = "native")]
    if let Some(d) = disk
        && let Some(dm) = m.disk()
    {
        let rb = m.row_bytes();
        let mut row = vec![0u8; rb];
        if let Err(e) = d.rows.read_into(dm.offset + (tok * rb) as u64, &mut row) {
            d.error.get_or_insert_with(|| format!("reading row {tok} of {}: {e}", m.name));
        }
        *read += rb as u64;
        m.dequantize_into(&row, out);
        return;
    }
    m.row_into(tok, out);
}

/// When the disk tier's reader read the piece staged last (`None` off the disk tier).
#[cfg_attr(not(feature = "native"), allow(unused_variables))]
fn take_read(disk: &mut Option<DiskState>) -> Option<(std::time::Instant, std::time::Instant)> {
    #[cfg(feature = "native")]
    if let Some(d) = disk {
        return d.last_read.take();
    }
    None
}

/// Ends a use of `m`'s streamed bytes: the disk tier's buffer goes back to its ring.
#[cfg_attr(not(feature = "native"), allow(unused_variables))]
fn unstage(m: &mut Matrix<'_>, disk: &mut Option<DiskState>) {
    #[cfg(feature = "native")]
    if let Some(d) = disk
        && let Some(f) = m.take_filled()
    {
        d.reader.give_back(f);
    }
    m.unstage();
}

impl<'m> Cpu<'m> {
    /// Starts recording the forward passes' spans (a trace already on starts over).
    #[cfg(feature = "native")]
    pub(crate) fn start_trace(&mut self) {
        self.trace = Some(Recorder {
            t0: std::time::Instant::now(),
            forward: 0,
            spans: Vec::new(),
        });
    }

    /// The spans recorded since [`Cpu::start_trace`], and the trace off (empty when none was on).
    pub(crate) fn take_trace(&mut self) -> Vec<tensorlane_offload::TraceSpan> {
        self.trace.take().map(|t| t.spans).unwrap_or_default()
    }

    pub(crate) fn new(spec: Spec, w: Weights<'m>, threads: usize, cache: CacheType) -> Result<Cpu<'m>> {
        #[cfg(feature = "native")]
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("tensorlane-llm-{i}"))
            .build()
            .map_err(|e| Error::Options(format!("cannot start {threads} worker threads: {e}")))?;
        // Without rayon (wasm32) the products run on the calling thread (crate::par says why).
        #[cfg(not(feature = "native"))]
        let pool = {
            let _ = threads;
            crate::par::ThreadPool
        };
        if let Some(f) = &w.rope_freqs
            && f.iter().any(|&x| !(x.is_finite() && x > 0.0))
        {
            return Err(Error::Metadata {
                key: spec.rope_freqs.name.clone(),
                message: "rope frequency factors must be positive numbers".into(),
            });
        }
        let routed_last = vec![Vec::new(); spec.layers.len()];
        let mut ropes: Vec<((f32, f32), Vec<(f32, f32)>)> =
            vec![((spec.hparams.rope_base, spec.hparams.rope_freq_scale), Vec::new())];
        let layer_rope = (0..spec.layers.len())
            .map(|il| {
                let r = spec.layer_rope(il);
                match ropes.iter().position(|(x, _)| *x == r) {
                    Some(i) => i,
                    None => {
                        ropes.push((r, Vec::new()));
                        ropes.len() - 1
                    }
                }
            })
            .collect();
        Ok(Cpu {
            spec,
            w,
            cache,
            pool: std::sync::Arc::new(pool),
            ropes,
            layer_rope,
            rope_positions: 0,
            streamed_last: 0,
            copy_last: std::time::Duration::ZERO,
            trace: None,
            routed_last,
            disk: None,
        })
    }

    /// Starts the disk tier over weights put on it ([`Weights::put_on_disk`]): a reader thread
    /// reading `path` ahead of use into a ring of `ring_bytes`. Returns whether reads bypass the
    /// page cache (`O_DIRECT`).
    #[cfg(feature = "native")]
    pub(crate) fn attach_disk(&mut self, path: &std::path::Path, ring_bytes: usize) -> Result<bool> {
        // The pass holds one piece at a time and hands each back before it waits for the next,
        // so a ring of the largest piece always makes progress; the plan's ring (at least that)
        // lets the reader run ahead.
        let reader = crate::disk::Reader::start(path, self.w.disk_schedule(), ring_bytes)?;
        let rows = tensorlane_offload::device::tiers::DirectFile::open(path).map_err(|e| {
            Error::Device(format!(
                "the disk tier cannot open {} ({e}); run without --budget or check that the file is readable",
                path.display()
            ))
        })?;
        let direct = reader.direct;
        self.disk = Some(DiskState {
            reader,
            rows,
            error: None,
            last_read: None,
        });
        Ok(direct)
    }

    /// The ring's bytes on the disk tier (0 without it).
    pub(crate) fn ring_bytes(&self) -> u64 {
        #[cfg(feature = "native")]
        if let Some(d) = &self.disk {
            return d.reader.ring_bytes as u64;
        }
        0
    }

    /// The first failed disk read since the last call (the pass that saw it computed with zeros
    /// in its place, so its results are to be dropped).
    pub(crate) fn take_disk_error(&mut self) -> Option<String> {
        #[cfg(feature = "native")]
        if let Some(d) = &mut self.disk {
            return d.error.take();
        }
        None
    }

    pub(crate) fn spec(&self) -> &Spec {
        &self.spec
    }

    pub(crate) fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// Per layer, each expert's `(stored, streamed)` bytes (its gate, up and down together);
    /// empty lists for dense layers.
    pub(crate) fn expert_bytes(&self) -> Vec<Vec<(u64, u64)>> {
        self.w
            .layers
            .iter()
            .map(|l| {
                l.moe.as_ref().map_or_else(Vec::new, |m| {
                    m.experts
                        .iter()
                        .map(|e| {
                            e.iter().fold((0, 0), |(a, b), x| {
                                (a + x.stored_bytes() as u64, b + x.streamed_bytes() as u64)
                            })
                        })
                        .collect()
                })
            })
            .collect()
    }

    pub(crate) fn stored_bytes(&self) -> u64 {
        self.w.stored_bytes()
    }

    /// Bytes the weights stream per forward pass.
    pub(crate) fn streamed_bytes(&self) -> u64 {
        self.w.streamed_bytes()
    }

    pub(crate) fn new_cache(&self) -> KvCache {
        let n = self.spec.layers.len();
        KvCache {
            k: (0..n).map(|_| Rows::new(self.cache)).collect(),
            v: (0..n).map(|_| Rows::new(self.cache)).collect(),
            len: 0,
        }
    }

    /// The rope table up to `positions` ([`Spec::rope_row`], ggml's `rope_cache_init`), grown a
    /// position at a time.
    fn grow_rope(&mut self, positions: usize) {
        let freqs = self.w.rope_freqs.as_deref();
        while self.rope_positions < positions {
            for (r, rope) in self.ropes.iter_mut() {
                self.spec
                    .rope_row_with(*r, self.rope_positions, freqs, |c, s| rope.push((c, s)));
            }
            self.rope_positions += 1;
        }
    }

    /// Applies layer `li`'s rope to `heads` heads of `x` (one position) at position `pos`.
    fn apply_rope(&self, li: usize, x: &mut [f32], heads: usize, pos: usize) {
        let h = &self.spec.hparams;
        let pairs = h.rope_dim / 2;
        let table = &self.ropes[self.layer_rope[li]].1[pos * pairs..(pos + 1) * pairs];
        for head in x.chunks_exact_mut(h.head_dim).take(heads) {
            match h.rope_style {
                RopeStyle::Adjacent => {
                    for (i, &(c, s)) in table.iter().enumerate() {
                        let (a, b) = (head[2 * i], head[2 * i + 1]);
                        head[2 * i] = a * c - b * s;
                        head[2 * i + 1] = a * s + b * c;
                    }
                }
                RopeStyle::Halves => {
                    for (i, &(c, s)) in table.iter().enumerate() {
                        let (a, b) = (head[i], head[i + pairs]);
                        head[i] = a * c - b * s;
                        head[i + pairs] = a * s + b * c;
                    }
                }
            }
        }
    }

    /// Runs `tokens` at positions `cache.len..` and appends their keys and values to the cache.
    /// Returns the logits (`n_vocab` each) of the positions `want(i)` selects, in order.
    /// The caller has checked the token ids and the context.
    pub(crate) fn forward(
        &mut self,
        tokens: &[u32],
        cache: &mut KvCache,
        want: &dyn Fn(usize) -> bool,
    ) -> Vec<Vec<f32>> {
        self.forward_many(&mut [(tokens, cache)], &|_, i| want(i), 0)
    }

    /// One step of a continuous batch in one forward pass, each weight staged (streamed, under a
    /// budget) once for all of it: a decode step of several sequences (`decode[s]` is sequence
    /// `s`'s next token and its own KV cache) and the prompts of sequences joining the batch
    /// (each with its own new cache; only its last position's logits are kept). Each sequence's
    /// logits are bit for bit what [`forward`](Self::forward) of its tokens alone gives: the
    /// decode rows go through each product together but row by row as for one row
    /// ([`Matrix::matmul_each`]), each prompt's rows through the tiled product on their own, as
    /// `forward` takes them; attention reads only the sequence's own cache. Returns one `n_vocab`
    /// row per decode sequence, then one per prompt, in order. The caller has checked the token
    /// ids and the contexts.
    pub(crate) fn step(
        &mut self,
        decode: &mut [(u32, &mut KvCache)],
        prompts: &mut [(&[u32], &mut KvCache)],
    ) -> Vec<Vec<f32>> {
        let tokens: Vec<[u32; 1]> = decode.iter().map(|(t, _)| [*t]).collect();
        let n = decode.len();
        let mut seqs: Vec<(&[u32], &mut KvCache)> = tokens
            .iter()
            .zip(decode.iter_mut())
            .map(|(t, (_, c))| (&t[..], &mut **c))
            .chain(prompts.iter_mut().map(|(t, c)| (*t, &mut **c)))
            .collect();
        let lens: Vec<usize> = seqs.iter().map(|(t, _)| t.len()).collect();
        self.forward_many(&mut seqs, &|s, i| s < n || i + 1 == lens[s], n)
    }

    /// The forward pass of several sequences at once: `seqs[s]` holds tokens run at positions
    /// `cache.len..` of that sequence's cache (their keys and values are appended to it). The
    /// rows of all sequences go through each matrix product together (each weight staged once);
    /// attention of a row reads its own sequence's cache. The first `per_row` sequences are
    /// decode rows, taken together row by row as for a single row ([`Matrix::matmul_each`]);
    /// every later sequence's rows are taken on their own by the tiled product of a prompt
    /// ([`Matrix::matmul`]), as if it ran alone. Returns the logits of the rows `want(s, i)`
    /// selects, sequence by sequence, in order.
    ///
    /// The whole pass runs inside the worker pool (one `install`): each product and attention
    /// then splits its work from a worker thread. Called from outside the pool, every one of
    /// them (8 per layer: 241 per decode step of SmolLM2) handed its work to a pool thread and
    /// slept until it was done: 16 µs each on the shared 2-core VM under load (an empty parallel
    /// loop timed from outside the pool; 0.1 µs from inside), more where the other thread has to
    /// be woken from an idle CPU.
    fn forward_many(
        &mut self,
        seqs: &mut [(&[u32], &mut KvCache)],
        want: &dyn Fn(usize, usize) -> bool,
        per_row: usize,
    ) -> Vec<Vec<f32>> {
        let wanted: Vec<Vec<bool>> = seqs
            .iter()
            .enumerate()
            .map(|(s, (t, _))| (0..t.len()).map(|i| want(s, i)).collect())
            .collect();
        let pool = self.pool.clone();
        pool.install(|| self.forward_in_pool(seqs, &wanted, per_row))
    }

    /// [`forward_many`](Self::forward_many) on a worker thread of the pool; `wanted[s][i]`
    /// selects the logits kept.
    fn forward_in_pool(
        &mut self,
        seqs: &mut [(&[u32], &mut KvCache)],
        wanted: &[Vec<bool>],
        per_row: usize,
    ) -> Vec<Vec<f32>> {
        let want = |s: usize, i: usize| wanted[s][i];
        // Row r is token i of sequence s at position pos0[s] + i.
        let rows: Vec<(usize, usize)> = seqs
            .iter()
            .enumerate()
            .flat_map(|(s, (t, _))| (0..t.len()).map(move |i| (s, i)))
            .collect();
        let pos0: Vec<usize> = seqs.iter().map(|(_, c)| c.len).collect();
        let n = rows.len();
        let max_pos = seqs.iter().map(|(t, c)| c.len + t.len()).max().unwrap_or(0);
        self.grow_rope(max_pos);
        let h = self.spec.hparams.clone();
        let (d, hd) = (h.n_embd, h.head_dim);
        let q_dim = h.n_head * hd;
        let kv_dim = h.n_head_kv * hd;
        let group = h.n_head / h.n_head_kv;
        let pool = &self.pool;
        // Row ranges taken by one product each: the decode rows together, then each prompt.
        let segments = |lens: &mut dyn Iterator<Item = usize>| {
            let mut segs: Vec<(usize, usize, bool)> = Vec::new();
            let mut r0 = 0;
            for (s, len) in lens.enumerate() {
                match segs.last_mut() {
                    Some(last) if s < per_row && last.2 => last.1 += len,
                    _ => segs.push((r0, r0 + len, s < per_row)),
                }
                r0 += len;
            }
            segs.retain(|&(a, b, _)| b > a);
            segs
        };
        let segs = segments(&mut seqs.iter().map(|(t, _)| t.len()));
        let product = |m: &Matrix<'_>, x: &[f32], out: &mut [f32], segs: &[(usize, usize, bool)]| {
            let rows = segs.last().map_or(0, |s| s.1);
            if rows == 0 {
                return;
            }
            let (cin, cout) = (x.len() / rows, out.len() / rows);
            for &(r0, r1, each) in segs {
                let (x, out) = (&x[r0 * cin..r1 * cin], &mut out[r0 * cout..r1 * cout]);
                if each {
                    m.matmul_each(x, out, pool)
                } else {
                    m.matmul(x, out, pool)
                }
            }
        };
        let matmul = |m: &Matrix<'_>, x: &[f32], out: &mut [f32]| product(m, x, out, &segs);

        // (clock readings only while a trace is on: wasm32 has no clock here)
        let tracing = self.trace.is_some();
        let t_forward = stamp(tracing);
        let mut wait = std::time::Duration::ZERO;
        // (on the disk tier the embedding's rows are read from the file; a tied embedding's
        // streamed bytes are read for the logits, at the end)
        let mut streamed = if self.disk.is_none() {
            stage(&mut self.w.token_embd, &mut self.disk, &mut wait)
        } else {
            0
        };
        let mut x = vec![0f32; n * d];
        for (r, &(s, i)) in rows.iter().enumerate() {
            // (rows read from the file are not counted as streamed: the plan keeps the
            // looked-up embedding on the host, and a token's rows are a few KiB)
            embed_row(
                &self.w.token_embd,
                &mut self.disk,
                seqs[s].0[i] as usize,
                &mut x[r * d..(r + 1) * d],
                &mut 0,
            );
        }
        if self.w.output.is_some() {
            unstage(&mut self.w.token_embd, &mut self.disk);
        }
        if h.embd_scale != 1.0 {
            x.iter_mut().for_each(|a| *a *= h.embd_scale);
        }
        let mut xn = vec![0f32; n * d];
        let mut q = vec![0f32; n * q_dim];
        let mut k = vec![0f32; n * kv_dim];
        let mut v = vec![0f32; n * kv_dim];
        let mut attn = vec![0f32; n * q_dim];
        let mut proj = vec![0f32; n * d];
        // (a mixture-of-experts model has no dense SwiGLU: its experts keep their own buffers)
        let ff = if h.n_expert > 0 { 0 } else { h.n_ff };
        let mut g = vec![0f32; n * ff];
        let mut u = vec![0f32; n * ff];
        let scale = if h.query_scale.is_some() { 1.0 } else { 1.0 / (hd as f32).sqrt() };

        // A weight's streamed bytes are copied in (read from disk, on the disk tier: the reader
        // has been reading them while the products before ran) right before its product and
        // dropped (handed back to the ring) right after it, so the pass holds one streamed
        // weight at a time and a ring of two of the largest keeps reads ahead of compute.
        // (`gate`, `up`, `down` are options: absent in a mixture-of-experts layer, which does
        // not name them here.)
        macro_rules! product_of {
            ($li:expr, $m:ident, $x:expr, $out:expr) => {{
                let l = &mut self.w.layers[$li];
                if let Some(m) = Option::<&mut Matrix<'_>>::from(&mut l.$m) {
                    let (t0, waited, before) = (stamp(tracing), wait, streamed);
                    streamed += stage(m, &mut self.disk, &mut wait);
                    let t1 = stamp(tracing);
                    matmul(m, $x, $out);
                    if let (Some(tr), Some(t0), Some(t1)) = (&mut self.trace, t0, t1) {
                        // (only a product that staged bytes just now has a read of its own)
                        if streamed > before
                            && let Some((a, b)) = take_read(&mut self.disk)
                        {
                            tr.span("disk reads", &m.name, a, b);
                        }
                        if wait > waited {
                            tr.span("disk waits", &m.name, t0, t1);
                        } else if streamed > before {
                            tr.span("copies", &m.name, t0, t1);
                        }
                        tr.span("compute", &m.name, t1, std::time::Instant::now());
                    }
                    unstage(m, &mut self.disk);
                }
            }};
        }
        for li in 0..self.w.layers.len() {
            let t_layer = stamp(tracing);
            rms_norm(&x, &mut xn, &self.w.layers[li].attn_norm, h.rms_eps);
            product_of!(li, wq, &xn, &mut q);
            product_of!(li, wk, &xn, &mut k);
            product_of!(li, wv, &xn, &mut v);
            let l = &self.w.layers[li];
            if let Some([bq, bk, bv]) = &l.bias {
                add_rows(&mut q, bq);
                add_rows(&mut k, bk);
                add_rows(&mut v, bv);
            }
            if let Some([nq, nk]) = &l.qk_norm {
                rms_norm_rows(&mut q, nq, h.rms_eps);
                rms_norm_rows(&mut k, nk, h.rms_eps);
            }
            for (r, &(s, i)) in rows.iter().enumerate() {
                self.apply_rope(li, &mut q[r * q_dim..(r + 1) * q_dim], h.n_head, pos0[s] + i);
                self.apply_rope(li, &mut k[r * kv_dim..(r + 1) * kv_dim], h.n_head_kv, pos0[s] + i);
            }
            // Gemma scales the queries (after rope) instead of the scores, as llama.cpp does.
            if let Some(qs) = h.query_scale {
                q.iter_mut().for_each(|a| *a *= qs);
            }
            let mut r0 = 0;
            for (t, cache) in seqs.iter_mut() {
                let r1 = r0 + t.len();
                cache.k[li].extend(&k[r0 * kv_dim..r1 * kv_dim]);
                cache.v[li].extend(&v[r0 * kv_dim..r1 * kv_dim]);
                r0 = r1;
            }
            // Each sequence's keys and values as f32 (an f16 or q8_0 cache converted once per layer)
            // and how attention rounds for them.
            let kv: Vec<LayerKv<'_>> = seqs
                .iter()
                .map(|(_, c)| (c.k[li].as_f32(), c.v[li].as_f32(), c.k[li].rounding()))
                .collect();
            let kv = &kv;
            let (q, rows, pos0) = (&q, &rows, &pos0);
            let window = self.spec.layers[li].window;
            let softcap = h.attn_softcap;
            // One task per (row, head): scores over positions 0..=pos, softmax, weighted sum.
            self.pool.install(|| {
                attn.par_chunks_mut(hd).enumerate().for_each_init(
                    || (Vec::with_capacity(max_pos), vec![0f32; hd]),
                    |(scores, qbuf): &mut (Vec<f32>, Vec<f32>), (idx, out)| {
                        let (r, head) = (idx / h.n_head, idx % h.n_head);
                        let (s, i) = rows[r];
                        let (kc, vc, round) = (&kv[s].0, &kv[s].1, kv[s].2);
                        let kvh = head / group;
                        round.query(&q[r * q_dim + head * hd..r * q_dim + (head + 1) * hd], qbuf);
                        let qh = &qbuf[..];
                        let len = pos0[s] + i + 1;
                        // sliding window: positions t with pos - t < window (llama.cpp's
                        // LLAMA_SWA_TYPE_STANDARD mask)
                        let first = window.map_or(0, |w| len.saturating_sub(w));
                        scores.clear();
                        let mut max = f32::NEG_INFINITY;
                        for t in first..len {
                            let kt = &kc[t * kv_dim + kvh * hd..t * kv_dim + (kvh + 1) * hd];
                            let mut s = crate::kernels::dot(qh, kt) * scale;
                            if let Some(c) = softcap {
                                s = (s * (1.0 / c)).tanh() * c;
                            }
                            max = max.max(s);
                            scores.push(s);
                        }
                        let mut sum = 0f64;
                        for s in scores.iter_mut() {
                            *s = (*s - max).exp();
                            sum += f64::from(*s);
                        }
                        let inv = (1.0 / sum) as f32;
                        out.fill(0.0);
                        for (t, &p) in (first..len).zip(scores.iter()) {
                            let p = round.weight(p * inv);
                            let vt = &vc[t * kv_dim + kvh * hd..t * kv_dim + (kvh + 1) * hd];
                            crate::kernels::add_scaled(out, p, vt);
                        }
                    },
                )
            });
            product_of!(li, wo, &attn, &mut proj);
            let l = &self.w.layers[li];
            if let Some([pa, _]) = &l.post_norms {
                rms_norm_rows(&mut proj, pa, h.rms_eps);
            }
            for (a, b) in x.iter_mut().zip(&proj) {
                *a += b;
            }
            rms_norm(&x, &mut xn, &l.ffn_norm, h.rms_eps);
            if let Some(moe) = self.w.layers[li].moe.as_mut() {
                // The router is staged like the dense weights; each routed expert is staged by
                // `Moe::forward` as it runs (a mixture of experts is never on the disk tier: its
                // reads depend on the router, which the reader's fixed order cannot know).
                streamed += stage(&mut moe.router, &mut self.disk, &mut wait);
                let (bytes, picked) = moe.forward(&xn, &mut proj, &|m, x, out| matmul(m, x, out), pool);
                unstage(&mut moe.router, &mut self.disk);
                streamed += bytes;
                self.routed_last[li] = picked;
            } else {
                product_of!(li, gate, &xn, &mut g);
                product_of!(li, up, &xn, &mut u);
                match h.ffn_act {
                    Activation::Silu => {
                        for (a, b) in g.iter_mut().zip(&u) {
                            *a = *a / (1.0 + (-*a).exp()) * b;
                        }
                    }
                    Activation::GeluTanh => geglu(&mut g, &u),
                }
                product_of!(li, down, &g, &mut proj);
            }
            if let Some([_, pf]) = &self.w.layers[li].post_norms {
                rms_norm_rows(&mut proj, pf, h.rms_eps);
            }
            for (a, b) in x.iter_mut().zip(&proj) {
                *a += b;
            }
            if let (Some(tr), Some(t)) = (&mut self.trace, t_layer) {
                tr.span("layers", &format!("blk.{li}"), t, std::time::Instant::now());
            }
        }
        for (t, cache) in seqs.iter_mut() {
            cache.len += t.len();
        }

        let picked: Vec<usize> = (0..n).filter(|&r| want(rows[r].0, rows[r].1)).collect();
        let mut xs = vec![0f32; picked.len() * d];
        for (j, &r) in picked.iter().enumerate() {
            xs[j * d..(j + 1) * d].copy_from_slice(&x[r * d..(r + 1) * d]);
        }
        let mut xo = vec![0f32; xs.len()];
        rms_norm(&xs, &mut xo, &self.w.output_norm, h.rms_eps);
        let before_out = streamed;
        match self.w.output.as_mut() {
            Some(o) => streamed += stage(o, &mut self.disk, &mut wait),
            None if self.disk.is_some() => streamed += stage(&mut self.w.token_embd, &mut self.disk, &mut wait),
            None => {}
        }
        let out = self.w.output();
        let mut logits = vec![0f32; picked.len() * out.rows];
        let picked_segs = segments(&mut (0..seqs.len()).map(|s| picked.iter().filter(|&&r| rows[r].0 == s).count()));
        let t_out = stamp(tracing);
        product(out, &xo, &mut logits, &picked_segs);
        if let (Some(tr), Some(t_out), Some(t_forward)) = (&mut self.trace, t_out, t_forward) {
            let end = std::time::Instant::now();
            if streamed > before_out
                && let Some((a, b)) = take_read(&mut self.disk)
            {
                tr.span("disk reads", &out.name, a, b);
            }
            tr.span("compute", &out.name, t_out, end);
            tr.span("forward passes", &format!("{n} token{}", if n == 1 { "" } else { "s" }), t_forward, end);
            tr.forward += 1;
        }
        if let Some(c) = h.final_softcap {
            logits.iter_mut().for_each(|l| *l = (*l * (1.0 / c)).tanh() * c);
        }
        if let Some(o) = self.w.output.as_mut() {
            unstage(o, &mut self.disk);
        }
        unstage(&mut self.w.token_embd, &mut self.disk);
        self.streamed_last = streamed;
        self.copy_last = if self.disk.is_some() {
            wait
        } else {
            self.w.matrices().iter().map(|m| m.staged_in).sum()
        };
        logits
            .chunks(self.spec.hparams.n_vocab.max(1))
            .map(<[f32]>::to_vec)
            .collect()
    }
}

/// The RMSNorm scale of a row: `1 / sqrt(mean(x²) + eps)`, the sum of squares in f64, as ggml.
fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let sum: f64 = x.iter().map(|&a| f64::from(a * a)).sum();
    let mean = (sum / x.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// `out[i] = x[i] / sqrt(mean(x[i]²) + eps) · w`, row by row (rows of `w.len()`).
fn rms_norm(x: &[f32], out: &mut [f32], w: &[f32], eps: f32) {
    let d = w.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let s = rms_scale(xr, eps);
        for ((o, &a), &wi) in or.iter_mut().zip(xr).zip(w) {
            *o = a * s * wi;
        }
    }
}

/// [`rms_norm`] in place, over rows of `w.len()` (qwen3's per-head norm of queries and keys).
fn rms_norm_rows(x: &mut [f32], w: &[f32], eps: f32) {
    for xr in x.chunks_exact_mut(w.len()) {
        let s = rms_scale(xr, eps);
        for (a, &wi) in xr.iter_mut().zip(w) {
            *a = *a * s * wi;
        }
    }
}

fn add_rows(x: &mut [f32], b: &[f32]) {
    for row in x.chunks_exact_mut(b.len()) {
        for (a, c) in row.iter_mut().zip(b) {
            *a += c;
        }
    }
}

/// GELU (tanh approximation) of `x` in f32, as ggml's `ggml_gelu_f32`.
fn gelu_f32(x: f32) -> f32 {
    const GELU_COEF_A: f32 = 0.044715;
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    // `1 + a·x·x` fused as the prebuilt llama.cpp's compiler contracts it (its haswell build's
    // table is this one bit for bit; without the fused step one of the 37376 entries in
    // (-10, 10) differs)
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (GELU_COEF_A * x).mul_add(x, 1.0)).tanh())
}

/// GELU of every f16 value, rounded to f16 (ggml's `ggml_table_gelu_f16`), as f32.
fn gelu_table() -> &'static [f32] {
    static TABLE: std::sync::OnceLock<Vec<f32>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|i| half::f16::from_f32(gelu_f32(half::f16::from_bits(i).to_f32())).to_f32())
            .collect()
    })
}

/// `g[i] = gelu(g[i]) · u[i]`, as llama.cpp's CPU `ggml_vec_geglu_f32` (built with
/// `GGML_GELU_FP16`): 0 at or below -10, the identity at or above 10, in between the f16 table
/// at the input rounded to f16.
fn geglu(g: &mut [f32], u: &[f32]) {
    let table = gelu_table();
    for (a, &b) in g.iter_mut().zip(u) {
        let x = *a;
        *a = if x <= -10.0 {
            0.0
        } else if x >= 10.0 {
            x * b
        } else {
            table[half::f16::from_f32(x).to_bits() as usize] * b
        };
    }
}

/// Binding without a model file: the weights a host (the browser) hands in as bytes.
impl Weights<'static> {
    /// [`Weights::bind`] over `catalog`'s tensors, each matrix and vector made by `load` (which
    /// reads the tensor's resident bytes from the host and says how the rest is streamed): the
    /// same tensors, in the same order, with the same checks and errors ([`Weights::bind_from`]).
    /// Fused tensors (phi3's `attn_qkv`/`ffn_up` parts) are refused, naming the tensor.
    pub(crate) fn bind_hosted(
        catalog: &tensorlane_core::formats::Catalog,
        spec: &Spec,
        load: &mut dyn FnMut(&tensorlane_core::formats::TensorInfo) -> Result<Matrix<'static>>,
    ) -> Result<Weights<'static>> {
        Weights::bind_from(&mut Hosted { catalog, load }, spec)
    }

    /// The first failed read of a streamed weight since the last call (the pass that saw it
    /// computed with zeros in its place, so its results are to be dropped), with the tensor.
    pub(crate) fn take_read_error(&mut self) -> Option<String> {
        let mut first = None;
        for m in self.matrices_mut() {
            if let Some(e) = m.take_error() {
                first.get_or_insert_with(|| format!("reading the streamed bytes of {}: {e}", m.name));
            }
        }
        first
    }
}

impl Cpu<'static> {
    /// See [`Weights::take_read_error`].
    pub(crate) fn take_read_error(&mut self) -> Option<String> {
        self.w.take_read_error()
    }
}
