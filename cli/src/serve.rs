//! `tensorlane serve`: the read-only HTTP server of [`tensorlane::serve`] with the web inspector,
//! and a bundled sample when no path is given.
//!
//! The inspector (`web-demo/`, `js/`, `wasm/pkg/`) is compiled into the binary (`build.rs`: from
//! the package's staged `inspector/` folder, or from the checkout once `scripts/build-js.sh` has
//! built the wasm; the wasm must be this binary's version) and served from memory, so a
//! `cargo install`ed or copied binary needs no checkout. `--web DIR` serves a checkout's files
//! instead (`tests/data/` too), for working on the pages. A binary built before the wasm embeds
//! nothing and looks for a checkout as before: the one it was built from when it is still there,
//! else the current folder or one above it that holds `web-demo/index.html`. Without either the
//! server still serves `/models`, `/files/`, `/tensors/` and `/ws`, and says so.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use tensorlane::serve::{Config, Server};
use tensorlane::st_write::{SafetensorsFile, StDtype, StTensor};

/// The web inspector compiled into this binary (`build.rs`).
mod inspector {
    include!(concat!(env!("OUT_DIR"), "/inspector.rs"));
}

/// `tensorlane serve` arguments.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Model files or folders to serve (default: a bundled sample). A folder is served with
    /// everything below it; a file with the companion files its model names (shards, splits,
    /// external data).
    pub paths: Vec<PathBuf>,
    /// The address to listen on. Anything but loopback (127.0.0.0/8, ::1) exposes the files to
    /// the network, and is refused unless --token or --public is given too.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// Serve on a non-loopback --bind without a token: anyone who reaches the address reads the
    /// files.
    #[arg(long)]
    pub public: bool,
    /// A tensorlane checkout whose web-demo/, js/, wasm/pkg/ and tests/data/ hold the inspector,
    /// served instead of the one compiled into the binary (for working on the pages).
    #[arg(long, value_name = "DIR")]
    pub web: Option<PathBuf>,
    /// A bearer token that every data request must carry (`Authorization: Bearer TOKEN` or
    /// `?token=TOKEN`).
    #[arg(long, env = "TENSORLANE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The most connections served at once; one more is answered 503 with Retry-After at once.
    /// Lowered (with a warning) to what the open-file limit (ulimit -n, raised to its hard limit
    /// when needed) leaves room for: a descriptor per connection, 64 kept for the rest.
    #[arg(long, default_value_t = 512)]
    pub max_connections: usize,
    /// How long a connection may take to send a request's head (from its accept, or from the
    /// first byte of a later request) before it is closed: `10s`, `500ms`, `2m`; `0` for no limit.
    #[arg(long, value_name = "TIME", default_value = "10s", value_parser = parse_duration)]
    pub header_timeout: Duration,
    /// How long a kept-alive connection may be idle between requests, and a client may take
    /// none of a response, before it is closed; `0` for no limit.
    #[arg(long, value_name = "TIME", default_value = "30s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// The most bytes of tensor data /tensors/ and /ws hold in memory at once, all requests
    /// together (e.g. 512MiB, 4GiB): a streamed packet (/tensors/, or a /ws message sent in
    /// frames) takes 1.5 MiB of it, plus the tensor when its storage can only be read whole. A
    /// request that does not fit waits up to 20 s, then gets 503 (Retry-After); one that never
    /// could gets 413. (--max-tensor-bytes limits a tensor held whole.)
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = crate::limits::parse_size)]
    pub max_memory: u64,
    /// Text generation: `--model` adds the OpenAI-compatible API (crate::serve_llm).
    #[command(flatten)]
    pub llm: crate::serve_llm::ModelArgs,
}

/// A duration as `--header-timeout` takes it: a whole number with `ms`, `s` or `m` (a bare
/// number is seconds); `0` means no limit.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?} is not a duration: give a whole number and a unit, as 10s, 500ms or 2m"))?;
    match unit.trim() {
        "ms" => Ok(Duration::from_millis(n)),
        "" | "s" => Ok(Duration::from_secs(n)),
        "m" => n
            .checked_mul(60)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("{s:?} is too long")),
        u => Err(format!("{s:?}: unknown unit {u:?}; use ms, s or m (as 10s)")),
    }
}

/// Whether `ip` reaches only this machine (127.0.0.0/8, ::1, or an IPv4-mapped loopback).
fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

/// The refusal of a non-loopback `--bind` with neither a token nor `--public`, or `None` when
/// the bind is allowed.
fn public_refusal(bind: SocketAddr, has_token: bool, public: bool) -> Option<String> {
    if is_loopback(bind.ip()) || has_token || public {
        return None;
    }
    Some(format!(
        "--bind {bind} is not a loopback address, so anyone who can reach it could read the served files: \
         add --token TOKEN (or set TENSORLANE_TOKEN) to require a token, or --public to serve them to \
         everyone without one"
    ))
}

