//! Continuous batching: one engine thread owns a model's executor (the CPU one, or the wgpu one
//! with [`Engine::start_on`]) and decodes every active sequence together, one token each per
//! step, so each weight is read (and, under a budget, streamed) once per step whatever the
//! number of sequences. Requests join at a step (their
//! prompts are evaluated in that step's forward pass, beside the decode rows, so joining costs no
//! extra pass over the weights), then decode with the others, and leave as soon as they finish or
//! their receiver is dropped (a client that went away).
//!
//! Greedy output is exactly [`Session::generate`](crate::Session::generate)'s: a prompt is
//! evaluated as a session evaluates it, and a batched decode step gives each sequence the logits
//! its own step would (see `Cpu::step`; on wgpu, `Wgpu::step`: each sequence's KV cache is one of
//! `max_batch` slots on the device, and each kernel computes a row as for a sequence alone).
//!
//! ```no_run
//! use tensorlane::model::Model;
//! use tensorlane_llm::batch::{Engine, EngineOptions, Event, Request};
//!
//! let engine = Engine::start(Model::open("model.gguf")?, EngineOptions::default())?;
//! let prompt = engine.tokenizer().encode("Once upon a time", true);
//! let mut events = engine.submit(Request::new(prompt, 16))?;
//! while let Some(event) = events.blocking_recv() {
//!     match event {
//!         Event::Token(t) => print!("{}", String::from_utf8_lossy(&engine.tokenizer().piece(t.id))),
//!         Event::Done(d) => println!("\n{:?} after {} tokens", d.finish, d.completion_tokens),
//!         Event::Failed(e) => eprintln!("{e}"),
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;

use tensorlane::model::Model;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::arch::Hparams;
use crate::cpu::{Cpu, KvCache, Weights};
use crate::exec::Exec;
use crate::sampling::Sampler;
use crate::session::Device;
use crate::tokenizer::Tokenizer;
use crate::{Error, Result, Sampling};

/// How [`Engine::start`] sets up the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineOptions {
    /// Positions each sequence's KV cache may hold (prompt and generated tokens together).
    /// `None`: the model's training context, at most 4096.
    pub context: Option<usize>,
    /// Worker threads of the CPU executor (`None`: the available parallelism; the wgpu executor
    /// is driven by the engine thread alone).
    pub threads: Option<usize>,
    /// The most sequences decoded together (at least 1).
    pub max_batch: usize,
    /// The most requests waiting for a place in the batch; [`Engine::submit`] refuses more with
    /// [`SubmitError::QueueFull`].
    pub max_queue: usize,
    /// Memory for the weights, the KV caches of `max_batch` sequences and the activations, in
    /// bytes (`None`: every weight resident), as [`Options::budget`](crate::Options::budget):
    /// the offload plan (scheduler policy) keeps some bytes of each matrix resident and the rest
    /// is streamed at each decode step, once for the whole batch.
    pub budget: Option<u64>,
    /// How the KV caches store keys and values (`None`: f16 on the CPU, f32 on wgpu), as
    /// [`Options::cache_type`](crate::Options::cache_type).
    pub cache_type: Option<crate::CacheType>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            context: None,
            threads: None,
            max_batch: 8,
            max_queue: 64,
            budget: None,
            cache_type: None,
        }
    }
}

/// One generation request.
#[derive(Clone, Debug)]
pub struct Request {
    /// The prompt's token ids (at least one).
    pub prompt: Vec<u32>,
    /// How tokens are picked (greedy by default); `stop_at_eog` ends the sequence after an
    /// end-of-generation token.
    pub sampling: Sampling,
    /// The most tokens to generate (at least 1; prompt plus these must fit the context).
    pub max_tokens: usize,
    /// With `Some(n)`, each token carries its log-probability and the `n` most likely
    /// alternatives ([`TokenEvent::logprob`], [`TokenEvent::top`]); at most 20.
    pub logprobs: Option<usize>,
    /// The grammar the generated tokens must follow (feature `grammar`): see
    /// [`Sampler::constrained`](crate::Sampler::constrained).
    #[cfg(feature = "grammar")]
    pub grammar: Option<crate::grammar::Constraint>,
}

