//! `tensorlane`: inspect, verify and convert tensor files (Tenso packets, `.zt` v2, legacy `.zt`,
//! and the foreign model formats: safetensors, GGUF, PyTorch, NumPy, ONNX, HDF5).
//!
//! ```text
//! tensorlane inspect FILE [--json] [--hash]        what a file holds (format from its content)
//! tensorlane verify FILE [--canonical] [--deep]    validate and check every digest and content rule
//! tensorlane convert IN OUT [--to zt|tenso|safetensors] [--dequantize]
//!                                                  any format -> .zt, .safetensors (streaming) or
//!                                                  a Tenso bundle
//! tensorlane stats FILE [TENSOR...] [--bins N] [--json]
//!                                                  count, min, max, mean, std, zeros, NaN, ±Inf,
//!                                                  histogram per tensor (every format)
//! tensorlane demo [--json] [--hash] [--out P]      write the bundled sample packet, then inspect it
//! tensorlane offload plan|sim MODEL --budget 4GiB  offload plan vs baselines (simulated, hazard-checked)
//! tensorlane serve [PATH...] [--bind 127.0.0.1:8080] [--token T]
//!                                                  read-only HTTP: the inspector, files with Range,
//!                                                  /models, tensors as packets, WebSocket
//! ```
//!
//! Exit codes (one rule, [`error::EXIT_CODES`], printed by `--help`): 0 success; 1 bad usage, a
//! file that cannot be read or written, or valid input this tool cannot handle (a file in no
//! format it reads, an unknown encoding, a conversion the target cannot represent); 2 invalid,
//! damaged or hostile input (for `.zt` the message on stderr starts with the spec's rule name and
//! gives the object, part and byte offset), or not canonical (`verify --canonical`).
#![deny(missing_docs)]

mod convert;
mod error;
mod identify;
mod inspect;
mod limits;
mod model_tools;
mod offload;
mod output;
mod remote;
mod run;
mod sample;
mod serve;
mod serve_llm;
mod stats;
mod zt_tools;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::error::CliError;
use crate::output::print_report;