/// Whether `dir` holds the inspector page.
fn has_inspector(dir: &Path) -> bool {
    dir.join("web-demo/index.html").is_file()
}

/// The web root to use: `--web`; else none when the inspector is compiled in; else the build
/// checkout, or the current folder or one above it.
fn find_web(given: Option<PathBuf>) -> Result<Option<PathBuf>, String> {
    if let Some(w) = given {
        if has_inspector(&w) {
            return Ok(Some(w));
        }
        return Err(format!(
            "--web {}: no web-demo/index.html there; give a tensorlane checkout",
            w.display()
        ));
    }
    if !inspector::ASSETS.is_empty() {
        return Ok(None);
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    if has_inspector(&built) {
        return Ok(Some(built.canonicalize().unwrap_or(built)));
    }
    let cwd = std::env::current_dir().ok();
    Ok(cwd.and_then(|c| c.ancestors().find(|d| has_inspector(d)).map(Path::to_path_buf)))
}

/// Writes the bundled sample into `dir`: `sample.safetensors` (the sample packet's dense tensors:
/// `weight` f32 [64, 32], `bias` f32 [64], `meta.step` i64 scalar) and `sample.tenso` (the whole
/// packet, which the inspector also opens).
fn write_sample(dir: &Path) -> Result<(), tensorlane::Error> {
    use tensorlane::core::wire::Packet;
    let packet = crate::sample::sample_packet();
    let mut dense: Vec<(String, StDtype, Vec<u64>, Vec<u8>)> = Vec::new();
    let entries = match &packet {
        Packet::Bundle(b) => b.entries.as_slice(),
        _ => &[],
    };
    for (name, p) in entries {
        let (name, p) = match p {
            Packet::Bundle(inner) => match inner.entries.first() {
                Some((n, p)) => (format!("{name}.{n}"), p),
                None => continue,
            },
            p => (name.to_string(), p),
        };
        if let Packet::Dense(t) = p {
            let dt = match t.dtype() {
                tensorlane::core::DType::F32 => StDtype::F32,
                tensorlane::core::DType::I64 => StDtype::I64,
                _ => continue,
            };
            dense.push((name, dt, t.shape().to_vec(), t.data().to_vec()));
        }
    }
    let specs: Vec<StTensor> = dense
        .iter()
        .map(|(n, d, s, _)| StTensor::new(n.clone(), *d, s.clone()))
        .collect();
    let meta = [("source".to_string(), "tensorlane serve: the bundled sample".to_string())];
    let mut w = SafetensorsFile::publish(dir.join("sample.safetensors"), specs, &meta)?;
    while let Some(i) = w.next_tensor() {
        w.write(&dense[i].3)?;
    }
    w.finish()?;
    tensorlane::publish::write_file(dir.join("sample.tenso"), &crate::sample::sample_bytes())?;
    Ok(())
}

/// File descriptors kept for what is not a connection: the files a request opens, the served
/// folders and models, the runtime's own.
const FD_MARGIN: u64 = 64;

/// The most connections the open-file limit (`RLIMIT_NOFILE`) leaves room for, after raising its
/// soft limit towards the hard one as far as `wanted` needs: `wanted`, or fewer with a warning
/// to print. (A connection takes a descriptor; the margin is for the rest.)
// `rlim_t` is u64 on some targets and not on others: the casts are for the others.
#[allow(clippy::unnecessary_cast)]
fn connection_limit(wanted: usize) -> (usize, Option<String>) {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
            return (wanted, None);
        }
        let need = (wanted as u64).saturating_add(FD_MARGIN);
        let cur = lim.rlim_cur as u64;
        let max = lim.rlim_max as u64;
        let mut soft = cur;
        if cur < need && max > cur {
            let raised = libc::rlimit {
                rlim_cur: need.min(max) as libc::rlim_t,
                rlim_max: lim.rlim_max,
            };
            // SAFETY: setrlimit reads the struct it is given.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                soft = need.min(max);
            }
        }
        let fits = soft.saturating_sub(FD_MARGIN).max(1);
        if (wanted as u64) > fits {
            let fits = usize::try_from(fits).unwrap_or(usize::MAX);
            return (
                fits,
                Some(format!(
                    "warning: --max-connections {wanted} lowered to {fits}: the open-file limit \
                     (ulimit -n) is {soft}, a file descriptor per connection and {FD_MARGIN} kept \
                     for the rest; raise the limit (ulimit -n) to serve more"
                )),
            );
        }
        (wanted, None)
    }
    #[cfg(not(unix))]
    {
        (wanted, None)
    }
}

