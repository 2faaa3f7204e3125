//! The architecture description: which tensors a decoder-only transformer needs, with which
//! shapes, and its hyperparameters, read from the model's metadata. Kept apart from the executor
//! (`cpu`), so a new architecture is a new arm here, not edits in the kernels.
//!
//! GGUF names (llama.cpp's): `token_embd.weight` `[vocab, embd]`, per block `blk.N.attn_norm`,
//! `attn_q` `[heads*head_dim, embd]`, `attn_k`/`attn_v` `[kv_heads*head_dim, embd]` (+ `.bias`
//! for qwen2), `attn_q_norm`/`attn_k_norm` `[head_dim]` (qwen3: an RMSNorm of each query and key
//! head before rope), `attn_output`, `ffn_norm`, `ffn_gate`/`ffn_up` `[ff, embd]`, `ffn_down` `[embd, ff]`,
//! then `output_norm.weight` and `output.weight` `[vocab, embd]` (absent: tied to the embedding).
//! A mixture-of-experts layer (qwen3moe, olmoe, llama with `expert_count`: Mixtral) has, in place
//! of `ffn_gate`/`ffn_up`/`ffn_down`, the router `ffn_gate_inp` `[n_expert, embd]` and the stacked
//! experts `ffn_gate_exps`/`ffn_up_exps` `[n_expert, ff, embd]`, `ffn_down_exps` `[n_expert, embd,
//! ff]` ([`MoeSpec`]).
//! Shapes are row-major (a GGUF's `ne` reversed), so a weight is `[out, in]`, one row per output.
//!
//! Hugging Face checkpoints (safetensors with `config.json`, [`Spec::from_hf_config`]) name the
//! same tensors `model.embed_tokens.weight`, `model.layers.N.self_attn.q_proj.weight`, ...,
//! `lm_head.weight`, and rotate halves ([`RopeStyle::Halves`]): their Q and K rows are not
//! permuted the way llama.cpp's converter permutes them for a GGUF.

use tensorlane_core::formats::{Catalog, Meta};

use crate::{Error, Result};

/// The architectures [`Spec::from_catalog`] accepts (`general.architecture`).
pub const SUPPORTED: &[&str] = &[
    "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "qwen3moe", "olmoe", "mixtral",
];

/// How rotary position embedding pairs the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(x[2i], x[2i+1])`: llama.cpp's "normal" rope, what a GGUF llama/mistral
    /// needs (llama.cpp's converter permutes the Q and K rows of Hugging Face checkpoints so).
    Adjacent,
    /// Halves `(x[i], x[i + d/2])` (`rotate_half`): Hugging Face checkpoints, and GGUF qwen2
    /// (llama.cpp's "neox" rope; its converter does not permute qwen2).
    Halves,
}

/// The architecture families.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Llama 2/3, TinyLlama, SmolLM and other llama-shaped models.
    Llama,
    /// Mistral: llama tensors. Its sliding window is applied where the file states one: a GGUF
    /// `mistral` with `mistral.attention.sliding_window`, a `config.json` with `sliding_window`.
    /// llama.cpp's converter writes Mistral checkpoints as GGUF `llama` (v0.4.0 has no `mistral`
    /// architecture) and llama.cpp applies no window to `llama`: neither do we, for parity.
    Mistral,
    /// Qwen2: llama tensors plus Q/K/V biases, rotate-half rope.
    Qwen2,
    /// Qwen3: llama tensors plus an RMSNorm over each query and key head (before rope),
    /// rotate-half rope, a head size of its own (`attention.key_length`, often wider than
    /// `embedding_length / head_count`).
    Qwen3,
    /// Qwen3-MoE: qwen3's attention, a mixture-of-experts feed-forward network (softmax router,
    /// top-k experts, their weights normalised to sum to 1, as llama.cpp always does for it).
    Qwen3Moe,
    /// OLMoE: an RMSNorm over the whole query and key projections (not per head), rotate-half
    /// rope, a mixture-of-experts feed-forward network whose top-k weights are not normalised.
    Olmoe,
    /// Phi-3 (and Phi-4-mini): one fused QKV tensor (`attn_qkv`) and one fused gate/up tensor
    /// (`ffn_up`, gate rows first), rotate-half rope over `rope.dimension_count` dimensions,
    /// Phi-3's long-RoPE frequency factors (`rope_factors_long`/`rope_factors_short`, chosen
    /// by context length) and attention factor. Its sliding window is not applied (llama.cpp
    /// disables it for phi3).
    Phi3,
    /// Gemma 2: the embedding scaled by sqrt(embd), RMSNorms after attention and after the FFN
    /// too, a GELU-tanh gated FFN, rotate-half rope, queries scaled before attention, attention
    /// and final logits soft-capped (tanh), sliding-window attention on every other layer
    /// (the even ones).
    Gemma2,
    /// Gemma 3: Gemma 2's layout with an RMSNorm over each query and key head (as qwen3), no
    /// attention soft-capping, five sliding-window layers with rope base 10000 for each global
    /// one (`sliding_window_pattern`, default 6), the global layers with `rope.freq_base` and the
    /// rope scaling.
    Gemma3,
}

impl Family {
    /// The `general.architecture` name.
    pub fn name(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Mistral => "mistral",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Qwen3Moe => "qwen3moe",
            Family::Olmoe => "olmoe",
            Family::Phi3 => "phi3",
            Family::Gemma2 => "gemma2",
            Family::Gemma3 => "gemma3",
        }
    }

    /// The family of a `general.architecture` (GGUF) or `model_type` (`config.json`) name.
    pub fn from_name(name: &str) -> Result<Family> {
        Ok(match name {
            "llama" => Family::Llama,
            "mistral" => Family::Mistral,
            "qwen2" => Family::Qwen2,
            "qwen3" => Family::Qwen3,
            // GGUF `qwen3moe`; config.json `qwen3_moe`
            "qwen3moe" | "qwen3_moe" => Family::Qwen3Moe,
            "olmoe" => Family::Olmoe,
            // Mixtral is llama with experts (GGUF `llama` with `llama.expert_count`)
            "mixtral" => Family::Llama,
            "phi3" => Family::Phi3,
            "gemma2" => Family::Gemma2,
            // Hugging Face's text-only Gemma 3 (Gemma3ForCausalLM)
            "gemma3" | "gemma3_text" => Family::Gemma3,
            other => {
                return Err(Error::UnsupportedArchitecture {
                    found: other.into(),
                    supported: SUPPORTED,
                });
            }
        })
    }
}

/// Hyperparameters of a model.
#[derive(Clone, Debug, PartialEq)]
pub struct Hparams {
    /// The architecture family.
    pub family: Family,
    /// Transformer blocks (`<arch>.block_count`).
    pub n_layer: usize,
    /// Embedding length (`<arch>.embedding_length`).
    pub n_embd: usize,
    /// Query heads (`<arch>.attention.head_count`).
    pub n_head: usize,
    /// Key/value heads (`<arch>.attention.head_count_kv`, default: `n_head`).
    pub n_head_kv: usize,
    /// Dimensions per head (`n_embd / n_head`, or `<arch>.attention.key_length`).
    pub head_dim: usize,
    /// Feed-forward length (`<arch>.feed_forward_length`).
    pub n_ff: usize,
    /// Vocabulary size (rows of `token_embd.weight`).
    pub n_vocab: usize,
    /// Training context length (`<arch>.context_length`).
    pub n_ctx_train: usize,
    /// RMSNorm epsilon (`<arch>.attention.layer_norm_rms_epsilon`).
    pub rms_eps: f32,
    /// RoPE base (`<arch>.rope.freq_base`, default 10000).
    pub rope_base: f32,
    /// RoPE position scale (1 / `<arch>.rope.scaling.factor` for linear scaling, else 1).
    pub rope_freq_scale: f32,
    /// Dimensions of each head that are rotated (`<arch>.rope.dimension_count`, default
    /// `head_dim`).
    pub rope_dim: usize,
    /// How rope pairs dimensions.
    pub rope_style: RopeStyle,
    /// Experts per mixture-of-experts layer (`<arch>.expert_count`; 0: a dense model).
    pub n_expert: usize,
    /// Experts each token is routed to (`<arch>.expert_used_count`; 0 for a dense model).
    pub n_expert_used: usize,
    /// YaRN and the attention factor of the rope (llama.cpp's `ext_factor`, `attn_factor`,
    /// `beta_fast`/`beta_slow`, `n_ctx_orig`); [`RopeScaling::NONE`] for unscaled rope.
    pub rope_scaling: RopeScaling,
    /// The factor the token embeddings are multiplied by (Gemma: sqrt(`n_embd`); else 1).
    pub embd_scale: f32,
    /// Gemma: the queries are multiplied by this after rope and the attention scores are not
    /// scaled (llama.cpp's `f_attention_scale`: 1/sqrt(`key_length`), or 1/sqrt(embd / heads)
    /// for the 27B shapes; `config.json`'s `query_pre_attn_scalar`^-1/2). `None`: the scores are
    /// scaled by 1/sqrt(`head_dim`).
    pub query_scale: Option<f32>,
    /// Attention scores soft-capped as `c·tanh(s/c)` before the softmax (Gemma 2's
    /// `attn_logit_softcapping`).
    pub attn_softcap: Option<f32>,
    /// Output logits soft-capped as `c·tanh(l/c)` (`final_logit_softcapping`).
    pub final_softcap: Option<f32>,
    /// The activation of the gated feed-forward network.
    pub ffn_act: Activation,
}

/// The activation of the gate in `down(act(gate·x) * up·x)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// SiLU (SwiGLU): llama, mistral, qwen.
    Silu,
    /// GELU, tanh approximation (GeGLU): Gemma. The CPU executor takes it from llama.cpp's f16
    /// table, as llama.cpp's CPU path does.
    GeluTanh,
}

/// The rope parameters llama.cpp passes to `ggml_rope_ext` besides the base and the linear scale:
/// with `ext_factor` 0 every angle is `freq_scale · θ` and cos/sin are multiplied by
/// `attn_factor`; with `ext_factor` > 0 (YaRN) each pair mixes the interpolated and the
/// extrapolated angle by ggml's ramp between the correction dimensions of `beta_fast` and
/// `beta_slow`, and the magnitude is further scaled by `1 + 0.1 ln(1 / freq_scale)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeScaling {
    /// YaRN's extrapolation mix (1 for `yarn`, else 0).
    pub ext_factor: f32,
    /// The magnitude cos and sin are multiplied by (llama.cpp's `cparams.yarn_attn_factor`).
    pub attn_factor: f32,
    /// YaRN's `beta_fast` (32 in llama.cpp for every family run here).
    pub beta_fast: f32,
    /// YaRN's `beta_slow` (1).
    pub beta_slow: f32,
    /// The context the model was trained with before scaling (`rope.scaling.original_context_length`,
    /// default the training context): YaRN's correction dimensions, and Phi-3's long/short choice.
    pub n_ctx_orig: usize,
}

