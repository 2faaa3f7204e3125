//! `run()` in Node: a language model generating on the CPU executor ([`tensorlane_llm::Session`]),
//! on a Rust thread of its own so that Node's event loop never waits on a forward pass.
//!
//! The thread owns the model and the session. JavaScript sends it commands (generate, cancel,
//! close) and reads its events (load progress, ready, each token, done, error) one at a time with
//! [`LlmSession::next`], an [`AsyncTask`] whose `compute` blocks on the event channel in libuv's
//! thread pool and resolves a promise per event. The event channel has no buffer: the thread hands
//! each token over when JavaScript asks for the next one, so it is at most one token ahead (the
//! one being computed) and `cancel()` stops after it. `js/run.js` turns the events into the same
//! `RunSession` as the browser's WebGPU runner.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::*;
use napi_derive::napi;
use serde_json::json;
use tensorlane::model::Model;
use tensorlane_llm::{CacheType, Error as LlmError, Options, Policy, Sampling, Session};

/// What the JavaScript side asks of the session's thread.
enum Command {
    Generate {
        prompt: Either<String, Vec<u32>>,
        sampling: Sampling,
        max: usize,
    },
}

/// What the session's thread reports, in order (resolved to JavaScript as an [`LlmEvent`]).
pub enum Event {
    /// Resident weight bytes read so far, of the total.
    Progress {
        /// Bytes read.
        loaded: u64,
        /// Bytes to read.
        total: u64,
    },
    /// The session is open: its figures (JSON).
    Ready(String),
    /// A generated token.
    Token {
        /// Its id.
        id: u32,
        /// The bytes it stands for.
        piece: Vec<u8>,
    },
    /// The generation ended: its figures (JSON).
    Done(String),
    /// Opening or generating failed.
    Error {
        /// The native error's message.
        message: String,
        /// `budget`, `unsupported` or `error`.
        code: &'static str,
        /// With `budget`: the smallest budget that works.
        minimum: Option<u64>,
    },
    /// The thread has ended (the session was closed, or opening it failed and was reported).
    Closed,
}

/// One event of a session, as [`LlmSession::next`] resolves it.
#[napi(object)]
pub struct LlmEvent {
    /// `progress`, `ready`, `token`, `done`, `error` or `closed`.
    pub op: String,
    /// `token`: the token id.
    pub id: Option<u32>,
    /// `token`: the bytes it stands for.
    pub piece: Option<Buffer>,
    /// `progress`: resident weight bytes read so far.
    pub loaded: Option<f64>,
    /// `progress`: resident weight bytes to read.
    pub total: Option<f64>,
    /// `ready`: the session's figures; `done`: the generation's (JSON).
    pub json: Option<String>,
    /// `error`: what went wrong.
    pub message: Option<String>,
    /// `error`: `budget`, `unsupported` or `error`.
    pub code: Option<String>,
    /// `error` with code `budget`: the smallest budget that works, in bytes.
    pub minimum: Option<f64>,
}

/// Options of [`LlmSession::new`] (`run()`'s, less those of the browser).
#[napi(object)]
pub struct LlmOptions {
    /// Weight, KV cache and activation bytes (absent: every weight resident).
    pub budget: Option<f64>,
    /// KV cache positions (absent: the model's training context, at most 4096).
    pub context: Option<u32>,
    /// Offload policy name (absent: `scheduler`).
    pub policy: Option<String>,
    /// Worker threads (absent: the available parallelism).
    pub threads: Option<u32>,
    /// How the KV cache keeps keys and values: `f16` (absent: the default), `f32` or `q8_0`.
    pub cache_type: Option<String>,
}