impl Request {
    /// A greedy request for `max_tokens` tokens after `prompt`.
    pub fn new(prompt: Vec<u32>, max_tokens: usize) -> Request {
        Request {
            prompt,
            sampling: Sampling::default(),
            max_tokens,
            logprobs: None,
            #[cfg(feature = "grammar")]
            grammar: None,
        }
    }
}

/// A generated token.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenEvent {
    /// The token id.
    pub id: u32,
    /// Its natural-log probability under the model's distribution (the log-softmax of the raw
    /// logits, before temperature or top-p), when [`Request::logprobs`] asked for it.
    pub logprob: Option<f32>,
    /// The most likely tokens and their log-probabilities, most likely first (empty unless
    /// [`Request::logprobs`] asked for them).
    pub top: Vec<(u32, f32)>,
}

/// Why a sequence ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-generation token (the last [`Event::Token`]).
    Eog,
    /// [`Request::max_tokens`] tokens were generated, or the context is full.
    Length,
}

/// The end of a sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    /// Why it ended.
    pub finish: Finish,
    /// Prompt tokens evaluated.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
}

/// What a request's receiver gets: tokens, then one `Done` or `Failed`.
#[derive(Debug)]
pub enum Event {
    /// The next token.
    Token(TokenEvent),
    /// The sequence ended normally.
    Done(Done),
    /// The sequence failed (the message says why); nothing follows.
    Failed(Error),
}

/// Why [`Engine::submit`] refused a request.
#[derive(Debug)]
pub enum SubmitError {
    /// The request is invalid (an empty prompt, an unknown token id, a prompt or `max_tokens`
    /// beyond the context, a bad sampling parameter); the error says which.
    Invalid(Error),
    /// The batch is full and `max_queue` requests already wait: retry later.
    QueueFull {
        /// The queue's bound ([`EngineOptions::max_queue`]).
        max_queue: usize,
    },
    /// The engine thread has stopped (it panicked or the engine is shutting down).
    Stopped,
}

impl std::fmt::Display for SubmitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubmitError::Invalid(e) => write!(f, "{e}"),
            SubmitError::QueueFull { max_queue } => write!(
                f,
                "the server is busy: every batch slot is taken and {max_queue} requests already wait (retry later)"
            ),
            SubmitError::Stopped => write!(f, "the generation engine has stopped"),
        }
    }
}

impl std::error::Error for SubmitError {}

impl From<SubmitError> for Error {
    fn from(e: SubmitError) -> Error {
        match e {
            SubmitError::Invalid(e) => e,
            e => Error::Options(e.to_string()),
        }
    }
}

/// Counters of an engine since it started ([`Engine::metrics`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Metrics {
    /// Batched decode steps run.
    pub steps: u64,
    /// Tokens those steps decoded (the sum of the batch sizes).
    pub decoded_tokens: u64,
    /// Forward passes over the weights: the decode steps, and the passes that only evaluated
    /// prompts (with nothing decoding). The prompts of requests that join while others decode
    /// are evaluated in the step's own pass, so under a budget the weights are streamed
    /// `passes` times in all. (On wgpu a step of more than [`BATCH`](crate::plan::BATCH) rows,
    /// a long joining prompt, makes a pass per `BATCH` rows, each counted.)
    pub passes: u64,
    /// Prompt tokens evaluated.
    pub prompt_tokens: u64,
    /// Weight bytes streamed by the last step (0 without a budget): one pass's, or on wgpu, a
    /// step of more than [`BATCH`](crate::plan::BATCH) rows, every pass's.
    pub streamed_last: u64,
    /// Sequences running now.
    pub active: usize,
    /// Requests submitted and not yet finished (running or waiting).
    pub in_flight: usize,
}