#[derive(Parser)]
#[command(
    name = "tensorlane",
    version,
    about = "Inspect, verify and convert tensor files: Tenso packets, .zt v2, legacy .zt v1/v0, safetensors, GGUF, \
             PyTorch, NumPy, ONNX and HDF5",
    after_help = error::EXIT_CODES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The most bytes one tensor (or .zt part, or packet body) may take when it must be read whole
    /// into memory (writing .zt, dequantizing, converting zstd parts, LZ4 bodies): e.g. 512MiB,
    /// 2GiB, 3000000000. Streaming reads (--hash, stats, verify, convert to safetensors) are not
    /// limited.
    /// Default: the smallest of 4 GiB, half the memory and half the address-space limit.
    #[arg(long, global = true, value_name = "SIZE", value_parser = limits::parse_size)]
    max_tensor_bytes: Option<u64>,
    #[command(flatten)]
    remote: remote::RemoteArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Print what a file holds: kinds, dtypes, shapes, sizes; for .zt also layouts, parts, blobs,
    /// digests, attributes and shards; for model formats metadata, storage and attributes. The
    /// format is detected from the file's content.
    Inspect {
        /// A Tenso packet file (one packet or several back to back), a .zt v2 file (shards are
        /// looked up next to it), a legacy .zt v1/v0 file, or a model: safetensors (or a sharded
        /// set's model.safetensors.index.json), GGUF, PyTorch .pt/.pth/.bin, .npy/.npz, ONNX
        /// (external data next to it) or HDF5.
        file: Option<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Add the SHA-256 of every tensor's (for .zt: every part's decoded) C-order
        /// little-endian bytes.
        #[arg(long)]
        hash: bool,
        /// Inspect the bundled sample packet instead of a file (see `demo`).
        #[arg(long, conflicts_with = "file")]
        sample: bool,
    },
    /// Validate a file and check every digest and content rule (exit 2 on the first failure).
    Verify {
        /// The file, in any format `inspect` reads: checksums (zip CRC-32s, ONNX SHA-1s, .zt
        /// digests, Tenso XXH3 footers), bounds and the format's rules.
        file: PathBuf,
        /// Also check that a .zt v2 file is in canonical form (spec §10).
        #[arg(long)]
        canonical: bool,
        /// Also resolve the shards next to the file and check their parts and whole-file digests.
        #[arg(long)]
        deep: bool,
    },
    /// Convert between formats: any format (model formats, .zt v2, legacy .zt, Tenso packets) ->
    /// .zt v2, .safetensors or a Tenso bundle. Tensors are streamed one at a time; output is
    /// written atomically (.zt in canonical form).
    Convert {
        /// The input (format detected from its content).
        input: PathBuf,
        /// The output file.
        output: PathBuf,
        /// Target format: `zt`, `tenso` or `safetensors` (default: from OUT's extension, else
        /// tenso for .zt v2 input and zt otherwise).
        #[arg(long, value_parser = ["zt", "tenso", "safetensors"])]
        to: Option<String>,
        /// Write ggml block-quantized tensors (GGUF) as float32. Without it they go to .zt as
        /// lossless gguf.TYPE/1 objects (gguf.q4_k/1, ...) and are refused for safetensors.
        #[arg(long)]
        dequantize: bool,
        /// Quantized Tenso packets (the `demo` sample has one): `error` refuses the file,
        /// `dequantize` writes them as float32, `skip` leaves them out with a warning.
        #[arg(long, value_parser = ["error", "dequantize", "skip"], default_value = "error")]
        quantized: String,
        /// Leave out, with a warning, Tenso packets .zt has no layout for (strings, COO/CSC sparse).
        #[arg(long)]
        skip_unsupported: bool,
        /// .zt blob alignment in bytes (a power of two, 4096 to 65536). Canonical form aligns to
        /// 65536; a smaller value makes small files smaller but not canonical.
        #[arg(long, value_parser = parse_align)]
        align: Option<u64>,
    },
    /// Summarise tensors: count, min, max, mean, std, zeros, NaN, +Inf, -Inf and a histogram per
    /// tensor, for every format. `--json` prints an array, one object per tensor.
    Stats {
        /// A model file (safetensors or its index, GGUF, PyTorch, .npy/.npz, ONNX, HDF5), a .zt v2
        /// file (shards are looked up next to it), a legacy .zt v1/v0 file or Tenso packets.
        file: PathBuf,
        /// The tensors to summarise, in this order (default: every tensor, in file order).
        tensors: Vec<String>,
        /// Histogram bins (1 to 1048576) over [min, max] of the finite values.
        #[arg(long, default_value_t = 64)]
        bins: usize,
        /// Print a JSON array (one object per tensor) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Plan, simulate and hazard-check streaming a model bigger than the GPU budget.
    #[command(subcommand)]
    Offload(offload::OffloadCommand),
    /// Generate text from a GGUF model (llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3, qwen3moe,
    /// olmoe, mixtral) on the CPU: tokens are printed as they are generated, then prefill and
    /// decode tokens/s.
    Run(run::RunArgs),
    /// Serve model files read-only over HTTP: the web inspector, the files with Range/ETag/CORS,
    /// `/models` (JSON), `/tensors/{model}/{name}` (a Tenso packet) and `/ws` (WebSocket). With no
    /// PATH, a bundled sample. Stops on Ctrl-C.
    Serve(serve::ServeArgs),
    /// Write the bundled sample packet (a float32 weight, a quantized tensor, a sparse matrix,
    /// strings) to a file and inspect it.
    Demo {
        /// Where to write the sample (default: a file in the temp directory).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Add SHA-256 digests.
        #[arg(long)]
        hash: bool,
    },
}

fn main() -> ExitCode {
    let cli: Cli = error::parse_args();
    limits::set(cli.max_tensor_bytes);
    if let Err(e) = cli.remote.apply() {
        return fail("remote options", &e);
    }
    match cli.command {
        Command::Inspect {
            file: Some(file),
            json,
            hash,
            sample: false,
        } => run_inspect(&file, json, hash),
        Command::Inspect {
            sample: true,
            json,
            hash,
            ..
        } => demo(None, json, hash),
        Command::Inspect { file: None, .. } => {
            eprintln!("error: give a FILE to inspect, or --sample");
            ExitCode::from(1)
        }
        Command::Demo { out, json, hash } => demo(out, json, hash),
        Command::Offload(cmd) => offload::run(cmd),
        Command::Serve(args) => serve::run(args),
        Command::Run(args) => run::run(args),
        Command::Verify { file, canonical, deep } => run_verify(&file, canonical, deep),
        Command::Convert {
            input,
            output,
            to,
            dequantize,
            quantized,
            skip_unsupported,
            align,
        } => {
            let opts = convert::ConvertOptions {
                dequantize,
                quantized: convert::Quantized::parse(&quantized).unwrap_or_default(),
                skip_unsupported,
                align,
            };
            run_convert(&input, &output, to.as_deref(), &opts)
        }
        Command::Stats {
            file,
            tensors,
            bins,
            json,
        } => run_stats(&file, &tensors, bins, json),
    }
}

/// Prints `error: NAME: MESSAGE` and returns the error's exit code.
fn fail(name: &str, e: &CliError) -> ExitCode {
    eprintln!("error: {name}: {e}");
    ExitCode::from(e.exit_code())
}

