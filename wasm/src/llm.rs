//! Text generation's host side in wasm (`tensorlane-llm` built without its `native` feature):
//! from a model a [`FormatSession`] has opened, the architecture ([`tensorlane_llm::arch::Spec`]),
//! the weights the forward pass reads (name, type, shape, byte range in the file), the offload
//! plan for a budget (the same compiler, checker and error text as `tensorlane run --budget`) and
//! the tokenizer. The browser's WebGPU executor (`js/run-worker.js`) runs the forward pass with
//! them.

use serde_json::{Value as J, json};
use tensorlane_core::formats::{Catalog, ElementType, Storage, TensorInfo};
use tensorlane_llm::Policy;
use tensorlane_llm::arch::{RopeStyle, Spec, TensorSpec};
use tensorlane_llm::plan::{self, Budgeted};
use tensorlane_llm::tokenizer::Tokenizer;
use tensorlane_offload::Access;
use wasm_bindgen::prelude::*;

use crate::FormatSession;

fn js_err(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

/// A model prepared for generation: its architecture, weights, plan compiler and tokenizer.
#[wasm_bindgen(js_name = LlmModel)]
pub struct LlmModel {
    name: String,
    spec: Spec,
    tokenizer: Tokenizer,
    /// `(name, rows, cols, stored bytes)` of each matrix, in the session's order (embedding, per
    /// layer q, k, v, o, gate, up, down, the output unless tied).
    mats: Vec<(String, usize, usize, u64)>,
    /// Bytes of the f32 vectors (norms, biases, rope factors).
    vector_bytes: u64,
    /// The tensors the forward pass reads, as JSON.
    tensors: J,
    /// The header (tensor names, types, shapes, byte ranges): what the CPU executor binds.
    catalog: Catalog,
    /// Why the WebGPU kernels cannot run this model (a weight type without a WGSL kernel), if
    /// they cannot: the wasm CPU executor takes every type the native CPU executor takes.
    webgpu_error: Option<String>,
}

/// The tensor `spec` names, shape checked (`None` when absent).
fn find<'c>(catalog: &'c Catalog, spec: &TensorSpec) -> Result<Option<&'c TensorInfo>, tensorlane_llm::Error> {
    match catalog.get(&spec.name) {
        None => Ok(None),
        Some(t) if t.shape == spec.shape => Ok(Some(t)),
        Some(t) => Err(tensorlane_llm::Error::TensorShape {
            name: spec.name.clone(),
            expected: spec.shape.clone(),
            found: t.shape.clone(),
        }),
    }
}

fn missing(spec: &TensorSpec) -> tensorlane_llm::Error {
    tensorlane_llm::Error::MissingTensor {
        name: spec.name.clone(),
        expected: spec.shape.clone(),
    }
}

/// The matmul kernels' kind code (`llm/src/wgsl/matmul.wgsl`: 0 F32, 1 F16, 2 BF16, 3 Q8_0,
/// 4 Q4_0, 5 Q4_K, 6 Q6_K; `None` for another type, which only the embedding may have: its rows
/// are looked up on the host) and `(elements, bytes)` of one block.
fn kind_of(t: &TensorInfo) -> Option<(Option<u32>, usize, usize)> {
    use tensorlane_core::dtype::DType;
    use tensorlane_core::formats::ggml::{self, GgmlType};
    Some(match t.ty {
        ElementType::Dense(DType::F32) | ElementType::Ggml(GgmlType(0)) => (Some(0), 1, 4),
        ElementType::Dense(DType::F16) | ElementType::Ggml(GgmlType(1)) => (Some(1), 1, 2),
        ElementType::Dense(DType::BF16) | ElementType::Ggml(GgmlType(30)) => (Some(2), 1, 2),
        ElementType::Ggml(GgmlType(8)) => (Some(3), 32, 34),
        ElementType::Ggml(GgmlType(2)) => (Some(4), 32, 18),
        ElementType::Ggml(GgmlType(12)) => (Some(5), 256, 144),
        ElementType::Ggml(GgmlType(14)) => (Some(6), 256, 210),
        ElementType::Ggml(g) if g.is_quantized() && ggml::can_dequantize(g) => {
            (None, g.block_size()? as usize, g.type_size()? as usize)
        }
        _ => return None,
    })
}

