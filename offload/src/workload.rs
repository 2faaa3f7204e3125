//! The workload: what a model asks of the device — ordered ops, the weight tensors each reads,
//! and what each op costs. Built from Llama-style layer shapes ([`LlamaShape`]) or from any model
//! file's tensor list ([`Workload::from_model`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::profile::DeviceProfile;

/// How an op reads a weight tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Access {
    /// Every byte is read by the kernel: the tensor must be on the device (resident or streamed).
    Dense,
    /// Only a few rows are gathered (an embedding table): served from host memory row by row,
    /// never resident and never streamed (spec §2.3, §3.4).
    Gather,
}

/// One weight tensor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadTensor {
    /// Name (as in the checkpoint).
    pub name: String,
    /// Stored size in bytes.
    pub bytes: u64,
    /// How ops read it.
    pub access: Access,
    /// The split unit: bytes of one output row (a matrix's first dimension). A plan keeps a
    /// whole number of rows resident and streams the rest, so a kernel never reads a row that
    /// straddles its resident and streamed parts. 0 or 1: any byte count.
    #[serde(default)]
    pub row_bytes: u64,
}

/// Bytes of one output row of a tensor of `shape` stored in `bytes` bytes (its first
/// dimension), or 0 when the rows do not divide the bytes evenly (an encoded tensor) or the
/// tensor has fewer than two dimensions.
pub fn row_bytes_of(shape: &[u64], bytes: u64) -> u64 {
    match shape.first() {
        Some(&rows) if shape.len() >= 2 && rows > 0 && bytes.is_multiple_of(rows) => bytes / rows,
        _ => 0,
    }
}

/// What an op costs. With `seconds` set, that is the time; otherwise
/// `max(flops / F, hbm_bytes / BW_hbm) + launch` under a [`DeviceProfile`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// Floating-point operations.
    pub flops: f64,
    /// Bytes read and written in device memory (weights, activations, KV cache).
    pub hbm_bytes: f64,
    /// An explicit time in seconds, overriding the roofline estimate.
    pub seconds: Option<f64>,
}

impl Cost {
    /// A roofline cost.
    pub fn roofline(flops: f64, hbm_bytes: f64) -> Cost {
        Cost {
            flops,
            hbm_bytes,
            seconds: None,
        }
    }

    /// An explicit time.
    pub fn explicit(seconds: f64) -> Cost {
        Cost {
            flops: 0.0,
            hbm_bytes: 0.0,
            seconds: Some(seconds),
        }
    }

    /// Time in seconds on `profile` (never negative, never NaN).
    pub fn seconds_on(&self, profile: &DeviceProfile) -> f64 {
        let t = match self.seconds {
            Some(s) => s,
            None => {
                let f = self.flops / (profile.compute_tflops * 1e12);
                let m = self.hbm_bytes / (profile.hbm_gbps * 1e9);
                f.max(m) + profile.launch_us * 1e-6
            }
        };
        if t.is_finite() && t > 0.0 { t } else { 0.0 }
    }
}

/// One op of a forward: the tensors it reads, in order, and its cost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Op {
    /// Name (for reports and hazard findings).
    pub name: String,
    /// Layer group (ops of one decoder layer share it; used by the FlexGen-like baseline's
    /// one-layer lookahead). Groups must be non-decreasing along the op order.
    pub group: u32,
    /// Indices into [`Workload::tensors`].
    pub reads: Vec<usize>,
    /// Cost.
    pub cost: Cost,
}

/// An ordered list of ops over a set of weight tensors: one forward (what plans are compiled
/// from; not to be confused with `tensorlane::model::Model`, a model file on disk).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// Name (`llama-7b`, a file name, ...).
    pub name: String,
    /// Tokens per forward (1 = decode).
    pub tokens: u64,
    /// Weight tensors.
    pub tensors: Vec<WorkloadTensor>,
    /// Ops in execution order.
    pub ops: Vec<Op>,
}

impl Workload {
    /// Checks indices and group order; a model that passes can be planned.
    pub fn validate(&self) -> Result<(), Error> {
        if self.ops.is_empty() {
            return Err(Error::InvalidWorkload("a model needs at least one op".into()));
        }
        let mut last_group = 0;
        for (i, op) in self.ops.iter().enumerate() {
            if op.group < last_group {
                return Err(Error::InvalidWorkload(format!(
                    "op {} ({}): group {} after group {last_group}",
                    i, op.name, op.group
                )));
            }
            last_group = op.group;
            for &t in &op.reads {
                if t >= self.tensors.len() {
                    return Err(Error::InvalidWorkload(format!(
                        "op {} ({}) reads tensor {t}, but there are {}",
                        i,
                        op.name,
                        self.tensors.len()
                    )));
                }
            }
            if let Some(s) = op.cost.seconds
                && !(s.is_finite() && s >= 0.0)
            {
                return Err(Error::InvalidWorkload(format!("op {}: bad explicit time {s}", op.name)));
            }
            if !(op.cost.flops.is_finite()
                && op.cost.flops >= 0.0
                && op.cost.hbm_bytes.is_finite()
                && op.cost.hbm_bytes >= 0.0)
            {
                return Err(Error::InvalidWorkload(format!("op {}: bad cost", op.name)));
            }
        }
        Ok(())
    }

