//! The CUDA executor (feature `cuda`): a device arena of `plan.arena_bytes`, every copy through
//! [`CudaDevice::upload_staged`] (pinned staging ring) at the plan's offset. Without an NVIDIA
//! driver [`CudaBackend::new`] returns a clean error. Status: the copies are real; each op reads
//! its weight pieces back from the device arena (so placement is what the plan says) and computes
//! with [`cpu_op`](super::cpu_op) on the host — the cuBLAS GEMM path is not wired yet (it could
//! not be run here: no NVIDIA GPU).

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use super::{Acts, Backend, Dims, ExecError, ExecOp, TensorRef, cpu_op, to_f32};
use crate::device::cuda::{CudaDevice, HostMem, Staging};
use crate::offload::plan::Plan;

/// The CUDA executor (see the module docs).
pub struct CudaBackend {
    dev: CudaDevice,
    stream: Arc<CudaStream>,
    arena: Option<CudaSlice<u8>>,
    staging: Vec<Staging>,
    dims: Option<Dims>,
    tokens: Vec<u32>,
    acts: Option<Acts>,
}

fn dev_err(e: impl std::fmt::Display) -> ExecError {
    ExecError::Device(e.to_string())
}

impl CudaBackend {
    /// Opens device 0; `Err(ExecError::Device("CUDA not available: ..."))` without a driver.
    pub fn new() -> Result<CudaBackend, ExecError> {
        let dev = CudaDevice::new(0).map_err(dev_err)?;
        let stream = dev.new_stream().map_err(dev_err)?;
        let staging = (0..2)
            .map(|_| dev.alloc_staging(4 << 20, HostMem::Pinned))
            .collect::<Result<Vec<_>, _>>()
            .map_err(dev_err)?;
        Ok(CudaBackend {
            dev,
            stream,
            arena: None,
            staging,
            dims: None,
            tokens: Vec::new(),
            acts: None,
        })
    }

    fn read_back(&self, off: u64, len: u64) -> Result<Vec<u8>, ExecError> {
        let arena = self
            .arena
            .as_ref()
            .ok_or_else(|| ExecError::Device("not prepared".into()))?;
        let end = off.checked_add(len).filter(|&e| e <= arena.len() as u64);
        let end = end.ok_or_else(|| ExecError::Device("read past the arena".into()))?;
        let view = arena.slice(off as usize..end as usize);
        let mut host = vec![0u8; len as usize];
        self.stream.memcpy_dtoh(&view, &mut host).map_err(dev_err)?;
        self.stream.synchronize().map_err(dev_err)?;
        Ok(host)
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> String {
        format!("cuda ({})", self.dev.name().unwrap_or_default())
    }

    fn prepare(&mut self, plan: &Plan, dims: Dims, tokens: &[u32]) -> Result<(), ExecError> {
        let n = usize::try_from(plan.arena_bytes).map_err(|_| ExecError::Device("arena too large".into()))?;
        self.arena = Some(self.dev.alloc_device(&self.stream, n.max(4)).map_err(dev_err)?);
        self.dims = Some(dims);
        self.tokens = tokens.to_vec();
        self.acts = Some(Acts::new(dims));
        Ok(())
    }

    fn copy_in(&mut self, dev_offset: u64, bytes: &[u8]) -> Result<(), ExecError> {
        let arena = self
            .arena
            .as_mut()
            .ok_or_else(|| ExecError::Device("not prepared".into()))?;
        let t = self
            .dev
            .upload_staged(&self.stream, bytes, arena, dev_offset as usize, &mut self.staging)
            .map_err(dev_err)?;
        t.wait().map_err(dev_err)
    }

    fn exec(&mut self, op: &ExecOp<'_>) -> Result<(), ExecError> {
        let dims = self
            .dims
            .ok_or_else(|| ExecError::Device("exec before prepare".into()))?;
        let mut ws = Vec::new();
        for w in &op.weights {
            ws.push(match w {
                TensorRef::Host(b) => to_f32(b),
                TensorRef::Arena { bytes, segments } => {
                    let mut buf = vec![0u8; *bytes as usize];
                    for s in segments {
                        let piece = self.read_back(s.dev_offset, s.bytes)?;
                        buf.get_mut(s.tensor_offset as usize..(s.tensor_offset + s.bytes) as usize)
                            .ok_or_else(|| ExecError::Device("piece outside its tensor".into()))?
                            .copy_from_slice(&piece);
                    }
                    to_f32(&buf)
                }
            });
        }
        let refs: Vec<&[f32]> = ws.iter().map(|w| w.as_slice()).collect();
        let acts = self
            .acts
            .as_mut()
            .ok_or_else(|| ExecError::Device("not prepared".into()))?;
        cpu_op(op.kind, dims, &self.tokens, acts, &refs)
    }

    fn finish_forward(&mut self) -> Result<Vec<f32>, ExecError> {
        self.acts
            .as_ref()
            .map(|a| a.logits.clone())
            .ok_or_else(|| ExecError::Device("no forward ran".into()))
    }
}