/// `(rows, cols, row bytes, kernel kind, file offset, stored bytes)` of a 2-D (or 1-D) weight,
/// or why it cannot be computed with on WebGPU (`host`: the rows are looked up on the host, so
/// a type without a kernel but with a dequantizer is accepted).
fn matrix(t: &TensorInfo, host: bool) -> Result<(usize, usize, usize, Option<u32>, u64, u64), tensorlane_llm::Error> {
    let unsupported = || tensorlane_llm::Error::TensorType {
        name: t.name.clone(),
        ty: format!(
            "{} on the WebGPU device (its kernels take F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K)",
            t.ty.name()
        ),
    };
    let (kind, block, block_bytes) = kind_of(t).ok_or_else(unsupported)?;
    if kind.is_none() && !host {
        return Err(unsupported());
    }
    let (rows, cols) = match t.shape[..] {
        [r, c] => (r as usize, c as usize),
        [c] => (1, c as usize),
        _ => {
            return Err(tensorlane_llm::Error::TensorShape {
                name: t.name.clone(),
                expected: vec![0, 0],
                found: t.shape.clone(),
            });
        }
    };
    if !cols.is_multiple_of(block) {
        return Err(tensorlane_llm::Error::TensorType {
            name: t.name.clone(),
            ty: format!(
                "{} with rows of {cols} elements (not whole blocks of {block})",
                t.ty.name()
            ),
        });
    }
    let row_bytes = cols / block * block_bytes;
    let (offset, len) = match t.storage {
        Storage::Range { source: 0, offset, len } => (offset, len),
        _ => {
            return Err(tensorlane_llm::Error::UnsupportedFormat(format!(
                "tensor {} is not one plain byte range of the opened file (split or compressed storage), \
                 which the browser runner streams from",
                t.name
            )));
        }
    };
    if len != (rows * row_bytes) as u64 {
        return Err(tensorlane_llm::Error::TensorType {
            name: t.name.clone(),
            ty: format!(
                "{} with {len} stored bytes for {rows} rows of {row_bytes} bytes",
                t.ty.name()
            ),
        });
    }
    Ok((rows, cols, row_bytes, kind, offset, len))
}

fn tensor_json(role: &str, layer: Option<usize>, t: &TensorInfo, host: bool) -> Result<J, tensorlane_llm::Error> {
    let (rows, cols, row_bytes, kind, offset, bytes) = matrix(t, host)?;
    let ggml = match t.ty {
        ElementType::Ggml(g) => Some(g.0),
        _ => None,
    };
    Ok(json!({
        "role": role, "layer": layer, "name": t.name, "dtype": t.ty.name(), "kind": kind, "ggml": ggml,
        "shape": t.shape, "rows": rows, "cols": cols, "row_bytes": row_bytes,
        "offset": offset, "bytes": bytes,
    }))
}

fn policy_of(name: &str) -> Result<Policy, JsError> {
    Policy::from_name(if name.is_empty() { "scheduler" } else { name }).ok_or_else(|| {
        JsError::new(&format!(
            "unknown offload policy '{name}' (one of: {})",
            Policy::ALL.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
        ))
    })
}

