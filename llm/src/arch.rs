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
pub const SUPPORTED: &[&str] = &["llama", "mistral", "qwen2", "qwen3", "qwen3moe", "olmoe", "mixtral"];

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
    /// Mistral (llama tensors; sliding-window attention is not applied).
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
}

/// A tensor the architecture needs: its name and row-major shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    /// The tensor's name in the file.
    pub name: String,
    /// Its row-major shape (`[out, in]` for a weight matrix).
    pub shape: Vec<u64>,
}

impl TensorSpec {
    fn new(name: impl Into<String>, shape: &[usize]) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            shape: shape.iter().map(|&d| d as u64).collect(),
        }
    }
}

/// The tensors of one transformer block.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// The transformer blocks.
    pub layers: Vec<LayerSpec>,
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
                    Family::Qwen3 | Family::Qwen3Moe => {
                        Some([TensorSpec::new(n(12), &[head_dim]), TensorSpec::new(n(13), &[head_dim])])
                    }
                    // OLMoE normalises the whole projection: one RMSNorm over all heads
                    Family::Olmoe => Some([TensorSpec::new(n(12), &[q_dim]), TensorSpec::new(n(13), &[kv_dim])]),
                    _ => None,
                },
                moe: None,
            }
        })
        .collect()
}

impl Spec {
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
    /// (1 without), times the linear scale. `freqs`, when given, has at least `rope_dim / 2`
    /// values (the tensor's shape is checked when the model is bound; [`Spec::rope_table`]
    /// checks it too).
    pub fn rope_row(&self, pos: usize, freqs: Option<&[f32]>, mut pair: impl FnMut(f32, f32)) {
        let h = &self.hparams;
        let theta_scale = h.rope_base.powf(-2.0 / h.rope_dim as f32);
        let mut theta = pos as f32;
        for i in 0..h.rope_dim / 2 {
            let ff = freqs.map_or(1.0, |f| f[i]);
            let t = h.rope_freq_scale * (theta / ff);
            pair(t.cos(), t.sin());
            theta *= theta_scale;
        }
    }

    /// Reads the architecture of a Hugging Face checkpoint from its `config.json` (`model_type`,
    /// `num_hidden_layers`, `hidden_size`, `num_attention_heads`, `num_key_value_heads`,
    /// `intermediate_size`, `vocab_size`, `max_position_embeddings`, `rms_norm_eps`,
    /// `rope_theta`, `head_dim`, `rope_scaling` (linear only)) for `model_type` llama, mistral,
    /// qwen2 or qwen3, with Hugging Face tensor names and
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
        let rope_freq_scale = match config.get("rope_scaling") {
            None | Some(serde_json::Value::Null) => 1.0,
            Some(s) => {
                let ty = s.get("rope_type").or_else(|| s.get("type")).and_then(|v| v.as_str());
                let factor = s.get("factor").and_then(|v| v.as_f64()).unwrap_or(1.0) as f32;
                match ty {
                    Some("linear") if factor.is_finite() && factor > 0.0 => 1.0 / factor,
                    Some("default") => 1.0,
                    _ => {
                        return Err(Error::Metadata {
                            key: "config.json rope_scaling".into(),
                            message: format!("{s} is not supported (linear only)"),
                        });
                    }
                }
            }
        };
        let mut layers = layer_specs(
            &HF_NAMES,
            family,
            n_layer,
            n_embd,
            n_ff,
            (n_head, n_head_kv, head_dim),
        );
        let (n_expert, n_expert_used) = hf_experts(config, family, &mut layers, n_embd)?;
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
                rope_dim: head_dim,
                rope_style: RopeStyle::Halves,
                n_expert,
                n_expert_used,
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
            rope_freqs: TensorSpec::new("<none>", &[head_dim / 2]),
            layers,
        })
    }

    /// Reads the architecture of a GGUF model from its metadata: the hyperparameters and the
    /// tensors it needs with their shapes. The tensors are not looked at here except for the
    /// vocabulary size (rows of `token_embd.weight`).
    ///
    /// Refused: a format other than GGUF, an architecture outside [`SUPPORTED`] (the error names
    /// it and the supported list), a missing or out-of-range hyperparameter (the error names the
    /// key), heads that do not divide the embedding, rope scaling other than linear.
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
        let scaling = meta_str(catalog, &k("rope.scaling.type"))?.unwrap_or("none");
        let rope_freq_scale = match scaling {
            "none" => 1.0,
            "linear" => {
                let f = meta_float(catalog, &k("rope.scaling.factor"))?.unwrap_or(1.0) as f32;
                if !(f.is_finite() && f > 0.0) {
                    return Err(Error::Metadata {
                        key: k("rope.scaling.factor"),
                        message: format!("{f} is not a positive number"),
                    });
                }
                1.0 / f
            }
            other => {
                return Err(Error::Metadata {
                    key: k("rope.scaling.type"),
                    message: format!("rope scaling '{other}' is not supported (none, linear)"),
                });
            }
        };
        let rope_style = match family {
            Family::Llama | Family::Mistral => RopeStyle::Adjacent,
            Family::Qwen2 | Family::Qwen3 | Family::Qwen3Moe | Family::Olmoe => RopeStyle::Halves,
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
            },
            token_embd: TensorSpec::new("token_embd.weight", &[n_vocab, n_embd]),
            output_norm: TensorSpec::new("output_norm.weight", &[n_embd]),
            output: TensorSpec::new("output.weight", &[n_vocab, n_embd]),
            rope_freqs: TensorSpec::new("rope_freqs.weight", &[rope_dim / 2]),
            layers,
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
}
