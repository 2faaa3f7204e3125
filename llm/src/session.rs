//! A generation session: a model's architecture, bound weights, tokenizer, KV cache and worker
//! pool.

use std::time::{Duration, Instant};

use tensorlane::model::Model;

use crate::arch::{Hparams, Spec};
use crate::plan::CacheType;
use tensorlane_offload::Policy;

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
    /// device; under a budget the streamed rows are written into the plan's ring before each
    /// use. Needs the crate feature `wgpu` ([`Session::open`] says so without it).
    Wgpu,
    /// The CUDA executor (feature `cuda`): the wgpu executor's kernels in CUDA, compiled with
    /// NVRTC when the session opens, weights in stored form, KV cache on the device, streamed
    /// rows copied into the plan's ring under a budget. Without the feature, a driver or a
    /// device, [`Session::open`] says which is missing.
    Cuda,
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
    /// Device memory for everything, in bytes (`None`: every weight resident): the weight
    /// matrices, the KV cache (`context` positions of [`Options::cache_type`]), the norm vectors and the activations
    /// of one batch. The offload plan of [`Options::policy`]
    /// ([`tensorlane_offload::compile_policy`] over the architecture's own op list, PCIe-4
    /// profile, hazard-checked) decides how many whole rows of each matrix stay resident (copied
    /// once); the rest is streamed: copied in from the model before each use, in stored form,
    /// into the plan's ring ([`Stats::streamed_bytes`] counts them). On the CPU the budget is
    /// the process's memory: the resident rows are read from the file with `pread` and the
    /// streamed ones from the file ahead of each use by a reader thread (`O_DIRECT` where the
    /// file system allows), never through the memory map, so a model bigger than RAM runs at
    /// the disk's pace ([`Stats::disk_gbps`], [`Stats::disk_floor_s`]). A budget below the
    /// policy's minimum is an error naming the smallest budget that works
    /// ([`Session::minimum_budget`]).
    pub budget: Option<u64>,
    /// The offload policy under a budget (`None`: the scheduler,
    /// [`Policy::Scheduler`](tensorlane_offload::Policy::Scheduler)); the baselines
    /// (all-resident, sync-jit, full-offload, flexgen-like) give the same tokens with other
    /// splits.
    pub policy: Option<Policy>,
    /// How the KV cache stores keys and values (`None`: f16 on the CPU, as llama.cpp's default,
    /// half the memory of f32; f32 on the wgpu and CUDA devices, whose kernels keep an f32 cache
    /// and refuse the others so far). [`CacheType::Q8_0`] takes about half of f16's again, on
    /// models whose attention heads are a multiple of 32 wide.
    pub cache_type: Option<CacheType>,
}

/// The KV cache type `options` asks for on its device for a model of `spec`, or why that device
/// or model cannot keep it.
pub(crate) fn cache_type_of(options: &Options, spec: &Spec) -> Result<CacheType> {
    match (options.device, options.cache_type) {
        (Device::Cpu, c) => {
            let c = c.unwrap_or(CacheType::F16);
            c.check(spec.hparams.head_dim)?;
            Ok(c)
        }
        (_, None | Some(CacheType::F32)) => Ok(CacheType::F32),
        (d, Some(c)) => Err(Error::Options(format!(
            "the {} executor keeps an f32 KV cache (a {} cache runs on the cpu only, so far): use cache type f32",
            match d {
                Device::Wgpu => "wgpu",
                _ => "cuda",
            },
            c.name()
        ))),
    }
}

