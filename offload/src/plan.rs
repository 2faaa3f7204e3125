//! The plan IR (offload.md §3.5): a resident set, a FIFO ring of slots for streamed tensors,
//! copies issued in consumption order, explicit events, and a periodic program (the copy stream
//! runs ahead into the next forward). The baselines of §6.2 are plans of the same IR, so the
//! simulator and the hazard checker treat every policy alike. The compiler that writes plans is
//! [`compile`](mod@crate::compile).

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::workload::Access;

/// Alignment of every arena and staging offset, bytes.
pub const ALIGN: u64 = 256;
/// Tensors smaller than this stay resident under the scheduler (a copy's fixed cost would
/// dominate).
pub const MIN_STREAM_BYTES: u64 = 1 << 20;
/// ZeRO's `stage3_param_persistence_threshold` (1e5 elements) at 2 bytes per element.
pub const ZERO_PERSIST_BYTES: u64 = 200_000;

/// `x` rounded up to [`ALIGN`] (saturating).
pub fn align(x: u64) -> u64 {
    x.div_ceil(ALIGN).saturating_mul(ALIGN)
}

/// Which policy produced a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Policy {
    /// The scheduler: water-filled resident set, FIFO ring, chosen by simulator-in-the-loop search.
    Scheduler,
    /// Everything resident (only when the weights fit): the ceiling, `C`.
    AllResident,
    /// Accelerate-like: resident prefix in execution order; every other tensor copied from
    /// pageable memory just before use, synchronously, and freed after.
    SyncJit,
    /// ZeRO-Inference-like: nothing resident (but tiny tensors), in-order prefetch as memory allows.
    FullOffload,
    /// FlexGen-like: the same fraction of every tensor resident, one-layer lookahead with a
    /// barrier per layer, two layer buffers, pinned memory.
    FlexGen,
}

impl Policy {
    /// The four baselines of offload.md §6.2, in table order.
    pub const BASELINES: [Policy; 4] = [
        Policy::AllResident,
        Policy::SyncJit,
        Policy::FullOffload,
        Policy::FlexGen,
    ];

    /// Every policy: the scheduler, then the baselines.
    pub const ALL: [Policy; 5] = [
        Policy::Scheduler,
        Policy::AllResident,
        Policy::SyncJit,
        Policy::FullOffload,
        Policy::FlexGen,
    ];

    /// The policy of a [`Policy::name`] (`scheduler`, `all-resident`, `sync-jit`,
    /// `full-offload`, `flexgen-like`).
    pub fn from_name(name: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Short name used in tables and on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            Policy::Scheduler => "scheduler",
            Policy::AllResident => "all-resident",
            Policy::SyncJit => "sync-jit",
            Policy::FullOffload => "full-offload",
            Policy::FlexGen => "flexgen-like",
        }
    }
}

/// Where a streamed chunk's bytes live between forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Home {
    /// Pinned host memory: asynchronous copies at `P`.
    Pinned,
    /// Pageable host memory: synchronous copies at the pageable rate.
    Pageable,
    /// On disk: read into a pinned host staging slot first (`D`), then copied.
    Disk,
    /// In the page cache (a warm, mapped file): staged into a pinned host slot by the memcpy
    /// threads (`M`), then copied.
    PageCache,
}

impl Home {
    /// Whether the chunk passes through a pinned host staging slot (disk or page cache).
    pub fn is_staged(self) -> bool {
        matches!(self, Home::Disk | Home::PageCache)
    }
}

/// A byte range `[base, base + len)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    /// First byte.
    pub base: u64,
    /// Length.
    pub len: u64,
}

impl Region {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.base.saturating_add(self.len)
    }
    /// True if the two ranges share a byte.
    pub fn overlaps(&self, o: &Region) -> bool {
        self.len > 0 && o.len > 0 && self.base < o.end() && o.base < self.end()
    }
}

/// A tensor as planned: how many of its bytes stay resident, how many are streamed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanTensor {
    /// Name.
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Dense or gathered.
    pub access: Access,
    /// Bytes kept resident (a prefix of the tensor, split along output rows).
    pub resident_bytes: u64,
    /// Bytes streamed every forward (the rest).
    pub streamed_bytes: u64,
}

/// The resident part of one tensor: loaded once, never evicted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resident {
    /// Index into [`Plan::tensors`].
    pub tensor: u32,
    /// Arena offset.
    pub offset: u64,
    /// Bytes.
    pub bytes: u64,
}

/// The streamed part of one tensor: copied into its ring slot before its first reader, freed
/// after its last reader, every forward.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    /// Index into [`Plan::tensors`].
    pub tensor: u32,
    /// Offset of the streamed part inside the tensor.
    pub tensor_offset: u64,
    /// Bytes.
    pub bytes: u64,
    /// Arena offset of its slot (inside [`Plan::ring`]).
    pub dev_offset: u64,
    /// Where its bytes come from.
    pub home: Home,
    /// Offset of its host staging slot (inside [`Plan::host_staging`]) for [`Home::Disk`] and
    /// [`Home::PageCache`].
    pub host_offset: Option<u64>,
    /// First op reading it.
    pub first_reader: u32,
    /// Last op reading it.
    pub last_reader: u32,
}