/// Runs `tensorlane serve`.
pub fn run(args: ServeArgs) -> ExitCode {
    let has_token = args.token.as_deref().is_some_and(|t| !t.is_empty());
    if let Some(why) = public_refusal(args.bind, has_token, args.public) {
        eprintln!("error: {why}");
        return ExitCode::from(2);
    }
    let web = match find_web(args.web) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let llm = match crate::serve_llm::start(&args.llm) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let mut sample_dir = None;
    let paths = if let (true, Some(m)) = (args.paths.is_empty(), &args.llm.model) {
        vec![m.clone()]
    } else if args.paths.is_empty() {
        let dir = std::env::temp_dir()
            .join(format!("tensorlane-serve-{}", std::process::id()))
            .join("sample");
        if let Err(e) = std::fs::create_dir_all(&dir)
            .map_err(tensorlane::Error::at(&dir, "create"))
            .and_then(|()| write_sample(&dir))
        {
            eprintln!("error: cannot write the bundled sample: {e}");
            return ExitCode::from(1);
        }
        sample_dir = dir.parent().map(Path::to_path_buf);
        vec![dir]
    } else {
        args.paths
    };
    let (max_connections, lowered) = connection_limit(args.max_connections);
    if let Some(warning) = lowered {
        eprintln!("{warning}");
    }
    let config = Config {
        bind: args.bind,
        paths,
        web: web.clone(),
        assets: inspector::ASSETS,
        token: args.token,
        max_connections,
        header_timeout: Some(args.header_timeout).filter(|d| !d.is_zero()),
        idle_timeout: Some(args.idle_timeout).filter(|d| !d.is_zero()),
        max_memory: args.max_memory,
        max_tensor_bytes: crate::limits::max_tensor_bytes(),
        api_origins: if args.llm.cors_origins.is_empty() {
            tensorlane::serve::DEFAULT_API_ORIGINS
                .iter()
                .map(|o| o.to_string())
                .collect()
        } else {
            args.llm.cors_origins.clone()
        },
    };
    let api_line = llm.as_ref().map(|l| {
        format!(
            "model {} ({} positions per request{}, chat {}): ",
            l.model_id,
            l.context,
            if l.streamed > 0 {
                format!(", {} weight bytes streamed per decode step", l.streamed)
            } else {
                String::new()
            },
            if l.chat {
                "template found"
            } else {
                "unavailable: no chat template"
            }
        )
    });
    let result = tensorlane::serve::run_until_ctrl_c_with(config, llm.map(|l| l.api), |server: &Server| {
        let base = format!("http://{}", server.local_addr());
        for (path, url) in server.mounts() {
            eprintln!("serving {} at {base}{url}", path.display());
        }
        let embedded = !inspector::ASSETS.is_empty();
        match &web {
            Some(w) => eprintln!("web inspector from {}", w.display()),
            None if embedded => eprintln!(
                "web inspector: built in (tensorlane {}, {} files, {} KiB)",
                env!("CARGO_PKG_VERSION"),
                inspector::ASSETS.len(),
                inspector::BYTES >> 10
            ),
            None => eprintln!(
                "no web inspector ({}, and no checkout was found; pass --web DIR): data only",
                inspector::WHY_NONE
            ),
        }
        if has_token {
            eprintln!("a token is required: Authorization: Bearer TOKEN, or ?token=TOKEN");
        } else if !is_loopback(server.local_addr().ip()) {
            eprintln!(
                "--public: serving to anyone who can reach {} without a token",
                server.local_addr()
            );
        }
        eprintln!("models: {base}/models");
        if let Some(line) = &api_line {
            eprintln!("{line}OpenAI-compatible API at {base}/v1/ (completions, chat/completions, models)");
        }
        eprintln!("press Ctrl-C to stop");
        // The URL to open, alone on stdout (scripts and tests read it).
        if web.is_some() || embedded {
            println!("{base}/web-demo/");
        } else {
            println!("{base}/models");
        }
    });
    if let Some(d) = sample_dir {
        let _ = std::fs::remove_dir_all(d);
    }
    match result {
        Ok(()) => {
            eprintln!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: serve: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("10h").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("99999999999999999999m").is_err());
    }

    #[test]
    fn public_binds() {
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(public_refusal(at("127.0.0.1:1"), false, false).is_none());
        assert!(public_refusal(at("127.9.9.9:1"), false, false).is_none());
        assert!(public_refusal(at("[::1]:1"), false, false).is_none());
        assert!(public_refusal(at("[::ffff:127.0.0.1]:1"), false, false).is_none());
        for open in ["0.0.0.0:1", "[::]:1", "192.168.1.2:1", "[::ffff:10.0.0.1]:1"] {
            let why = public_refusal(at(open), false, false).expect("refused");
            assert!(why.contains("--token") && why.contains("--public"), "{why}");
            assert!(public_refusal(at(open), true, false).is_none());
            assert!(public_refusal(at(open), false, true).is_none());
        }
    }
}
