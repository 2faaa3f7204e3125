//! `tensorlane serve --model PATH`: the OpenAI-compatible routes of [`tensorlane_llm::openai`]
//! (`/v1/models`, `/v1/completions`, `/v1/chat/completions`) over a continuous-batching engine
//! ([`tensorlane_llm::batch`]), mounted beside the file routes of `tensorlane serve`.

use std::path::PathBuf;

use clap::Args;
use tensorlane::model::Model;
use tensorlane_llm::Device;
use tensorlane_llm::batch::{Engine, EngineOptions};
use tensorlane_llm::openai::{ApiConfig, chat_template, router};

/// The generation flags of `tensorlane serve`.
#[derive(Args, Debug)]
pub struct ModelArgs {
    /// A model to generate text with (GGUF, or safetensors with config.json and tokenizer.json
    /// beside it): adds the OpenAI-compatible API under /v1/ (models, completions, chat
    /// completions). The file is also served as a path when no path is given.
    #[arg(long, value_name = "PATH")]
    pub model: Option<PathBuf>,
    /// Memory for the weights, the KV caches of --max-batch requests and the activations (e.g.
    /// 2G): the offload plan keeps part of each weight resident and the rest is streamed at each
    /// decode step, once for the whole batch. A budget too small names the smallest that works.
    #[arg(long, value_name = "SIZE", value_parser = crate::limits::parse_size, requires = "model")]
    pub budget: Option<u64>,
    /// Where generation runs: cpu, or wgpu (a build with the `wgpu` feature: every request's KV
    /// cache on the device, --max-batch of them allocated at the start). cuda does not serve
    /// batches yet.
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "wgpu", "cuda"], requires = "model")]
    pub device: String,
    /// The most requests decoded together in one step.
    #[arg(long, default_value_t = 8, requires = "model")]
    pub max_batch: usize,
    /// The most requests waiting for a place in the batch; more are answered 429.
    #[arg(long, default_value_t = 64, requires = "model")]
    pub max_queue: usize,
    /// Positions each request may use (prompt and generated tokens; default: the model's
    /// training context, at most 4096).
    #[arg(long, requires = "model")]
    pub context: Option<usize>,
    /// Worker threads of the executor (default: every core).
    #[arg(long, requires = "model")]
    pub threads: Option<usize>,
    /// How the KV caches store keys and values: f16 (the default on the cpu, as llama.cpp's: half
    /// the memory), q8_0 (cpu: 8-bit blocks, about half of f16 again) or f32 (exact; the only one
    /// on wgpu so far).
    #[arg(long, value_parser = ["f32", "f16", "q8_0"], requires = "model")]
    pub cache_type: Option<String>,
    /// How long a request's body may take to arrive after its head (`30s`, `500ms`, `2m`; a bare
    /// number is seconds; `0` for no limit): a body that takes longer is answered 408 and the
    /// connection closed. (A body over 1 MiB is answered 413 at once, when its Content-Length
    /// says so before anything is read.)
    #[arg(long, value_name = "TIME", default_value = "30s", value_parser = crate::serve::parse_duration, requires = "model")]
    pub body_timeout: std::time::Duration,
    /// An origin whose web pages may call the API under /v1/ (CORS), as `https://app.example`,
    /// `http://host:*` (any port) or `*` (any page on the web; give it only for an API meant to
    /// be public); repeat for several. Default: pages from loopback only (http://127.0.0.1:*,
    /// http://localhost:*, http://[::1]:*) and this server's own. A request from another page is
    /// refused with 403. The file routes stay open to every origin.
    #[arg(long = "cors-origin", value_name = "ORIGIN", value_parser = parse_origin, requires = "model")]
    pub cors_origins: Vec<String>,
}

/// An origin as `--cors-origin` takes it: `*`, or `http://` / `https://` and a host with an
/// optional port (`:*` for any), nothing after it.
fn parse_origin(s: &str) -> Result<String, String> {
    if s == "*" {
        return Ok(s.into());
    }
    let s = s.strip_suffix('/').unwrap_or(s);
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"))
        .ok_or_else(|| {
            format!("{s:?} is not an origin: give scheme and host, as https://app.example or http://localhost:*, or *")
        })?;
    if rest.is_empty() || rest.contains(['/', '?', '#', ' ', '@']) {
        return Err(format!(
            "{s:?} is not an origin: scheme, host and port only (as https://app.example:8443), no path"
        ));
    }
    Ok(s.into())
}

/// What `--model` started: the routes to mount and a line to print.
pub struct Started {
    /// The OpenAI-compatible routes.
    pub api: tensorlane_llm::openai::Router,
    /// The model's name in the API.
    pub model_id: String,
    /// Whether the model has a chat template.
    pub chat: bool,
    /// Positions per request.
    pub context: usize,
    /// Weight bytes streamed per decode step (0 without --budget).
    pub streamed: u64,
}

/// Opens `--model` and starts its engine; `Ok(None)` without `--model`. Errors are the message
/// to print (naming the flag or the file).
pub fn start(args: &ModelArgs) -> Result<Option<Started>, String> {
    let Some(path) = &args.model else { return Ok(None) };
    let device = match args.device.as_str() {
        "cpu" => Device::Cpu,
        "wgpu" if cfg!(feature = "wgpu") => Device::Wgpu,
        "wgpu" => {
            return Err(
                "--device wgpu: this tensorlane was built without the `wgpu` feature (cargo build -p \
                 tensorlane-cli --features wgpu); use --device cpu"
                    .into(),
            );
        }
        other => {
            return Err(format!(
                "--device {other}: the serving engine runs on cpu and wgpu only so far (batched \
                 decoding on {other} is not implemented); use --device cpu or wgpu, or `tensorlane \
                 run --device {other}` for one prompt"
            ));
        }
    };
    if args.max_batch == 0 {
        return Err("--max-batch must be at least 1".into());
    }
    let model = Model::open(path).map_err(|e| format!("--model {}: {e}", path.display()))?;
    let template = chat_template(&model);
    let model_id = path
        .file_name()
        .map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let engine = Engine::start_on(
        model,
        EngineOptions {
            context: args.context,
            threads: args.threads,
            max_batch: args.max_batch,
            max_queue: args.max_queue,
            budget: args.budget,
            cache_type: args.cache_type.as_deref().and_then(tensorlane_llm::CacheType::from_name),
        },
        device,
    )
    .map_err(|e| match (&e, args.budget) {
        (tensorlane_llm::Error::Budget(_), Some(b)) => format!("--budget {b}: {e}"),
        _ => format!("--model {}: {e}", path.display()),
    })?;
    let context = engine.info().context;
    let streamed = engine.info().streamed_bytes;
    let config = ApiConfig {
        chat_template: template.clone(),
        body_timeout: Some(args.body_timeout).filter(|d| !d.is_zero()),
        ..ApiConfig::new(model_id.clone())
    };
    Ok(Some(Started {
        api: router(engine, config),
        model_id,
        chat: template.is_some(),
        context,
        streamed,
    }))
}