impl LlmModel {
    fn new(name: &str, catalog: &Catalog) -> Result<LlmModel, tensorlane_llm::Error> {
        if catalog.format.name() != "gguf" {
            return Err(tensorlane_llm::Error::UnsupportedFormat(format!(
                "{} models do not run in the browser yet (GGUF does)",
                catalog.format.name()
            )));
        }
        let spec = Spec::from_catalog(catalog)?;
        if spec.hparams.n_expert > 0 {
            return Err(tensorlane_llm::Error::UnsupportedFormat(format!(
                "{} is a mixture-of-experts model ({} experts, {} per token): the browser's WebGPU runner does \
                 not run experts yet (the native cpu executor does)",
                spec.hparams.family.name(),
                spec.hparams.n_expert,
                spec.hparams.n_expert_used
            )));
        }
        if spec.hparams.family == tensorlane_llm::arch::Family::Phi3 {
            return Err(tensorlane_llm::Error::Device(
                "phi3 does not run on the browser (WebGPU) device yet: its fused attn_qkv and ffn_up \
                 tensors are split only by the native executors (cpu, wgpu, cuda)"
                    .into(),
            ));
        }
        let tokenizer = Tokenizer::from_catalog(catalog)?;
        if tokenizer.len() > spec.hparams.n_vocab {
            return Err(tensorlane_llm::Error::Metadata {
                key: "tokenizer.ggml.tokens".into(),
                message: format!(
                    "{} tokens but token_embd.weight has {} rows",
                    tokenizer.len(),
                    spec.hparams.n_vocab
                ),
            });
        }
        let need = |s: &TensorSpec| find(catalog, s)?.ok_or_else(|| missing(s));
        let mut tensors = Vec::new();
        let mut mats = Vec::new();
        let mut vector_elems = 0u64;
        let tied = find(catalog, &spec.output)?.is_none();
        let mut webgpu_error = None;
        let mut mat = |role: &str, layer: Option<usize>, t: &TensorInfo, tensors: &mut Vec<J>| {
            // Any type with a dequantizer here (the CPU executor's); the WebGPU one is noted.
            let j = tensor_json(role, layer, t, true)?;
            if let Err(e) = matrix(t, role == "token_embd" && !tied) {
                webgpu_error.get_or_insert(e.to_string());
            }
            mats.push((
                t.name.clone(),
                j["rows"].as_u64().unwrap_or(0) as usize,
                j["cols"].as_u64().unwrap_or(0) as usize,
                j["bytes"].as_u64().unwrap_or(0),
            ));
            tensors.push(j);
            Ok::<(), tensorlane_llm::Error>(())
        };
        let mut vector = |role: &str, layer: Option<usize>, t: &TensorInfo, tensors: &mut Vec<J>| {
            let j = tensor_json(role, layer, t, true)?;
            vector_elems += t.numel().unwrap_or(0);
            tensors.push(j);
            Ok::<(), tensorlane_llm::Error>(())
        };
        mat("token_embd", None, need(&spec.token_embd)?, &mut tensors)?;
        for (l, ls) in spec.layers.iter().enumerate() {
            let l = Some(l);
            vector("attn_norm", l, need(&ls.attn_norm)?, &mut tensors)?;
            mat("wq", l, need(&ls.wq)?, &mut tensors)?;
            mat("wk", l, need(&ls.wk)?, &mut tensors)?;
            mat("wv", l, need(&ls.wv)?, &mut tensors)?;
            let b: Vec<Option<&TensorInfo>> = ls.biases.iter().map(|s| find(catalog, s)).collect::<Result<_, _>>()?;
            match (b[0], b[1], b[2]) {
                (Some(q), Some(k), Some(v)) => {
                    vector("bq", l, q, &mut tensors)?;
                    vector("bk", l, k, &mut tensors)?;
                    vector("bv", l, v, &mut tensors)?;
                }
                (None, None, None) if !ls.biases_required => {}
                _ => {
                    let which = ls.biases.iter().zip(&b).find(|(_, v)| v.is_none()).map(|(s, _)| s);
                    return Err(missing(which.unwrap_or(&ls.biases[0])));
                }
            }
            if let Some([nq, nk]) = &ls.qk_norm {
                vector("q_norm", l, need(nq)?, &mut tensors)?;
                vector("k_norm", l, need(nk)?, &mut tensors)?;
            }
            mat("wo", l, need(&ls.wo)?, &mut tensors)?;
            vector("ffn_norm", l, need(&ls.ffn_norm)?, &mut tensors)?;
            mat("gate", l, need(&ls.gate)?, &mut tensors)?;
            mat("up", l, need(&ls.up)?, &mut tensors)?;
            mat("down", l, need(&ls.down)?, &mut tensors)?;
        }
        if let Some(t) = find(catalog, &spec.output)? {
            mat("output", None, t, &mut tensors)?;
        }
        vector("output_norm", None, need(&spec.output_norm)?, &mut tensors)?;
        if let Some(t) = find(catalog, &spec.rope_freqs)? {
            vector("rope_freqs", None, t, &mut tensors)?;
        }
        Ok(LlmModel {
            name: name.to_string(),
            spec,
            tokenizer,
            mats,
            vector_bytes: 4 * vector_elems,
            tensors: J::Array(tensors),
            catalog: catalog.clone(),
            webgpu_error,
        })
    }