impl RopeScaling {
    /// No YaRN, an attention factor of 1 (the correction dimensions are then unused).
    pub const NONE: RopeScaling = RopeScaling {
        ext_factor: 0.0,
        attn_factor: 1.0,
        beta_fast: 32.0,
        beta_slow: 1.0,
        n_ctx_orig: 0,
    };

    /// YaRN as llama.cpp sets it up for a `yarn` model with scale `factor` (llama.cpp's
    /// `llama_context` constructor): ext_factor 1 and an attention factor of
    /// `mscale(factor) / (1 + 0.1 ln factor) · rope_attn_factor`, computed in f32 as it does
    /// (ggml's rope multiplies `1 + 0.1 ln factor` back in).
    pub fn yarn(factor: f32, rope_attn_factor: f32, n_ctx_orig: usize) -> RopeScaling {
        let mscale = if factor <= 1.0 { 1.0 } else { 0.1f32 * 1.0 * factor.ln() + 1.0 };
        let attn = mscale * (1.0f32 / (1.0 + 0.1 * factor.ln()));
        RopeScaling {
            ext_factor: 1.0,
            attn_factor: attn * rope_attn_factor,
            n_ctx_orig,
            ..RopeScaling::NONE
        }
    }

    /// ggml's `ggml_rope_yarn_corr_dims`: the first and last pair dimension of the ramp.
    pub fn corr_dims(&self, rope_dim: usize, base: f32) -> [f32; 2] {
        let dim = |beta: f32| {
            rope_dim as f32 * (self.n_ctx_orig as f32 / (beta * 2.0 * std::f32::consts::PI)).ln() / (2.0 * base.ln())
        };
        let start = dim(self.beta_fast).floor();
        let end = dim(self.beta_slow).ceil();
        [start.max(0.0), end.min(rope_dim as f32 - 1.0)]
    }
}

/// A tensor the architecture needs: its name and row-major shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    /// The tensor's name in the file.
    pub name: String,
    /// Its row-major shape (`[out, in]` for a weight matrix).
    pub shape: Vec<u64>,
    /// `Some` when these are rows of a fused tensor (phi3): `name` is then the part's own name,
    /// and the stored tensor is [`Part::tensor`].
    pub part: Option<Part>,
}

impl TensorSpec {
    fn new(name: impl Into<String>, shape: &[usize]) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            shape: shape.iter().map(|&d| d as u64).collect(),
            part: None,
        }
    }

    /// Rows `first..first + rows` of the fused tensor `tensor` (`[total, cols]`), named
    /// `tensor[first..first + rows]`: phi3's Q, K, V in `attn_qkv` and gate, up in `ffn_up`.
    /// Executors bind it as a tensor of its own, a view of the stored rows.
    fn part(tensor: &str, total: usize, first: usize, rows: usize, cols: usize) -> TensorSpec {
        TensorSpec {
            name: format!("{tensor}[{first}..{}]", first + rows),
            shape: vec![rows as u64, cols as u64],
            part: Some(Part {
                tensor: tensor.into(),
                shape: vec![total as u64, cols as u64],
                first_row: first as u64,
            }),
        }
    }
}

/// Where a [`TensorSpec`] that is part of a fused tensor lies in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// The stored tensor's name (`blk.0.attn_qkv.weight`).
    pub tensor: String,
    /// Its row-major shape, checked when the model is bound.
    pub shape: Vec<u64>,
    /// Its first row that belongs to this part.
    pub first_row: u64,
}

/// The tensors of one transformer block.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerSpec {
    /// RMSNorm weight before attention `[embd]`.
    pub attn_norm: TensorSpec,
    /// Query projection `[heads*head_dim, embd]`.
    pub wq: TensorSpec,
    /// Key projection `[kv_heads*head_dim, embd]`.
    pub wk: TensorSpec,
    /// Value projection `[kv_heads*head_dim, embd]`.
    pub wv: TensorSpec,
    /// Query, key and value biases, and whether the architecture requires them (qwen2) or takes
    /// them when present (llama, mistral).
    pub biases: [TensorSpec; 3],
    /// Whether the biases must be present.
    pub biases_required: bool,
    /// RMSNorm weights `[head_dim]` applied to each query head and each key head before rope
    /// (qwen3), required when present here.
    pub qk_norm: Option<[TensorSpec; 2]>,
    /// Attention output projection `[embd, heads*head_dim]`.
    pub wo: TensorSpec,
    /// RMSNorm weight before the feed-forward network `[embd]`.
    pub ffn_norm: TensorSpec,
    /// SwiGLU gate `[ff, embd]`.
    pub gate: TensorSpec,
    /// SwiGLU up `[ff, embd]`.
    pub up: TensorSpec,
    /// SwiGLU down `[embd, ff]`.
    pub down: TensorSpec,
    /// RMSNorm weights `[embd]` of the attention output and of the feed-forward output, before
    /// each is added to the residual stream (Gemma: `post_attention_norm`, `post_ffw_norm`).
    pub post_norms: Option<[TensorSpec; 2]>,
    /// Sliding-window attention: a query at position `p` attends to the positions `t` with
    /// `p - t < window` only (llama.cpp's `LLAMA_SWA_TYPE_STANDARD`). `None`: every earlier
    /// position.
    pub window: Option<usize>,
    /// This layer's rope `(base, linear position scale)` where it differs from the model's
    /// (`Hparams::rope_base`, `Hparams::rope_freq_scale`): Gemma's sliding-window layers.
    pub rope: Option<(f32, f32)>,
    /// A mixture-of-experts feed-forward network in place of `gate`/`up`/`down` (which are then
    /// not bound).
    pub moe: Option<MoeSpec>,
}

/// A mixture-of-experts feed-forward network (llama.cpp's `build_moe_ffn` with a softmax
/// router): the router's logits `[n_expert]` for each token, their softmax, the `n_expert_used`
/// most probable experts, their probabilities as weights (divided by their sum when
/// `norm_weights`), and the sum of each chosen expert's SwiGLU output times its weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoeSpec {
    /// Experts in the layer.
    pub n_expert: usize,
    /// Experts each token is routed to.
    pub n_expert_used: usize,
    /// Feed-forward length of one expert.
    pub n_ff_exp: usize,
    /// Whether the chosen experts' weights are divided by their sum (qwen3moe and mixtral in
    /// llama.cpp; not olmoe).
    pub norm_weights: bool,
    /// The router `[n_expert, embd]` (`ffn_gate_inp`).
    pub router: TensorSpec,
    /// The experts' gate, up and down projections.
    pub experts: ExpertTensors,
}

/// Where a layer's experts are stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExpertTensors {
    /// One tensor per projection holding every expert, one after the other (GGUF:
    /// `ffn_gate_exps`/`ffn_up_exps` `[n_expert, ff, embd]`, `ffn_down_exps` `[n_expert, embd,
    /// ff]`): expert `e` is the contiguous `e`-th block.
    Stacked([TensorSpec; 3]),
    /// Each expert's own gate, up and down tensors (Hugging Face checkpoints), `[ff, embd]`,
    /// `[ff, embd]`, `[embd, ff]`.
    PerExpert(Vec<[TensorSpec; 3]>),
}

/// Where a set of rope frequency factors comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeFactors {
    /// A tensor of the model (`rope_factors_long.weight`), used when present.
    Tensor(TensorSpec),
    /// Values of `config.json` (`rope_scaling.long_factor`).
    Values(Vec<f32>),
}

/// A model's architecture: hyperparameters and every tensor it needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// Hyperparameters.
    pub hparams: Hparams,
    /// Token embedding `[vocab, embd]`.
    pub token_embd: TensorSpec,
    /// Final RMSNorm weight `[embd]`.
    pub output_norm: TensorSpec,
    /// Output projection `[vocab, embd]`; when the file lacks it the embedding is used (tied).
    pub output: TensorSpec,
    /// Per-dimension rope frequency factors `[rope_dim / 2]` (Llama 3.1), used when present.
    pub rope_freqs: TensorSpec,
    /// Frequency factors given by `config.json` rather than a tensor (Hugging Face
    /// `rope_scaling` of type `llama3`, computed as llama.cpp's converter computes
    /// `rope_freqs.weight`; Phi-3's `long_factor`/`short_factor`); used instead of `rope_freqs`.
    pub rope_freq_values: Option<Vec<f32>>,
    /// Phi-3's two sets of factors, long and short: [`Spec::fit_context`] picks the long ones when
    /// the context is over [`RopeScaling::n_ctx_orig`], as llama.cpp's `get_rope_factors` does.
    pub rope_long_short: Option<[RopeFactors; 2]>,
    /// The transformer blocks.
    pub layers: Vec<LayerSpec>,
    /// Added to every RMSNorm weight when it is read: 1 for Hugging Face Gemma checkpoints, which
    /// store `w` for a norm that multiplies by `1 + w` (llama.cpp's converter writes `1 + w` into
    /// the GGUF); 0 otherwise.
    pub norm_shift: f32,
}

/// The metadata value of `key`, if present.
pub fn meta<'c>(catalog: &'c Catalog, key: &str) -> Option<&'c Meta> {
    catalog.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// An unsigned integer metadata value (`None` when absent; an error when not an integer).
pub fn meta_uint(catalog: &Catalog, key: &str) -> Result<Option<u64>> {
    match meta(catalog, key) {
        None => Ok(None),
        Some(Meta::UInt(v)) => Ok(Some(*v)),
        Some(Meta::Int(v)) if *v >= 0 => Ok(Some(*v as u64)),
        Some(other) => Err(Error::Metadata {
            key: key.into(),
            message: format!("expected a non-negative integer, found {other:?}"),
        }),
    }
}

/// A float metadata value (integers are accepted).
pub fn meta_float(catalog: &Catalog, key: &str) -> Result<Option<f64>> {
    match meta(catalog, key) {
        None => Ok(None),
        Some(Meta::Float(v)) => Ok(Some(*v)),
        Some(Meta::UInt(v)) => Ok(Some(*v as f64)),
        Some(Meta::Int(v)) => Ok(Some(*v as f64)),
        Some(other) => Err(Error::Metadata {
            key: key.into(),
            message: format!("expected a number, found {other:?}"),
        }),
    }
}