fn run_verify(path: &Path, canonical: bool, deep: bool) -> ExitCode {
    let name = path.display().to_string();
    // Every file reads with pread (limits::open_model): a file truncated meanwhile is an error
    // naming it, not SIGBUS.
    let (model, size) = match open(path) {
        Ok(m) => m,
        Err(e) => return fail(&name, &e),
    };
    match model_tools::verify(&model, canonical, deep) {
        Ok(s) => {
            output::outln!("{name}: {s}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(
            &name,
            &inspect::explain_tenso(path, identify::note_if_changed(path, size, e)),
        ),
    }
}

/// Opens any file as a [`tensorlane::model::Model`] ([`limits::open_model`]); a Tenso file the
/// catalog refuses is explained by the wire decoder ([`inspect::explain_tenso`]).
fn open(path: &Path) -> Result<(tensorlane::model::Model, u64), CliError> {
    limits::open_model(path).map_err(|e| inspect::explain_tenso(path, e))
}

/// `--align`: a power of two from 4096 to 65536.
fn parse_align(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(a) if a.is_power_of_two() && (4096..=65536).contains(&a) => Ok(a),
        _ => Err(format!(
            "{s:?} is not a power of two from 4096 to 65536 (e.g. 4096, 16384, 65536)"
        )),
    }
}

/// On SIGINT or SIGTERM, removes the unfinished output files ([`tensorlane::publish`]'s
/// temporaries; a signal ends the process without running destructors) and exits with 128 + the
/// signal's number, as a shell reports a process the signal ended. SIGKILL cannot be caught:
/// the next write into the same folder removes what it leaves ([`tensorlane::publish::sweep_stale`]).
fn remove_partial_outputs_on_signal() {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            tensorlane::publish::remove_pending();
            std::process::exit(128 + sig);
        }
    });
}

fn run_convert(input: &Path, output: &Path, to: Option<&str>, opts: &convert::ConvertOptions) -> ExitCode {
    remove_partial_outputs_on_signal();
    match convert::convert(input, output, to, opts) {
        Ok(c) => {
            for w in &c.warnings {
                eprintln!("warning: {}: {w}", input.display());
            }
            eprintln!(
                "converted {} ({}) to {} ({}): {} tensor{}, {}",
                input.display(),
                c.from,
                output.display(),
                c.to,
                c.objects,
                if c.objects == 1 { "" } else { "s" },
                output::size(c.bytes)
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(&input.display().to_string(), &inspect::explain_tenso(input, e)),
    }
}

fn demo(out: Option<PathBuf>, json: bool, hash: bool) -> ExitCode {
    let path = out.unwrap_or_else(|| std::env::temp_dir().join("tensorlane-sample.tenso"));
    let bytes = sample::sample_bytes();
    // Beside the target, then renamed: readers never see half a file.
    if let Err(e) = tensorlane::publish::write_file(&path, &bytes) {
        let why = match &e {
            tensorlane::Error::Io { source, .. } => source.to_string(),
            other => other.to_string(),
        };
        eprintln!("error: cannot write the sample to {}: {why}", path.display());
        return ExitCode::from(1);
    }
    eprintln!(
        "wrote the sample packet ({}) to {}",
        output::size(bytes.len() as u64),
        path.display()
    );
    run_inspect(&path, json, hash)
}

fn run_inspect(path: &Path, json: bool, hash: bool) -> ExitCode {
    let name = path.display().to_string();
    let (model, size) = match open(path) {
        Ok(m) => m,
        Err(e) => return fail(&name, &e),
    };
    model_tools::inspect(&model, &name, hash)
        .map(|report| {
            for w in &report.warnings {
                eprintln!("warning: {name}: {w}");
            }
            print_report(&report, json)
        })
        .unwrap_or_else(|e| {
            fail(
                &name,
                &inspect::explain_tenso(path, identify::note_if_changed(path, size, e)),
            )
        })
}

fn run_stats(path: &Path, tensors: &[String], bins: usize, json: bool) -> ExitCode {
    let name = path.display().to_string();
    if bins == 0 || bins > tensorlane::core::stats::MAX_BINS {
        eprintln!(
            "error: --bins {bins}: a histogram needs 1 to {} bins",
            tensorlane::core::stats::MAX_BINS
        );
        return ExitCode::from(1);
    }
    let opts = tensorlane::core::stats::StatsOptions {
        bins,
        ..Default::default()
    };
    let (model, size) = match open(path) {
        Ok(m) => m,
        Err(e) => return fail(&name, &e),
    };
    for w in model.warnings() {
        eprintln!("warning: {name}: {w}");
    }
    match stats::model_stats(&model, &name, tensors, &opts) {
        Ok(r) => print_report(&r, json),
        Err(e) => fail(
            &name,
            &inspect::explain_tenso(path, identify::note_if_changed(path, size, e)),
        ),
    }
}