    fn described(&self) -> Vec<(&str, usize, usize, u64)> {
        self.mats.iter().map(|(n, r, c, b)| (n.as_str(), *r, *c, *b)).collect()
    }

    fn context(&self, context: u32) -> Result<usize, JsError> {
        match if context == 0 {
            self.spec.hparams.n_ctx_train.min(4096)
        } else {
            context as usize
        } {
            0 => Err(JsError::new("the context must hold at least one position")),
            c => Ok(c),
        }
    }

    /// The KV cache type `name` names (absent or `""`: f32, the WebGPU runner's), or why this
    /// model cannot keep it.
    fn cache_of(&self, name: Option<&str>) -> Result<plan::CacheType, JsError> {
        let cache = match name {
            None | Some("") => plan::CacheType::F32,
            Some(n) => plan::CacheType::parse(n).map_err(|e| JsError::new(&format!("cache type {e}")))?,
        };
        cache.check(self.spec.hparams.head_dim).map_err(js_err)?;
        Ok(cache)
    }
}

fn plan_json(b: &Budgeted) -> J {
    let p = &b.plan;
    let tensors: Vec<J> = p
        .tensors
        .iter()
        .map(|t| {
            json!({"name": t.name, "bytes": t.bytes, "resident_bytes": t.resident_bytes,
                   "streamed_bytes": t.streamed_bytes, "gather": t.access == Access::Gather})
        })
        .collect();
    let chunks: Vec<J> = p
        .chunks
        .iter()
        .map(|c| {
            json!({"tensor": p.tensors.get(c.tensor as usize).map(|t| t.name.as_str()),
                   "tensor_offset": c.tensor_offset, "bytes": c.bytes, "slot": c.dev_offset - p.ring.base})
        })
        .collect();
    json!({
        "policy": p.policy.name(),
        "budget_bytes": p.budget_bytes + b.working_set,
        "working_set_bytes": b.working_set,
        "arena_bytes": p.arena_bytes,
        // As `tensorlane run` reports it: every weight byte not streamed (the embedding, looked
        // up on the host, included).
        "resident_bytes": p.tensors.iter().map(|t| t.bytes).sum::<u64>() - p.streamed_bytes(),
        "device_resident_bytes": p.resident_bytes(),
        "streamed_bytes": p.streamed_bytes(),
        "ring_bytes": p.ring.len,
        "tensors": tensors,
        "chunks": chunks,
        "sim_forward_s": b.sim.forward_s,
        "sim_floor_s": b.sim.floor_s,
    })
}

#[wasm_bindgen(js_class = LlmModel)]
impl LlmModel {
    /// Prepares the model `session` has opened (`open()` returned its catalog) for generation;
    /// `name` names it in plans (its file name). Errors say what is unsupported or missing: the
    /// architecture (with the supported list), a metadata key, a tensor (with its expected shape),
    /// a weight type the WebGPU kernels lack.
    #[wasm_bindgen(constructor)]
    pub fn new_js(session: &FormatSession, name: &str) -> Result<LlmModel, JsError> {
        let catalog = session
            .inner
            .opened_catalog()
            .ok_or_else(|| JsError::new("the model is not open yet (call open() until it returns the catalog)"))?;
        LlmModel::new(name, catalog).map_err(js_err)
    }

