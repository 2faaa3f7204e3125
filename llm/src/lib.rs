//! # tensorlane-llm
//!
//! Text generation from the checkpoints [`tensorlane::model::Model`] opens, weights kept in their
//! stored form (F32, F16, BF16, and every ggml block type: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K,
//! Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS have integer kernels on the CPU, their activations quantized
//! as llama.cpp's CPU backend quantizes them (Q8_0/Q8_1 blocks for the 32-value types, Q8_K for
//! the 256-value ones), AVX2 where the CPU has it; the others are decoded a row at a time by
//! [`tensorlane_core::formats::ggml`]).
//!
//! * [`arch`] — the architecture description: which tensors with which shapes, and the
//!   hyperparameters, read from the GGUF metadata (`general.architecture`,
//!   `<arch>.block_count`, ...) or a Hugging Face `config.json`: llama (Llama 2/3, TinyLlama,
//!   SmolLM), mistral, qwen2, qwen3, phi3, gemma2, gemma3, and the mixtures of experts qwen3moe,
//!   olmoe and mixtral (llama with `llama.expert_count`).
//! * [`tokenizer`] — the GGUF's embedded vocabulary: `llama` (SentencePiece BPE with scores and
//!   byte fallback) and `gpt2` (byte-level BPE with merges), as llama.cpp tokenizes them.
//! * [`Session`] — a CPU executor (RMSNorm, RoPE, grouped-query attention with a causal mask and a
//!   KV cache, SwiGLU, final norm, logits; f32 accumulation; the matrix products are spread over
//!   a worker pool by output rows and dequantize one weight row at a time into a small buffer).
//! * [`Device::Wgpu`] (feature `wgpu`) — the same forward pass in WGSL compute shaders, the
//!   weights uploaded in stored form and dequantized inside the matrix-product kernel, the KV
//!   cache on the device.
//! * [`Sampling`] — greedy by default; temperature, top-k, top-p, seed, logit bias; with feature
//!   `grammar`, constrained to a JSON schema or a Lark grammar (module `grammar`).
//!
//! The executor is checked against llama.cpp (`llm/tests/llama_reference.rs`): greedy tokens,
//! per-position log-probabilities and tokenization on random-weight checkpoints of every
//! architecture and weight type.
//!
//! ```no_run
//! use tensorlane::model::Model;
//! use tensorlane_llm::{Options, Sampling, Session};
//!
//! let model = Model::open("tinyllama.Q8_0.gguf")?;
//! let mut session = Session::open(&model, Options::default())?;
//! let prompt = session.tokenizer().encode("The capital of France is", true);
//! for token in session.generate(&prompt, &Sampling::default()).take(16) {
//!     print!("{}", String::from_utf8_lossy(&token?.piece));
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

use std::fmt;

pub mod arch;
#[cfg(feature = "native")]
pub mod batch;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod bind;
#[cfg(feature = "serve")]
pub mod chat;
// (without `native` only the hosted session's part of the executor is used)
#[cfg_attr(not(feature = "native"), allow(dead_code))]
mod cpu;
/// The CPU executor's disk tier under a budget (positioned reads ahead of use).
#[cfg(feature = "native")]
mod disk;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "native")]
mod exec;
pub mod hosted;
#[cfg_attr(not(feature = "native"), allow(dead_code))]
mod kernels;
#[cfg(feature = "grammar")]
pub mod grammar;
#[cfg(feature = "serve")]
pub mod openai;
mod par;
pub mod plan;
mod sampling;
#[cfg(feature = "native")]
mod session;
#[cfg(feature = "serve")]
pub mod tools;
pub mod tokenizer;
#[cfg(feature = "wgpu")]
mod wgpu;

pub use sampling::{Sampler, Sampling};
#[cfg(feature = "native")]
pub use session::{Device, Generate, Load, Options, Session, Stats, Token};
/// The offload policies [`Options::policy`] takes (re-exported from `tensorlane-offload`).
pub use plan::CacheType;
/// The tracks of a trace [`Session::take_trace`] records, in the order it shows them.
pub use cpu::CPU_TRACKS as TRACE_TRACKS;
pub use tensorlane_offload::Policy;

