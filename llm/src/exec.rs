//! The executor a [`Session`](crate::Session) runs on: the CPU one, or (features `wgpu`, `cuda`) a
//! device one. All take the same calls.

use crate::Result;
use crate::arch::Spec;
use crate::cpu::{Cpu, KvCache};

/// One of the executors (the CPU one inline: it is the one used on every call).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Exec<'m> {
    Cpu(Cpu<'m>),
    #[cfg(feature = "wgpu")]
    Wgpu(Box<crate::wgpu::Wgpu<'m>>),
    #[cfg(feature = "cuda")]
    Cuda(Box<crate::cuda::Cuda<'m>>),
}

impl Exec<'_> {
    pub(crate) fn spec(&self) -> &Spec {
        match self {
            Exec::Cpu(c) => c.spec(),
            #[cfg(feature = "wgpu")]
            Exec::Wgpu(g) => g.spec(),
            #[cfg(feature = "cuda")]
            Exec::Cuda(g) => g.spec(),
        }
    }

    /// Worker threads (1 for a device executor: the host thread that drives it).
    pub(crate) fn threads(&self) -> usize {
        match self {
            Exec::Cpu(c) => c.threads(),
            #[cfg(feature = "wgpu")]
            Exec::Wgpu(_) => 1,
            #[cfg(feature = "cuda")]
            Exec::Cuda(_) => 1,
        }
    }

    pub(crate) fn stored_bytes(&self) -> u64 {
        match self {
            Exec::Cpu(c) => c.stored_bytes(),
            #[cfg(feature = "wgpu")]
            Exec::Wgpu(g) => g.stored_bytes(),
            #[cfg(feature = "cuda")]
            Exec::Cuda(g) => g.stored_bytes(),
        }
    }

    /// Bytes the weights stream per forward pass.
    pub(crate) fn streamed_bytes(&self) -> u64 {
        match self {
            Exec::Cpu(c) => c.streamed_bytes(),
            #[cfg(feature = "wgpu")]
            Exec::Wgpu(g) => g.streamed_bytes(),
            #[cfg(feature = "cuda")]
            Exec::Cuda(g) => g.streamed_bytes(),
        }
    }

    /// Weight bytes the last forward pass streamed.
    pub(crate) fn streamed_last(&self) -> u64 {
        match self {
            Exec::Cpu(c) => c.streamed_last,
            #[cfg(feature = "wgpu")]
            Exec::Wgpu(g) => g.streamed_last,
            #[cfg(feature = "cuda")]
            Exec::Cuda(g) => g.streamed_last,
        }
    }

    /// Passes over the weights the last [`Exec::step`] made: 1, or on an executor that takes at
    /// most [`Exec::rows_per_pass`] rows a pass, one per that many rows.
    pub(crate) fn passes_last(&self) -> u64 {
        match self {
            Exec::Cpu(_) => 1,
            #[cfg(feature = "wgpu")]
            Exec::Wgpu(g) => g.passes_last,
            #[cfg(feature = "cuda")]
            Exec::Cuda(_) => 1,
        }
    }

    /// Time the last forward pass spent copying its streamed bytes in.
    pub(crate) fn copy_last(&self) -> std::time::Duration {
        match self {
            Exec::Cpu(c) => c.copy_last,
            #[cfg(feature = "wgpu")]
            Exec::Wgpu(g) => g.copy_last,
            #[cfg(feature = "cuda")]
            Exec::Cuda(g) => g.copy_last,
        }
    }

    /// The link's copy rate in GB/s, measured now: the best of three copies of up to 32 MiB
    /// (memcpy on the CPU; a queue write, submitted and waited for, on the wgpu device).
    pub(crate) fn probe_link_gbps(&self) -> f64 {
        let bytes = (self.streamed_bytes() as usize).clamp(1 << 20, 32 << 20);
        match self {
            Exec::Cpu(_) => {
                let src = vec![1u8; bytes];
                let mut dst = Vec::with_capacity(bytes);
                let mut best = f64::INFINITY;
                for _ in 0..3 {
                    dst.clear();
                    let t = std::time::Instant::now();
                    dst.extend_from_slice(std::hint::black_box(&src));
                    best = best.min(t.elapsed().as_secs_f64());
                    std::hint::black_box(&dst);
                }
                bytes as f64 / best.max(1e-9) / 1e9
            }
            #[cfg(feature = "wgpu")]
            Exec::Wgpu(g) => g.probe_link_gbps(bytes),
            #[cfg(feature = "cuda")]
            Exec::Cuda(g) => g.probe_link_gbps(bytes),
        }
    }

    /// A KV cache (the wgpu executor keeps its keys and values on the device; this one counts
    /// the positions).
    pub(crate) fn new_cache(&self) -> KvCache {
        match self {
            Exec::Cpu(c) => c.new_cache(),
            #[cfg(feature = "wgpu")]
            Exec::Wgpu(_) => KvCache::default(),
            #[cfg(feature = "cuda")]
            Exec::Cuda(_) => KvCache::default(),
        }
    }

    /// One step of a continuous batch ([`Cpu::step`]): `decode[s]` is sequence `s`'s next token,
    /// its cache and its KV slot, `prompts` the joining sequences' prompts with theirs (the CPU
    /// executor keeps each cache in its `KvCache` and ignores the slots; the wgpu executor's
    /// caches live in its slots, [`crate::wgpu::Wgpu::step`]). One `n_vocab` row per decode
    /// sequence, then one per prompt.
    pub(crate) fn step(
        &mut self,
        decode: &mut [(u32, &mut KvCache, usize)],
        prompts: &mut [(&[u32], &mut KvCache, usize)],
    ) -> Result<Vec<Vec<f32>>> {
        match self {
            Exec::Cpu(c) => {
                let mut d: Vec<(u32, &mut KvCache)> = decode.iter_mut().map(|(t, c, _)| (*t, &mut **c)).collect();
                let mut p: Vec<(&[u32], &mut KvCache)> = prompts.iter_mut().map(|(t, c, _)| (*t, &mut **c)).collect();
                let out = c.step(&mut d, &mut p);
                disk_result(c, out)
            }
            #[cfg(feature = "wgpu")]
            Exec::Wgpu(g) => g.step(decode, prompts),
            #[cfg(feature = "cuda")]
            Exec::Cuda(_) => Err(crate::Error::Device(
                "batched decoding on the cuda device is not implemented (use cpu or wgpu)".into(),
            )),
        }
    }

    /// The most rows one forward pass takes (`None`: any number, the CPU executor); a step with
    /// more rows makes several passes, each streaming the weights.
    pub(crate) fn rows_per_pass(&self) -> Option<usize> {
        match self {
            Exec::Cpu(_) => None,
            #[cfg(feature = "wgpu")]
            Exec::Wgpu(_) => Some(crate::plan::BATCH),
            #[cfg(feature = "cuda")]
            Exec::Cuda(_) => Some(crate::plan::BATCH),
        }
    }

    /// See [`Cpu::forward`].
    pub(crate) fn forward(
        &mut self,
        tokens: &[u32],
        cache: &mut KvCache,
        want: &dyn Fn(usize) -> bool,
    ) -> Result<Vec<Vec<f32>>> {
        match self {
            Exec::Cpu(c) => {
                let out = c.forward(tokens, cache, want);
                disk_result(c, out)
            }
            #[cfg(feature = "wgpu")]
            Exec::Wgpu(g) => g.forward(tokens, cache, want),
            #[cfg(feature = "cuda")]
            Exec::Cuda(g) => g.forward(tokens, cache, want),
        }
    }
}

/// A CPU forward pass's results, or the disk tier's first failed read in it (the pass computed
/// with zeros in place of the bytes it could not read).
fn disk_result(c: &mut crate::cpu::Cpu<'_>, out: Vec<Vec<f32>>) -> crate::Result<Vec<Vec<f32>>> {
    match c.take_disk_error() {
        None => Ok(out),
        Some(e) => Err(crate::Error::Device(format!(
            "{e}; the model file changed or cannot be read: check the file, or run without --budget"
        ))),
    }
}
