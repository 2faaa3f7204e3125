//! `tensorlane offload …`: plan, simulate and check from the command line.
//!
//! ```text
//! tensorlane offload plan MODEL --budget 4GiB [--profile h100|pcie4|FILE] [--json OUT] [--prefill N]
//! tensorlane offload sim  MODEL --budget 4GiB [--profile …] [--prefill N] [--forwards K] [--json OUT] [--trace OUT]
//! tensorlane offload run  …   (needs a device executor: --features wgpu/cuda)
//! ```
//!
//! `MODEL` is a preset (`llama-7b`, `llama-13b`, `tiny`) or any file `inspect` reads (its tensors
//! through the one [`tensorlane::model::Model`]; `run`: the `tiny` preset only). Sizes print in
//! IEC units. Exit codes follow the tool's rule ([`crate::error::EXIT_CODES`]): 1 for bad usage
//! (an unknown preset, profile or budget, a file in no format read here), a budget the policy
//! cannot fit, I/O, or a plan with hazard findings; 2 for an invalid model file or profile.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::output::{human_bytes, outln};

use tensorlane_offload::{
    DeviceProfile, Error, Evaluation, HostWeights, Phase, Policy, Workload, check, chrome_trace, evaluate, parse_bytes,
    simulate, simulate_traced,
};

/// `tensorlane offload` subcommands.
#[derive(Subcommand, Debug)]
pub enum OffloadCommand {
    /// Compile the scheduler's plan and compare it with the baselines (simulated).
    Plan(OffloadArgs),
    /// Simulate the plan for K forwards and run the hazard checker on it and on every baseline.
    Sim(OffloadArgs),
    /// Execute a plan on a device (cpu; wgpu and cuda with their cargo features). Runs the `tiny`
    /// preset only (synthetic seeded f32 weights); model files are planned and simulated.
    Run(OffloadArgs),
}

/// Arguments shared by the `offload` subcommands.
#[derive(Args, Debug)]
pub struct OffloadArgs {
    /// A preset (`llama-7b`, `llama-13b`, `tiny`) or a model file in any format `inspect` reads
    /// (safetensors, GGUF, .zt, ...); `run` takes the `tiny` preset only.
    pub model: String,
    /// VRAM budget for weights: a number with an optional unit, IEC (`4GiB`, `512MiB`, `4G`) or
    /// SI (`4GB`, `500MB`), or a plain byte count.
    #[arg(long)]
    pub budget: String,
    /// Device profile: a bundled one (`h100`, `pcie4`) or a JSON file.
    #[arg(long, default_value = "h100")]
    pub profile: String,
    /// Where host copies of streamed weights live: `pinned` (a pinned copy made at load) or
    /// `page-cache` (the mapped file; memcpy threads stage each chunk into pinned buffers).
    /// Overrides the profile's `host_weights`.
    #[arg(long)]
    pub host: Option<String>,
    /// Write the plan as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// `sim` only: write the simulated schedule here as a Chrome/Perfetto trace (one track per
    /// stream: compute ops, host-to-device copies, disk reads, page-cache copies; open it in
    /// <https://ui.perfetto.dev> or chrome://tracing).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Prefill N tokens per forward instead of decoding one.
    #[arg(long)]
    pub prefill: Option<u64>,
    /// KV context for decode.
    #[arg(long, default_value_t = 512)]
    pub context: u64,
    /// Forwards to simulate (or, for `run`, to execute).
    #[arg(long, default_value_t = 6)]
    pub forwards: usize,
    /// `run` only: the executor, `cpu`, `wgpu` or `cuda` (the latter two need their cargo feature).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// `run` only: the policy whose plan runs (`scheduler`, `all-resident`, `sync-jit`,
    /// `full-offload`, `flexgen-like`).
    #[arg(long, default_value = "scheduler")]
    pub policy: String,
}

/// Runs an `offload` subcommand; prints to stdout, errors to stderr. Exit 0 on success; 1 for bad
/// usage, a budget that does not fit, I/O, or a plan with hazard findings; 2 for invalid input
/// files.
pub fn run(cmd: OffloadCommand) -> ExitCode {
    let (args, sim) = match cmd {
        OffloadCommand::Plan(a) => (a, false),
        OffloadCommand::Sim(a) => (a, true),
        OffloadCommand::Run(a) => return run_exec(&a),
    };
    match run_inner(&args, sim) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Why an `offload` command failed.
enum OffloadError {
    /// Bad usage: an unknown preset, profile or budget form, a file in no format read here.
    Usage(String),
    /// What the offload crate reported.
    Lib(Error),
}

impl OffloadError {
    fn exit_code(&self) -> u8 {
        match self {
            OffloadError::Usage(_) | OffloadError::Lib(Error::Io(_) | Error::DoesNotFit { .. }) => 1,
            OffloadError::Lib(_) => 2,
        }
    }
}

impl std::fmt::Display for OffloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OffloadError::Usage(m) => f.write_str(m),
            OffloadError::Lib(e) => e.fmt(f),
        }
    }
}