/// A string metadata value.
pub fn meta_str<'c>(catalog: &'c Catalog, key: &str) -> Result<Option<&'c str>> {
    match meta(catalog, key) {
        None => Ok(None),
        Some(Meta::Str(s)) => Ok(Some(s)),
        Some(other) => Err(Error::Metadata {
            key: key.into(),
            message: format!("expected a string, found {other:?}"),
        }),
    }
}

fn required(catalog: &Catalog, key: &str) -> Result<usize> {
    let v = meta_uint(catalog, key)?.ok_or_else(|| Error::Metadata {
        key: key.into(),
        message: "missing".into(),
    })?;
    positive(key, v)
}

fn positive(key: &str, v: u64) -> Result<usize> {
    // 1 << 24 bounds every dimension a real model has and keeps products of two in range.
    if v == 0 || v > 1 << 24 {
        return Err(Error::Metadata {
            key: key.into(),
            message: format!("{v} is out of range (1..=16777216)"),
        });
    }
    Ok(v as usize)
}

/// A positive integer field of a `config.json`.
fn cfg_usize(config: &serde_json::Value, key: &str) -> Result<Option<usize>> {
    match config.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) => positive(&format!("config.json {key}"), n).map(Some),
            None => Err(Error::Metadata {
                key: format!("config.json {key}"),
                message: format!("expected a positive integer, found {v}"),
            }),
        },
    }
}

fn cfg_required(config: &serde_json::Value, key: &str) -> Result<usize> {
    cfg_usize(config, key)?.ok_or_else(|| Error::Metadata {
        key: format!("config.json {key}"),
        message: "missing".into(),
    })
}

fn cfg_f32(config: &serde_json::Value, key: &str, default: f32) -> Result<f32> {
    match config.get(key) {
        None | Some(serde_json::Value::Null) => Ok(default),
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() && x >= 0.0 => Ok(x as f32),
            _ => Err(Error::Metadata {
                key: format!("config.json {key}"),
                message: format!("expected a non-negative number, found {v}"),
            }),
        },
    }
}

/// The names of one layer's tensors in a checkpoint's naming scheme: the prefix before the layer
/// index, then the suffixes of attn_norm, q, k, v, q bias, k bias, v bias, o, ffn_norm, gate, up,
/// down, q norm, k norm.
struct LayerNames {
    prefix: &'static str,
    suffixes: [&'static str; 14],
}

/// llama.cpp's GGUF names (`blk.N.attn_q.weight`).
const GGUF_NAMES: LayerNames = LayerNames {
    prefix: "blk",
    suffixes: [
        "attn_norm.weight",
        "attn_q.weight",
        "attn_k.weight",
        "attn_v.weight",
        "attn_q.bias",
        "attn_k.bias",
        "attn_v.bias",
        "attn_output.weight",
        "ffn_norm.weight",
        "ffn_gate.weight",
        "ffn_up.weight",
        "ffn_down.weight",
        "attn_q_norm.weight",
        "attn_k_norm.weight",
    ],
};

/// Hugging Face transformers' names (`model.layers.N.self_attn.q_proj.weight`).
const HF_NAMES: LayerNames = LayerNames {
    prefix: "model.layers",
    suffixes: [
        "input_layernorm.weight",
        "self_attn.q_proj.weight",
        "self_attn.k_proj.weight",
        "self_attn.v_proj.weight",
        "self_attn.q_proj.bias",
        "self_attn.k_proj.bias",
        "self_attn.v_proj.bias",
        "self_attn.o_proj.weight",
        "post_attention_layernorm.weight",
        "mlp.gate_proj.weight",
        "mlp.up_proj.weight",
        "mlp.down_proj.weight",
        "self_attn.q_norm.weight",
        "self_attn.k_norm.weight",
    ],
};

/// Every layer's tensors, by `names`, with the shapes the hyperparameters give (one description
/// for both naming schemes); the last argument is (query heads, key/value heads, head size).
fn layer_specs(
    names: &LayerNames,
    family: Family,
    n_layer: usize,
    n_embd: usize,
    n_ff: usize,
    (n_head, n_head_kv, head_dim): (usize, usize, usize),
) -> Vec<LayerSpec> {
    let (q_dim, kv_dim) = (n_head * head_dim, n_head_kv * head_dim);
    if family == Family::Phi3 {
        return phi3_layer_specs(names, n_layer, n_embd, n_ff, q_dim, kv_dim);
    }
    (0..n_layer)
        .map(|i| {
            let n = |k: usize| format!("{}.{i}.{}", names.prefix, names.suffixes[k]);
            LayerSpec {
                attn_norm: TensorSpec::new(n(0), &[n_embd]),
                wq: TensorSpec::new(n(1), &[q_dim, n_embd]),
                wk: TensorSpec::new(n(2), &[kv_dim, n_embd]),
                wv: TensorSpec::new(n(3), &[kv_dim, n_embd]),
                biases: [
                    TensorSpec::new(n(4), &[q_dim]),
                    TensorSpec::new(n(5), &[kv_dim]),
                    TensorSpec::new(n(6), &[kv_dim]),
                ],
                biases_required: family == Family::Qwen2,
                wo: TensorSpec::new(n(7), &[n_embd, q_dim]),
                ffn_norm: TensorSpec::new(n(8), &[n_embd]),
                gate: TensorSpec::new(n(9), &[n_ff, n_embd]),
                up: TensorSpec::new(n(10), &[n_ff, n_embd]),
                down: TensorSpec::new(n(11), &[n_embd, n_ff]),
                qk_norm: match family {
                    Family::Qwen3 | Family::Qwen3Moe | Family::Gemma3 => {
                        Some([TensorSpec::new(n(12), &[head_dim]), TensorSpec::new(n(13), &[head_dim])])
                    }
                    // OLMoE normalises the whole projection: one RMSNorm over all heads
                    Family::Olmoe => Some([TensorSpec::new(n(12), &[q_dim]), TensorSpec::new(n(13), &[kv_dim])]),
                    _ => None,
                },
                moe: None,
                post_norms: None,
                window: None,
                rope: None,
            }
        })
        .collect()
}

/// The rope scaling of a GGUF as llama.cpp v0.4.0 sets it up for the families run here:
/// `<arch>.rope.scaling.type` (absent: `linear`, as llama.cpp defaults) `none`, `linear` or
/// `longrope` (a position scale of 1 / `rope.scaling.factor`) or `yarn` ([`RopeScaling::yarn`]);
/// `rope.scaling.attn_factor` multiplies the attention factor; `rope.scaling.original_context_length`
/// (default: the training context) is YaRN's and Phi-3's original context. llama.cpp reads the
/// `rope.scaling.yarn_*` keys only for other families (grok, mistral3), so they are not read
/// here either. Another type is refused, naming it.
fn gguf_rope_scaling(catalog: &Catalog, arch: &str, n_ctx_train: usize) -> Result<(f32, RopeScaling)> {
    let k = |s: &str| format!("{arch}.{s}");
    let positive_f32 = |key: &str| -> Result<Option<f32>> {
        match meta_float(catalog, key)? {
            None => Ok(None),
            Some(f) if f.is_finite() && f > 0.0 => Ok(Some(f as f32)),
            Some(f) => Err(Error::Metadata {
                key: key.into(),
                message: format!("{f} is not a positive number"),
            }),
        }
    };
    let factor = match positive_f32(&k("rope.scaling.factor"))? {
        Some(f) => Some(f),
        None => positive_f32(&k("rope.scale_linear"))?,
    };
    let mut freq_scale = factor.map_or(1.0, |f| 1.0 / f);
    let attn = positive_f32(&k("rope.scaling.attn_factor"))?.unwrap_or(1.0);
    let n_ctx_orig = match meta_uint(catalog, &k("rope.scaling.original_context_length"))? {
        Some(v) => positive(&k("rope.scaling.original_context_length"), v)?,
        None => n_ctx_train,
    };
    let scaling = match meta_str(catalog, &k("rope.scaling.type"))?.unwrap_or("linear") {
        "none" => {
            freq_scale = 1.0;
            RopeScaling::NONE
        }
        "linear" | "longrope" => RopeScaling::NONE,
        "yarn" => RopeScaling::yarn(1.0 / freq_scale, 1.0, n_ctx_orig),
        other => {
            return Err(Error::Metadata {
                key: k("rope.scaling.type"),
                message: format!(
                    "rope scaling '{other}' is not supported (none, linear, yarn, longrope): running it unscaled \
                     would give wrong results"
                ),
            });
        }
    };
    Ok((
        freq_scale,
        RopeScaling {
            attn_factor: scaling.attn_factor * attn,
            n_ctx_orig,
            ..scaling
        },
    ))
}

/// Phi-3's layers: Q, K and V are rows `0..q`, `q..q+kv`, `q+kv..q+2kv` of the fused
/// `attn_qkv` (`self_attn.qkv_proj`), gate and up rows `0..ff`, `ff..2ff` of the fused `ffn_up`
/// (`mlp.gate_up_proj`: llama.cpp's `ggml_swiglu` takes the first half as the gate), no biases.
fn phi3_layer_specs(
    names: &LayerNames,
    n_layer: usize,
    n_embd: usize,
    n_ff: usize,
    q_dim: usize,
    kv_dim: usize,
) -> Vec<LayerSpec> {
    let hf = names.prefix == HF_NAMES.prefix;
    let (qkv, gate_up) = if hf {
        ("self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight")
    } else {
        ("attn_qkv.weight", "ffn_up.weight")
    };
    (0..n_layer)
        .map(|i| {
            let n = |k: usize| format!("{}.{i}.{}", names.prefix, names.suffixes[k]);
            let fused = format!("{}.{i}.{qkv}", names.prefix);
            let total = q_dim + 2 * kv_dim;
            let gu = format!("{}.{i}.{gate_up}", names.prefix);
            LayerSpec {
                attn_norm: TensorSpec::new(n(0), &[n_embd]),
                wq: TensorSpec::part(&fused, total, 0, q_dim, n_embd),
                wk: TensorSpec::part(&fused, total, q_dim, kv_dim, n_embd),
                wv: TensorSpec::part(&fused, total, q_dim + kv_dim, kv_dim, n_embd),
                biases: [
                    TensorSpec::new(n(4), &[q_dim]),
                    TensorSpec::new(n(5), &[kv_dim]),
                    TensorSpec::new(n(6), &[kv_dim]),
                ],
                biases_required: false,
                wo: TensorSpec::new(n(7), &[n_embd, q_dim]),
                ffn_norm: TensorSpec::new(n(8), &[n_embd]),
                gate: TensorSpec::part(&gu, 2 * n_ff, 0, n_ff, n_embd),
                up: TensorSpec::part(&gu, 2 * n_ff, n_ff, n_ff, n_embd),
                down: TensorSpec::new(n(11), &[n_embd, n_ff]),
                qk_norm: None,
                moe: None,
                post_norms: None,
                window: None,
                rope: None,
            }
        })
        .collect()
}

/// A float field of `config.json`'s `rope_scaling`, `default` when absent.
fn scaling_f32(s: &serde_json::Value, key: &str, default: f32) -> Result<f32> {
    match s.get(key) {
        None | Some(serde_json::Value::Null) => Ok(default),
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() && x > 0.0 => Ok(x as f32),
            _ => Err(Error::Metadata {
                key: format!("config.json rope_scaling.{key}"),
                message: format!("expected a positive number, found {v}"),
            }),
        },
    }
}