struct Job {
    req: Request,
    tx: UnboundedSender<Event>,
}

#[derive(Default)]
struct Shared {
    in_flight: AtomicUsize,
    active: AtomicUsize,
    steps: AtomicU64,
    decoded: AtomicU64,
    passes: AtomicU64,
    prompt: AtomicU64,
    streamed_last: AtomicU64,
}

impl Shared {
    /// A request has ended: its place (in the batch or the queue) is free.
    fn release(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The model's facts a front end needs ([`Engine::info`]).
#[derive(Clone, Debug)]
pub struct EngineInfo {
    /// The hyperparameters.
    pub hparams: Hparams,
    /// Positions each sequence may hold.
    pub context: usize,
    /// The most sequences decoded together.
    pub max_batch: usize,
    /// The most requests waiting.
    pub max_queue: usize,
    /// Stored bytes of the weight matrices.
    pub weight_bytes: u64,
    /// Weight bytes streamed per decode step (0 without a budget).
    pub streamed_bytes: u64,
    /// Worker threads.
    pub threads: usize,
}

/// A running engine: submit requests from any thread; dropping the last handle stops the
/// thread once its sequences have ended.
#[derive(Clone)]
pub struct Engine {
    inbox: mpsc::Sender<Job>,
    shared: Arc<Shared>,
    tokenizer: Arc<Tokenizer>,
    info: Arc<EngineInfo>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// Opens `model` on a new thread (architecture, tokenizer and weights as
    /// [`Session::open`](crate::Session::open) reads them, CPU executor) and starts its loop.
    /// Errors are those of `Session::open`, and options out of range.
    pub fn start(model: Model, options: EngineOptions) -> Result<Engine> {
        Engine::start_on(model, options, Device::Cpu)
    }

    /// [`Engine::start`] on `device`: [`Device::Cpu`], or [`Device::Wgpu`] (crate feature
    /// `wgpu`), where the engine allocates `max_batch` KV caches of `context` positions on the
    /// device at the start (counted in the budget's plan as on the CPU) and each step runs the
    /// rows of every sequence through each product together, up to
    /// [`BATCH`](crate::plan::BATCH) rows a pass (each streamed weight written once a pass).
    /// Errors: those of `start`; caches that do not fit the device (naming their sizes);
    /// [`Device::Cuda`], which has no batched step yet; a device this build lacks.
    pub fn start_on(model: Model, options: EngineOptions, device: Device) -> Result<Engine> {
        if options.max_batch == 0 {
            return Err(Error::Options("max_batch must be at least 1".into()));
        }
        if options.threads == Some(0) {
            return Err(Error::Options("threads must be at least 1".into()));
        }
        let (inbox, jobs) = mpsc::channel::<Job>();
        let (ready_tx, ready) = mpsc::sync_channel::<Result<(Arc<Tokenizer>, EngineInfo)>>(1);
        let shared = Arc::new(Shared::default());
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("tensorlane-batch".into())
            .spawn(move || {
                let model = model;
                let (mut exec, tokenizer, info) = match open(&model, &options, device) {
                    Ok(x) => x,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok((tokenizer.clone(), info.clone())));
                drop(ready_tx);
                run(&mut exec, &tokenizer, &info, &jobs, &thread_shared);
            })
            .map_err(|e| Error::Options(format!("cannot start the engine thread: {e}")))?;
        let (tokenizer, info) = ready
            .recv()
            .map_err(|_| Error::Options("the engine thread stopped while opening the model".into()))??;
        Ok(Engine {
            inbox,
            shared,
            tokenizer,
            info: Arc::new(info),
        })
    }

    /// The model's tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The model's hyperparameters and the engine's limits.
    pub fn info(&self) -> &EngineInfo {
        &self.info
    }

    /// Counters since the start.
    pub fn metrics(&self) -> Metrics {
        let s = &self.shared;
        Metrics {
            steps: s.steps.load(Ordering::Relaxed),
            decoded_tokens: s.decoded.load(Ordering::Relaxed),
            passes: s.passes.load(Ordering::Relaxed),
            prompt_tokens: s.prompt.load(Ordering::Relaxed),
            streamed_last: s.streamed_last.load(Ordering::Relaxed),
            active: s.active.load(Ordering::Relaxed),
            in_flight: s.in_flight.load(Ordering::Relaxed),
        }
    }

    /// Checks `req` and queues it. The receiver gets its tokens as they are decoded, then
    /// [`Event::Done`] (or [`Event::Failed`]); dropping the receiver cancels the sequence at the
    /// next step and frees its place.
    pub fn submit(&self, req: Request) -> std::result::Result<UnboundedReceiver<Event>, SubmitError> {
        self.check(&req).map_err(SubmitError::Invalid)?;
        let limit = self.info.max_batch + self.info.max_queue;
        let taken = self
            .shared
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < limit).then_some(n + 1));
        if taken.is_err() {
            return Err(SubmitError::QueueFull {
                max_queue: self.info.max_queue,
            });
        }
        let (tx, rx) = unbounded_channel();
        if self.inbox.send(Job { req, tx }).is_err() {
            self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(SubmitError::Stopped);
        }
        Ok(rx)
    }