/// Sampling of [`LlmSession::generate`] (`generate()`'s, greedy by default).
#[napi(object)]
pub struct LlmSampling {
    /// 0 (default): greedy.
    pub temperature: Option<f64>,
    /// Keep the `topK` most likely tokens (0: all).
    pub top_k: Option<u32>,
    /// Nucleus cut (1: none).
    pub top_p: Option<f64>,
    /// The random generator's seed.
    pub seed: Option<f64>,
    /// Stop after an end-of-generation token (default true).
    pub stop_at_eog: Option<bool>,
    /// Tokens to generate at most (default 64).
    pub max_tokens: Option<u32>,
}

/// The smallest budget a budget error names, when it names one.
fn minimum_of(message: &str) -> Option<u64> {
    let rest = message.split("smallest budget the ").nth(1)?;
    let rest = rest.split(" accepts is ").nth(1)?;
    rest.split(' ').next()?.parse().ok()
}

/// The RunError code of a native error: the same three the browser runner uses.
fn event_of(e: &LlmError) -> Event {
    let message = e.to_string();
    let code = match e {
        LlmError::Budget(_) => "budget",
        LlmError::UnsupportedArchitecture { .. } | LlmError::UnsupportedFormat(_) | LlmError::TensorType { .. } => {
            "unsupported"
        }
        _ => "error",
    };
    Event::Error {
        minimum: if code == "budget" { minimum_of(&message) } else { None },
        message,
        code,
    }
}

/// A model opened for generation on a thread of its own (`run()` in Node; see the module docs).
#[napi(js_name = "LlmSession")]
pub struct LlmSession {
    commands: Mutex<Option<Sender<Command>>>,
    events: Arc<Mutex<Option<Receiver<Event>>>>,
    cancel: Arc<AtomicBool>,
}

#[napi]
impl LlmSession {
    /// Starts the session's thread: it opens the model at `path` (GGUF; safetensors with its
    /// config.json and tokenizer.json beside it), reads the resident weights (`progress` events)
    /// and reports `ready` or an `error`.
    #[napi(constructor)]
    pub fn new(path: String, options: LlmOptions) -> Result<Self> {
        let policy = match options.policy.as_deref() {
            None | Some("") => None,
            Some(name) => Some(Policy::from_name(name).ok_or_else(|| {
                Error::from_reason(format!(
                    "policy '{name}' is not an offload policy (use one of: {})",
                    Policy::ALL.map(|p| p.name()).join(", ")
                ))
            })?),
        };
        let budget = match options.budget {
            None => None,
            Some(b) if b.is_finite() && b >= 1.0 && b <= 2f64.powi(53) => Some(b as u64),
            Some(b) => {
                return Err(Error::from_reason(format!(
                    "budget {b}: not a number of bytes (a positive integer)"
                )));
            }
        };
        let cache_type = options
            .cache_type
            .as_deref()
            .map(CacheType::parse)
            .transpose()
            .map_err(|e| Error::from_reason(format!("cacheType {e}")))?;
        let opts = Options {
            budget,
            policy,
            cache_type,
            context: options.context.map(|c| c as usize),
            threads: options.threads.map(|t| t as usize),
            ..Options::default()
        };
        let (cmd_tx, cmd_rx) = channel::<Command>();
        let (ev_tx, ev_rx) = sync_channel::<Event>(0);
        let cancel = Arc::new(AtomicBool::new(false));
        let flag = cancel.clone();
        std::thread::Builder::new()
            .name("tensorlane-run".into())
            .spawn(move || {
                serve(&path, opts, &cmd_rx, &ev_tx, &flag);
                let _ = ev_tx.try_send(Event::Closed);
            })
            .map_err(|e| Error::from_reason(format!("could not start the session's thread: {e}")))?;
        Ok(LlmSession {
            commands: Mutex::new(Some(cmd_tx)),
            events: Arc::new(Mutex::new(Some(ev_rx))),
            cancel,
        })
    }

    /// The next event (a promise; waits in the thread pool, not on the event loop).
    #[napi]
    pub fn next(&self) -> AsyncTask<NextEvent> {
        AsyncTask::new(NextEvent {
            events: self.events.clone(),
        })
    }

