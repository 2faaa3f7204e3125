//! What a device executor allocates for a plan besides the arena, the same for every device: the
//! activations of one forward and the gather scratch, and where each weight of an op is read
//! from (in place in the arena, or gathered into a scratch buffer first).

use super::{ExecOp, Segment, TensorRef, largest_gathered_weight};
use crate::error::Error;
use crate::plan::Plan;

/// `state` of an executor that [`Backend::prepare`](super::Backend::prepare) sets up, or an
/// error saying the executor was used before it (the interpreter, [`execute`](super::execute),
/// always prepares first).
pub fn prepared<T>(state: Option<T>) -> Result<T, Error> {
    state.ok_or_else(|| {
        Error::Device("the executor was used before Backend::prepare; call execute() or prepare() first".into())
    })
}

/// Gather scratch buffers per executor: an op reads at most two weights that are split.
pub const SCRATCH_BUFFERS: usize = 2;

/// One forward's activations on a device, `T ×` their width each (see [`OpKind`](super::OpKind)).
#[derive(Debug)]
pub struct Activations<B> {
    /// Hidden state (`h`).
    pub x: B,
    /// Normed input of the attention block, and the executors' temporary (`h`).
    pub a: B,
    /// Queries (`h`).
    pub q: B,
    /// Keys (`kv`).
    pub k: B,
    /// Values (`kv`).
    pub v: B,
    /// Attention mix (`h`).
    pub s: B,
    /// Normed input of the MLP (`h`).
    pub b: B,
    /// Gate projection (`ffn`).
    pub g: B,
    /// Up projection (`ffn`).
    pub u: B,
    /// MLP mix (`ffn`).
    pub m: B,
    /// A projection's output before it is added back into `x` (`h`).
    pub y: B,
    /// Output logits (`vocab`).
    pub logits: B,
}

impl<B> Activations<B> {
    /// Allocates every activation with `alloc(elements)`, the number of f32 elements (`T ×` the
    /// width).
    pub fn alloc(d: super::Dims, mut alloc: impl FnMut(usize) -> Result<B, Error>) -> Result<Self, Error> {
        let mut f = |width: usize| alloc(d.t * width);
        Ok(Activations {
            x: f(d.h)?,
            a: f(d.h)?,
            q: f(d.h)?,
            k: f(d.kv)?,
            v: f(d.kv)?,
            s: f(d.h)?,
            b: f(d.h)?,
            g: f(d.ffn)?,
            u: f(d.ffn)?,
            m: f(d.ffn)?,
            y: f(d.h)?,
            logits: f(d.vocab)?,
        })
    }
}

/// Allocates the gather scratch for `plan`: [`SCRATCH_BUFFERS`] buffers of the largest weight
/// that cannot be read in place when in-place reads must start on an `align`-byte boundary
/// ([`largest_gathered_weight`]), each by `alloc(bytes)`.
pub fn alloc_scratch<B>(
    plan: &Plan,
    align: u64,
    mut alloc: impl FnMut(u64) -> Result<B, Error>,
) -> Result<Vec<B>, Error> {
    let bytes = largest_gathered_weight(plan, align);
    (0..SCRATCH_BUFFERS).map(|_| alloc(bytes)).collect()
}

/// Where an executor reads one weight of an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place<'a> {
    /// A gathered tensor in host memory (the embedding).
    Host(&'a [u8]),
    /// In place: the whole weight is one piece at this arena offset.
    Arena {
        /// Arena offset.
        offset: u64,
        /// Bytes.
        bytes: u64,
    },
    /// Gathered into scratch buffer `slot` from these pieces (the executor copies them).
    Scratch {
        /// Index of the scratch buffer.
        slot: usize,
        /// Bytes of the whole weight.
        bytes: u64,
        /// The pieces, each copied to its `tensor_offset` in the scratch buffer.
        segments: &'a [Segment],
    },
}

/// The place of every weight of `op`, in order: a weight in one piece that starts the tensor and
/// for which `in_place` holds is read in the arena; the others take the next scratch buffer.
/// Fails when an op needs more than [`SCRATCH_BUFFERS`] of them.
pub fn places<'a>(op: &'a ExecOp<'a>, in_place: impl Fn(&Segment) -> bool) -> Result<Vec<Place<'a>>, Error> {
    let mut slot = 0;
    let mut out = Vec::with_capacity(op.weights.len());
    for w in &op.weights {
        match w {
            TensorRef::Host(b) => out.push(Place::Host(b)),
            TensorRef::Arena { bytes, segments } => {
                if let [s] = segments.as_slice()
                    && s.tensor_offset == 0
                    && in_place(s)
                {
                    out.push(Place::Arena {
                        offset: s.dev_offset,
                        bytes: *bytes,
                    });
                    continue;
                }
                if slot >= SCRATCH_BUFFERS {
                    return Err(Error::Device(format!(
                        "op {:?} reads more than {SCRATCH_BUFFERS} split weights; the executors gather at most {SCRATCH_BUFFERS}",
                        op.kind
                    )));
                }
                out.push(Place::Scratch {
                    slot,
                    bytes: *bytes,
                    segments,
                });
                slot += 1;
            }
        }
    }
    Ok(out)
}
