//! The CPU executor for a host without a model file to map: the browser's wasm build (no
//! `native` feature). The host reads each weight's resident bytes (File slices, HTTP Range) and
//! hands them in when the session opens; the bytes a budget leaves out are read through a
//! [`ReadAt`] at each use, a layer at a time in the order the forward pass takes them, the same
//! plan order `tensorlane run --budget` streams. The forward pass is the native CPU executor's
//! ([`Session`](crate::Session) runs the same code), so the tokens are the same; without the
//! `native` feature its products run on one thread (why: `crate::par`), and on wasm32 with
//! `simd128` the kernels' inner loops use 128-bit vectors.

use tensorlane_core::formats::{Catalog, Storage, TensorInfo};

use crate::arch::Spec;
use crate::cpu::{Cpu, KvCache, Weights};
use crate::kernels::Matrix;
pub use crate::kernels::ReadAt;
use crate::plan::CacheType;
use crate::{Error, Result};

/// How [`HostedSession::open`] gets a tensor's resident bytes: `(name, file offset, length)` to
/// the bytes.
pub type LoadBytes<'a> = dyn FnMut(&str, u64, u64) -> Result<Vec<u8>> + 'a;

/// A model opened over bytes handed in by its host: a forward pass at a time, one KV cache.
pub struct HostedSession {
    cpu: Cpu<'static>,
    cache: KvCache,
    context: usize,
}

impl std::fmt::Debug for HostedSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostedSession")
            .field("context", &self.context)
            .field("positions", &self.cache.len)
            .finish_non_exhaustive()
    }
}

/// `(offset, len)` of tensor `t`'s stored bytes in the opened file, or why it has none.
fn range(t: &TensorInfo) -> Result<(u64, u64)> {
    match t.storage {
        Storage::Range { source: 0, offset, len } => Ok((offset, len)),
        _ => Err(Error::UnsupportedFormat(format!(
            "tensor {} is not one plain byte range of the opened file (split or compressed storage), \
             which a hosted session reads from",
            t.name
        ))),
    }
}

impl HostedSession {
    /// Opens the model `catalog` describes (a GGUF's header, as the wasm reader gives it).
    ///
    /// For each tensor the forward pass reads, in the session's order (the embedding, per layer
    /// its vectors and matrices, the output, the final norm), `load(name, offset, len)` must
    /// return the `len` bytes at file offset `offset`: the whole tensor, or for a matrix
    /// `resident(name)` names (the plan's resident bytes under a budget, `LlmModel.plan`) only
    /// that prefix; the rest is read with `read` at each forward pass. `context`: KV cache
    /// positions (at least 1); `cache`: how keys and values are kept (`tensorlane run` keeps f16
    /// on the CPU).
    ///
    /// Errors are [`Session::open`](crate::Session::open)'s (architecture, metadata key, tensor
    /// and shape, element type), a tensor not stored as one byte range of the file, or what
    /// `load` returns.
    pub fn open(
        catalog: &Catalog,
        resident: &dyn Fn(&str) -> Option<u64>,
        load: &mut LoadBytes<'_>,
        read: ReadAt,
        context: usize,
        cache: CacheType,
    ) -> Result<HostedSession> {
        if context == 0 {
            return Err(Error::Options("the context must hold at least one position".into()));
        }
        let spec = Spec::from_catalog(catalog)?;
        let weights = Weights::bind_hosted(catalog, &spec, &mut |t| {
            let (offset, len) = range(t)?;
            let keep = resident(&t.name).map_or(len, |r| r.min(len));
            let bytes = load(&t.name, offset, keep)?;
            if bytes.len() as u64 != keep {
                return Err(Error::Options(format!(
                    "tensor {}: {} bytes were handed in for the {keep} asked for (at offset {offset})",
                    t.name,
                    bytes.len()
                )));
            }
            Matrix::hosted(t, bytes, offset, len, read)
        })?;
        let cpu = Cpu::new(spec, weights, 1, cache)?;
        let cache = cpu.new_cache();
        Ok(HostedSession { cpu, cache, context })
    }

    /// The architecture.
    pub fn spec(&self) -> &Spec {
        self.cpu.spec()
    }

    /// Positions in the KV cache.
    pub fn positions(&self) -> usize {
        self.cache.len
    }

    /// Forgets the KV cache (a new prompt).
    pub fn reset(&mut self) {
        self.cache.clear();
    }

    /// Stored bytes of the weight matrices.
    pub fn stored_bytes(&self) -> u64 {
        self.cpu.stored_bytes()
    }

    /// Weight bytes read from the host at each forward pass (0: everything resident).
    pub fn streamed_bytes(&self) -> u64 {
        self.cpu.streamed_bytes()
    }

    /// Weight bytes the last forward pass read from the host.
    pub fn streamed_last(&self) -> u64 {
        self.cpu.streamed_last
    }

    /// Runs `tokens` at the next positions (their keys and values join the cache) and returns
    /// the logits of the last one (`n_vocab` values). An empty `tokens`, an id outside the
    /// vocabulary, more positions than the context, or a failed read of a streamed weight is an
    /// error; after a failed read the cache is as it was before the call.
    pub fn forward(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let n_vocab = self.cpu.spec().hparams.n_vocab;
        if tokens.is_empty() {
            return Err(Error::Options("forward needs at least one token".into()));
        }
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(Error::UnknownToken { id, vocab: n_vocab });
        }
        let needed = self.cache.len + tokens.len();
        if needed > self.context {
            return Err(Error::Context {
                needed,
                context: self.context,
            });
        }
        let before = self.cache.len;
        let last = tokens.len() - 1;
        let mut logits = self.cpu.forward(tokens, &mut self.cache, &|i| i == last);
        if let Some(e) = self.cpu.take_read_error() {
            self.cache.truncate(before);
            return Err(Error::Device(e));
        }
        Ok(logits.pop().unwrap_or_default())
    }
}