    fn check(&self, req: &Request) -> Result<()> {
        let (vocab, context) = (self.info.hparams.n_vocab, self.info.context);
        if req.prompt.is_empty() {
            return Err(Error::Options(
                "the prompt is empty (a model needs at least one token)".into(),
            ));
        }
        if let Some(&id) = req.prompt.iter().find(|&&t| t as usize >= vocab) {
            return Err(Error::UnknownToken { id, vocab });
        }
        if req.max_tokens == 0 {
            return Err(Error::Options("max_tokens must be at least 1".into()));
        }
        // As OpenAI counts: the prompt and every token it may generate within the context
        // (`usage.total_tokens` at most the context). The last generated token is never
        // evaluated, so one position stays unused; a client that asks for
        // `context - prompt` tokens is served exactly that.
        let needed = req.prompt.len().saturating_add(req.max_tokens);
        if needed > context {
            return Err(Error::Context { needed, context });
        }
        if req.logprobs.is_some_and(|n| n > 20) {
            return Err(Error::Options("logprobs must be at most 20".into()));
        }
        req.sampling.check()
    }
}

/// Opens the executor on the engine thread.
fn open<'m>(
    model: &'m Model,
    options: &EngineOptions,
    device: Device,
) -> Result<(Exec<'m>, Arc<Tokenizer>, EngineInfo)> {
    if device == Device::Cuda {
        return Err(Error::Device(
            "the serving engine runs on the cpu and wgpu devices (batched decoding on cuda is not \
             implemented); use the cpu or wgpu device, or a Session on cuda for one sequence"
                .into(),
        ));
    }
    let (mut spec, tokenizer) = crate::session::spec_and_tokenizer(model)?;
    let context = options.context.unwrap_or(spec.hparams.n_ctx_train.min(4096));
    if context == 0 {
        return Err(Error::Options("the context must hold at least one position".into()));
    }
    spec.fit_context(context);
    let threads = options
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut weights = Weights::bind(model, &spec)?;
    let cache_type = crate::session::cache_type_of(&crate::Options {
        device,
        cache_type: options.cache_type,
        ..crate::Options::default()
    }, &spec)?;
    let plan = match options.budget {
        Some(budget) => {
            // The working set holds max_batch KV caches: plan for that many positions.
            let positions = context.saturating_mul(options.max_batch);
            Some(crate::plan::compile(
                &model.path().display().to_string(),
                &spec,
                &weights.matrices(),
                weights.vector_bytes(),
                budget,
                positions,
                cache_type,
                tensorlane_offload::Policy::Scheduler,
            )?)
        }
        None => None,
    };
    let hparams = spec.hparams.clone();
    let exec = match device {
        Device::Wgpu => {
            drop(weights);
            wgpu_exec(model, spec, context, plan.as_ref(), options.max_batch)?
        }
        _ => {
            // Under a budget the weights are on the disk tier (as `Session::open` puts them):
            // resident bytes read in now, the rest read from the file ahead of each use.
            match &plan {
                // A mixture of experts stays on the memory-map path (its reads follow the
                // router; `Weights::put_on_disk` says why).
                Some(plan) if hparams.n_expert > 0 => {
                    let resident = plan.resident();
                    weights.split(&|name| resident.get(name).copied());
                    Exec::Cpu(Cpu::new(spec, weights, threads, cache_type)?)
                }
                Some(plan) => {
                    let resident = plan.resident();
                    weights.put_on_disk(model, &|name| resident.get(name).copied(), &mut |_| {})?;
                    let mut cpu = Cpu::new(spec, weights, threads, cache_type)?;
                    cpu.attach_disk(model.path(), usize::try_from(plan.plan.ring.len).unwrap_or(usize::MAX))?;
                    Exec::Cpu(cpu)
                }
                None => Exec::Cpu(Cpu::new(spec, weights, threads, cache_type)?),
            }
        }
    };
    let info = EngineInfo {
        hparams,
        context,
        max_batch: options.max_batch,
        max_queue: options.max_queue,
        weight_bytes: exec.stored_bytes(),
        streamed_bytes: exec.streamed_bytes(),
        threads: exec.threads(),
    };
    Ok((exec, Arc::new(tokenizer), info))
}

