//! A generation session: a model's architecture, bound weights, tokenizer, KV cache and worker
//! pool.

use std::time::{Duration, Instant};

use tensorlane::model::Model;

use crate::arch::{Hparams, Spec};
use crate::cpu::{Cpu, KvCache, Weights};
use crate::exec::Exec;
use crate::sampling::Sampler;
use crate::tokenizer::Tokenizer;
use crate::{Error, Result, Sampling};

/// Where the forward pass runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Device {
    /// The CPU executor (multi-threaded).
    #[default]
    Cpu,
    /// The wgpu executor (WGSL compute shaders; Vulkan, Mesa lavapipe on CPU-only machines): the
    /// weights uploaded in stored form and dequantized inside the kernels, the KV cache on the
    /// device. Needs the crate feature `wgpu` ([`Session::open`] says so without it) and takes no
    /// [`Options::budget`].
    Wgpu,
}

/// How [`Session::open`] sets up a session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Where to run.
    pub device: Device,
    /// Positions the KV cache may hold (prompt and generated tokens together). `None`: the
    /// model's training context, at most 4096.
    pub context: Option<usize>,
    /// Worker threads (`None`: the available parallelism).
    pub threads: Option<usize>,
    /// Memory for the weights, the KV cache (f32, `context` positions) and the norm vectors, in
    /// bytes (`None`: every weight resident). The offload plan
    /// ([`tensorlane_offload::compile()`], PCIe-4 profile, hazard-checked) of the weight matrices
    /// under what is left decides how many bytes of each stay resident (copied once); the rest is
    /// streamed: copied in from the model before each use and dropped after
    /// ([`Stats::streamed_bytes`]). A budget below the plan's minimum is an error naming it.
    pub budget: Option<u64>,
}

/// A generated token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    /// The token id.
    pub id: u32,
    /// The bytes it stands for ([`Tokenizer::piece`]; a multi-byte character may be split over
    /// several tokens, so join pieces before decoding UTF-8).
    pub piece: Vec<u8>,
}

/// Timings of the last [`Session::generate`] or [`Session::logits`] call.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    /// Prompt tokens evaluated in one batch.
    pub prefill_tokens: usize,
    /// Time spent on them.
    pub prefill: Duration,
    /// Tokens generated one at a time (each one's forward pass).
    pub decode_tokens: usize,
    /// Time spent on them.
    pub decode: Duration,
    /// Stored bytes of the weight matrices a forward pass reads.
    pub weight_bytes: u64,
    /// Worker threads.
    pub threads: usize,
    /// Weight bytes resident (all of them without a budget).
    pub resident_bytes: u64,
    /// Weight bytes the plan streams per forward pass (0 without a budget).
    pub plan_streamed_bytes: u64,
    /// Weight bytes the last forward pass streamed (counted as they were copied in).
    pub streamed_bytes: u64,
}

impl Stats {
    /// Prompt tokens per second.
    pub fn prefill_tokens_per_s(&self) -> f64 {
        self.prefill_tokens as f64 / self.prefill.as_secs_f64().max(1e-9)
    }

    /// Generated tokens per second.
    pub fn decode_tokens_per_s(&self) -> f64 {
        self.decode_tokens as f64 / self.decode.as_secs_f64().max(1e-9)
    }
}

/// A model opened for generation: its architecture ([`Spec`]), its weights bound in stored form
/// (borrowed from the model's map), its tokenizer, a KV cache and a worker pool.
///
/// ```no_run
/// use tensorlane::model::Model;
/// use tensorlane_llm::{Options, Sampling, Session};
///
/// let model = Model::open("model.gguf")?;
/// let mut session = Session::open(&model, Options { context: Some(512), ..Options::default() })?;
/// let prompt = session.tokenizer().encode("Once upon a time", true);
/// let ids: Vec<u32> = session
///     .generate(&prompt, &Sampling::default())
///     .take(20)
///     .map(|t| t.map(|t| t.id))
///     .collect::<Result<_, _>>()?;
/// println!("{}", session.tokenizer().decode(&ids));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Session<'m> {
    cpu: Exec<'m>,
    tokenizer: Tokenizer,
    cache: KvCache,
    context: usize,
    stats: Stats,
}