    /// The architecture as JSON: `{family, n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff,
    /// n_vocab, n_ctx_train, rms_eps, rope_base, rope_freq_scale, rope_dim, rope_style}`.
    pub fn spec(&self) -> String {
        let h = &self.spec.hparams;
        json!({
            "family": h.family.name(), "n_layer": h.n_layer, "n_embd": h.n_embd, "n_head": h.n_head,
            "n_head_kv": h.n_head_kv, "head_dim": h.head_dim, "n_ff": h.n_ff, "n_vocab": h.n_vocab,
            "n_ctx_train": h.n_ctx_train, "rms_eps": h.rms_eps, "rope_base": h.rope_base,
            "rope_freq_scale": h.rope_freq_scale, "rope_dim": h.rope_dim,
            "rope_style": match h.rope_style { RopeStyle::Adjacent => "adjacent", RopeStyle::Halves => "halves" },
            "tied_output": !self.mats.iter().any(|m| m.0 == self.spec.output.name),
            "vector_bytes": self.vector_bytes,
        })
        .to_string()
    }

    /// The tensors the forward pass reads, as a JSON array of `{role, layer, name, dtype, kind,
    /// shape, rows, cols, row_bytes, offset, bytes}` (`offset`/`bytes`: the stored byte range in
    /// the file; `kind`: the matmul kernel's type code).
    pub fn tensors(&self) -> String {
        self.tensors.to_string()
    }

    /// Weight bytes of the matrices (what a budget is weighed against).
    #[wasm_bindgen(js_name = weightBytes)]
    pub fn weight_bytes(&self) -> f64 {
        self.mats.iter().map(|m| m.3).sum::<u64>() as f64
    }

    /// The offload plan for `budget` device bytes (working set included), a KV cache of
    /// `context` positions (0: the model's, at most 4096) and `policy` (`""`: scheduler), as JSON
    /// (`resident_bytes`, `streamed_bytes` per forward, `ring_bytes`, per tensor resident and
    /// streamed bytes, the chunks in streaming order with their ring slot). A budget that is too
    /// small is an error naming the smallest one that works, as `tensorlane run --budget` says it.
    ///
    /// `cache_type`: how the KV cache keeps keys and values, `f32` (absent: the WebGPU
    /// runner's), `f16` (the wasm CPU executor's default, as `tensorlane run`'s) or `q8_0`.
    pub fn plan(&self, budget: f64, context: u32, policy: &str, cache_type: Option<String>) -> Result<String, JsError> {
        let policy = policy_of(policy)?;
        let context = self.context(context)?;
        if !(budget.is_finite() && budget >= 0.0) {
            return Err(JsError::new(&format!("budget {budget}: not a number of bytes")));
        }
        let b = plan::compile_described(
            &self.name,
            &self.spec,
            &self.described(),
            self.vector_bytes,
            budget as u64,
            context,
            self.cache_of(cache_type.as_deref())?,
            policy,
        )
        .map_err(js_err)?;
        Ok(plan_json(&b).to_string())
    }

    /// The smallest budget `plan` accepts for `context` and `policy` (and `cache_type`, as
    /// `plan` takes it), or `undefined` when none.
    #[wasm_bindgen(js_name = minimumBudget)]
    pub fn minimum_budget(&self, context: u32, policy: &str, cache_type: Option<String>) -> Result<Option<f64>, JsError> {
        let policy = policy_of(policy)?;
        let context = self.context(context)?;
        Ok(plan::minimum_described(
            &self.name,
            &self.spec,
            &self.described(),
            self.vector_bytes,
            context,
            self.cache_of(cache_type.as_deref())?,
            policy,
        )
        .map(|b| b as f64))
    }

    /// Device bytes besides the weights for `context` positions (KV cache, vectors, activations;
    /// `cache_type` as `plan` takes it).
    #[wasm_bindgen(js_name = workingSet)]
    pub fn working_set(&self, context: u32, cache_type: Option<String>) -> Result<f64, JsError> {
        let cache = self.cache_of(cache_type.as_deref())?;
        Ok(plan::working_set(&self.spec, self.context(context)?, self.vector_bytes, cache) as f64)
    }

