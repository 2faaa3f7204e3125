//! `tensorlane`: inspect tensor packet files.
//!
//! ```text
//! tensorlane inspect FILE [--json] [--hash]   what a packet file holds
//! tensorlane demo [--json] [--hash] [--out P] write the bundled sample packet, then inspect it
//! ```
//!
//! Exit codes: 0 success, 1 the file could not be read (I/O), 2 the file is not a valid packet
//! file (the message on stderr gives the byte offset and entry path) or bad usage.
#![warn(missing_docs)]

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tensorlane::inspect::{InspectOptions, inspect_bytes};

#[derive(Parser)]
#[command(name = "tensorlane", version, about = "Inspect Tenso tensor packets (one or several back to back in a file)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print what a packet file holds: kinds, dtypes, shapes, flags, sizes.
    Inspect {
        /// The packet file (a single packet, or a stream of packets back to back).
        file: Option<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Add the SHA-256 of every tensor's C-order little-endian bytes.
        #[arg(long)]
        hash: bool,
        /// Inspect the bundled sample packet instead of a file (see `demo`).
        #[arg(long, conflicts_with = "file")]
        sample: bool,
    },
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
    let cli = Cli::parse();
    match cli.command {
        Command::Inspect { file: Some(file), json, hash, sample: false } => run_inspect(&file, json, hash),
        Command::Inspect { sample: true, json, hash, .. } => demo(None, json, hash),
        Command::Inspect { file: None, .. } => {
            eprintln!("error: give a FILE to inspect, or --sample");
            ExitCode::from(2)
        }
        Command::Demo { out, json, hash } => demo(out, json, hash),
    }
}

fn demo(out: Option<PathBuf>, json: bool, hash: bool) -> ExitCode {
    let path = out.unwrap_or_else(|| std::env::temp_dir().join("tensorlane-sample.tenso"));
    let bytes = tensorlane::sample::sample_bytes();
    // Write beside the target, then rename: readers never see half a file.
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let written = File::create(&tmp)
        .and_then(|mut f| f.write_all(&bytes).and_then(|_| f.sync_all()))
        .and_then(|_| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        eprintln!("error: cannot write the sample to {}: {e}", path.display());
        return ExitCode::from(1);
    }
    eprintln!("wrote the sample packet ({} bytes) to {}", bytes.len(), path.display());
    run_inspect(&path, json, hash)
}

/// The file's bytes: memory-mapped, so opening a large file reads only what inspection touches.
enum Contents {
    Mapped(memmap2::Mmap),
    Empty,
}

impl Contents {
    fn open(path: &Path) -> std::io::Result<Contents> {
        let f = File::open(path)?;
        if f.metadata()?.len() == 0 {
            return Ok(Contents::Empty);
        }
        // SAFETY: the map is read-only and lives while we read it. Another process truncating or
        // rewriting the file meanwhile is outside what a file inspector can guard against (as for
        // every mmap-based reader); tensorlane never writes through it.
        let m = unsafe { memmap2::Mmap::map(&f)? };
        Ok(Contents::Mapped(m))
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Contents::Mapped(m) => m,
            Contents::Empty => &[],
        }
    }
}

fn run_inspect(path: &Path, json: bool, hash: bool) -> ExitCode {
    let name = path.display().to_string();
    let contents = match Contents::open(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot read {name}: {e}");
            return ExitCode::from(1);
        }
    };
    let opts = InspectOptions { hash, progress: true };
    let report = match inspect_bytes(contents.bytes(), &name, &opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {name}: {e}");
            return ExitCode::from(2);
        }
    };
    let text = if json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => s + "\n",
            Err(e) => {
                eprintln!("error: cannot serialise the report: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        report.to_table()
    };
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|_| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`| head`) is not an error worth a message.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot write output: {e}");
            ExitCode::from(1)
        }
    }
}