impl std::fmt::Debug for Session<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("hparams", self.hparams())
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

impl<'m> Session<'m> {
    /// Reads the architecture and the tokenizer from `model`'s metadata (a GGUF's key/values and
    /// embedded vocabulary; for safetensors, `config.json` and `tokenizer.json` beside the file),
    /// finds every tensor the
    /// architecture needs (checking its shape and element type) and starts the worker pool.
    /// Nothing is dequantized up front: the weights stay in the model's map.
    ///
    /// Errors name what is wrong: an unsupported architecture (with the supported list), a
    /// missing metadata key, a missing or misshapen tensor (with the expected shape), an element
    /// type that cannot be computed with, a context of 0.
    pub fn open(model: &'m Model, options: Options) -> Result<Session<'m>> {
        let (spec, tokenizer) = spec_and_tokenizer(model)?;
        let context = options.context.unwrap_or(spec.hparams.n_ctx_train.min(4096));
        if context == 0 {
            return Err(Error::Options("the context must hold at least one position".into()));
        }
        let threads = match options.threads {
            Some(0) => return Err(Error::Options("threads must be at least 1".into())),
            Some(t) => t,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let mut weights = Weights::bind(model, &spec)?;
        let plan_streamed_bytes = match options.budget {
            Some(budget) => plan_budget(model, &spec, &mut weights, budget, context)?,
            None => 0,
        };
        let cpu = match options.device {
            Device::Cpu => Exec::Cpu(Cpu::new(spec, weights, threads)?),
            Device::Wgpu => wgpu_exec(model, spec, context, options.budget)?,
        };
        let cache = cpu.new_cache();
        let stats = Stats {
            weight_bytes: cpu.stored_bytes(),
            threads: cpu.threads(),
            resident_bytes: cpu.stored_bytes() - cpu.streamed_bytes(),
            plan_streamed_bytes,
            ..Stats::default()
        };
        Ok(Session {
            cpu,
            tokenizer,
            cache,
            context,
            stats,
        })
    }

    /// The hyperparameters.
    pub fn hparams(&self) -> &Hparams {
        &self.cpu.spec().hparams
    }

    /// The architecture description.
    pub fn spec(&self) -> &Spec {
        self.cpu.spec()
    }

    /// The tokenizer of the model's embedded vocabulary.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Positions the KV cache may hold.
    pub fn context(&self) -> usize {
        self.context
    }

    /// Timings of the last call.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    fn check_tokens(&self, tokens: &[u32]) -> Result<()> {
        let vocab = self.hparams().n_vocab;
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= vocab) {
            return Err(Error::UnknownToken { id, vocab });
        }
        if tokens.len() > self.context {
            return Err(Error::Context {
                needed: tokens.len(),
                context: self.context,
            });
        }
        Ok(())
    }

    /// The logits (one `n_vocab` row per position) of `tokens` evaluated from position 0, in
    /// one batch: row `i` is the distribution of the token after `tokens[..=i]`. Clears the KV
    /// cache first.
    pub fn logits(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        self.check_tokens(tokens)?;
        self.cache.clear();
        let start = Instant::now();
        let out = if tokens.is_empty() {
            Vec::new()
        } else {
            self.cpu.forward(tokens, &mut self.cache, &|_| true)?
        };
        self.stats.prefill_tokens = tokens.len();
        self.stats.prefill = start.elapsed();
        self.stats.streamed_bytes = self.cpu.streamed_last();
        self.stats.decode_tokens = 0;
        self.stats.decode = Duration::ZERO;
        Ok(out)
    }

    /// Generates tokens after `prompt` (evaluated from position 0 in one batch; the KV cache is
    /// cleared first). Each item is the next token; the iterator ends after an end-of-generation
    /// token when `sampling.stop_at_eog`, and yields [`Error::Context`] when the context is full.
    /// Bad input (an empty prompt, an unknown token id, a prompt longer than the context, bad
    /// sampling parameters) is the first item's error. Limit the count with
    /// [`Iterator::take`].
    pub fn generate<'s>(&'s mut self, prompt: &[u32], sampling: &Sampling) -> Generate<'s, 'm> {
        let error = if prompt.is_empty() {
            Some(Error::Options(
                "the prompt is empty (a model needs at least one token)".into(),
            ))
        } else {
            self.check_tokens(prompt).err().or_else(|| sampling.check().err())
        };
        Generate {
            session: self,
            prompt: prompt.to_vec(),
            sampling: sampling.sampler(),
            last: None,
            error,
            done: false,
        }
    }
}