/// A list of `n` positive factors of `config.json`'s `rope_scaling` (Phi-3's `long_factor`).
fn scaling_factors(s: &serde_json::Value, key: &str, n: usize) -> Result<Vec<f32>> {
    let err = |message: String| Error::Metadata {
        key: format!("config.json rope_scaling.{key}"),
        message,
    };
    let list = s
        .get(key)
        .and_then(|v| v.as_array())
        .ok_or_else(|| err(format!("missing: a list of {n} numbers (rope dimensions / 2)")))?;
    if list.len() != n {
        return Err(err(format!("{} numbers where the rope needs {n} (rope dimensions / 2)", list.len())));
    }
    list.iter()
        .map(|v| match v.as_f64() {
            Some(x) if x.is_finite() && x > 0.0 => Ok(x as f32),
            _ => Err(err(format!("{v} is not a positive number"))),
        })
        .collect()
}

/// Llama 3's per-pair frequency factors from its `rope_scaling` (`factor`, `low_freq_factor`,
/// `high_freq_factor`, `original_max_position_embeddings`), as llama.cpp's converter computes
/// `rope_freqs.weight` (in f32, as its torch code does): 1 for wavelengths under
/// `old_context / high_freq_factor`, `factor` over `old_context / low_freq_factor`, a smooth
/// blend between.
pub fn llama3_rope_factors(rope_dim: usize, base: f32, factor: f32, low: f32, high: f32, old_context: f32) -> Vec<f32> {
    let low_wavelen = old_context / low;
    let high_wavelen = old_context / high;
    (0..rope_dim / 2)
        .map(|i| {
            let freq = 1.0f32 / base.powf((2 * i) as f32 / rope_dim as f32);
            let wavelen = (2.0 * std::f64::consts::PI) as f32 / freq;
            if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = (old_context / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            }
        })
        .collect()
}

/// What a Hugging Face `rope_scaling` asks of the rope, as llama.cpp runs the GGUF its converter
/// writes from it.
struct HfRope {
    freq_scale: f32,
    scaling: RopeScaling,
    values: Option<Vec<f32>>,
    long_short: Option<[RopeFactors; 2]>,
}

/// Reads `config.json`'s `rope_scaling` (`rope_type` or `type`): `default`; `linear` (`factor`);
/// `llama3` (factors per pair, [`llama3_rope_factors`]); `yarn` (`factor`,
/// `original_max_position_embeddings`: the converter writes those, and llama.cpp takes beta_fast
/// 32 and beta_slow 1 and its own attention factor for these families, whatever the config
/// says); for phi3 `longrope`/`su` (or `yarn`) with `long_factor`/`short_factor` and the
/// attention factor its converter computes from `max_position_embeddings /
/// original_max_position_embeddings`. Any other type is refused, naming it.
fn hf_rope(config: &serde_json::Value, family: Family, rope_dim: usize, base: f32, n_ctx_train: usize) -> Result<HfRope> {
    let mut out = HfRope {
        freq_scale: 1.0,
        scaling: RopeScaling {
            n_ctx_orig: n_ctx_train,
            ..RopeScaling::NONE
        },
        values: None,
        long_short: None,
    };
    let s = match config.get("rope_scaling") {
        None | Some(serde_json::Value::Null) => return Ok(out),
        Some(s) => s,
    };
    let ty = s
        .get("rope_type")
        .or_else(|| s.get("type"))
        .and_then(|v| v.as_str())
        .unwrap_or("<none>")
        .to_ascii_lowercase();
    let orig = |default: Option<usize>| -> Result<usize> {
        let key = "original_max_position_embeddings";
        match s.get(key).or_else(|| config.get(key)) {
            Some(v) => v.as_u64().filter(|&n| n > 0 && n <= 1 << 24).map(|n| n as usize).ok_or_else(|| Error::Metadata {
                key: format!("config.json rope_scaling.{key}"),
                message: format!("expected a positive integer, found {v}"),
            }),
            None => default.ok_or_else(|| Error::Metadata {
                key: format!("config.json rope_scaling.{key}"),
                message: format!("missing (rope_scaling of type {ty} needs it)"),
            }),
        }
    };
    match ty.as_str() {
        "default" => {}
        "linear" => out.freq_scale = 1.0 / scaling_f32(s, "factor", 1.0)?,
        "llama3" if family != Family::Phi3 => {
            out.values = Some(llama3_rope_factors(
                rope_dim,
                base,
                scaling_f32(s, "factor", 8.0)?,
                scaling_f32(s, "low_freq_factor", 1.0)?,
                scaling_f32(s, "high_freq_factor", 4.0)?,
                orig(Some(8192))? as f32,
            ));
        }
        "yarn" if family != Family::Phi3 => {
            let factor = scaling_f32(s, "factor", 1.0)?;
            out.freq_scale = 1.0 / factor;
            out.scaling = RopeScaling::yarn(1.0 / out.freq_scale, 1.0, orig(None)?);
        }
        "longrope" | "su" | "yarn" if family == Family::Phi3 => {
            let n_ctx_orig = orig(None)?;
            let scale = n_ctx_train as f64 / n_ctx_orig as f64;
            let attn = if scale <= 1.0 {
                1.0
            } else if ty == "yarn" {
                0.1 * scale.ln() + 1.0
            } else {
                (1.0 + scale.ln() / (n_ctx_orig as f64).ln()).sqrt()
            };
            out.scaling = RopeScaling {
                attn_factor: attn as f32,
                n_ctx_orig,
                ..RopeScaling::NONE
            };
            let pairs = rope_dim / 2;
            out.long_short = Some([
                RopeFactors::Values(scaling_factors(s, "long_factor", pairs)?),
                RopeFactors::Values(scaling_factors(s, "short_factor", pairs)?),
            ]);
        }
        other => {
            return Err(Error::Metadata {
                key: "config.json rope_scaling".into(),
                message: format!(
                    "rope scaling '{other}' is not supported for {} (default, linear, {}): running it unscaled would \
                     give wrong results",
                    family.name(),
                    if family == Family::Phi3 { "longrope, su, yarn" } else { "llama3, yarn" }
                ),
            });
        }
    }
    Ok(out)
}

impl Spec {
    /// Picks what depends on the context a session runs with: Phi-3's long frequency factors
    /// when `context` is over [`RopeScaling::n_ctx_orig`], else the short ones (llama.cpp's
    /// `get_rope_factors` compares its per-sequence context the same way). Call it before
    /// binding the weights; without long/short factors it changes nothing.
    pub fn fit_context(&mut self, context: usize) {
        let Some([long, short]) = &self.rope_long_short else { return };
        let picked = if context > self.hparams.rope_scaling.n_ctx_orig { long } else { short };
        match picked.clone() {
            RopeFactors::Tensor(t) => {
                self.rope_freqs = t;
                self.rope_freq_values = None;
            }
            RopeFactors::Values(v) => self.rope_freq_values = Some(v),
        }
    }

    /// The rope table as the CPU executor computes it (ggml's `rope_cache_init`, in f32): `(cos,
    /// sin)` per position and pair, `context` positions, with the model's frequency factors
    /// (`rope_freqs.weight`) when it has them. The device executors (wgpu, CUDA, the browser's
    /// WebGPU runner) upload this table, so every executor rotates by the same angles.
    pub fn rope_table(&self, context: usize, freqs: Option<&[f32]>) -> Result<Vec<f32>> {
        let h = &self.hparams;
        let pairs = h.rope_dim / 2;
        if let Some(f) = freqs
            && (f.len() < pairs || f.iter().any(|&x| !(x.is_finite() && x > 0.0)))
        {
            return Err(Error::Metadata {
                key: self.rope_freqs.name.clone(),
                message: format!("rope frequency factors must be {pairs} positive numbers"),
            });
        }
        let mut table = Vec::with_capacity(context * pairs * 2);
        for pos in 0..context {
            self.rope_row(pos, freqs, |c, s| table.extend([c, s]));
        }
        Ok(table)
    }

    /// Gives `(cos, sin)` of each rope pair at position `pos`, in pair order, as ggml's
    /// `rope_cache_init` computes them: the angle of pair `i` is `pos · base^(-2i/rope_dim)`, the
    /// power taken by repeated multiplication in f32, divided by the frequency factor `freqs[i]`
    /// (1 without), times the linear scale; under YaRN ([`RopeScaling::ext_factor`]) mixed with
    /// the unscaled angle by ggml's ramp (`rope_yarn`); cos and sin multiplied by the attention
    /// factor (and YaRN's `1 + 0.1 ln(1 / scale)`). `freqs`, when given, has at least `rope_dim / 2`
    /// values (the tensor's shape is checked when the model is bound; [`Spec::rope_table`]
    /// checks it too).
    pub fn rope_row(&self, pos: usize, freqs: Option<&[f32]>, pair: impl FnMut(f32, f32)) {
        self.rope_row_with((self.hparams.rope_base, self.hparams.rope_freq_scale), pos, freqs, pair)
    }

    /// [`Spec::rope_row`] with the rope `(base, linear position scale)` given (a layer's own,
    /// [`Spec::layer_rope`]).
    pub fn rope_row_with(
        &self,
        (base, freq_scale): (f32, f32),
        pos: usize,
        freqs: Option<&[f32]>,
        mut pair: impl FnMut(f32, f32),
    ) {
        let h = &self.hparams;
        let sc = &h.rope_scaling;
        let theta_scale = base.powf(-2.0 / h.rope_dim as f32);
        let corr = sc.corr_dims(h.rope_dim, base);
        let mut theta = pos as f32;
        for i in 0..h.rope_dim / 2 {
            let ff = freqs.map_or(1.0, |f| f[i]);
            let extrap = theta / ff;
            let mut t = freq_scale * extrap;
            let mut mscale = sc.attn_factor;
            // ggml's rope_yarn: the interpolated and extrapolated angles mixed by the ramp
            if sc.ext_factor != 0.0 {
                let y = (i as f32 - corr[0]) / (corr[1] - corr[0]).max(0.001);
                let ramp = (1.0 - y.clamp(0.0, 1.0)) * sc.ext_factor;
                t = t * (1.0 - ramp) + extrap * ramp;
                mscale *= 1.0 + 0.1 * (1.0 / freq_scale).ln();
            }
            pair(t.cos() * mscale, t.sin() * mscale);
            theta *= theta_scale;
        }
    }