impl From<Error> for OffloadError {
    fn from(e: Error) -> Self {
        OffloadError::Lib(e)
    }
}

/// The presets `MODEL` may name.
const PRESETS: &str = "llama-7b, llama-13b, tiny";

/// The profiles bundled with the tool (`--profile NAME`).
const PROFILES: [&str; 2] = ["h100", "pcie4"];

/// `--budget`, or an error that lists the accepted forms.
fn parse_budget(s: &str) -> Result<u64, OffloadError> {
    parse_bytes(s).ok_or_else(|| {
        OffloadError::Usage(format!(
            "bad --budget {s:?}: give a number with an optional unit: IEC 4GiB, 512MiB, 1.5GiB (also K, M, G, T), \
             SI 4GB, 500MB (kB, MB, GB, TB), or a plain byte count such as 4294967296"
        ))
    })
}

fn load_model(name: &str, phase: Phase) -> Result<Workload, OffloadError> {
    if let Some(m) = Workload::preset(name, phase) {
        return Ok(m);
    }
    let p = Path::new(name);
    if p.is_dir() {
        return Err(OffloadError::Usage(format!(
            "{name} is a directory; give a model file (or a preset: {PRESETS})"
        )));
    }
    if p.exists() {
        // Any file the tool reads, through the one Model (read with pread, not mapped: a file
        // truncated meanwhile is an error, not SIGBUS).
        return match crate::limits::open_model(p) {
            Ok((model, _)) => Ok(Workload::from_model(&model, phase)),
            Err(e) if e.exit_code() == 2 => Err(OffloadError::Lib(Error::Input(format!("{name}: {e}")))),
            Err(e) => Err(OffloadError::Usage(format!("{name}: {e}"))),
        };
    }
    Err(OffloadError::Usage(format!(
        "{name}: not a preset ({PRESETS}) and no such file"
    )))
}

fn gb(b: u64) -> String {
    human_bytes(b)
}

fn row(e: &Evaluation, reference: f64) -> String {
    format!(
        "  {:<13} {:>10.2} ms  ({:>5.2}x scheduler)  streamed {:>10}  floor ratio {:.3}  hidden {:.2} / {:.2}  [{}]",
        e.policy.name(),
        e.sim.forward_s * 1e3,
        e.sim.forward_s / reference,
        gb(e.streamed_bytes),
        e.sim.ratio,
        e.sim.hidden_fraction,
        e.sim.hideable,
        e.layout
    )
}

/// The profile named by `--profile`, with `--host` applied. A name that is neither a bundled
/// profile nor a file lists the bundled ones.
fn load_profile(a: &OffloadArgs) -> Result<DeviceProfile, OffloadError> {
    if !PROFILES.contains(&a.profile.as_str()) && !Path::new(&a.profile).is_file() {
        return Err(OffloadError::Usage(format!(
            "unknown --profile {:?}: the bundled profiles are {}; or give the path of a JSON profile file",
            a.profile,
            PROFILES.join(", ")
        )));
    }
    let mut profile = DeviceProfile::load(&a.profile)?;
    if let Some(h) = &a.host {
        profile.host_weights = HostWeights::parse(h)
            .ok_or_else(|| OffloadError::Usage(format!("bad --host {h:?}: expected pinned or page-cache")))?;
    }
    Ok(profile)
}

