//! The one error type of the offload layer: planning, simulation, execution and device transfer.

use std::fmt;

/// What can go wrong planning, simulating or executing an offload plan, or moving bytes to a
/// device. Every message says what was wrong and what to do about it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// The workload is malformed: no op, a tensor index out of range, layer groups out of
    /// order, a negative or non-finite cost, or a model the executors cannot run.
    InvalidWorkload(String),
    /// The device profile is malformed (a missing, negative or non-finite rate or size).
    InvalidProfile(String),
    /// A plan is malformed: an index out of range, a piece outside the arena, a plan compiled
    /// from another workload.
    InvalidPlan(String),
    /// The policy cannot fit its arena into the VRAM budget.
    DoesNotFit {
        /// Bytes the policy needs at least.
        needed: u64,
        /// The budget, bytes.
        budget: u64,
        /// The policy's name.
        policy: &'static str,
    },
    /// The ring cannot hold what one op reads, or a slot would be reused while still needed.
    RingTooSmall(String),
    /// A simulation or execution stopped at a wait that no record can satisfy.
    Deadlock(String),
    /// A file could not be read or written (the message names the path).
    Io(String),
    /// An input could not be parsed (a `.zt` file, plan JSON, a command-line value).
    Input(String),
    /// No device of the asked kind: no wgpu adapter (no GPU and no CPU fallback such as
    /// lavapipe), or `libcuda` cannot be loaded (no NVIDIA driver).
    NoDevice(String),
    /// The device or its driver failed a call: device creation, a buffer mapping, a poll, a
    /// CUDA driver, cuBLAS or NVRTC call, a kernel launch.
    Device(String),
    /// A driver binding panicked inside a call; the panic was caught and its message kept.
    Panicked(String),
    /// A buffer larger than the device allows.
    TooLarge {
        /// Bytes asked for.
        size: u64,
        /// The device's limit.
        limit: u64,
        /// Which limit (`max_buffer_size`, `max_storage_buffer_binding_size`).
        which: &'static str,
    },
    /// An offset or length the copy rules refuse, or a range past a buffer's end.
    Range(String),
    /// Matrix dimensions that do not fit the buffers or the dispatch limits.
    Shape(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidWorkload(m) => write!(
                f,
                "invalid workload: {m} (every op must read existing tensors, layer groups must be in order, costs finite and >= 0)"
            ),
            Error::InvalidProfile(m) => write!(
                f,
                "invalid device profile: {m} (fix the profile JSON; offload/profiles/h100.json shows every field)"
            ),
            Error::InvalidPlan(m) => write!(
                f,
                "invalid plan: {m} (compile the plan again from this workload and profile)"
            ),
            Error::DoesNotFit { needed, budget, policy } => write!(
                f,
                "{policy}: needs at least {needed} bytes of VRAM, the budget is {budget} bytes (raise the budget or pick another policy)"
            ),
            Error::RingTooSmall(m) => write!(f, "ring too small: {m} (raise the budget)"),
            Error::Deadlock(m) => write!(
                f,
                "deadlock: {m} (a wait no record satisfies; run the hazard checker on the plan)"
            ),
            Error::Io(m) => write!(f, "{m}"),
            Error::Input(m) => write!(f, "{m}"),
            Error::NoDevice(m) => write!(f, "no device: {m}"),
            Error::Device(m) => write!(f, "device error: {m}"),
            Error::Panicked(m) => write!(f, "a device call panicked (caught): {m}"),
            Error::TooLarge { size, limit, which } => write!(
                f,
                "buffer of {size} bytes exceeds the device's {which} ({limit} bytes); use a smaller budget or split the buffer"
            ),
            Error::Range(m) => write!(f, "bad range: {m}"),
            Error::Shape(m) => write!(f, "bad matmul shape: {m}"),
        }
    }
}

impl std::error::Error for Error {}

#[cfg(feature = "cuda")]
impl From<cudarc::driver::DriverError> for Error {
    fn from(e: cudarc::driver::DriverError) -> Self {
        Error::Device(format!("CUDA driver: {e}"))
    }
}