    /// `W`: bytes of dense tensors some op reads (what must reach the device each forward).
    pub fn weight_bytes(&self) -> u64 {
        self.read_tensors()
            .iter()
            .filter(|&&t| self.tensors[t].access == Access::Dense)
            .map(|&t| self.tensors[t].bytes)
            .sum()
    }

    /// Bytes of gathered tensors (served from host memory).
    pub fn gather_bytes(&self) -> u64 {
        self.read_tensors()
            .iter()
            .filter(|&&t| self.tensors[t].access == Access::Gather)
            .map(|&t| self.tensors[t].bytes)
            .sum()
    }

    fn read_tensors(&self) -> Vec<usize> {
        let mut seen = vec![false; self.tensors.len()];
        for op in &self.ops {
            for &t in &op.reads {
                if let Some(s) = seen.get_mut(t) {
                    *s = true;
                }
            }
        }
        (0..self.tensors.len()).filter(|&t| seen[t]).collect()
    }

    /// `C`: compute time of one forward with everything resident.
    pub fn compute_seconds(&self, profile: &DeviceProfile) -> f64 {
        self.ops.iter().map(|o| o.cost.seconds_on(profile)).sum()
    }

    /// A Llama-style decoder (see [`LlamaShape`]) for one phase.
    pub fn llama(name: &str, shape: &LlamaShape, phase: Phase) -> Workload {
        shape.build(name, phase)
    }

    /// A model by preset name: `llama-7b`, `llama-13b`, `tiny`.
    pub fn preset(name: &str, phase: Phase) -> Option<Workload> {
        let shape = match name {
            "llama-7b" | "7b" => LlamaShape::llama_7b(),
            "llama-13b" | "13b" => LlamaShape::llama_13b(),
            "tiny" => LlamaShape::tiny(),
            _ => return None,
        };
        Some(shape.build(name, phase))
    }

    /// A model from a file's tensor list: tensors named `…layers.N.…` (also `h.N`,
    /// `blocks.N`, `layer.N`) form layer `N`; names containing `embed` or `wte` are gathered;
    /// every dense tensor is one op (2-D tensors cost a GEMM over `tokens`, others their bytes).
    /// Ops run in the order: pre-layer tensors, layers by number (q, k, v, o, gate, up, down, then
    /// the rest by name), post-layer tensors (norms before heads).
    ///
    /// The tensors are those of any file [`tensorlane::model::Model`] opens (every model
    /// format, `.zt` v2 with its shards, legacy `.zt`, Tenso packets): names and shapes from its
    /// catalog, bytes as stored ([`tensorlane::core::formats::Storage::stored_len`]: what crosses
    /// the link when the tensor is streamed; the element bytes where the format does not say).
    #[cfg(feature = "native")]
    pub fn from_model(model: &tensorlane::model::Model, phase: Phase) -> Workload {
        let list: Vec<(String, Vec<u64>, u64)> = model
            .catalog()
            .tensors
            .iter()
            .map(|t| {
                let bytes = t.storage.stored_len().or_else(|| t.nbytes()).unwrap_or(0);
                (t.name.clone(), t.shape.clone(), bytes)
            })
            .collect();
        let name = model
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Workload::from_tensor_list(&name, &list, phase)
    }