/// How far [`Session::open_with_progress`] has read the resident weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// Bytes read so far.
    pub loaded: u64,
    /// Bytes to read: the weight bytes that stay resident.
    pub total: u64,
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
    /// Weight bytes streamed over the whole last call (prompt and every generated token).
    pub streamed_total: u64,
    /// Time the last call spent copying streamed bytes in (on the wgpu device: handing them to
    /// the queue, whose transfer then runs with the kernels).
    pub copy: Duration,
    /// The part of [`Stats::copy`] spent in the decode steps.
    pub decode_copy: Duration,
    /// The link's measured copy rate in GB/s (a probe at [`Session::open`] under a budget:
    /// memcpy from the model's pages on the CPU, a queue write on the wgpu device); 0 without
    /// a budget.
    pub link_gbps: f64,
    /// Device bytes outside the weight matrices (KV cache, vectors, activations).
    pub working_set_bytes: u64,
    /// The plan's policy (`None` without a budget).
    pub policy: Option<Policy>,
    /// The plan's decode forward on the PCIe-4 profile, as simulated, seconds (0 without a
    /// budget): what the same budget would take on a GPU behind PCIe 4.
    pub sim_forward_s: f64,
    /// The plan's floor `max(compute, streamed / PCIe)` on that profile, seconds.
    pub sim_floor_s: f64,
    /// The disk's read rate in GB/s when the CPU executor streams from disk (under a budget on
    /// the CPU: measured at [`Session::open`] by the `offload` crate's disk-tier probe over the
    /// model file); 0 otherwise. [`Stats::streamed_bytes`] are then bytes read from disk.
    pub disk_gbps: f64,
    /// Whether the disk reads bypass the page cache (`O_DIRECT`; buffered `pread` where the file
    /// system refuses it).
    pub disk_direct: bool,
    /// Bytes of the ring the disk reads are issued into ahead of use (0 without the disk tier).
    pub ring_bytes: u64,
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

    /// Clears the per-call figures before a call.
    fn restart(&mut self) {
        self.prefill_tokens = 0;
        self.prefill = Duration::ZERO;
        self.decode_tokens = 0;
        self.decode = Duration::ZERO;
        self.streamed_bytes = 0;
        self.streamed_total = 0;
        self.copy = Duration::ZERO;
        self.decode_copy = Duration::ZERO;
    }

    /// Adds the executor's last forward pass (a decode step when `decode`): its streamed bytes
    /// and copy time.
    fn count(&mut self, exec: &Exec<'_>, decode: bool) {
        self.streamed_bytes = exec.streamed_last();
        self.streamed_total += self.streamed_bytes;
        self.copy += exec.copy_last();
        if decode {
            self.decode_copy += exec.copy_last();
        }
    }

    /// Achieved copy rate of the streamed bytes, GB/s (0 when nothing was streamed).
    pub fn h2d_gbps(&self) -> f64 {
        if self.streamed_total == 0 || self.copy.is_zero() {
            return 0.0;
        }
        self.streamed_total as f64 / self.copy.as_secs_f64() / 1e9
    }

    /// The floor of one decode step, seconds: `max(compute, streamed / link)`, with compute the
    /// measured step time less its copies and link [`Stats::link_gbps`]; what a step would take
    /// if every copy were hidden behind compute at the link's rate. 0 before a decode step.
    pub fn floor_s(&self) -> f64 {
        if self.decode_tokens == 0 {
            return 0.0;
        }
        let copy = self.decode_copy.as_secs_f64();
        let step = self.decode.as_secs_f64() / self.decode_tokens as f64;
        let compute = (self.decode.as_secs_f64() - copy).max(0.0) / self.decode_tokens as f64;
        let link = if self.link_gbps > 0.0 {
            self.streamed_bytes as f64 / (self.link_gbps * 1e9)
        } else {
            0.0
        };
        compute.max(link).min(step)
    }

    /// The disk floor of one decode step, seconds: the bytes it read from disk over the disk's
    /// read rate ([`Stats::disk_gbps`]); 0 without the disk tier or before a decode step.
    pub fn disk_floor_s(&self) -> f64 {
        if self.disk_gbps <= 0.0 || self.decode_tokens == 0 {
            return 0.0;
        }
        self.streamed_bytes as f64 / (self.disk_gbps * 1e9)
    }

    /// A decode step's time over [`Stats::disk_floor_s`] (1: as fast as the disk allows; 0
    /// without the disk tier).
    pub fn t_over_disk_floor(&self) -> f64 {
        let floor = self.disk_floor_s();
        if floor <= 0.0 {
            return 0.0;
        }
        self.decode.as_secs_f64() / self.decode_tokens as f64 / floor
    }

    /// A decode step's time over [`Stats::floor_s`] (1 when copies are fully hidden; 0 before
    /// a decode step).
    pub fn t_over_floor(&self) -> f64 {
        let floor = self.floor_s();
        if floor <= 0.0 {
            return 0.0;
        }
        self.decode.as_secs_f64() / self.decode_tokens as f64 / floor
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
    /// The tokens whose keys and values the cache holds, in order ([`Session::generate_continued`]
    /// reuses their longest common prefix with a new prompt).
    cached: Vec<u32>,
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
        Session::open_with_progress(model, options, &mut |_| {})
    }

    /// [`Session::open`], reporting the load: `progress(loaded)` as the weight bytes that stay
    /// resident are read in (every 16 MiB, with the total), so a caller can draw a bar. Pages of a mapped file are read here rather than during the
    /// first forward pass, so the prefill time is compute, not disk.
    pub fn open_with_progress(
        model: &'m Model,
        options: Options,
        progress: &mut dyn FnMut(Load),
    ) -> Result<Session<'m>> {
        let (mut spec, tokenizer) = spec_and_tokenizer(model)?;
        let context = context_of(&spec, &options)?;
        spec.fit_context(context);
        let cache_type = cache_type_of(&options, &spec)?;
        let threads = match options.threads {
            Some(0) => return Err(Error::Options("threads must be at least 1".into())),
            Some(t) => t,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        refuse_experts_off_cpu(&spec, options.device)?;
        let mut weights = Weights::bind(model, &spec)?;
        let policy = options.policy.unwrap_or(Policy::Scheduler);
        let budgeted = match options.budget {
            Some(budget) => Some(crate::plan::compile(
                &model_name(model),
                &spec,
                &weights.matrices(),
                weights.vector_bytes(),
                budget,
                context,
                cache_type,
                policy,
            )?),
            None => None,
        };
        let resident = budgeted.as_ref().map(|b| b.resident());
        let resident_of = |name: &str| resident.as_ref().and_then(|r| r.get(name).copied());
        // Under a budget on the CPU the weights are on the disk tier: resident bytes read in
        // with positioned reads now, the rest read from the file ahead of each use; the map's
        // pages are never touched (they would be resident as well as the copies).
        // A mixture of experts stays on the memory-map path (its reads follow the router;
        // `Weights::put_on_disk` says why).
        let on_disk = resident.is_some() && options.device == Device::Cpu && spec.hparams.n_expert == 0;
        let mats = weights.matrices();
        let keep: Vec<usize> = mats
            .iter()
            .map(|m| resident_of(&m.name).map_or(m.stored_bytes(), |r| r as usize))
            .collect();
        let mut load = Load {
            loaded: 0,
            total: keep.iter().map(|&k| k as u64).sum(),
        };
        progress(load);
        if !on_disk {
            for (m, &k) in mats.iter().zip(&keep) {
                m.touch(k, &mut |b| {
                    load.loaded += b;
                    progress(load);
                });
            }
        }
        drop(mats);
        if on_disk {
            weights.put_on_disk(model, &resident_of, &mut |b| {
                load.loaded += b;
                progress(load);
            })?;
            // What the plan leaves out (the embedding) is looked up by row from the file on the
            // disk tier, so it needs no read now: the session is ready, the total reached.
            if load.loaded < load.total {
                load.loaded = load.total;
                progress(load);
            }
        } else if resident.is_some() {
            weights.split(&resident_of);
        }
        // On the disk tier the link is the disk: its rate, measured over the model file before
        // the reader starts.
        let disk_gbps = if on_disk {
            crate::disk::probe_gbps(model.path())?.0
        } else {
            0.0
        };
        let mut disk_direct = false;
        let cpu = match options.device {
            Device::Cpu if on_disk => {
                let mut c = Cpu::new(spec, weights, threads, cache_type)?;
                let ring = budgeted.as_ref().map_or(0, |b| b.plan.ring.len);
                disk_direct = c.attach_disk(model.path(), usize::try_from(ring).unwrap_or(usize::MAX))?;
                Exec::Cpu(c)
            }
            Device::Cpu => Exec::Cpu(Cpu::new(spec, weights, threads, cache_type)?),
            Device::Wgpu => wgpu_exec(model, spec, context, budgeted.as_ref())?,
            Device::Cuda => cuda_exec(model, spec, context, budgeted.as_ref())?,
        };
        let link_gbps = if on_disk {
            disk_gbps
        } else if cpu.streamed_bytes() > 0 {
            cpu.probe_link_gbps()
        } else {
            0.0
        };
        let cache = cpu.new_cache();
        let stats = Stats {
            weight_bytes: cpu.stored_bytes(),
            threads: cpu.threads(),
            resident_bytes: cpu.stored_bytes() - cpu.streamed_bytes(),
            plan_streamed_bytes: budgeted.as_ref().map_or(0, |b| b.plan.streamed_bytes()),
            link_gbps,
            working_set_bytes: budgeted.as_ref().map_or(0, |b| b.working_set),
            policy: budgeted.as_ref().map(|_| policy),
            sim_forward_s: budgeted.as_ref().map_or(0.0, |b| b.sim.forward_s),
            sim_floor_s: budgeted.as_ref().map_or(0.0, |b| b.sim.floor_s),
            disk_gbps,
            disk_direct,
            ring_bytes: match &cpu {
                Exec::Cpu(c) => c.ring_bytes(),
                #[allow(unreachable_patterns)]
                _ => 0,
            },
            ..Stats::default()
        };
        Ok(Session {
            cpu,
            tokenizer,
            cache,
            cached: Vec::new(),
            context,
            stats,
        })
    }

    /// The smallest [`Options::budget`] that `options` (its context and policy; the budget
    /// itself is ignored) accepts for `model`, in bytes, to 256 bytes; `None` when the policy
    /// fits no budget. What a budget error names; where a budget sweep starts.
    pub fn minimum_budget(model: &Model, options: &Options) -> Result<Option<u64>> {
        let (mut spec, _) = spec_and_tokenizer(model)?;
        let context = context_of(&spec, options)?;
        spec.fit_context(context);
        let weights = Weights::bind(model, &spec)?;
        Ok(crate::plan::minimum(
            &model_name(model),
            &spec,
            &weights.matrices(),
            weights.vector_bytes(),
            context,
            cache_type_of(options, &spec)?,
            options.policy.unwrap_or(Policy::Scheduler),
        ))
    }

    /// Of a mixture-of-experts model on the CPU, per layer, the experts the last forward pass
    /// routed any position to, ascending: the ones whose weights it read (and, under a budget,
    /// streamed). Empty lists for dense layers, and on the device executors.
    pub fn routed_experts(&self) -> Vec<Vec<usize>> {
        match &self.cpu {
            Exec::Cpu(c) => c.routed_last.clone(),
            #[allow(unreachable_patterns)]
            _ => Vec::new(),
        }
    }

    /// Of a mixture-of-experts model on the CPU, per layer and expert, the `(stored, streamed)`
    /// bytes of its gate, up and down matrices: under a budget the plan keeps some experts (or
    /// part of one) resident and a forward pass streams the rest of each expert it routes to.
    /// Empty lists for dense layers, and on the device executors.
    pub fn expert_bytes(&self) -> Vec<Vec<(u64, u64)>> {
        match &self.cpu {
            Exec::Cpu(c) => c.expert_bytes(),
            #[allow(unreachable_patterns)]
            _ => Vec::new(),
        }
    }

    /// Starts recording what each forward pass does, span by span, on the CPU executor (a trace
    /// already on starts over): each product's copy-in (or wait for the disk tier's reader, and
    /// the reader's read of its bytes) and compute, each layer, each forward pass.
    /// [`Session::take_trace`] ends it. The GPU executors are refused.
    #[cfg(feature = "native")]
    pub fn start_trace(&mut self) -> Result<()> {
        match &mut self.cpu {
            Exec::Cpu(c) => {
                c.start_trace();
                Ok(())
            }
            #[allow(unreachable_patterns)]
            _ => Err(Error::Options(
                "a trace is recorded on the CPU executor only (--device cpu), not on a GPU device".into(),
            )),
        }
    }

    /// The spans recorded since [`Session::start_trace`] (seconds from its call; `forward`
    /// counts the forward passes), and the trace off; empty when none was on. Write them with
    /// [`tensorlane_offload::chrome_trace`] and [`crate::TRACE_TRACKS`] for a Chrome/Perfetto trace.
    pub fn take_trace(&mut self) -> Vec<tensorlane_offload::TraceSpan> {
        match &mut self.cpu {
            Exec::Cpu(c) => c.take_trace(),
            #[allow(unreachable_patterns)]
            _ => Vec::new(),
        }
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
        self.cached.clear();
        self.stats.restart();
        let start = Instant::now();
        let out = if tokens.is_empty() {
            Vec::new()
        } else {
            self.cpu.forward(tokens, &mut self.cache, &|_| true)?
        };
        self.stats.prefill_tokens = tokens.len();
        self.stats.prefill = start.elapsed();
        self.stats.count(&self.cpu, false);
        Ok(out)
    }

    /// Generates tokens after `prompt` (evaluated from position 0 in one batch; the KV cache is
    /// cleared first). Each item is the next token; the iterator ends after an end-of-generation
    /// token when `sampling.stop_at_eog`, and yields [`Error::Context`] when the context is full.
    /// Bad input (an empty prompt, an unknown token id, a prompt longer than the context, bad
    /// sampling parameters) is the first item's error. Limit the count with
    /// [`Iterator::take`].
    pub fn generate<'s>(&'s mut self, prompt: &[u32], sampling: &Sampling) -> Generate<'s, 'm> {
        self.generate_from(prompt, sampling, false)
    }

    /// As [`Session::generate`], but the KV cache is kept as far as it holds the start of
    /// `prompt`: the longest common prefix of `prompt` and the tokens the cache holds (the last
    /// call's prompt and the tokens it generated, less the last, which was never evaluated) is
    /// not evaluated again, and only the rest of `prompt` is (at least its last token, whose
    /// logits pick the first new one). What a chat does from turn to turn: each turn's prompt is
    /// the whole conversation so far, and only the new messages cost a prefill
    /// ([`Stats::prefill_tokens`] counts those). The logits are those of evaluating the rest
    /// after the kept positions, as a decode of them would give.
    pub fn generate_continued<'s>(&'s mut self, prompt: &[u32], sampling: &Sampling) -> Generate<'s, 'm> {
        self.generate_from(prompt, sampling, true)
    }

    fn generate_from<'s>(&'s mut self, prompt: &[u32], sampling: &Sampling, reuse: bool) -> Generate<'s, 'm> {
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
            reuse,
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
        "safetensors" | "safetensors-index" => hf_companions(model)?,
        // A .zt converted from a GGUF carries the GGUF's key/values (architecture, vocabulary)
        // under `source_metadata`; one converted from safetensors has config.json and
        // tokenizer.json beside it, as a safetensors file would.
        "zt" => match zt_gguf_view(model.catalog()) {
            Some(view) => (Spec::from_catalog(&view)?, Tokenizer::from_catalog(&view)?),
            None => hf_companions(model)?,
        },
        other => {
            return Err(Error::UnsupportedFormat(format!(
                "{other} models are not supported (GGUF; safetensors or .zt with config.json and tokenizer.json \
                 beside them; .zt converted from GGUF)"
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

/// The catalog of a .zt converted from a GGUF as the GGUF's own would be: its tensors, the
/// GGUF's key/values (`source_metadata`) as the metadata, the GGUF format; `None` for any other
/// .zt.
fn zt_gguf_view(catalog: &tensorlane_core::formats::Catalog) -> Option<tensorlane_core::formats::Catalog> {
    use tensorlane_core::formats::Meta;
    let get = |key: &str| catalog.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    if get("source_format") != Some(&Meta::Str("gguf".into())) {
        return None;
    }
    let Some(Meta::Map(entries)) = get("source_metadata") else {
        return None;
    };
    Some(tensorlane_core::formats::Catalog {
        format: tensorlane_core::detect::Format::Gguf,
        tensors: catalog.tensors.clone(),
        metadata: entries.clone(),
        skipped: Vec::new(),
        sources: Vec::new(),
        checks: Vec::new(),
    })
}

/// The wgpu executor (the weights split by the plan when there is one).
#[cfg(feature = "wgpu")]
fn wgpu_exec<'m>(
    model: &'m Model,
    spec: Spec,
    context: usize,
    plan: Option<&crate::plan::Budgeted>,
) -> Result<Exec<'m>> {
    Ok(Exec::Wgpu(Box::new(crate::wgpu::Wgpu::new(
        model, spec, context, plan,
    )?)))
}

#[cfg(not(feature = "wgpu"))]
fn wgpu_exec<'m>(_: &'m Model, _: Spec, _: usize, _: Option<&crate::plan::Budgeted>) -> Result<Exec<'m>> {
    Err(Error::Device(
        "the wgpu device needs tensorlane-llm built with the `wgpu` feature".into(),
    ))
}

/// The context `options` asks for (the model's training context, at most 4096, by default).
fn context_of(spec: &Spec, options: &Options) -> Result<usize> {
    match options.context.unwrap_or(spec.hparams.n_ctx_train.min(4096)) {
        0 => Err(Error::Options("the context must hold at least one position".into())),
        c => Ok(c),
    }
}

/// The CUDA executor (the weights split by the plan when there is one).
#[cfg(feature = "cuda")]
fn cuda_exec<'m>(
    model: &'m Model,
    spec: Spec,
    context: usize,
    plan: Option<&crate::plan::Budgeted>,
) -> Result<Exec<'m>> {
    Ok(Exec::Cuda(Box::new(crate::cuda::Cuda::new(
        model, spec, context, plan,
    )?)))
}