    /// Generates from `prompt` (text, tokenized with BOS, or token ids): `token` events, then
    /// `done` (or `error`).
    #[napi]
    pub fn generate(&self, prompt: Either<String, Vec<u32>>, sampling: LlmSampling) -> Result<()> {
        let s = Sampling {
            temperature: sampling.temperature.unwrap_or(0.0) as f32,
            top_k: sampling.top_k.unwrap_or(0) as usize,
            top_p: sampling.top_p.unwrap_or(1.0) as f32,
            seed: sampling.seed.unwrap_or(0.0) as u64,
            stop_at_eog: sampling.stop_at_eog.unwrap_or(true),
            ..Sampling::default()
        };
        self.cancel.store(false, Ordering::SeqCst);
        let commands = self
            .commands
            .lock()
            .map_err(|_| Error::from_reason("the session's lock is poisoned"))?;
        let sent = commands.as_ref().map(|c| {
            c.send(Command::Generate {
                prompt,
                sampling: s,
                max: sampling.max_tokens.unwrap_or(64) as usize,
            })
        });
        match sent {
            Some(Ok(())) => Ok(()),
            _ => Err(Error::from_reason(
                "this session is closed (run() again to open the model)",
            )),
        }
    }

    /// Stops the generation under way after the token being computed.
    #[napi]
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::SeqCst);
    }

    /// Ends the session's thread once its current token is done (the model is unmapped).
    #[napi]
    pub fn close(&self) {
        self.cancel.store(true, Ordering::SeqCst);
        if let Ok(mut c) = self.commands.lock() {
            c.take();
        }
        // Dropping the receiver frees a thread waiting to hand over an event nobody will read.
        // When a next() is waiting on it instead, that one gets the thread's last events.
        if let Ok(mut e) = self.events.try_lock() {
            e.take();
        }
    }
}

/// The task behind [`LlmSession::next`].
pub struct NextEvent {
    events: Arc<Mutex<Option<Receiver<Event>>>>,
}

impl Task for NextEvent {
    type Output = Event;
    type JsValue = LlmEvent;

    fn compute(&mut self) -> Result<Event> {
        let rx = self
            .events
            .lock()
            .map_err(|_| Error::from_reason("the session's lock is poisoned"))?;
        Ok(rx.as_ref().and_then(|rx| rx.recv().ok()).unwrap_or(Event::Closed))
    }

    fn resolve(&mut self, _env: Env, e: Event) -> Result<LlmEvent> {
        let mut out = LlmEvent {
            op: String::new(),
            id: None,
            piece: None,
            loaded: None,
            total: None,
            json: None,
            message: None,
            code: None,
            minimum: None,
        };
        out.op = match e {
            Event::Progress { loaded, total } => {
                out.loaded = Some(loaded as f64);
                out.total = Some(total as f64);
                "progress"
            }
            Event::Ready(j) => {
                out.json = Some(j);
                "ready"
            }
            Event::Token { id, piece } => {
                out.id = Some(id);
                out.piece = Some(piece.into());
                "token"
            }
            Event::Done(j) => {
                out.json = Some(j);
                "done"
            }
            Event::Error { message, code, minimum } => {
                out.message = Some(message);
                out.code = Some(code.into());
                out.minimum = minimum.map(|m| m as f64);
                "error"
            }
            Event::Closed => "closed",
        }
        .into();
        Ok(out)
    }
}