    /// Reads the architecture of a Hugging Face checkpoint from its `config.json` (`model_type`,
    /// `num_hidden_layers`, `hidden_size`, `num_attention_heads`, `num_key_value_heads`,
    /// `intermediate_size`, `vocab_size`, `max_position_embeddings`, `rms_norm_eps`,
    /// `rope_theta`, `head_dim`, `rope_scaling` (see `hf_rope`: linear, llama3, yarn; phi3's
    /// longrope), phi3's `partial_rotary_factor`) for `model_type` llama, mistral, qwen2, qwen3
    /// or phi3 (fused `qkv_proj` and `gate_up_proj`), with Hugging Face tensor names and
    /// rotate-half rope. Refused like [`Spec::from_catalog`]; errors name the `config.json` key.
    pub fn from_hf_config(config: &serde_json::Value) -> Result<Spec> {
        let family = Family::from_name(config.get("model_type").and_then(|v| v.as_str()).unwrap_or("<none>"))?;
        let n_layer = cfg_required(config, "num_hidden_layers")?;
        let n_embd = cfg_required(config, "hidden_size")?;
        let n_head = cfg_required(config, "num_attention_heads")?;
        let n_head_kv = cfg_usize(config, "num_key_value_heads")?.unwrap_or(n_head);
        let n_ff = cfg_required(config, "intermediate_size")?;
        let n_vocab = cfg_required(config, "vocab_size")?;
        let n_ctx_train = cfg_usize(config, "max_position_embeddings")?.unwrap_or(2048);
        let head_dim = match cfg_usize(config, "head_dim")? {
            Some(d) => d,
            None if n_embd.is_multiple_of(n_head) => n_embd / n_head,
            None => {
                return Err(Error::Metadata {
                    key: "config.json num_attention_heads".into(),
                    message: format!("{n_head} heads do not divide hidden_size {n_embd}"),
                });
            }
        };
        if !n_head.is_multiple_of(n_head_kv) {
            return Err(Error::Metadata {
                key: "config.json num_key_value_heads".into(),
                message: format!("{n_head_kv} key/value heads do not divide {n_head} query heads"),
            });
        }
        let rms_eps = cfg_f32(config, "rms_norm_eps", 1e-6)?;
        let rope_base = cfg_f32(config, "rope_theta", 10000.0)?;
        if rope_base <= 0.0 {
            return Err(Error::Metadata {
                key: "config.json rope_theta".into(),
                message: format!("{rope_base} is not positive"),
            });
        }
        // Phi-3/4: a fraction of each head is rotated (the converter's int(pct * embd) // heads)
        let rope_dim = match config.get("partial_rotary_factor").and_then(|v| v.as_f64()) {
            Some(pct) if family == Family::Phi3 && pct > 0.0 && pct <= 1.0 => {
                let d = (pct * n_embd as f64) as usize / n_head;
                if d == 0 || !d.is_multiple_of(2) || d > head_dim {
                    return Err(Error::Metadata {
                        key: "config.json partial_rotary_factor".into(),
                        message: format!("{pct} gives {d} rotated dimensions of {head_dim}, not an even number in 2..={head_dim}"),
                    });
                }
                d
            }
            _ => head_dim,
        };
        let rope = hf_rope(config, family, rope_dim, rope_base, n_ctx_train)?;
        let rope_freq_scale = rope.freq_scale;
        let mut layers = layer_specs(
            &HF_NAMES,
            family,
            n_layer,
            n_embd,
            n_ff,
            (n_head, n_head_kv, head_dim),
        );
        let (n_expert, n_expert_used) = hf_experts(config, family, &mut layers, n_embd)?;
        let x = hf_extras(config, family, &mut layers, (rope_base, rope_freq_scale), n_embd, head_dim)?;
        Ok(Spec {
            hparams: Hparams {
                family,
                n_layer,
                n_embd,
                n_head,
                n_head_kv,
                head_dim,
                n_ff,
                n_vocab,
                n_ctx_train,
                rms_eps,
                rope_base,
                rope_freq_scale,
                rope_dim,
                rope_style: RopeStyle::Halves,
                n_expert,
                n_expert_used,
                rope_scaling: rope.scaling,
                embd_scale: x.embd_scale,
                query_scale: x.query_scale,
                attn_softcap: x.attn_softcap,
                final_softcap: x.final_softcap,
                ffn_act: x.ffn_act,
            },
            token_embd: TensorSpec::new("model.embed_tokens.weight", &[n_vocab, n_embd]),
            output_norm: TensorSpec::new("model.norm.weight", &[n_embd]),
            // absent, or tie_word_embeddings (a name no tensor has): the embedding is used
            output: TensorSpec::new(
                if config.get("tie_word_embeddings").and_then(|v| v.as_bool()) == Some(true) {
                    "<tied to model.embed_tokens.weight>"
                } else {
                    "lm_head.weight"
                },
                &[n_vocab, n_embd],
            ),
            rope_freqs: TensorSpec::new("<none>", &[rope_dim / 2]),
            rope_freq_values: rope.values,
            rope_long_short: rope.long_short,
            layers,
            norm_shift: x.norm_shift,
        })
    }

    /// Reads the architecture of a GGUF model from its metadata: the hyperparameters and the
    /// tensors it needs with their shapes. The tensors are not looked at here except for the
    /// vocabulary size (rows of `token_embd.weight`).
    ///
    /// Refused: a format other than GGUF, an architecture outside [`SUPPORTED`] (the error names
    /// it and the supported list), a missing or out-of-range hyperparameter (the error names the
    /// key), heads that do not divide the embedding, a rope scaling type other than none, linear,
    /// yarn and longrope (`gguf_rope_scaling`).
    pub fn from_catalog(catalog: &Catalog) -> Result<Spec> {
        if catalog.format.name() != "gguf" {
            return Err(Error::UnsupportedFormat(format!(
                "{} models carry no GGUF metadata (see Spec::from_hf_config for safetensors)",
                catalog.format.name()
            )));
        }
        let arch = meta_str(catalog, "general.architecture")?.unwrap_or("<none>");
        let family = Family::from_name(arch)?;
        let k = |s: &str| format!("{arch}.{s}");
        let n_layer = required(catalog, &k("block_count"))?;
        let n_embd = required(catalog, &k("embedding_length"))?;
        let n_head = required(catalog, &k("attention.head_count"))?;
        let n_head_kv = match meta_uint(catalog, &k("attention.head_count_kv"))? {
            Some(v) => positive(&k("attention.head_count_kv"), v)?,
            None => n_head,
        };
        let n_ff = required(catalog, &k("feed_forward_length"))?;
        let n_ctx_train = required(catalog, &k("context_length"))?;
        let head_dim = match meta_uint(catalog, &k("attention.key_length"))? {
            Some(v) => positive(&k("attention.key_length"), v)?,
            None => {
                if !n_embd.is_multiple_of(n_head) {
                    return Err(Error::Metadata {
                        key: k("attention.head_count"),
                        message: format!("{n_head} heads do not divide the embedding length {n_embd}"),
                    });
                }
                n_embd / n_head
            }
        };
        if let Some(v) = meta_uint(catalog, &k("attention.value_length"))?
            && v as usize != head_dim
        {
            return Err(Error::Metadata {
                key: k("attention.value_length"),
                message: format!("{v} differs from the key length {head_dim}, which is not supported"),
            });
        }
        if !n_head.is_multiple_of(n_head_kv) {
            return Err(Error::Metadata {
                key: k("attention.head_count_kv"),
                message: format!("{n_head_kv} key/value heads do not divide {n_head} query heads"),
            });
        }
        let rms_eps = meta_float(catalog, &k("attention.layer_norm_rms_epsilon"))?.ok_or_else(|| Error::Metadata {
            key: k("attention.layer_norm_rms_epsilon"),
            message: "missing".into(),
        })? as f32;
        if !(rms_eps.is_finite() && rms_eps >= 0.0) {
            return Err(Error::Metadata {
                key: k("attention.layer_norm_rms_epsilon"),
                message: format!("{rms_eps} is not a non-negative number"),
            });
        }
        let rope_base = meta_float(catalog, &k("rope.freq_base"))?.unwrap_or(10000.0) as f32;
        if !(rope_base.is_finite() && rope_base > 0.0) {
            return Err(Error::Metadata {
                key: k("rope.freq_base"),
                message: format!("{rope_base} is not a positive number"),
            });
        }
        let rope_dim = match meta_uint(catalog, &k("rope.dimension_count"))? {
            Some(v) => positive(&k("rope.dimension_count"), v)?,
            None => head_dim,
        };
        if rope_dim > head_dim || !rope_dim.is_multiple_of(2) {
            return Err(Error::Metadata {
                key: k("rope.dimension_count"),
                message: format!("{rope_dim} must be even and at most the head dimension {head_dim}"),
            });
        }
        let (rope_freq_scale, rope_scaling) = gguf_rope_scaling(catalog, arch, n_ctx_train)?;
        let rope_style = match family {
            Family::Llama | Family::Mistral => RopeStyle::Adjacent,
            Family::Qwen2
            | Family::Qwen3
            | Family::Qwen3Moe
            | Family::Olmoe
            | Family::Phi3
            | Family::Gemma2
            | Family::Gemma3 => RopeStyle::Halves,
        };
        let n_vocab = match catalog.get("token_embd.weight") {
            Some(t) if t.shape.len() == 2 => positive("token_embd.weight rows", t.shape[0])?,
            Some(t) => {
                return Err(Error::TensorShape {
                    name: t.name.clone(),
                    expected: vec![0, n_embd as u64],
                    found: t.shape.clone(),
                });
            }
            None => {
                return Err(Error::MissingTensor {
                    name: "token_embd.weight".into(),
                    expected: vec![0, n_embd as u64],
                });
            }
        };
        let mut layers = layer_specs(
            &GGUF_NAMES,
            family,
            n_layer,
            n_embd,
            n_ff,
            (n_head, n_head_kv, head_dim),
        );
        let (n_expert, n_expert_used) = gguf_experts(catalog, arch, family, &mut layers, n_embd, n_ff)?;
        let x = gguf_extras(
            catalog,
            family,
            &mut layers,
            (rope_base, rope_freq_scale),
            (n_embd, n_head, head_dim),
        )?;
        Ok(Spec {
            hparams: Hparams {
                family,
                n_layer,
                n_embd,
                n_head,
                n_head_kv,
                head_dim,
                n_ff,
                n_vocab,
                n_ctx_train,
                rms_eps,
                rope_base,
                rope_freq_scale,
                rope_dim,
                rope_style,
                n_expert,
                n_expert_used,
                rope_scaling,
                embd_scale: x.embd_scale,
                query_scale: x.query_scale,
                attn_softcap: x.attn_softcap,
                final_softcap: x.final_softcap,
                ffn_act: x.ffn_act,
            },
            token_embd: TensorSpec::new("token_embd.weight", &[n_vocab, n_embd]),
            output_norm: TensorSpec::new("output_norm.weight", &[n_embd]),
            // gemma2: llama.cpp always takes the embedding (an output.weight is not read)
            output: TensorSpec::new(
                if family == Family::Gemma2 { "<tied to token_embd.weight>" } else { "output.weight" },
                &[n_vocab, n_embd],
            ),
            // phi3 has no rope_freqs in llama.cpp: its factors are the long or the short ones
            rope_freqs: TensorSpec::new(
                if family == Family::Phi3 { "<none>" } else { "rope_freqs.weight" },
                &[rope_dim / 2],
            ),
            rope_freq_values: None,
            rope_long_short: (family == Family::Phi3).then(|| {
                [
                    RopeFactors::Tensor(TensorSpec::new("rope_factors_long.weight", &[rope_dim / 2])),
                    RopeFactors::Tensor(TensorSpec::new("rope_factors_short.weight", &[rope_dim / 2])),
                ]
            }),
            layers,
            norm_shift: x.norm_shift,
        })
    }
}