/// The CUDA executor's kernel source (`llm/src/cuda/kernels.cu`), for tools and tests that
/// compile it with NVRTC ahead of a session.
#[cfg(feature = "cuda")]
pub fn cuda_kernels() -> &'static str {
    cuda::KERNELS
}

/// Everything that can go wrong opening a model for generation or running it.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The model file could not be read (see `tensorlane::Error`; feature `native`).
    #[cfg(feature = "native")]
    Model(tensorlane::Error),
    /// `general.architecture` names an architecture this crate does not run.
    UnsupportedArchitecture {
        /// The architecture the file declares (`"<none>"` when it declares none).
        found: String,
        /// The architectures that are supported.
        supported: &'static [&'static str],
    },
    /// The model's format is not one this crate reads hyperparameters from.
    UnsupportedFormat(String),
    /// A metadata key is missing or its value is unusable.
    Metadata {
        /// The key (`llama.block_count`, `tokenizer.ggml.tokens`, ...).
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// A tensor the architecture needs is not in the file.
    MissingTensor {
        /// The tensor's name.
        name: String,
        /// The shape it should have (row-major).
        expected: Vec<u64>,
    },
    /// A tensor has another shape than the architecture needs.
    TensorShape {
        /// The tensor's name.
        name: String,
        /// The shape it should have (row-major).
        expected: Vec<u64>,
        /// The shape it has.
        found: Vec<u64>,
    },
    /// A tensor's element type cannot be computed with.
    TensorType {
        /// The tensor's name.
        name: String,
        /// Its element type.
        ty: String,
    },
    /// More tokens than the session's context holds.
    Context {
        /// Positions needed.
        needed: usize,
        /// The context length.
        context: usize,
    },
    /// A token id outside the vocabulary.
    UnknownToken {
        /// The id.
        id: u32,
        /// The vocabulary size (valid ids are `0..vocab`).
        vocab: usize,
    },
    /// The embedded vocabulary is unusable (the message says why).
    Tokenizer(String),
    /// An option or sampling parameter is out of range (the message names it).
    Options(String),
    /// The weight budget is below what the offload plan needs (the message names the minimum),
    /// or its plan failed the hazard checker.
    Budget(String),
    /// The device executor cannot run (no adapter, a device limit, a device failure, or a build
    /// without the device's feature); the message says why.
    Device(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            #[cfg(feature = "native")]
            Error::Model(e) => write!(f, "{e}"),
            Error::UnsupportedArchitecture { found, supported } => write!(
                f,
                "unsupported architecture '{found}' (general.architecture); supported: {}",
                supported.join(", ")
            ),
            Error::UnsupportedFormat(s) => write!(f, "{s}"),
            Error::Metadata { key, message } => write!(f, "metadata {key}: {message}"),
            Error::MissingTensor { name, expected } => {
                write!(f, "tensor {name} is missing (expected shape {expected:?})")
            }
            Error::TensorShape { name, expected, found } => {
                write!(f, "tensor {name} has shape {found:?}, expected {expected:?}")
            }
            Error::TensorType { name, ty } => {
                write!(f, "tensor {name} has element type {ty}, which cannot be computed with")
            }
            Error::Context { needed, context } => write!(
                f,
                "{needed} positions are needed but the context holds {context} (raise --context / Options::context)"
            ),
            Error::UnknownToken { id, vocab } => {
                write!(f, "token id {id} is outside the vocabulary (0..{vocab})")
            }
            Error::Tokenizer(s) => write!(f, "tokenizer: {s}"),
            Error::Options(s) | Error::Budget(s) | Error::Device(s) => write!(f, "{s}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            #[cfg(feature = "native")]
            Error::Model(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(feature = "native")]
impl From<tensorlane::Error> for Error {
    fn from(e: tensorlane::Error) -> Self {
        Error::Model(e)
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