fn run_inner(a: &OffloadArgs, sim: bool) -> Result<ExitCode, OffloadError> {
    let budget = parse_budget(&a.budget)?;
    let profile = load_profile(a)?;
    let phase = match a.prefill {
        Some(n) if n > 0 => Phase::Prefill { tokens: n },
        Some(_) => return Err(OffloadError::Usage("--prefill needs N > 0".into())),
        None => Phase::Decode { context: a.context },
    };
    let model = load_model(&a.model, phase)?;
    let forwards = a.forwards.clamp(3, 1000);
    let (plan, s) = evaluate(&model, &profile, budget, Policy::Scheduler, forwards)?;
    outln!(
        "model {} ({}, {} ops, W = {}, gathered {}), profile {}, budget {}",
        model.name,
        phase.label(),
        model.ops.len(),
        gb(model.weight_bytes()),
        gb(model.gather_bytes()),
        profile.id,
        gb(budget)
    );
    if budget > profile.vram_bytes {
        outln!(
            "note: the budget exceeds the profile's VRAM ({})",
            gb(profile.vram_bytes)
        );
    }
    outln!("plan: {}", plan.layout);
    outln!(
        "  resident {}  ring {}  arena {}  streamed per forward {} in {} copies{}",
        gb(plan.resident_bytes()),
        gb(plan.ring.len),
        gb(plan.arena_bytes),
        gb(plan.streamed_bytes()),
        plan.chunks.len(),
        if plan.disk_bytes() > 0 {
            format!(" ({} from disk)", gb(plan.disk_bytes()))
        } else {
            String::new()
        }
    );
    if plan.memcpy_bytes() > 0 {
        outln!(
            "  staged from the page cache by {} memcpy threads: {} per forward (X_m/M {:.2} ms)",
            profile.memcpy_threads,
            gb(plan.memcpy_bytes()),
            plan.memcpy_bytes() as f64 / (profile.memcpy_total_gbps() * 1e9) * 1e3
        );
    }
    outln!(
        "  predicted {:.2} ms per forward (cold {:.2} ms), floor {:.2} ms (C {:.2} ms, X/P {:.2} ms), ratio {:.3}",
        s.sim.forward_s * 1e3,
        s.sim.cold_s * 1e3,
        s.sim.floor_s * 1e3,
        s.sim.compute_s * 1e3,
        s.streamed_bytes as f64 / (profile.h2d_pinned_gbps * 1e9) * 1e3,
        s.sim.ratio
    );
    outln!(
        "  hidden fraction {:.3} (hideable {:.3}), achieved {:.1} GB/s, peak {}",
        s.sim.hidden_fraction,
        s.sim.hideable,
        s.sim.achieved_gbps,
        gb(s.sim.peak_bytes)
    );
    outln!("baselines:");
    outln!("{}", row(&s, s.sim.forward_s));
    let mut clean = s.findings.is_empty();
    for p in Policy::BASELINES {
        match evaluate(&model, &profile, budget, p, forwards) {
            Ok((_, e)) => {
                clean &= e.findings.is_empty();
                outln!("{}", row(&e, s.sim.forward_s));
                if sim {
                    for f in e.findings.iter().take(5) {
                        outln!("    hazard: {f}");
                    }
                }
            }
            Err(e) => outln!("  {:<13} {e}", p.name()),
        }
    }
    if sim {
        let (r, spans) = simulate_traced(&plan, &profile, forwards)?;
        if let Some(path) = &a.trace {
            let process = format!("{} at {} on {} (simulated)", plan.model, human_bytes(budget), profile.id);
            let trace = chrome_trace(&process, &tensorlane_offload::sim::SIM_TRACKS, &spans);
            std::fs::write(path, serde_json::to_vec(&trace).map_err(|e| OffloadError::Usage(e.to_string()))?)
                .map_err(|e| OffloadError::Usage(format!("cannot write the trace to {}: {e}", path.display())))?;
            outln!("trace: {} spans over {} forwards in {}", spans.len(), r.forwards, path.display());
        }
        outln!(
            "simulated {} forwards: steady {:.3} ms, cold {:.3} ms, H2D {} per forward, disk {}, page cache {}",
            r.forwards,
            r.forward_s * 1e3,
            r.cold_s * 1e3,
            gb(r.h2d_bytes),
            gb(r.disk_bytes),
            gb(r.memcpy_bytes)
        );
        let findings = check(&plan);
        outln!("hazard checker: {} finding(s) in the scheduler's plan", findings.len());
        for f in findings.iter().take(20) {
            outln!("  {f}");
        }
        outln!(
            "hazard checker over the baselines: {}",
            if clean { "no findings" } else { "FINDINGS (see above)" }
        );
    }
    if let Some(out) = &a.json {
        std::fs::write(out, plan.to_json()).map_err(|e| Error::Io(format!("{}: {e}", out.display())))?;
        // (through From: an I/O error, exit 1)
        outln!("plan written to {}", out.display());
    }
    Ok(if clean { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// `offload run`: executes the plan of `--policy` for the model (tiny-style presets with real
/// seeded weights) on `--device`, prints time per forward, bytes moved and the exact check
/// against the all-resident reference. Exit 0 when every forward matches, 1 when not or on a
/// device error, 2 for bad input.
fn run_exec(a: &OffloadArgs) -> ExitCode {
    use tensorlane_offload::LlamaShape;
    use tensorlane_offload::exec::{Backend, CpuBackend, ExecModel, ExecOptions, bit_equal, execute};
    let budget = match parse_budget(&a.budget) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let shape = match a.model.as_str() {
        "tiny" => LlamaShape::tiny(),
        other if Path::new(other).exists() => {
            eprintln!(
                "error: `offload run` cannot execute a model file yet ({other}): it runs only the `tiny` preset \
                 (synthetic seeded f32 weights). Plan or simulate the file instead: tensorlane offload plan {other} \
                 --budget {}",
                a.budget
            );
            return ExitCode::from(1);
        }
        other => {
            eprintln!("error: `offload run` runs only the `tiny` preset (synthetic seeded f32 weights); got {other:?}");
            return ExitCode::from(1);
        }
    };
    let policy = match Policy::from_name(&a.policy) {
        Some(p) => p,
        None => {
            eprintln!(
                "error: unknown --policy {:?}: scheduler, all-resident, sync-jit, full-offload or flexgen-like",
                a.policy
            );
            return ExitCode::from(1);
        }
    };
    let phase = match a.prefill {
        Some(n) if n > 0 => Phase::Prefill { tokens: n },
        Some(_) => {
            eprintln!("error: --prefill needs N > 0");
            return ExitCode::from(1);
        }
        None => Phase::Decode { context: a.context },
    };
    let result = (|| -> Result<bool, String> {
        let profile = load_profile(a).map_err(|e| e.to_string())?;
        let m = ExecModel::synthetic(&a.model, &shape, phase, 1).map_err(|e| e.to_string())?;
        let plan =
            tensorlane_offload::compile_policy(&m.workload, &profile, budget, policy).map_err(|e| e.to_string())?;
        let mut backend: Box<dyn Backend> = match a.device.as_str() {
            "cpu" => Box::new(CpuBackend::new()),
            #[cfg(feature = "wgpu")]
            "wgpu" => Box::new(tensorlane_offload::exec::wgpu::WgpuBackend::new().map_err(|e| e.to_string())?),
            #[cfg(feature = "cuda")]
            "cuda" => Box::new(tensorlane_offload::exec::cuda::CudaBackend::new().map_err(|e| e.to_string())?),
            d if d == "wgpu" || d == "cuda" => {
                return Err(format!(
                    "--device {} needs a build with --features {}",
                    a.device, a.device
                ));
            }
            d => return Err(format!("unknown --device {d:?} (cpu, wgpu, cuda)")),
        };
        let forwards = a.forwards.clamp(1, 1000);
        let opts = ExecOptions {
            forwards,
            poison: true,
            copies_first: true,
        };
        let rep = execute(&plan, &m, backend.as_mut(), opts).map_err(|e| e.to_string())?;
        let sim = simulate(&plan, &profile, forwards.max(3)).map_err(|e| e.to_string())?;
        let reference = m.reference();
        outln!(
            "model {} ({}), W = {} dense, policy {}, budget {}, arena {}, device {}",
            m.workload.name,
            phase.label(),
            human_bytes(m.dense_bytes()),
            policy.name(),
            human_bytes(budget),
            human_bytes(plan.arena_bytes),
            rep.backend
        );
        outln!(
            "resident {} loaded once in {:.1} ms; plan streams {} per forward, simulator {}",
            crate::output::size(rep.resident_load_bytes),
            rep.load_s * 1e3,
            crate::output::size(plan.streamed_bytes()),
            crate::output::size(sim.h2d_bytes)
        );
        let mut all = true;
        for (f, out) in rep.outputs.iter().enumerate() {
            let ok = bit_equal(out, &reference);
            all &= ok;
            outln!(
                "forward {f}: {:.2} ms, H2D {} in {} copies, output {}",
                rep.forward_s[f] * 1e3,
                crate::output::size(rep.h2d_bytes.get(f).copied().unwrap_or(0)),
                rep.copies.get(f).copied().unwrap_or(0),
                if ok {
                    "== all-resident (bit-exact)"
                } else {
                    "DIFFERS from all-resident"
                }
            );
        }
        outln!(
            "steady forward {:.2} ms (median after the first)",
            rep.steady_forward_s() * 1e3
        );
        Ok(all)
    })();
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