    /// A model from `(name, shape, bytes)` triples (the engine of [`Workload::from_model`]).
    pub fn from_tensor_list(name: &str, list: &[(String, Vec<u64>, u64)], phase: Phase) -> Workload {
        let tokens = phase.tokens();
        let mut pre = Vec::new();
        let mut layers: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        let mut post = Vec::new();
        let mut tensors = Vec::new();
        for (i, (n, _, bytes)) in list.iter().enumerate() {
            let lower = n.to_ascii_lowercase();
            let gather = lower.contains("embed") || lower.contains("wte") || lower.contains("tok_embeddings");
            tensors.push(WorkloadTensor {
                name: n.clone(),
                bytes: *bytes,
                access: if gather { Access::Gather } else { Access::Dense },
                row_bytes: row_bytes_of(&list[i].1, *bytes),
            });
            match layer_index(n) {
                Some(l) => layers.entry(l).or_default().push(i),
                None if gather => pre.push(i),
                None => post.push(i),
            }
        }
        for v in layers.values_mut() {
            v.sort_by_key(|&i| (rank(&list[i].0), list[i].0.clone()));
        }
        post.sort_by_key(|&i| (rank(&list[i].0), list[i].0.clone()));
        let mut ops = Vec::new();
        let mut push = |group: u32, i: usize| {
            let (n, shape, bytes) = &list[i];
            let b = *bytes as f64;
            let cost = if tensors[i].access == Access::Gather {
                // A row gather: a few rows per token.
                let row =
                    shape_elems(shape.get(1..).unwrap_or(&[])).max(1) as f64 * b / (shape_elems(shape).max(1) as f64);
                Cost::roofline(0.0, row * tokens as f64)
            } else if shape.len() >= 2 {
                let elems = shape_elems(shape) as f64;
                let width = shape[0] as f64 + shape_elems(&shape[1..]) as f64;
                let esize = b / elems.max(1.0);
                Cost::roofline(2.0 * tokens as f64 * elems, b + tokens as f64 * width * esize)
            } else {
                Cost::roofline(0.0, b + tokens as f64 * b)
            };
            ops.push(Op {
                name: n.clone(),
                group,
                reads: vec![i],
                cost,
            });
        };
        for &i in &pre {
            push(0, i);
        }
        let mut g = 1u32;
        for v in layers.values() {
            for &i in v {
                push(g, i);
            }
            g = g.saturating_add(1);
        }
        for &i in &post {
            push(g, i);
        }
        Workload {
            name: name.to_string(),
            tokens,
            tensors,
            ops,
        }
    }
}

fn shape_elems(shape: &[u64]) -> u64 {
    shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .unwrap_or(u64::MAX)
}

/// `N` in `…layers.N.…`, `h.N.…`, `blocks.N.…`, `layer.N.…`.
fn layer_index(name: &str) -> Option<u64> {
    let parts: Vec<&str> = name.split('.').collect();
    parts.windows(2).find_map(|w| {
        if matches!(w[0], "layers" | "h" | "blocks" | "layer")
            && !w[1].is_empty()
            && w[1].bytes().all(|b| b.is_ascii_digit())
        {
            w[1].parse().ok()
        } else {
            None
        }
    })
}

fn rank(name: &str) -> u32 {
    const ORDER: [&str; 12] = [
        "input_layernorm",
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "post_attention_layernorm",
        "gate_proj",
        "up_proj",
        "down_proj",
        "norm",
        "lm_head",
        "output",
    ];
    ORDER.iter().position(|k| name.contains(k)).map_or(100, |p| p as u32)
}

/// Which forward: one token (decode, with a KV context) or N tokens (prefill).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// One token attending to `context` cached tokens.
    Decode {
        /// KV-cache length.
        context: u64,
    },
    /// `tokens` tokens processed together (causal attention among them).
    Prefill {
        /// Tokens per forward.
        tokens: u64,
    },
}

impl Phase {
    /// Decode at a 512-token context.
    pub const DECODE: Phase = Phase::Decode { context: 512 };

    /// Tokens per forward.
    pub fn tokens(&self) -> u64 {
        match *self {
            Phase::Decode { .. } => 1,
            Phase::Prefill { tokens } => tokens.max(1),
        }
    }

    /// Short label: `decode` or `prefill N`.
    pub fn label(&self) -> String {
        match *self {
            Phase::Decode { .. } => "decode".into(),
            Phase::Prefill { tokens } => format!("prefill {tokens}"),
        }
    }
}

/// Shapes of a Llama-style decoder (untied embedding and lm_head).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlamaShape {
    /// Hidden size.
    pub hidden: u64,
    /// MLP intermediate size.
    pub intermediate: u64,
    /// Attention heads.
    pub heads: u64,
    /// Key/value heads (GQA when fewer than `heads`).
    pub kv_heads: u64,
    /// Decoder layers.
    pub layers: u64,
    /// Vocabulary size.
    pub vocab: u64,
    /// Bytes per weight element (2 = FP16/BF16).
    pub dtype_bytes: u64,
}

impl LlamaShape {
    /// Llama-2-7B: 4096 / 11008 / 32 heads / 32 layers / 32000, FP16 (13.5 GB).
    pub fn llama_7b() -> LlamaShape {
        LlamaShape {
            hidden: 4096,
            intermediate: 11008,
            heads: 32,
            kv_heads: 32,
            layers: 32,
            vocab: 32000,
            dtype_bytes: 2,
        }
    }