impl Chunk {
    /// Its device slot.
    pub fn slot(&self) -> Region {
        Region {
            base: self.dev_offset,
            len: self.bytes,
        }
    }
}

/// One op as planned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanOp {
    /// Name.
    pub name: String,
    /// Layer group.
    pub group: u32,
    /// Compute time on the plan's profile, seconds.
    pub seconds: f64,
    /// Indices into [`Plan::resident`] it reads.
    pub resident: Vec<u32>,
    /// Indices into [`Plan::chunks`] it reads.
    pub chunks: Vec<u32>,
}

/// What an event marks (each is recorded once per forward).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventKind {
    /// Chunk copied into its slot.
    Loaded(u32),
    /// Chunk's last reader done: its slot may be overwritten.
    SlotFree(u32),
    /// Op done.
    OpDone(u32),
    /// Staged chunk (disk or page cache) filled into its host staging slot.
    HostReady(u32),
    /// Staged chunk copied out of its host staging slot.
    HostFree(u32),
}

/// Which engine a stream drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamKind {
    /// The compute stream.
    Compute,
    /// The host-to-device copy engine.
    H2d,
    /// The disk IO thread (disk → pinned host staging).
    Io,
    /// The memcpy threads (page cache → pinned host staging), each chunk split across them.
    Memcpy,
}

/// One instruction of a stream's program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Instr {
    /// Block until the event's instance from `lag` forwards back is recorded (an instance before
    /// the first forward counts as already recorded: the ring starts empty).
    Wait {
        /// Index into [`Plan::events`].
        event: u32,
        /// How many forwards back.
        lag: u32,
    },
    /// Record the event (this forward's instance) when everything before it on the stream is done.
    Record {
        /// Index into [`Plan::events`].
        event: u32,
    },
    /// Fill a chunk's host staging slot: a disk read (Io stream) or a page-cache memcpy (Memcpy
    /// stream).
    Read {
        /// Index into [`Plan::chunks`].
        chunk: u32,
    },
    /// Host-to-device copy of a chunk into its slot (H2D stream).
    Copy {
        /// Index into [`Plan::chunks`].
        chunk: u32,
    },
    /// Run an op (compute stream).
    Exec {
        /// Index into [`Plan::ops`].
        op: u32,
    },
}

/// One stream: an engine and its per-forward program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stream {
    /// Engine.
    pub kind: StreamKind,
    /// Program of one forward (repeated every forward).
    pub program: Vec<Instr>,
}

/// A static, serialisable offload plan (offload.md §3.5).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The device profile it was compiled for.
    pub profile_id: String,
    /// Model name.
    pub model: String,
    /// Tokens per forward.
    pub tokens: u64,
    /// The policy that produced it.
    pub policy: Policy,
    /// Which layout the policy chose (the scheduler's winning search candidate).
    pub layout: String,
    /// VRAM budget for weights, bytes.
    pub budget_bytes: u64,
    /// Bytes the arena needs (resident set + ring), `<= budget_bytes`.
    pub arena_bytes: u64,
    /// Tensors with their split.
    pub tensors: Vec<PlanTensor>,
    /// Resident parts with arena offsets.
    pub resident: Vec<Resident>,
    /// The FIFO ring for streamed chunks (arena offsets).
    pub ring: Region,
    /// Pinned host staging for staged chunks (host offsets; empty when every chunk has a pinned
    /// host copy).
    pub host_staging: Region,
    /// Streamed chunks in consumption (= copy) order.
    pub chunks: Vec<Chunk>,
    /// Ops in execution order.
    pub ops: Vec<PlanOp>,
    /// Events.
    pub events: Vec<EventKind>,
    /// Streams and their programs.
    pub streams: Vec<Stream>,
    /// Always true: the program is a loop body; the next forward's copies may run in this one's tail.
    pub period: bool,
}

impl Plan {
    /// Bytes resident across forwards.
    pub fn resident_bytes(&self) -> u64 {
        self.resident.iter().map(|r| r.bytes).sum()
    }
    /// Bytes copied host → device per forward.
    pub fn streamed_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.bytes).sum()
    }
    /// Bytes read from disk per forward.
    pub fn disk_bytes(&self) -> u64 {
        self.chunks
            .iter()
            .filter(|c| c.home == Home::Disk)
            .map(|c| c.bytes)
            .sum()
    }
    /// Bytes staged from the page cache by the memcpy threads per forward.
    pub fn memcpy_bytes(&self) -> u64 {
        self.chunks
            .iter()
            .filter(|c| c.home == Home::PageCache)
            .map(|c| c.bytes)
            .sum()
    }
    /// The plan as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
    /// A plan from JSON.
    pub fn from_json(text: &str) -> Result<Plan, Error> {
        serde_json::from_str(text).map_err(|e| Error::Input(format!("plan JSON: {e}")))
    }
}