/// The name of expert `e`'s block of the stacked tensor `name` (`blk.0.ffn_up_exps.weight[3]`):
/// how plans and reports name one expert's part.
pub fn expert_name(name: &str, e: usize) -> String {
    format!("{name}[{e}]")
}

impl MoeSpec {
    /// The names of expert `e`'s gate, up and down matrices (a stacked tensor's block:
    /// [`expert_name`]).
    pub fn expert_names(&self, e: usize) -> [String; 3] {
        match &self.experts {
            ExpertTensors::Stacked(s) => [0, 1, 2].map(|j| expert_name(&s[j].name, e)),
            ExpertTensors::PerExpert(v) => [0, 1, 2].map(|j| v[e][j].name.clone()),
        }
    }
}

/// What a family adds to the llama layout: [`Hparams`]' Gemma fields and [`Spec::norm_shift`].
struct Extras {
    embd_scale: f32,
    query_scale: Option<f32>,
    attn_softcap: Option<f32>,
    final_softcap: Option<f32>,
    ffn_act: Activation,
    norm_shift: f32,
}

impl Extras {
    /// The llama layout: nothing added.
    fn plain() -> Extras {
        Extras {
            embd_scale: 1.0,
            query_scale: None,
            attn_softcap: None,
            final_softcap: None,
            ffn_act: Activation::Silu,
            norm_shift: 0.0,
        }
    }

    /// Gemma's: the embedding scaled by sqrt(embd), queries scaled by `query_scale`, GELU.
    fn gemma(n_embd: usize, query_scale: f32) -> Extras {
        Extras {
            embd_scale: (n_embd as f32).sqrt(),
            query_scale: Some(query_scale),
            ffn_act: Activation::GeluTanh,
            ..Extras::plain()
        }
    }
}

/// The most experts a layer may have (llama.cpp's `LLAMA_MAX_EXPERTS`).
pub const MAX_EXPERTS: usize = 512;

/// Checks an expert count and a used count read from `count_key` and `used_key`.
fn expert_counts(count_key: &str, n_expert: usize, used_key: &str, n_used: usize) -> Result<()> {
    if n_expert > MAX_EXPERTS {
        return Err(Error::Metadata {
            key: count_key.into(),
            message: format!("{n_expert} experts; at most {MAX_EXPERTS} are supported"),
        });
    }
    if n_used == 0 || n_used > n_expert {
        return Err(Error::Metadata {
            key: used_key.into(),
            message: format!("{n_used} experts used per token must be 1..={n_expert} (the expert count)"),
        });
    }
    Ok(())
}

/// Gives every layer of a GGUF mixture-of-experts model (qwen3moe, olmoe, and llama with
/// `llama.expert_count` > 0: Mixtral) its [`MoeSpec`] with llama.cpp's stacked tensors
/// (`blk.N.ffn_gate_inp`, `ffn_gate_exps`, `ffn_up_exps`, `ffn_down_exps`); returns `(n_expert,
/// n_expert_used)`, `(0, 0)` for a dense model. The expert feed-forward length is
/// `<arch>.expert_feed_forward_length` for qwen3moe (else `feed_forward_length /
/// expert_used_count`, as llama.cpp), `feed_forward_length` for the others.
fn gguf_experts(
    catalog: &Catalog,
    arch: &str,
    family: Family,
    layers: &mut [LayerSpec],
    n_embd: usize,
    n_ff: usize,
) -> Result<(usize, usize)> {
    let k = |s: &str| format!("{arch}.{s}");
    let n_expert = meta_uint(catalog, &k("expert_count"))?.unwrap_or(0) as usize;
    let moe_family = matches!(family, Family::Qwen3Moe | Family::Olmoe);
    if n_expert == 0 || !(moe_family || family == Family::Llama) {
        if moe_family {
            return Err(Error::Metadata {
                key: k("expert_count"),
                message: format!("missing or 0: a {arch} model has experts"),
            });
        }
        return Ok((0, 0));
    }
    let n_used = meta_uint(catalog, &k("expert_used_count"))?.unwrap_or(0) as usize;
    expert_counts(&k("expert_count"), n_expert, &k("expert_used_count"), n_used)?;
    let n_ff_exp = match (family, meta_uint(catalog, &k("expert_feed_forward_length"))?) {
        (Family::Qwen3Moe, Some(v)) => positive(&k("expert_feed_forward_length"), v)?,
        (Family::Qwen3Moe, None) => positive(&k("feed_forward_length"), (n_ff / n_used) as u64)?,
        _ => n_ff,
    };
    for (i, l) in layers.iter_mut().enumerate() {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        l.moe = Some(MoeSpec {
            n_expert,
            n_expert_used: n_used,
            n_ff_exp,
            norm_weights: family != Family::Olmoe,
            router: TensorSpec::new(n("ffn_gate_inp"), &[n_expert, n_embd]),
            experts: ExpertTensors::Stacked([
                TensorSpec::new(n("ffn_gate_exps"), &[n_expert, n_ff_exp, n_embd]),
                TensorSpec::new(n("ffn_up_exps"), &[n_expert, n_ff_exp, n_embd]),
                TensorSpec::new(n("ffn_down_exps"), &[n_expert, n_embd, n_ff_exp]),
            ]),
        });
    }
    Ok((n_expert, n_used))
}

/// [`gguf_experts`] for a Hugging Face checkpoint: `config.json`'s `num_experts` (qwen3_moe,
/// olmoe) or `num_local_experts` (mixtral), `num_experts_per_tok`, the expert feed-forward
/// length (`moe_intermediate_size` for qwen3_moe, `intermediate_size` for the others) and
/// `norm_topk_prob` (mixtral always normalises; the others by this flag, false when absent, as
/// transformers defaults it); each expert's own tensors (`mlp.experts.E.gate_proj` ..., or
/// mixtral's `block_sparse_moe.experts.E.w1`/`w3`/`w2`) and the router `mlp.gate` /
/// `block_sparse_moe.gate`.
fn hf_experts(
    config: &serde_json::Value,
    family: Family,
    layers: &mut [LayerSpec],
    n_embd: usize,
) -> Result<(usize, usize)> {
    let model_type = config.get("model_type").and_then(|v| v.as_str()).unwrap_or("");
    let mixtral = model_type == "mixtral";
    if !(mixtral || matches!(family, Family::Qwen3Moe | Family::Olmoe)) {
        return Ok((0, 0));
    }
    let count_key = if mixtral { "num_local_experts" } else { "num_experts" };
    let n_expert = cfg_required(config, count_key)?;
    let n_used = cfg_required(config, "num_experts_per_tok")?;
    expert_counts(
        &format!("config.json {count_key}"),
        n_expert,
        "config.json num_experts_per_tok",
        n_used,
    )?;
    let n_ff_exp = if family == Family::Qwen3Moe {
        cfg_required(config, "moe_intermediate_size")?
    } else {
        cfg_required(config, "intermediate_size")?
    };
    if family == Family::Qwen3Moe {
        let sparse_step = cfg_usize(config, "decoder_sparse_step")?.unwrap_or(1);
        let dense = config.get("mlp_only_layers").and_then(|v| v.as_array()).map_or(0, Vec::len);
        if sparse_step != 1 || dense != 0 {
            return Err(Error::Metadata {
                key: "config.json decoder_sparse_step".into(),
                message: "dense layers among the expert layers (decoder_sparse_step other than 1, or \
                          mlp_only_layers) are not supported"
                    .into(),
            });
        }
    }
    let norm_weights = mixtral || config.get("norm_topk_prob").and_then(|v| v.as_bool()) == Some(true);
    let (block, names) = if mixtral {
        ("block_sparse_moe", ["w1", "w3", "w2"])
    } else {
        ("mlp", ["gate_proj", "up_proj", "down_proj"])
    };
    for (i, l) in layers.iter_mut().enumerate() {
        let p = format!("model.layers.{i}.{block}");
        let experts = (0..n_expert)
            .map(|e| {
                let t = |j: usize, shape: &[usize]| TensorSpec::new(format!("{p}.experts.{e}.{}.weight", names[j]), shape);
                [t(0, &[n_ff_exp, n_embd]), t(1, &[n_ff_exp, n_embd]), t(2, &[n_embd, n_ff_exp])]
            })
            .collect();
        l.moe = Some(MoeSpec {
            n_expert,
            n_expert_used: n_used,
            n_ff_exp,
            norm_weights,
            router: TensorSpec::new(format!("{p}.gate.weight"), &[n_expert, n_embd]),
            experts: ExpertTensors::PerExpert(experts),
        });
    }
    Ok((n_expert, n_used))
}

/// Whether layer `il` is a sliding-window layer under llama.cpp's `set_swa_pattern(pattern)`:
/// `pattern - 1` sliding layers, then a global one (0: every layer sliding).
fn swa_layer(il: usize, pattern: usize) -> bool {
    pattern == 0 || il % pattern < pattern - 1
}