    /// Why the WebGPU kernels cannot run this model (a weight type without a WGSL kernel, named
    /// with its tensor), or `undefined` when they can.
    #[wasm_bindgen(js_name = webgpuError)]
    pub fn webgpu_error(&self) -> Option<String> {
        self.webgpu_error.clone()
    }

    /// The rope table of `context` positions as the native executors compute it (ggml's
    /// rope_cache_init, in f32): `(cos, sin)` per position and pair, with the model's frequency
    /// factors `freqs` (`rope_freqs.weight`) when it has them.
    /// Refused (the error names the family and the runner) for what the WebGPU runner does not
    /// compute yet ([`Spec::beyond_device_executors`]): it is what the runner uploads first.
    #[wasm_bindgen(js_name = ropeTable)]
    pub fn rope_table(&self, context: u32, freqs: Option<Vec<f32>>) -> Result<Vec<f32>, JsError> {
        if let Some(why) = self.device_refusal(context) {
            return Err(JsError::new(&why));
        }
        self.spec
            .rope_table(context as usize, freqs.as_deref())
            .map_err(|e| JsError::new(&e.to_string()))
    }

    /// Why the browser's WebGPU runner cannot run this model at `context` positions (Gemma's
    /// layout, a sliding window narrower than the context: [`Spec::beyond_device_executors`]),
    /// or `None` when it can. The CPU runtime (`tensorlane run`) runs them.
    #[wasm_bindgen(js_name = deviceRefusal)]
    pub fn device_refusal(&self, context: u32) -> Option<String> {
        self.spec
            .beyond_device_executors(context as usize)
            .map(|why| format!("the browser's WebGPU runner: {why}: not computed by this runner yet"))
    }

    /// Token ids of `text` (with the BOS token first when `add_bos` and the vocabulary has one).
    pub fn encode(&self, text: &str, add_bos: bool) -> Vec<u32> {
        self.tokenizer.encode(text, add_bos)
    }

    /// The text of `ids` (the BOS token and control tokens dropped, as `tensorlane run` prints).
    pub fn decode(&self, ids: &[u32]) -> String {
        self.tokenizer.decode(ids)
    }

    /// The bytes of token `id` (a piece may be part of a UTF-8 character).
    pub fn piece(&self, id: u32) -> Vec<u8> {
        self.tokenizer.piece(id)
    }

    /// Whether `id` ends generation (EOS, EOT and the vocabulary's other end-of-generation ids).
    #[wasm_bindgen(js_name = isEog)]
    pub fn is_eog(&self, id: u32) -> bool {
        self.tokenizer.is_eog(id)
    }

    /// The vocabulary's size.
    #[wasm_bindgen(js_name = vocabSize)]
    pub fn vocab_size(&self) -> u32 {
        self.tokenizer.len() as u32
    }
}

/// `tensorlane-llm`'s sampler (greedy, temperature, top-k, top-p, seeded), so a browser run
/// picks the tokens `tensorlane run` picks from the same logits.
#[wasm_bindgen(js_name = LlmSampler)]
pub struct LlmSampler {
    inner: tensorlane_llm::Sampler,
}

#[wasm_bindgen(js_class = LlmSampler)]
impl LlmSampler {
    /// A sampler: `temperature` (0: greedy), `top_k` (0: no cut), `top_p` (1: no cut), `seed`.
    /// Out-of-range parameters are an error naming them.
    #[wasm_bindgen(constructor)]
    pub fn new(temperature: f32, top_k: u32, top_p: f32, seed: f64) -> Result<LlmSampler, JsError> {
        let params = tensorlane_llm::Sampling {
            temperature,
            top_k: top_k as usize,
            top_p,
            seed: seed as u64,
            stop_at_eog: true,
            ..tensorlane_llm::Sampling::default()
        };
        params.check().map_err(js_err)?;
        Ok(LlmSampler {
            inner: params.sampler(),
        })
    }