/// The wgpu executor with `slots` KV caches.
#[cfg(feature = "wgpu")]
fn wgpu_exec<'m>(
    model: &'m Model,
    spec: crate::arch::Spec,
    context: usize,
    plan: Option<&crate::plan::Budgeted>,
    slots: usize,
) -> Result<Exec<'m>> {
    Ok(Exec::Wgpu(Box::new(crate::wgpu::Wgpu::with_slots(
        model, spec, context, plan, slots,
    )?)))
}

#[cfg(not(feature = "wgpu"))]
fn wgpu_exec<'m>(
    _: &'m Model,
    _: crate::arch::Spec,
    _: usize,
    _: Option<&crate::plan::Budgeted>,
    _: usize,
) -> Result<Exec<'m>> {
    Err(Error::Device(
        "the wgpu device needs tensorlane-llm built with the `wgpu` feature".into(),
    ))
}

/// A sequence in the batch.
struct Seq {
    tx: UnboundedSender<Event>,
    cache: KvCache,
    /// Its KV slot on a device executor (one of `max_batch`; unused on the CPU).
    slot: usize,
    sampler: Sampler,
    /// The token to evaluate next.
    last: u32,
    generated: usize,
    max_tokens: usize,
    prompt_tokens: usize,
    logprobs: Option<usize>,
}

/// Under a budget, the most prompt tokens evaluated in one step beside the decode rows (a longer
/// prompt joins alone): short prompts arriving together share a pass, so one stream of the
/// weights, while the decoding sequences wait for at most about this many prompt rows a step and
/// the first of several joiners gets its first token without waiting for all their prompts. With
/// every weight resident there is no stream to share and one prompt joins a step (each joiner's
/// first token comes as soon as its own prompt is evaluated).
const JOIN_TOKENS: usize = 64;