/// Gemma's per-layer parts: the post-attention and post-FFN norms (named by `post`), and on the
/// layers `sliding(il)` selects, the window and the sliding layers' rope.
fn gemma_layers(
    layers: &mut [LayerSpec],
    post: impl Fn(usize) -> [String; 2],
    n_embd: usize,
    window: Option<usize>,
    sliding: impl Fn(usize) -> bool,
    swa_rope: (f32, f32),
) {
    for (il, l) in layers.iter_mut().enumerate() {
        let [a, f] = post(il);
        l.post_norms = Some([TensorSpec::new(a, &[n_embd]), TensorSpec::new(f, &[n_embd])]);
        if let Some(w) = window
            && sliding(il)
        {
            l.window = Some(w);
            l.rope = Some(swa_rope);
        }
    }
}

/// A positive float metadata value of a GGUF, or `default` when absent.
fn meta_positive(catalog: &Catalog, key: &str, default: f32) -> Result<f32> {
    let v = meta_float(catalog, key)?.map_or(default, |v| v as f32);
    if !(v.is_finite() && v > 0.0) {
        return Err(Error::Metadata {
            key: key.into(),
            message: format!("{v} is not a positive number"),
        });
    }
    Ok(v)
}

/// The GGUF keys of Gemma 2/3 and of Mistral's sliding window, as llama.cpp v0.4.0 reads them
/// (`src/models/gemma2.cpp`, `gemma3.cpp`): soft-capping (gemma2: attention 50 and final 30 by
/// default; gemma3: final only, when stated), `attention.sliding_window` (gemma2: 4096 by
/// default; gemma3: no window unless stated), `attention.sliding_window_pattern` (2 and 6),
/// `rope.freq_base_swa` (gemma2: the global base; gemma3: 10000, with no position scaling),
/// the query scale 1/sqrt(key_length), or 1/sqrt(embd / heads) for the 27B shapes (46 and 62
/// layers).
fn gguf_extras(
    catalog: &Catalog,
    family: Family,
    layers: &mut [LayerSpec],
    (rope_base, rope_freq_scale): (f32, f32),
    (n_embd, n_head, head_dim): (usize, usize, usize),
) -> Result<Extras> {
    let arch = family.name();
    let k = |s: &str| format!("{arch}.{s}");
    let window_key = k("attention.sliding_window");
    let window = match meta_uint(catalog, &window_key)? {
        Some(0) => None,
        Some(w) => Some(positive(&window_key, w)?),
        None => None,
    };
    let pattern = |default: usize| -> Result<usize> {
        Ok(meta_uint(catalog, &k("attention.sliding_window_pattern"))?.map_or(default, |v| v.min(1 << 24) as usize))
    };
    let post = |il: usize| [format!("blk.{il}.post_attention_norm.weight"), format!("blk.{il}.post_ffw_norm.weight")];
    let gemma_scale = |big: bool| {
        if big {
            1.0 / ((n_embd / n_head) as f32).sqrt()
        } else {
            1.0 / (head_dim as f32).sqrt()
        }
    };
    match family {
        Family::Mistral => {
            for l in layers.iter_mut() {
                l.window = window;
            }
            Ok(Extras::plain())
        }
        Family::Gemma2 => {
            let pattern = pattern(2)?;
            let swa_rope = (meta_positive(catalog, &k("rope.freq_base_swa"), rope_base)?, rope_freq_scale);
            let w = window.or(if meta(catalog, &window_key).is_none() { Some(4096) } else { None });
            gemma_layers(layers, post, n_embd, w, |il| swa_layer(il, pattern), swa_rope);
            let mut x = Extras::gemma(n_embd, gemma_scale(layers.len() == 46));
            x.attn_softcap = Some(meta_positive(catalog, &k("attn_logit_softcapping"), 50.0)?);
            x.final_softcap = Some(meta_positive(catalog, &k("final_logit_softcapping"), 30.0)?);
            Ok(x)
        }
        Family::Gemma3 => {
            let pattern = pattern(6)?;
            let swa_rope = (meta_positive(catalog, &k("rope.freq_base_swa"), 10000.0)?, 1.0);
            gemma_layers(layers, post, n_embd, window, |il| swa_layer(il, pattern), swa_rope);
            let mut x = Extras::gemma(n_embd, gemma_scale(layers.len() == 62));
            x.final_softcap = match meta_float(catalog, &k("final_logit_softcapping"))? {
                None => None,
                Some(c) if c == 0.0 => None,
                Some(_) => Some(meta_positive(catalog, &k("final_logit_softcapping"), 0.0)?),
            };
            Ok(x)
        }
        // phi3: llama.cpp applies no sliding window to it
        Family::Llama | Family::Qwen2 | Family::Qwen3 | Family::Qwen3Moe | Family::Olmoe | Family::Phi3 => {
            Ok(Extras::plain())
        }
    }
}

/// A positive number of a `config.json`, `None` when absent or null.
fn cfg_positive(config: &serde_json::Value, key: &str) -> Result<Option<f32>> {
    match config.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() && x > 0.0 => Ok(Some(x as f32)),
            _ => Err(Error::Metadata {
                key: format!("config.json {key}"),
                message: format!("expected a positive number, found {v}"),
            }),
        },
    }
}

/// The `config.json` fields of Gemma 2/3 and Mistral's `sliding_window`, as transformers reads
/// them: `query_pre_attn_scalar` (the query scale is its inverse square root; default
/// `head_dim`), `attn_logit_softcapping`, `final_logit_softcapping`, `sliding_window`,
/// `layer_types` (`sliding_attention`/`full_attention` per layer) or `sliding_window_pattern`
/// (gemma3, default 6; gemma2 alternates, the even layers sliding), `rope_local_base_freq`
/// (gemma3's sliding layers, default 10000, no scaling); the norms are stored as `w` for `1 + w`
/// ([`Spec::norm_shift`]) and the FFN norm is `pre_feedforward_layernorm`.
fn hf_extras(
    config: &serde_json::Value,
    family: Family,
    layers: &mut [LayerSpec],
    (rope_base, rope_freq_scale): (f32, f32),
    n_embd: usize,
    head_dim: usize,
) -> Result<Extras> {
    let window = cfg_usize(config, "sliding_window")?;
    match family {
        Family::Mistral => {
            for l in layers.iter_mut() {
                l.window = window;
            }
            Ok(Extras::plain())
        }
        Family::Gemma2 | Family::Gemma3 => {
            let types: Option<Vec<bool>> = match config.get("layer_types") {
                None | Some(serde_json::Value::Null) => None,
                Some(v) => {
                    let list = v.as_array().filter(|a| a.len() == layers.len());
                    let parsed: Option<Vec<bool>> = list.and_then(|a| {
                        a.iter()
                            .map(|t| match t.as_str() {
                                Some("sliding_attention") => Some(true),
                                Some("full_attention") => Some(false),
                                _ => None,
                            })
                            .collect()
                    });
                    match parsed {
                        Some(p) => Some(p),
                        None => {
                            return Err(Error::Metadata {
                                key: "config.json layer_types".into(),
                                message: format!(
                                    "expected {} of \"sliding_attention\" or \"full_attention\", found {v}",
                                    layers.len()
                                ),
                            });
                        }
                    }
                }
            };
            let pattern = match family {
                Family::Gemma2 => 2,
                _ => cfg_usize(config, "sliding_window_pattern")?.unwrap_or(6),
            };
            let swa_rope = match family {
                Family::Gemma2 => (rope_base, rope_freq_scale),
                _ => (cfg_positive(config, "rope_local_base_freq")?.unwrap_or(10000.0), 1.0),
            };
            let post = |il: usize| {
                [
                    format!("model.layers.{il}.post_attention_layernorm.weight"),
                    format!("model.layers.{il}.post_feedforward_layernorm.weight"),
                ]
            };
            let window = window.or(Some(4096));
            gemma_layers(
                layers,
                post,
                n_embd,
                window,
                |il| types.as_ref().map_or(swa_layer(il, pattern), |t| t[il]),
                swa_rope,
            );
            for (il, l) in layers.iter_mut().enumerate() {
                l.ffn_norm.name = format!("model.layers.{il}.pre_feedforward_layernorm.weight");
            }
            let scalar = cfg_positive(config, "query_pre_attn_scalar")?.unwrap_or(head_dim as f32);
            let mut x = Extras::gemma(n_embd, 1.0 / scalar.sqrt());
            x.attn_softcap = cfg_positive(config, "attn_logit_softcapping")?;
            x.final_softcap = cfg_positive(config, "final_logit_softcapping")?;
            x.norm_shift = 1.0;
            Ok(x)
        }
        // phi3: llama.cpp applies no sliding window to it
        Family::Llama | Family::Qwen2 | Family::Qwen3 | Family::Qwen3Moe | Family::Olmoe | Family::Phi3 => {
            Ok(Extras::plain())
        }
    }
}

impl Spec {
    /// The rope `(base, linear position scale)` of layer `il`: its own ([`LayerSpec::rope`]) or
    /// the model's.
    pub fn layer_rope(&self, il: usize) -> (f32, f32) {
        self.layers
            .get(il)
            .and_then(|l| l.rope)
            .unwrap_or((self.hparams.rope_base, self.hparams.rope_freq_scale))
    }