/// The session's thread: open, then generate on each command until the commands' sender is dropped.
fn serve(path: &str, options: Options, commands: &Receiver<Command>, events: &SyncSender<Event>, cancel: &AtomicBool) {
    let model = match Model::open(path) {
        Ok(m) => m,
        Err(e) => {
            let _ = events.send(event_of(&LlmError::Model(e)));
            return;
        }
    };
    let policy = options.policy;
    let cache_type = options.cache_type.unwrap_or(CacheType::F16);
    let minimum = if options.budget.is_some() {
        Session::minimum_budget(&model, &options).ok().flatten()
    } else {
        None
    };
    let mut last = 0u64;
    let opened = Session::open_with_progress(&model, options, &mut |load| {
        // every 16 MiB (as read) and the last one
        if load.loaded == 0 || load.loaded == load.total || load.loaded - last >= 16 << 20 {
            last = load.loaded;
            let _ = events.send(Event::Progress {
                loaded: load.loaded,
                total: load.total,
            });
        }
    });
    let mut session = match opened {
        Ok(s) => s,
        Err(e) => {
            let _ = events.send(event_of(&e));
            return;
        }
    };
    let h = session.hparams();
    let st = session.stats();
    let info = json!({
        "device": "cpu",
        "architecture": format!("{:?}", h.family).to_lowercase(),
        "spec": {
            "n_layer": h.n_layer, "n_embd": h.n_embd, "n_head": h.n_head, "n_head_kv": h.n_head_kv,
            "head_dim": h.head_dim, "n_ff": h.n_ff, "n_vocab": h.n_vocab, "n_ctx_train": h.n_ctx_train,
        },
        "context": session.context(),
        "weightBytes": st.weight_bytes,
        "residentBytes": st.resident_bytes,
        "streamedPerForward": st.plan_streamed_bytes,
        "workingSet": st.working_set_bytes,
        "minimumBudget": minimum,
        "policy": st.policy.or(policy).map(|p| p.name()),
        "threads": st.threads,
        "linkGbps": st.link_gbps,
        "cacheType": cache_type.name(),
    });
    if events.send(Event::Ready(info.to_string())).is_err() {
        return;
    }
    while let Ok(Command::Generate { prompt, sampling, max }) = commands.recv() {
        let ids = match prompt {
            Either::A(text) => session.tokenizer().encode(&text, true),
            Either::B(ids) => ids,
        };
        let mut tokens = Vec::new();
        let mut bytes = Vec::new();
        let mut failed = None;
        let mut cancelled = false;
        {
            let mut steps = session.generate(&ids, &sampling);
            while tokens.len() < max {
                if cancel.load(Ordering::SeqCst) {
                    cancelled = true;
                    break;
                }
                match steps.next() {
                    None => break,
                    Some(Err(e)) => {
                        failed = Some(e);
                        break;
                    }
                    Some(Ok(t)) => {
                        tokens.push(t.id);
                        bytes.extend_from_slice(&t.piece);
                        let sent = events.send(Event::Token {
                            id: t.id,
                            piece: t.piece,
                        });
                        if sent.is_err() {
                            // close(): nobody reads the events any more
                            return;
                        }
                    }
                }
            }
        }
        if let Some(e) = failed {
            if events.send(event_of(&e)).is_err() {
                return;
            }
            continue;
        }
        let s = session.stats();
        let passes = if s.prefill_tokens > 0 { 1 + s.decode_tokens } else { 0 };
        let stats = json!({
            "promptTokens": ids,
            "tokens": tokens,
            "text": String::from_utf8_lossy(&bytes),
            "prefillTokens": s.prefill_tokens,
            "prefillS": s.prefill.as_secs_f64(),
            "prefillTokensPerS": if s.prefill_tokens > 0 { s.prefill_tokens_per_s() } else { 0.0 },
            "decodeTokens": s.decode_tokens,
            "decodeS": s.decode.as_secs_f64(),
            "decodeTokensPerS": if s.decode_tokens > 0 { s.decode_tokens_per_s() } else { 0.0 },
            "passes": passes,
            "streamedBytes": s.streamed_total,
            "fetchedBytes": s.streamed_total,
            "planStreamedBytes": s.plan_streamed_bytes,
            "copyS": s.copy.as_secs_f64(),
            "threads": s.threads,
            "cancelled": cancelled,
        });
        if events.send(Event::Done(stats.to_string())).is_err() {
            return;
        }
    }
}