#[cfg(not(feature = "cuda"))]
fn cuda_exec<'m>(_: &'m Model, _: Spec, _: usize, _: Option<&crate::plan::Budgeted>) -> Result<Exec<'m>> {
    Err(Error::Device(
        "the cuda device needs tensorlane-llm built with the `cuda` feature".into(),
    ))
}

/// The model's name in plans and reports: its file name.
fn model_name(model: &Model) -> String {
    model.path().file_name().map_or_else(
        || model.path().display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// The architecture and tokenizer of a Hugging Face checkpoint: `config.json` and
/// `tokenizer.json` next to the safetensors file (or its index), in the same folder or, for a
/// model opened by URL, beside it on the same server or store.
fn hf_companions(model: &Model) -> Result<(Spec, Tokenizer)> {
    let dir = model.path().parent().unwrap_or(std::path::Path::new("."));
    let read = |name: &str| -> Result<serde_json::Value> {
        let path = dir.join(name);
        let bytes = tensorlane::source::Source::open(&path)
            .and_then(|src| tensorlane::source::read_whole(&src))
            .map_err(|e| {
                Error::UnsupportedFormat(format!("this model needs {name} beside it: {} ({e})", path.display()))
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
    /// Whether the prompt's prefix already in the cache is kept ([`Session::generate_continued`]).
    reuse: bool,
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
    /// The same generation, its tokens picked by `sampler` (a
    /// [constrained](crate::Sampler::constrained) one, say) instead of a fresh sampler of the
    /// [`Sampling`] it was made with. Call it before the first token.
    pub fn with_sampler(mut self, sampler: Sampler) -> Self {
        if self.error.is_none() {
            self.error = sampler.params().check().err();
        }
        self.sampling = sampler;
        self
    }

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
                // Positions kept: the prompt's prefix the cache holds, all but its last token.
                let keep = if self.reuse {
                    let common = s.cached.iter().zip(&self.prompt).take_while(|(a, b)| a == b).count();
                    common.min(self.prompt.len() - 1).min(s.cache.len)
                } else {
                    0
                };
                if keep == 0 {
                    s.cache.clear();
                } else {
                    s.cache.truncate(keep);
                }
                s.cached.truncate(keep);
                s.stats.restart();
                let start = Instant::now();
                let rest = &self.prompt[keep..];
                let n = rest.len();
                s.cached.extend_from_slice(rest);
                let mut l = match s.cpu.forward(rest, &mut s.cache, &|i| i + 1 == n) {
                    Ok(l) => l,
                    Err(e) => {
                        // What the cache holds is unknown now: the next call starts afresh.
                        s.cache.clear();
                        s.cached.clear();
                        self.done = true;
                        return Some(Err(e));
                    }
                };
                s.stats.prefill_tokens = n;
                s.stats.prefill = start.elapsed();
                s.stats.count(&s.cpu, false);
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
                s.cached.push(t);
                let mut l = match s.cpu.forward(&[t], &mut s.cache, &|_| true) {
                    Ok(l) => l,
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                };
                s.stats.decode_tokens += 1;
                s.stats.decode += start.elapsed();
                s.stats.count(&s.cpu, true);
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

/// Refuses a mixture-of-experts model on a device executor (wgpu, CUDA): their kernels have no
/// router or per-expert products yet, so such a model runs on the CPU only.
fn refuse_experts_off_cpu(spec: &Spec, device: Device) -> Result<()> {
    let h = &spec.hparams;
    if h.n_expert == 0 || device == Device::Cpu {
        return Ok(());
    }
    let device = match device {
        Device::Wgpu => "wgpu",
        _ => "cuda",
    };
    Err(Error::Device(format!(
        "{} is a mixture-of-experts model ({} experts, {} per token): the {device} executor does not run \
         experts yet; use the cpu device",
        h.family.name(),
        h.n_expert,
        h.n_expert_used
    )))
}