/// The architecture and the tokenizer of `model`: a GGUF's key/values and embedded vocabulary;
/// for safetensors, `config.json` and `tokenizer.json` beside the file.
pub(crate) fn spec_and_tokenizer(model: &Model) -> Result<(Spec, Tokenizer)> {
    let (spec, tokenizer) = match model.format().name() {
        "gguf" => (
            Spec::from_catalog(model.catalog())?,
            Tokenizer::from_catalog(model.catalog())?,
        ),
        "safetensors" => hf_companions(model)?,
        other => {
            return Err(Error::UnsupportedFormat(format!(
                "{other} models are not supported (GGUF, or safetensors with config.json and tokenizer.json)"
            )));
        }
    };
    if tokenizer.len() > spec.hparams.n_vocab {
        return Err(Error::Metadata {
            key: "tokenizer.ggml.tokens".into(),
            message: format!(
                "{} tokens but token_embd.weight has {} rows",
                tokenizer.len(),
                spec.hparams.n_vocab
            ),
        });
    }
    Ok((spec, tokenizer))
}

/// The wgpu executor (every weight resident on the device; no budget).
#[cfg(feature = "wgpu")]
fn wgpu_exec<'m>(model: &'m Model, spec: Spec, context: usize, budget: Option<u64>) -> Result<Exec<'m>> {
    if budget.is_some() {
        return Err(Error::Options(
            "a weight budget is not supported on the wgpu device yet (every weight is resident there)".into(),
        ));
    }
    Ok(Exec::Wgpu(Box::new(crate::wgpu::Wgpu::new(model, spec, context)?)))
}

#[cfg(not(feature = "wgpu"))]
fn wgpu_exec<'m>(_: &'m Model, _: Spec, _: usize, _: Option<u64>) -> Result<Exec<'m>> {
    Err(Error::Device(
        "the wgpu device needs tensorlane-llm built with the `wgpu` feature".into(),
    ))
}

/// Splits the weights by the offload plan for `budget` (see [`Options::budget`]); returns the
/// bytes the plan streams per forward pass.
fn plan_budget(model: &Model, spec: &Spec, weights: &mut Weights<'_>, budget: u64, context: usize) -> Result<u64> {
    use tensorlane_offload::{DeviceProfile, Phase, Workload, check, compile};
    let h = &spec.hparams;
    let kv = (context as u64).saturating_mul((2 * h.n_layer * h.n_head_kv * h.head_dim * 4) as u64);
    let fixed = kv.saturating_add(weights.vector_bytes());
    let list: Vec<(String, Vec<u64>, u64)> = weights
        .matrices()
        .iter()
        .map(|m| {
            (
                m.name.clone(),
                vec![m.rows as u64, m.cols as u64],
                m.stored_bytes() as u64,
            )
        })
        .collect();
    if budget <= fixed {
        return Err(Error::Budget(format!(
            "budget {budget} bytes: the KV cache ({context} positions) and the norm vectors alone take {fixed}"
        )));
    }
    let name = model.path().display().to_string();
    let workload = Workload::from_tensor_list(
        &name,
        &list,
        Phase::Decode {
            context: context as u64,
        },
    );
    let plan = compile(&workload, &DeviceProfile::pcie4(), budget - fixed).map_err(|e| {
        Error::Budget(format!(
            "budget {budget} bytes ({} after the KV cache and norm vectors): {e}",
            budget - fixed
        ))
    })?;
    let findings = check(&plan);
    if let Some(f) = findings.first() {
        return Err(Error::Budget(format!(
            "the plan for budget {budget} bytes fails the hazard checker ({} findings; first: {f:?})",
            findings.len()
        )));
    }
    let resident: std::collections::HashMap<&str, u64> = plan
        .tensors
        .iter()
        .map(|t| (t.name.as_str(), t.resident_bytes))
        .collect();
    weights.split(&|name| resident.get(name).copied());
    Ok(plan.tensors.iter().map(|t| t.streamed_bytes).sum())
}