    /// The next token id from one position's `logits` (advances the random state).
    pub fn pick(&mut self, logits: &[f32]) -> Result<u32, JsError> {
        self.inner.pick(logits).map_err(js_err)
    }
}


thread_local! {
    /// The reader of the forward pass under way ([`LlmCpu::forward`]'s `read`).
    static READER: std::cell::RefCell<Option<js_sys::Function>> = const { std::cell::RefCell::new(None) };
}

/// [`tensorlane_llm::hosted::ReadAt`] over the JavaScript reader of the pass under way: calls
/// `read(offset, len)`, which must return a `Uint8Array` of `len` bytes synchronously.
fn read_at(offset: u64, out: &mut [u8]) -> Result<(), String> {
    READER.with(|r| {
        let r = r.borrow();
        let f = r
            .as_ref()
            .ok_or("no reader was given to forward() for the streamed weights (pass read(offset, len))")?;
        let v = f
            .call2(&JsValue::NULL, &JsValue::from_f64(offset as f64), &JsValue::from_f64(out.len() as f64))
            .map_err(|e| {
                e.dyn_ref::<js_sys::Error>()
                    .map(|e| String::from(e.message()))
                    .or_else(|| e.as_string())
                    .unwrap_or_else(|| "the reader threw".into())
            })?;
        let a = v
            .dyn_into::<js_sys::Uint8Array>()
            .map_err(|_| format!("the reader returned no Uint8Array for {} bytes at {offset}", out.len()))?;
        if a.length() as usize != out.len() {
            return Err(format!(
                "the reader returned {} bytes for the {} asked for at {offset}",
                a.length(),
                out.len()
            ));
        }
        a.copy_to(out);
        Ok(())
    })
}

/// The weights of an [`LlmCpu`] as they are read in: `add` each tensor's resident bytes, then
/// `open`.
#[wasm_bindgen(js_name = LlmCpuLoader)]
#[derive(Default)]
pub struct LlmCpuLoader {
    bytes: std::collections::HashMap<String, Vec<u8>>,
}

#[wasm_bindgen(js_class = LlmCpuLoader)]
impl LlmCpuLoader {
    /// An empty loader.
    #[wasm_bindgen(constructor)]
    pub fn new() -> LlmCpuLoader {
        LlmCpuLoader::default()
    }

    /// Hands in tensor `name`'s resident bytes (the whole tensor, or under a plan its
    /// `resident_bytes` prefix: [`LlmModel::cpu_reads`] lists them), copied into wasm memory.
    pub fn add(&mut self, name: &str, bytes: Vec<u8>) {
        self.bytes.insert(name.to_string(), bytes);
    }
}

/// The native CPU executor (`tensorlane-llm`'s, the code `tensorlane run` runs) in wasm: one
/// thread (wasm threads need a nightly `-Z build-std` with atomics and cross-origin isolated
/// pages), simd128 kernels. Resident weights live in wasm memory; the bytes a plan streams are
/// read through `forward`'s reader at each pass, a weight at a time in the plan's order.
#[wasm_bindgen(js_name = LlmCpu)]
pub struct LlmCpu {
    inner: tensorlane_llm::hosted::HostedSession,
}

/// Each streamed matrix's resident bytes under `plan` (JSON of [`LlmModel::plan`]; empty:
/// none streamed), as `tensorlane run --budget` keeps them: the plan's dense tensors.
fn resident_of(plan: &str) -> Result<std::collections::HashMap<String, u64>, JsError> {
    if plan.is_empty() {
        return Ok(Default::default());
    }
    let j: J = serde_json::from_str(plan).map_err(|e| JsError::new(&format!("the plan is not JSON: {e}")))?;
    let mut out = std::collections::HashMap::new();
    for t in j["tensors"].as_array().ok_or_else(|| JsError::new("the plan has no tensors array"))? {
        if t["gather"].as_bool() == Some(true) {
            continue;
        }
        if let (Some(n), Some(r)) = (t["name"].as_str(), t["resident_bytes"].as_u64()) {
            out.insert(n.to_string(), r);
        }
    }
    Ok(out)
}