/// The engine loop: admit waiting jobs, then one forward pass: a decode step over every active
/// sequence and the joining prompts; until every [`Engine`] handle is dropped and nothing runs.
fn run(exec: &mut Exec<'_>, tokenizer: &Tokenizer, info: &EngineInfo, jobs: &mpsc::Receiver<Job>, shared: &Shared) {
    let mut waiting: VecDeque<Job> = VecDeque::new();
    let mut active: Vec<Seq> = Vec::new();
    // The KV slots no sequence holds (a device executor's caches; the CPU ignores them).
    let mut free: Vec<usize> = (0..info.max_batch).rev().collect();
    let mut open = true;
    let join_limit = if info.streamed_bytes > 0 { JOIN_TOKENS } else { 0 };
    let rows_per_pass = exec.rows_per_pass();
    loop {
        if active.is_empty() && waiting.is_empty() {
            if !open {
                return;
            }
            match jobs.recv() {
                Ok(j) => waiting.push_back(j),
                Err(_) => return,
            }
        }
        loop {
            match jobs.try_recv() {
                Ok(j) => waiting.push_back(j),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        // Sequences whose receiver is gone (the client left) end now.
        active.retain(|s| {
            let keep = !s.tx.is_closed();
            if !keep {
                shared.release();
                free.push(s.slot);
            }
            keep
        });
        // Requests joining now: their prompts are evaluated in the same forward pass as the
        // decode step, so a join costs no extra pass over (or stream of) the weights. At least
        // one prompt a step, more while their tokens stay within `join_limit` (and, on an
        // executor whose pass takes at most so many rows, within the rows the decode step
        // leaves free).
        let limit = match rows_per_pass {
            Some(rows) => join_limit.min(rows.saturating_sub(active.len())),
            None => join_limit,
        };
        let mut joining: Vec<(Job, KvCache, usize)> = Vec::new();
        let mut join_tokens = 0;
        while active.len() + joining.len() < info.max_batch {
            let Some(job) = waiting.pop_front() else { break };
            if job.tx.is_closed() {
                shared.release();
                continue;
            }
            if !joining.is_empty() && join_tokens + job.req.prompt.len() > limit {
                waiting.push_front(job);
                break;
            }
            let Some(slot) = free.pop() else {
                waiting.push_front(job);
                break;
            };
            join_tokens += job.req.prompt.len();
            shared.prompt.fetch_add(job.req.prompt.len() as u64, Ordering::Relaxed);
            joining.push((job, exec.new_cache(), slot));
        }
        shared.active.store(active.len() + joining.len(), Ordering::Relaxed);
        if active.is_empty() && joining.is_empty() {
            continue;
        }
        let stepped = {
            let mut batch: Vec<(u32, &mut KvCache, usize)> =
                active.iter_mut().map(|s| (s.last, &mut s.cache, s.slot)).collect();
            let mut prompts: Vec<(&[u32], &mut KvCache, usize)> = joining
                .iter_mut()
                .map(|(j, c, slot)| (&j.req.prompt[..], c, *slot))
                .collect();
            exec.step(&mut batch, &mut prompts)
        };
        let mut logits = match stepped {
            Ok(l) => l.into_iter(),
            Err(e) => {
                // The device failed: every sequence of the step ends with the error.
                let message = e.to_string();
                for s in active.drain(..) {
                    shared.release();
                    free.push(s.slot);
                    let _ = s.tx.send(Event::Failed(Error::Device(message.clone())));
                }
                for (job, _, slot) in joining {
                    shared.release();
                    free.push(slot);
                    let _ = job.tx.send(Event::Failed(Error::Device(message.clone())));
                }
                shared.active.store(0, Ordering::Relaxed);
                continue;
            }
        };
        shared.passes.fetch_add(exec.passes_last(), Ordering::Relaxed);
        shared.streamed_last.store(exec.streamed_last(), Ordering::Relaxed);
        if !active.is_empty() {
            shared.steps.fetch_add(1, Ordering::Relaxed);
            shared.decoded.fetch_add(active.len() as u64, Ordering::Relaxed);
        }
        active.retain_mut(|s| {
            let l = logits.next().unwrap_or_default();
            let keep = emit(s, &l, tokenizer, info.context, shared);
            if !keep {
                free.push(s.slot);
            }
            keep
        });
        for (job, cache, slot) in joining {
            let l = logits.next().unwrap_or_default();
            match joined(job, cache, slot, &l, tokenizer, info.context, shared) {
                Some(seq) => active.push(seq),
                None => free.push(slot),
            }
        }
        shared.active.store(active.len(), Ordering::Relaxed);
    }
}

/// A job whose prompt was evaluated (into `cache`, in KV slot `slot`, giving `logits` for its
/// last position): emits its first token; `None` when the sequence has already ended (one token
/// asked for, an end-of-generation token, a failure, a receiver gone) and its place is free.
fn joined(
    job: Job,
    cache: KvCache,
    slot: usize,
    logits: &[f32],
    tokenizer: &Tokenizer,
    context: usize,
    shared: &Shared,
) -> Option<Seq> {
    let Job { mut req, tx } = job;
    if logits.is_empty() {
        shared.release();
        let _ = tx.send(Event::Failed(Error::Options("the prompt gave no logits".into())));
        return None;
    }
    let mut seq = Seq {
        tx,
        cache,
        slot,
        sampler: sampler(&mut req),
        last: 0,
        generated: 0,
        max_tokens: req.max_tokens,
        prompt_tokens: req.prompt.len(),
        logprobs: req.logprobs,
    };
    emit(&mut seq, logits, tokenizer, context, shared).then_some(seq)
}

/// The sampler of `req`: its sampling parameters, within its grammar.
fn sampler(req: &mut Request) -> crate::Sampler {
    let s = req.sampling.sampler();
    #[cfg(feature = "grammar")]
    if let Some(g) = req.grammar.take() {
        return s.constrained(g);
    }
    s
}

/// Picks `seq`'s next token from `logits` and sends it (and `Done` when the sequence ends);
/// whether the sequence goes on. A sequence that ends frees its place before its last event is
/// sent, so a client that submits again on `Done` finds it free.
fn emit(seq: &mut Seq, logits: &[f32], tokenizer: &Tokenizer, context: usize, shared: &Shared) -> bool {
    let id = match seq.sampler.pick(logits) {
        Ok(id) => id,
        Err(e) => {
            shared.release();
            let _ = seq.tx.send(Event::Failed(e));
            return false;
        }
    };
    let (logprob, top) = match seq.logprobs {
        Some(k) => {
            let lp = log_softmax(logits);
            let mut idx: Vec<u32> = (0..lp.len() as u32).collect();
            let k = k.min(idx.len());
            if k > 0 {
                idx.select_nth_unstable_by(k - 1, |&a, &b| {
                    lp[b as usize].total_cmp(&lp[a as usize]).then(a.cmp(&b))
                });
            }
            idx.truncate(k);
            idx.sort_by(|&a, &b| lp[b as usize].total_cmp(&lp[a as usize]).then(a.cmp(&b)));
            (
                Some(lp[id as usize]),
                idx.into_iter().map(|i| (i, lp[i as usize])).collect(),
            )
        }
        None => (None, Vec::new()),
    };
    seq.generated += 1;
    seq.last = id;
    if seq.tx.send(Event::Token(TokenEvent { id, logprob, top })).is_err() {
        shared.release();
        return false;
    }
    let finish = if seq.sampler.params().stop_at_eog && tokenizer.is_eog(id) {
        Some(Finish::Eog)
    } else if seq.generated >= seq.max_tokens || seq.cache.len + 1 > context {
        Some(Finish::Length)
    } else {
        None
    };
    match finish {
        Some(finish) => {
            shared.release();
            let _ = seq.tx.send(Event::Done(Done {
                finish,
                prompt_tokens: seq.prompt_tokens,
                completion_tokens: seq.generated,
            }));
            false
        }
        None => true,
    }
}

/// Natural-log softmax in f64, rounded to f32.
fn log_softmax(l: &[f32]) -> Vec<f32> {
    let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = l.iter().map(|&x| (x as f64 - max).exp()).sum();
    let ln = sum.ln();
    l.iter().map(|&x| (x as f64 - max - ln) as f32).collect()
}