/// The architecture and tokenizer of a Hugging Face checkpoint: `config.json` and
/// `tokenizer.json` next to the safetensors file (or its index).
fn hf_companions(model: &Model) -> Result<(Spec, Tokenizer)> {
    let dir = model.path().parent().unwrap_or(std::path::Path::new("."));
    let read = |name: &str| -> Result<serde_json::Value> {
        let path = dir.join(name);
        let bytes = std::fs::read(&path).map_err(|e| {
            Error::UnsupportedFormat(format!(
                "a safetensors model needs {name} beside it: {} ({e})",
                path.display()
            ))
        })?;
        serde_json::from_slice(&bytes).map_err(|e| Error::Metadata {
            key: path.display().to_string(),
            message: format!("not JSON: {e}"),
        })
    };
    let config = read("config.json")?;
    let spec = Spec::from_hf_config(&config)?;
    let id = |key: &str| {
        let v = config.get(key)?;
        v.as_u64().or_else(|| v.as_array()?.first()?.as_u64()).map(|x| x as u32)
    };
    let vocab =
        crate::tokenizer::Vocab::from_tokenizer_json(&read("tokenizer.json")?, id("bos_token_id"), id("eos_token_id"))?;
    Ok((spec, Tokenizer::new(vocab)?))
}

/// The iterator [`Session::generate`] returns.
pub struct Generate<'s, 'm> {
    session: &'s mut Session<'m>,
    prompt: Vec<u32>,
    sampling: Sampler,
    /// The last token yielded (to be evaluated next); `None` before the prompt.
    last: Option<u32>,
    error: Option<Error>,
    done: bool,
}

impl std::fmt::Debug for Generate<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generate")
            .field("prompt", &self.prompt.len())
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

impl Generate<'_, '_> {
    /// The session's timings and byte counts so far (as [`Session::stats`]).
    pub fn stats(&self) -> Stats {
        self.session.stats
    }
}

impl Iterator for Generate<'_, '_> {
    type Item = Result<Token>;

    fn next(&mut self) -> Option<Result<Token>> {
        if self.done {
            return None;
        }
        if let Some(e) = self.error.take() {
            self.done = true;
            return Some(Err(e));
        }
        let s = &mut *self.session;
        let logits = match self.last {
            None => {
                s.cache.clear();
                s.stats.decode_tokens = 0;
                s.stats.decode = Duration::ZERO;
                let start = Instant::now();
                let n = self.prompt.len();
                let mut l = match s.cpu.forward(&self.prompt, &mut s.cache, &|i| i + 1 == n) {
                    Ok(l) => l,
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                };
                s.stats.prefill_tokens = n;
                s.stats.prefill = start.elapsed();
                s.stats.streamed_bytes = s.cpu.streamed_last();
                l.pop()
            }
            Some(t) => {
                if s.cache.len + 1 > s.context {
                    self.done = true;
                    return Some(Err(Error::Context {
                        needed: s.cache.len + 1,
                        context: s.context,
                    }));
                }
                let start = Instant::now();
                let mut l = match s.cpu.forward(&[t], &mut s.cache, &|_| true) {
                    Ok(l) => l,
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                };
                s.stats.decode_tokens += 1;
                s.stats.decode += start.elapsed();
                s.stats.streamed_bytes = s.cpu.streamed_last();
                l.pop()
            }
        };
        let Some(logits) = logits else {
            self.done = true;
            return None;
        };
        let id = match self.sampling.pick(&logits) {
            Ok(id) => id,
            Err(e) => {
                self.done = true;
                return Some(Err(e));
            }
        };
        self.last = Some(id);
        if self.sampling.params().stop_at_eog && s.tokenizer.is_eog(id) {
            self.done = true;
        }
        Some(Ok(Token {
            id,
            piece: s.tokenizer.piece(id),
        }))
    }
}