#[wasm_bindgen(js_class = LlmModel)]
impl LlmModel {
    /// The bytes the CPU executor needs read in before it opens, under `plan` (JSON of
    /// [`LlmModel::plan`], or `""`: everything resident): a JSON array of `{name, offset, len}`
    /// in the order the session binds them (each vector and matrix whole, a streamed matrix its
    /// resident prefix).
    #[wasm_bindgen(js_name = cpuReads)]
    pub fn cpu_reads(&self, plan: &str) -> Result<String, JsError> {
        let resident = resident_of(plan)?;
        let mut reads = Vec::new();
        for t in self.tensors.as_array().into_iter().flatten() {
            let (Some(name), Some(offset), Some(bytes)) = (t["name"].as_str(), t["offset"].as_u64(), t["bytes"].as_u64())
            else {
                continue;
            };
            let len = resident.get(name).map_or(bytes, |&r| r.min(bytes));
            reads.push(json!({"name": name, "offset": offset, "len": len}));
        }
        Ok(J::Array(reads).to_string())
    }

    /// Opens the CPU executor over the bytes `loader` holds (emptied), with the streamed bytes of
    /// `plan` (`""`: none) read at each pass; `context` KV positions (0: the model's, at most
    /// 4096); `cache_type`: how keys and values are kept, `f16` (as `tensorlane run` keeps them on
    /// the CPU), `f32` or `q8_0`. Errors name the tensor that was not handed in or has the wrong
    /// length.
    #[wasm_bindgen(js_name = openCpu)]
    pub fn open_cpu(&self, loader: &mut LlmCpuLoader, plan: &str, context: u32, cache_type: &str) -> Result<LlmCpu, JsError> {
        let resident = resident_of(plan)?;
        let context = self.context(context)?;
        let cache = self.cache_of(Some(cache_type))?;
        let inner = tensorlane_llm::hosted::HostedSession::open(
            &self.catalog,
            &|name| resident.get(name).copied(),
            &mut |name, offset, len| {
                loader.bytes.remove(name).ok_or_else(|| {
                    tensorlane_llm::Error::Options(format!(
                        "tensor {name}: its {len} bytes at offset {offset} were not handed in (LlmCpuLoader.add, as cpuReads lists)"
                    ))
                })
            },
            read_at,
            context,
            cache,
        )
        .map_err(js_err)?;
        Ok(LlmCpu { inner })
    }
}

#[wasm_bindgen(js_class = LlmCpu)]
impl LlmCpu {
    /// Runs `tokens` at the next positions and returns the last one's logits. `read(offset,
    /// len)` must return the `len` bytes at `offset` of the model file as a `Uint8Array`,
    /// synchronously (a Worker's `FileReaderSync` or synchronous Range request); it is called
    /// only when the plan streams weights. An id outside the vocabulary, a full context or a
    /// failed read is an error (the cache then is as before the call).
    pub fn forward(&mut self, tokens: &[u32], read: Option<js_sys::Function>) -> Result<Vec<f32>, JsError> {
        READER.with(|r| *r.borrow_mut() = read);
        let out = self.inner.forward(tokens);
        READER.with(|r| *r.borrow_mut() = None);
        out.map_err(js_err)
    }

    /// Forgets the KV cache (a new prompt).
    pub fn reset(&mut self) {
        self.inner.reset();
    }

    /// Positions in the KV cache.
    pub fn positions(&self) -> u32 {
        self.inner.positions() as u32
    }

    /// Weight bytes read through the reader at each forward pass (0: everything resident).
    #[wasm_bindgen(js_name = streamedBytes)]
    pub fn streamed_bytes(&self) -> f64 {
        self.inner.streamed_bytes() as f64
    }

    /// Weight bytes the last forward pass read.
    #[wasm_bindgen(js_name = streamedLast)]
    pub fn streamed_last(&self) -> f64 {
        self.inner.streamed_last() as f64
    }
}