    /// What of this model the executors other than the CPU one (wgpu, CUDA, the browser's
    /// WebGPU runner) do not compute yet, for their refusal: a mixture of experts, Gemma's
    /// layout, or a sliding window narrower than the `context` positions (a wider one masks
    /// nothing). `None`: they run it.
    pub fn beyond_device_executors(&self, context: usize) -> Option<String> {
        let h = &self.hparams;
        if h.n_expert > 0 || self.layers.iter().any(|l| l.moe.is_some()) {
            return Some(format!(
                "{} is a mixture-of-experts model ({} experts, {} per token), which runs on the CPU only so far",
                h.family.name(),
                h.n_expert,
                h.n_expert_used
            ));
        }
        if matches!(h.family, Family::Gemma2 | Family::Gemma3) {
            return Some(format!(
                "{} (post-norms, GELU, soft-capping, sliding-window layers) runs on the CPU only so far",
                h.family.name()
            ));
        }
        if let Some(w) = self.layers.iter().filter_map(|l| l.window).min()
            && w < context
        {
            return Some(format!(
                "{}'s sliding window of {w} positions (narrower than the context of {context}) is applied on the CPU only so far; use the CPU, or a context of at most {w}",
                h.family.name()
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Spec {
        Spec::from_hf_config(&serde_json::json!({
            "model_type": "llama", "num_hidden_layers": 1, "hidden_size": 64,
            "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 128,
            "vocab_size": 32, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0
        }))
        .unwrap()
    }

    /// The table every device executor uploads is the CPU executor's rows, position by position;
    /// position 0 is the identity and pair 0 turns by one radian a position; bad frequency
    /// factors are refused naming the tensor.
    #[test]
    fn rope_table_is_the_rows_and_checks_frequency_factors() {
        let s = spec();
        let pairs = s.hparams.rope_dim / 2;
        let freqs: Vec<f32> = (0..pairs).map(|i| 1.0 + i as f32 / 4.0).collect();
        for f in [None, Some(&freqs[..])] {
            let t = s.rope_table(5, f).unwrap();
            assert_eq!(t.len(), 5 * pairs * 2);
            for pos in 0..5 {
                let mut row = Vec::new();
                s.rope_row(pos, f, |c, sn| row.extend([c, sn]));
                assert_eq!(&t[pos * pairs * 2..(pos + 1) * pairs * 2], &row[..]);
            }
            assert!(t[..pairs * 2].chunks(2).all(|p| p == [1.0, 0.0]));
        }
        let t = s.rope_table(2, None).unwrap();
        assert_eq!([t[pairs * 2], t[pairs * 2 + 1]], [1f32.cos(), 1f32.sin()]);
        for bad in [&freqs[..pairs - 1], &[0.0; 64][..pairs], &[f32::NAN; 64][..pairs]] {
            match s.rope_table(2, Some(bad)) {
                Err(Error::Metadata { key, .. }) => assert_eq!(key, s.rope_freqs.name),
                other => panic!("{other:?}"),
            }
        }
    }

    fn moe_config(model_type: &str, extra: serde_json::Value) -> serde_json::Value {
        let mut c = serde_json::json!({
            "model_type": model_type, "num_hidden_layers": 2, "hidden_size": 64,
            "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 32,
            "num_experts_per_tok": 2
        });
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    }

    /// Phi-3 from config.json: fused parts of qkv_proj and gate_up_proj with the rows llama.cpp
    /// takes (Q, K, V; gate then up), Phi-4-mini's partial rotary, longrope's factors by context
    /// and the converter's attention factor; a list of the wrong length is refused naming it.
    #[test]
    fn phi3_config_is_read_as_llama_cpp_runs_its_conversion() {
        let pairs: Vec<f32> = (0..12).map(|i| 1.0 + i as f32).collect();
        let cfg = |long: &[f32]| {
            serde_json::json!({
                "model_type": "phi3", "num_hidden_layers": 1, "hidden_size": 256, "num_attention_heads": 8,
                "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 32,
                "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
                "partial_rotary_factor": 0.75,
                "rope_scaling": {"type": "longrope", "long_factor": long, "short_factor": vec![1.0; 12]},
            })
        };
        let mut s = Spec::from_hf_config(&cfg(&pairs)).unwrap();
        let l = &s.layers[0];
        let qkv = "model.layers.0.self_attn.qkv_proj.weight";
        assert_eq!(l.wq.part.as_ref().unwrap().tensor, qkv);
        assert_eq!(l.wq.part.as_ref().unwrap().shape, [512, 256]);
        assert_eq!([&l.wq.name, &l.wk.name, &l.wv.name], [
            &format!("{qkv}[0..256]"),
            &format!("{qkv}[256..384]"),
            &format!("{qkv}[384..512]")
        ]);
        assert_eq!(l.gate.name, "model.layers.0.mlp.gate_up_proj.weight[0..512]");
        assert_eq!(l.up.name, "model.layers.0.mlp.gate_up_proj.weight[512..1024]");
        let h = &s.hparams;
        assert_eq!((h.rope_dim, h.head_dim, h.rope_style), (24, 32, RopeStyle::Halves));
        let attn = (1.0 + 32f64.ln() / 4096f64.ln()).sqrt() as f32;
        assert_eq!((h.rope_scaling.attn_factor, h.rope_scaling.n_ctx_orig), (attn, 4096));
        s.fit_context(4096);
        assert_eq!(s.rope_freq_values.as_deref(), Some(&[1.0; 12][..]));
        s.fit_context(4097);
        assert_eq!(s.rope_freq_values.as_deref(), Some(&pairs[..]));
        match Spec::from_hf_config(&cfg(&pairs[..11])) {
            Err(Error::Metadata { key, message }) => {
                assert_eq!(key, "config.json rope_scaling.long_factor");
                assert!(message.contains("11 numbers") && message.contains("12"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    fn gemma_config(extra: serde_json::Value) -> serde_json::Value {
        let mut c = serde_json::json!({
            "model_type": "gemma3_text", "num_hidden_layers": 12, "hidden_size": 64,
            "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32, "intermediate_size": 128,
            "vocab_size": 32, "rope_theta": 1e6, "query_pre_attn_scalar": 64, "sliding_window": 16,
            "rope_scaling": {"rope_type": "linear", "factor": 8.0}
        });
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    }

    /// config.json's experts: each family's count key, expert width and weight normalisation,
    /// per-expert tensor names; counts out of range are refused naming the key.
    #[test]
    fn hf_mixture_of_experts() {
        let s = Spec::from_hf_config(&moe_config("qwen3_moe", serde_json::json!({
            "num_experts": 8, "moe_intermediate_size": 32, "norm_topk_prob": true
        })))
        .unwrap();
        assert_eq!((s.hparams.family, s.hparams.n_expert, s.hparams.n_expert_used), (Family::Qwen3Moe, 8, 2));
        let m = s.layers[1].moe.as_ref().unwrap();
        assert_eq!((m.n_ff_exp, m.norm_weights), (32, true));
        assert_eq!(m.router.name, "model.layers.1.mlp.gate.weight");
        assert_eq!(m.expert_names(7)[2], "model.layers.1.mlp.experts.7.down_proj.weight");
        let s = Spec::from_hf_config(&moe_config("mixtral", serde_json::json!({"num_local_experts": 4}))).unwrap();
        let m = s.layers[0].moe.as_ref().unwrap();
        assert_eq!((s.hparams.family, m.n_ff_exp, m.norm_weights), (Family::Llama, 128, true));
        assert_eq!(m.expert_names(3)[0], "model.layers.0.block_sparse_moe.experts.3.w1.weight");
        let s = Spec::from_hf_config(&moe_config("olmoe", serde_json::json!({"num_experts": 4}))).unwrap();
        assert!(!s.layers[0].moe.as_ref().unwrap().norm_weights);
        assert_eq!(s.layers[0].qk_norm.as_ref().unwrap()[0].shape, vec![64]);
        for (ty, extra, key) in [
            ("olmoe", serde_json::json!({"num_experts": 1}), "config.json num_experts_per_tok"),
            ("olmoe", serde_json::json!({}), "config.json num_experts"),
            ("mixtral", serde_json::json!({"num_local_experts": 100000}), "config.json num_local_experts"),
        ] {
            match Spec::from_hf_config(&moe_config(ty, extra)) {
                Err(Error::Metadata { key: k, .. }) => assert_eq!(k, key),
                other => panic!("{ty}: {other:?}"),
            }
        }
    }

    /// Gemma 3's `config.json` as transformers reads it: five sliding layers of six (rope base
    /// 10000, no scaling), the global ones with `rope_theta` and the linear scaling, or the
    /// pattern `layer_types` states; queries scaled by `query_pre_attn_scalar`^-1/2; the norms
    /// stored as `w` for `1 + w`; the FFN norm is `pre_feedforward_layernorm`. A `layer_types`
    /// of the wrong length is refused naming the key.
    #[test]
    fn gemma3_config_interleaves_sliding_and_global_layers() {
        let s = Spec::from_hf_config(&gemma_config(serde_json::json!({}))).unwrap();
        let global: Vec<usize> = (0..12).filter(|&i| s.layers[i].window.is_none()).collect();
        assert_eq!(global, [5, 11]);
        assert!(s.layers.iter().all(|l| l.window.is_none() || l.window == Some(16)));
        assert_eq!((s.layer_rope(0), s.layer_rope(5)), ((10000.0, 1.0), (1e6, 0.125)));
        assert_eq!(s.hparams.query_scale, Some(0.125));
        assert_eq!((s.hparams.embd_scale, s.norm_shift), (8.0, 1.0));
        assert_eq!(s.hparams.ffn_act, Activation::GeluTanh);
        assert_eq!(s.layers[3].ffn_norm.name, "model.layers.3.pre_feedforward_layernorm.weight");
        assert!(s.beyond_device_executors(8).is_some_and(|w| w.contains("gemma3")));

        let types: Vec<&str> = (0..12).map(|i| if i % 3 == 2 { "full_attention" } else { "sliding_attention" }).collect();
        let s = Spec::from_hf_config(&gemma_config(serde_json::json!({"layer_types": types}))).unwrap();
        let global: Vec<usize> = (0..12).filter(|&i| s.layers[i].window.is_none()).collect();
        assert_eq!(global, [2, 5, 8, 11]);
        match Spec::from_hf_config(&gemma_config(serde_json::json!({"layer_types": ["full_attention"]}))) {
            Err(Error::Metadata { key, .. }) => assert_eq!(key, "config.json layer_types"),
            other => panic!("{other:?}"),
        }
    }

    /// llama.cpp's YaRN set-up: the attention factor mscale(f) / (1 + 0.1 ln f) is 1 up to
    /// rounding, and the correction dimensions are ggml's for a 64-position original context.
    #[test]
    fn yarn_parameters_are_ggmls() {
        let y = RopeScaling::yarn(4.0, 1.0, 64);
        assert_eq!(y.ext_factor, 1.0);
        assert!((y.attn_factor - 1.0).abs() < 1e-6);
        assert_eq!(y.corr_dims(32, 1e4), [0.0, 5.0]);
        assert_eq!(RopeScaling::yarn(4.0, 1.0, 32768).corr_dims(128, 1e6), [23.0, 40.0]);
    }

    /// Mistral's `sliding_window` (config.json) is applied to every layer; null or absent, none.
    /// The device executors refuse a window narrower than their context only.
    #[test]
    fn mistral_sliding_window_is_applied() {
        let mut c = serde_json::json!({
            "model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 64,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
            "vocab_size": 32, "sliding_window": 4096
        });
        let s = Spec::from_hf_config(&c).unwrap();
        assert!(s.layers.iter().all(|l| l.window == Some(4096) && l.rope.is_none()));
        assert_eq!(s.beyond_device_executors(4096), None);
        assert!(s.beyond_device_executors(4097).is_some_and(|w| w.contains("mistral") && w.contains("4096")));
        c["sliding_window"] = serde_json::Value::Null;
        let s = Spec::from_hf_config(&c).unwrap();
        assert!(s.layers.iter().all(|l| l.window.is_none()));
        assert_eq!(s.hparams.embd_scale, 1.0);
    }
}