    /// Llama-2-13B: 5120 / 13824 / 40 heads / 40 layers / 32000, FP16 (26 GB).
    pub fn llama_13b() -> LlamaShape {
        LlamaShape {
            hidden: 5120,
            intermediate: 13824,
            heads: 40,
            kv_heads: 40,
            layers: 40,
            vocab: 32000,
            dtype_bytes: 2,
        }
    }

    /// The CI `tiny` model: 8 layers, hidden 256, ffn 688, 4 heads, vocab 1024, f32.
    pub fn tiny() -> LlamaShape {
        LlamaShape {
            hidden: 256,
            intermediate: 688,
            heads: 4,
            kv_heads: 4,
            layers: 8,
            vocab: 1024,
            dtype_bytes: 4,
        }
    }

    /// The op list for `phase`: embed (gather); per layer q, k, v (with the input norm on q),
    /// attention (no weights), o, gate (with the post-attention norm), up, down; final norm +
    /// lm_head.
    pub fn build(&self, name: &str, phase: Phase) -> Workload {
        let t = phase.tokens() as f64;
        let db = self.dtype_bytes.max(1);
        let h = self.hidden;
        let kv = if self.heads == 0 {
            h
        } else {
            h / self.heads.max(1) * self.kv_heads
        };
        let mut tensors: Vec<WorkloadTensor> = Vec::new();
        let mut ops = Vec::new();
        let mut tensor = |name: String, elems: u64, access: Access| {
            tensors.push(WorkloadTensor {
                name,
                bytes: elems.saturating_mul(db),
                access,
                row_bytes: 0,
            });
            tensors.len() - 1
        };
        let dbf = db as f64;
        let gemm = |din: u64, dout: u64| {
            let w = (din * dout * db) as f64;
            Cost::roofline(2.0 * t * (din * dout) as f64, w + t * (din + dout) as f64 * dbf)
        };
        let e = tensor("model.embed_tokens.weight".into(), self.vocab * h, Access::Gather);
        ops.push(Op {
            name: "embed".into(),
            group: 0,
            reads: vec![e],
            cost: Cost::roofline(0.0, 2.0 * t * h as f64 * dbf),
        });
        for l in 0..self.layers {
            let g = (l + 1) as u32;
            let p = format!("model.layers.{l}.");
            let n1 = tensor(format!("{p}input_layernorm.weight"), h, Access::Dense);
            let q = tensor(format!("{p}self_attn.q_proj.weight"), h * h, Access::Dense);
            let k = tensor(format!("{p}self_attn.k_proj.weight"), h * kv, Access::Dense);
            let v = tensor(format!("{p}self_attn.v_proj.weight"), h * kv, Access::Dense);
            let o = tensor(format!("{p}self_attn.o_proj.weight"), h * h, Access::Dense);
            let n2 = tensor(format!("{p}post_attention_layernorm.weight"), h, Access::Dense);
            let gt = tensor(format!("{p}mlp.gate_proj.weight"), h * self.intermediate, Access::Dense);
            let up = tensor(format!("{p}mlp.up_proj.weight"), h * self.intermediate, Access::Dense);
            let dn = tensor(format!("{p}mlp.down_proj.weight"), self.intermediate * h, Access::Dense);
            let mut op = |n: &str, reads: Vec<usize>, cost: Cost| {
                ops.push(Op {
                    name: format!("layers.{l}.{n}"),
                    group: g,
                    reads,
                    cost,
                })
            };
            op("q_proj", vec![n1, q], gemm(h, h));
            op("k_proj", vec![k], gemm(h, kv));
            op("v_proj", vec![v], gemm(h, kv));
            // Attention: decode reads the KV cache once; prefill is causal over the N tokens.
            let (ctx, flops) = match phase {
                Phase::Decode { context } => (context as f64, 4.0 * context as f64 * h as f64),
                Phase::Prefill { tokens } => (tokens as f64, 2.0 * (tokens as f64).powi(2) * h as f64),
            };
            let attn_bytes = 2.0 * ctx * kv as f64 * dbf + 2.0 * t * h as f64 * dbf;
            op("attn", vec![], Cost::roofline(flops, attn_bytes));
            op("o_proj", vec![o], gemm(h, h));
            op("gate_proj", vec![n2, gt], gemm(h, self.intermediate));
            op("up_proj", vec![up], gemm(h, self.intermediate));
            op("down_proj", vec![dn], gemm(self.intermediate, h));
        }
        let nf = tensor("model.norm.weight".into(), h, Access::Dense);
        let lm = tensor("lm_head.weight".into(), self.vocab * h, Access::Dense);
        ops.push(Op {
            name: "lm_head".into(),
            group: (self.layers + 1) as u32,
            reads: vec![nf, lm],
            cost: gemm(h, self.vocab),
        });
        Workload {
            name: name.to_string(),
            tokens: phase.tokens(),
            tensors,
            ops,
        }
    }
}
