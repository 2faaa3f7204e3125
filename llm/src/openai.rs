//! `openai` (feature `serve`): an OpenAI-compatible HTTP API over a
//! [`batch::Engine`](crate::batch::Engine), as an axum [`Router`] that `tensorlane serve --model`
//! mounts beside its file routes (behind the same token guard).
//!
//! | route | what |
//! |---|---|
//! | `GET /v1/models`, `GET /v1/models/{id}` | the one model served |
//! | `POST /v1/completions` | text after a prompt (text or token ids) |
//! | `POST /v1/chat/completions` | a reply to messages, rendered with the model's chat template |
//!
//! Both generation routes take `max_tokens` (chat also `max_completion_tokens`), `temperature`
//! (OpenAI's default 1; 0 is greedy and equals `tensorlane run`), `top_p`, `stop` (a string or up
//! to 4), `seed`, `stream` (server-sent events ending with `data: [DONE]`;
//! `stream_options.include_usage` adds a last chunk with the usage), `n` (1 only) and, as
//! llama.cpp's server does, `ignore_eos` (go on after an end-of-generation token).
//! Completions take `logprobs` (0..=20: the sampled token's log-probability and the most likely
//! alternatives, OpenAI's legacy shape); chat takes `logprobs` and `top_logprobs` (0..=20).
//! Log-probabilities are the model's (the log-softmax of the raw logits, before temperature).
//! Every response has `usage` (prompt, completion and total tokens). Both take `logit_bias` and
//! `response_format` (`text`, `json_object`, `json_schema`: sampling constrained by
//! [`crate::grammar`], so the reply parses and follows the schema); chat takes `tools` and
//! `tool_choice` ([`crate::tools`]: rendered by the template, the reply parsed into
//! `tool_calls`, constrained when a call is required). The legacy `functions` is a 400.
//!
//! Chat templates come from the GGUF key `tokenizer.chat_template` or `tokenizer_config.json`
//! beside a safetensors file ([`chat_template`]) and are rendered with minijinja (Python string
//! methods of Hugging Face templates included) with `messages`, `add_generation_prompt`,
//! `bos_token` and `eos_token`; special tokens written by the template are parsed as tokens, and
//! none in the messages' text ([`mark_text`], [`chat_prompt`]): `</s>` in a message is those
//! characters. A role must be a name (letters, digits, `_`, `-`). A model without a template
//! answers chat requests with 400.
//!
//! A `POST` must be `Content-Type: application/json` (else 415) and its body arrive within
//! [`ApiConfig::body_timeout`] (else 408, the connection closed). Response ids are `chatcmpl-` /
//! `cmpl-` and 24 characters from the operating system's CSPRNG.
//!
//! Errors are OpenAI error objects, `{"error": {"message", "type", "param", "code"}}`: 400
//! `invalid_request_error` for invalid JSON or parameters (`context_length_exceeded` for a prompt
//! plus `max_tokens` beyond the context, which holds both), 404 `model_not_found` for another
//! model name, 413 for a body over [`ApiConfig::max_body`], 429 `rate_limit_exceeded` (with
//! `Retry-After`) when every batch slot is taken and the queue is full. A client that disconnects
//! cancels its sequence at the next decode step.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path as AxPath, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::batch::{Engine, Event, Finish, Request, SubmitError, TokenEvent};
use crate::grammar::{Constraint, Grammars};
use crate::tools::Tools;
use crate::{Error, Sampling};

/// How [`router`] serves.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    /// The model's name in `/v1/models` and in responses; requests naming another get 404.
    pub model_id: String,
    /// The chat template (Jinja), or `None`: chat requests get 400.
    pub chat_template: Option<String>,
    /// The largest request body accepted, in bytes (default 1 MiB); larger ones get 413, at once
    /// when their `Content-Length` says so.
    pub max_body: usize,
    /// How long a request's body may take to arrive once its head has (default 30 s; `None`: no
    /// limit); a body that takes longer is answered 408 and the connection closed.
    pub body_timeout: Option<Duration>,
}

/// [`ApiConfig::body_timeout`]'s default.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

impl ApiConfig {
    /// A configuration for `model_id` with no chat template and a 1 MiB body limit.
    pub fn new(model_id: impl Into<String>) -> ApiConfig {
        ApiConfig {
            model_id: model_id.into(),
            chat_template: None,
            max_body: 1 << 20,
            body_timeout: Some(DEFAULT_BODY_TIMEOUT),
        }
    }
}

/// The chat template of `model`: the GGUF key `tokenizer.chat_template`, or for other formats
/// `chat_template` of `tokenizer_config.json` beside the file (a string, or the template named
/// `default` of a list). `None` when there is none.
pub fn chat_template(model: &tensorlane::model::Model) -> Option<String> {
    use tensorlane_core::formats::Meta;
    let meta = model
        .catalog()
        .metadata
        .iter()
        .find(|(k, _)| k == "tokenizer.chat_template");
    if let Some((_, Meta::Str(s))) = meta {
        return Some(s.clone());
    }
    let dir = model.path().parent()?;
    let config: Value = serde_json::from_slice(&std::fs::read(dir.join("tokenizer_config.json")).ok()?).ok()?;
    match config.get("chat_template")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(list) => list
            .iter()
            .find(|t| t["name"] == "default")
            .or(list.first())
            .and_then(|t| t["template"].as_str())
            .map(str::to_string),
        _ => None,
    }
}

struct Api {
    engine: Engine,
    config: ApiConfig,
    /// The template compiled, or why it does not compile.
    template: Option<std::result::Result<minijinja::Environment<'static>, String>>,
    /// The grammar engine over the model's vocabulary, built at the first request that needs it.
    grammars: std::sync::OnceLock<std::result::Result<Grammars, String>>,
    created: u64,
}

impl Api {
    /// The grammar engine, or a 400-worthy reason why this vocabulary has none.
    fn grammars(&self, param: &'static str) -> ApiResult<&Grammars> {
        self.grammars
            .get_or_init(|| Grammars::new(self.engine.tokenizer()).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| ApiError::invalid(format!("{param}: constrained decoding is unavailable: {e}"), Some(param)))
    }
}

/// The routes of the module docs over `engine`.
pub fn router(engine: Engine, config: ApiConfig) -> Router {
    let template = config.chat_template.clone().map(crate::chat::environment);
    let max_body = config.max_body;
    let limits = (max_body, config.body_timeout.filter(|d| !d.is_zero()));
    let api = Arc::new(Api {
        engine,
        config,
        template,
        grammars: std::sync::OnceLock::new(),
        created: now(),
    });
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/models/{*id}", get(model))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .layer(DefaultBodyLimit::max(max_body))
        .route_layer(axum::middleware::from_fn_with_state(limits, read_body))
        .with_state(api)
}

/// The largest body over the limit that is read (and dropped) before its 413, so that the
/// client, still sending, is not reset before it reads the answer.
const DRAIN_LIMIT: u64 = 16 << 20;

/// A `POST`'s body, read before its handler runs: it must be `Content-Type: application/json`
/// (else 415), at most `max_body` bytes (413 when `Content-Length` says more, after dropping a
/// body of up to [`DRAIN_LIMIT`], at once for a larger one) and all there within `timeout` of
/// the head (else 408). 408 and 413 close the
/// connection (the rest of the body is not read).
async fn read_body(
    State((max_body, timeout)): State<(usize, Option<Duration>)>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use axum::http::{HeaderValue, Method, header};
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    let closing = |e: ApiError| {
        let mut r = e.into_response();
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        r
    };
    let too_large = || ApiError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        message: format!("the request body is larger than this server takes ({max_body} bytes)"),
        kind: "invalid_request_error",
        param: None,
        code: Some("request_too_large"),
    };
    let json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return closing(ApiError {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            message: "the request body must be JSON, sent with Content-Type: application/json".into(),
            kind: "invalid_request_error",
            param: None,
            code: Some("unsupported_media_type"),
        });
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(n) = declared.filter(|&n| n > max_body as u64) {
        // A connection closed while its client is still sending is reset, and the reset can
        // take the 413 with it: a body of moderate size is read and dropped first (within the
        // body timeout), so the client reads its answer; a huge one is answered at once.
        if n <= DRAIN_LIMIT {
            let drain = async {
                use futures_util::StreamExt;
                let mut stream = req.into_body().into_data_stream();
                while let Some(Ok(_)) = stream.next().await {}
            };
            match timeout {
                Some(t) => drop(tokio::time::timeout(t, drain).await),
                None => drain.await,
            }
        }
        return closing(too_large());
    }
    let (parts, body) = req.into_parts();
    let read = async {
        use futures_util::StreamExt;
        let mut data = Vec::new();
        let mut stream = body.into_data_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| ApiError::invalid(format!("cannot read the request body: {e}"), None))?;
            if data.len() + chunk.len() > max_body {
                return Err(too_large());
            }
            data.extend_from_slice(&chunk);
        }
        Ok(data)
    };
    let data = match timeout {
        Some(t) => match tokio::time::timeout(t, read).await {
            Ok(r) => r,
            Err(_) => Err(ApiError {
                status: StatusCode::REQUEST_TIMEOUT,
                message: format!(
                    "the request body did not arrive within {} s (the server's body timeout)",
                    t.as_secs_f32()
                ),
                kind: "invalid_request_error",
                param: None,
                code: Some("timeout"),
            }),
        },
        None => read.await,
    };
    match data {
        Ok(data) => {
            next.run(axum::extract::Request::from_parts(parts, axum::body::Body::from(data)))
                .await
        }
        Err(e) => closing(e),
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// An OpenAI error response.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    message: String,
    kind: &'static str,
    param: Option<&'static str>,
    code: Option<&'static str>,
}

impl ApiError {
    fn invalid(message: impl Into<String>, param: Option<&'static str>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param,
            code: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }});
        let mut r = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::TOO_MANY_REQUESTS {
            r.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        r
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> ApiError {
        match e {
            SubmitError::Invalid(e @ Error::Context { .. }) => ApiError {
                code: Some("context_length_exceeded"),
                ..ApiError::invalid(
                    format!("{e}: shorten the prompt or lower max_tokens"),
                    Some("max_tokens"),
                )
            },
            SubmitError::Invalid(e @ Error::UnknownToken { .. }) => ApiError::invalid(e.to_string(), Some("prompt")),
            SubmitError::Invalid(e) => ApiError::invalid(e.to_string(), None),
            e @ SubmitError::QueueFull { .. } => ApiError {
                status: StatusCode::TOO_MANY_REQUESTS,
                message: e.to_string(),
                kind: "rate_limit_error",
                param: None,
                code: Some("rate_limit_exceeded"),
            },
            e @ SubmitError::Stopped => ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                message: e.to_string(),
                kind: "server_error",
                param: None,
                code: None,
            },
        }
    }
}

type ApiResult<T> = std::result::Result<T, ApiError>;

async fn models(State(api): State<Arc<Api>>) -> Response {
    axum::Json(json!({"object": "list", "data": [model_object(&api)]})).into_response()
}

async fn model(State(api): State<Arc<Api>>, AxPath(id): AxPath<String>) -> Response {
    if id == api.config.model_id {
        axum::Json(model_object(&api)).into_response()
    } else {
        not_found(&api, &id).into_response()
    }
}

fn model_object(api: &Api) -> Value {
    json!({
        "id": api.config.model_id,
        "object": "model",
        "created": api.created,
        "owned_by": "tensorlane",
        "context_length": api.engine.info().context,
    })
}

fn not_found(api: &Api, id: &str) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        message: format!(
            "the model '{id}' does not exist here: this server serves '{}' (GET /v1/models)",
            api.config.model_id
        ),
        kind: "invalid_request_error",
        param: Some("model"),
        code: Some("model_not_found"),
    }
}

/// The body as a JSON object (errors: too large, not JSON, not an object).
fn parse_body(body: std::result::Result<Bytes, BytesRejection>) -> ApiResult<serde_json::Map<String, Value>> {
    let bytes = body.map_err(|e| ApiError {
        status: e.status(),
        message: format!("cannot read the request body: {}", e.body_text()),
        kind: "invalid_request_error",
        param: None,
        code: None,
    })?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::invalid("the request body must be a JSON object", None)),
        Err(e) => Err(ApiError::invalid(
            format!("the request body is not valid JSON: {e}"),
            None,
        )),
    }
}

/// The request parameters both routes share.
struct Params {
    stream: bool,
    include_usage: bool,
    max_tokens: Option<usize>,
    sampling: Sampling,
    stop: Vec<String>,
    logprobs: Option<usize>,
    /// `response_format`'s grammar (or a required tool call's).
    grammar: Option<Constraint>,
    /// The chat request's tools.
    tools: Option<Tools>,
}

fn get_f32(m: &serde_json::Map<String, Value>, key: &'static str) -> ApiResult<Option<f32>> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(|x| Some(x as f32))
            .ok_or_else(|| ApiError::invalid(format!("{key} must be a number"), Some(key))),
    }
}

fn get_uint(m: &serde_json::Map<String, Value>, key: &'static str) -> ApiResult<Option<u64>> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| ApiError::invalid(format!("{key} must be a non-negative integer"), Some(key))),
    }
}

fn get_bool(m: &serde_json::Map<String, Value>, key: &'static str) -> ApiResult<bool> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::invalid(format!("{key} must be true or false"), Some(key))),
    }
}

/// Checks `model` and reads the shared parameters.
fn params(api: &Api, m: &serde_json::Map<String, Value>, max_tokens_keys: &[&'static str]) -> ApiResult<Params> {
    match m.get("model") {
        None | Some(Value::Null) => {}
        Some(Value::String(id)) if *id == api.config.model_id => {}
        Some(Value::String(id)) => return Err(not_found(api, id)),
        Some(_) => return Err(ApiError::invalid("model must be a string", Some("model"))),
    }
    if let Some(n) = get_uint(m, "n")?
        && n != 1
    {
        return Err(ApiError::invalid("only n = 1 is supported", Some("n")));
    }
    for key in ["presence_penalty", "frequency_penalty"] {
        if get_f32(m, key)?.is_some_and(|x| x != 0.0) {
            return Err(ApiError::invalid(format!("{key} is not supported (only 0)"), None));
        }
    }
    let mut max_tokens = None;
    for &key in max_tokens_keys {
        if let Some(n) = get_uint(m, key)? {
            max_tokens = Some(usize::try_from(n).unwrap_or(usize::MAX));
        }
    }
    let temperature = get_f32(m, "temperature")?.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::invalid(
            "temperature must be between 0 and 2",
            Some("temperature"),
        ));
    }
    let top_p = get_f32(m, "top_p")?.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid("top_p must be in (0, 1]", Some("top_p")));
    }
    let seed = match m.get("seed") {
        None | Some(Value::Null) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
        Some(v) => v
            .as_i64()
            .map(|s| s as u64)
            .or_else(|| v.as_u64())
            .ok_or_else(|| ApiError::invalid("seed must be an integer", Some("seed")))?,
    };
    let stop = match m.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) if a.len() <= 4 => a
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ApiError::invalid("stop must be a string or a list of strings", Some("stop")))?,
        Some(_) => {
            return Err(ApiError::invalid(
                "stop must be a string or a list of at most 4 strings",
                Some("stop"),
            ));
        }
    };
    if stop.iter().any(|s| s.is_empty() || s.len() > 256) {
        return Err(ApiError::invalid(
            "each stop string must be 1 to 256 bytes long",
            Some("stop"),
        ));
    }
    // What this server does not do yet is refused, never ignored: an agent that asks for a tool
    // call or a JSON reply and gets prose breaks in confusing ways.
    let unsupported = |key: &'static str, what: &str| {
        Err(ApiError {
            code: Some("unsupported_parameter"),
            ..ApiError::invalid(format!("{key}: {what} is not supported by this server yet"), Some(key))
        })
    };
    for key in ["functions", "function_call"] {
        if !matches!(m.get(key), None | Some(Value::Null)) {
            return unsupported(key, "function calling");
        }
    }
    let grammar = response_format(api, m.get("response_format"))?;
    let n_vocab = api.engine.info().hparams.n_vocab;
    let logit_bias = match m.get("logit_bias") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(o)) if o.len() <= 300 => o
            .iter()
            .map(|(k, v)| {
                let id = k.parse::<u32>().ok().filter(|&id| (id as usize) < n_vocab);
                let b = v.as_f64().filter(|b| (-100.0..=100.0).contains(b));
                match (id, b) {
                    (Some(id), Some(b)) => Ok((id, b as f32)),
                    _ => Err(ApiError::invalid(
                        format!(
                            "logit_bias maps token ids (0..{n_vocab}) to numbers in [-100, 100]; '{k}': {v} is not one"
                        ),
                        Some("logit_bias"),
                    )),
                }
            })
            .collect::<ApiResult<Vec<_>>>()?,
        Some(_) => {
            return Err(ApiError::invalid(
                "logit_bias must be an object of at most 300 token ids",
                Some("logit_bias"),
            ));
        }
    };
    let stream = get_bool(m, "stream")?;
    let ignore_eos = get_bool(m, "ignore_eos")?;
    let include_usage = match m.get("stream_options") {
        Some(Value::Object(o)) => o.get("include_usage").and_then(Value::as_bool).unwrap_or(false),
        _ => false,
    };
    Ok(Params {
        stream,
        include_usage,
        max_tokens,
        sampling: Sampling {
            temperature,
            top_p,
            seed,
            stop_at_eog: !ignore_eos,
            logit_bias,
            ..Sampling::default()
        },
        stop,
        logprobs: None,
        grammar,
        tools: None,
    })
}

/// The grammar of `response_format`: none for `{"type": "text"}`, any JSON object for
/// `{"type": "json_object"}`, the schema of `{"type": "json_schema", "json_schema": {"name",
/// "schema", "strict"}}`.
fn response_format(api: &Api, v: Option<&Value>) -> ApiResult<Option<Constraint>> {
    const P: &str = "response_format";
    let bad = |m: String| ApiError::invalid(m, Some(P));
    let o = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(o)) => o,
        Some(_) => return Err(bad("response_format must be an object with a type".into())),
    };
    let constraint = match o.get("type").and_then(Value::as_str) {
        Some("text") => return Ok(None),
        Some("json_object") => api.grammars(P)?.json_object(),
        Some("json_schema") => {
            let Some(Value::Object(js)) = o.get("json_schema") else {
                return Err(bad(
                    "response_format of type json_schema needs json_schema: {\"name\", \"schema\"}".into(),
                ));
            };
            let schema = js.get("schema").cloned().unwrap_or_else(|| json!({}));
            api.grammars(P)?.json_schema(&schema)
        }
        other => {
            return Err(bad(format!(
                "response_format.type must be text, json_object or json_schema, not {}",
                other.map_or_else(|| "missing".to_string(), |t| format!("'{t}'"))
            )));
        }
    };
    constraint.map(Some).map_err(|e| bad(e.to_string()))
}

/// Tokens left to generate after the prompt (the default `max_tokens` of chat): the context
/// holds the prompt and all the generated tokens.
fn room(api: &Api, prompt: usize) -> usize {
    api.engine.info().context.saturating_sub(prompt).max(1)
}

async fn completions(State(api): State<Arc<Api>>, body: std::result::Result<Bytes, BytesRejection>) -> Response {
    off_the_workers(move || completions_inner(api, body)).await
}

/// Runs a request's preparation — JSON parsing, template rendering, tokenizing, compiling its
/// grammar: CPU work that grows with the request — on tokio's blocking pool, then answers it. On
/// the async workers, four megabyte prompts held every worker and `GET /v1/models` waited
/// behind them.
async fn off_the_workers(prepare: impl FnOnce() -> ApiResult<Started> + Send + 'static) -> Response {
    match tokio::task::spawn_blocking(prepare).await {
        Ok(Ok(s)) => s.respond().await,
        Ok(Err(e)) => e.into_response(),
        Err(e) => server_error(format!("preparing the request failed: {e}")).into_response(),
    }
}

fn completions_inner(api: Arc<Api>, body: std::result::Result<Bytes, BytesRejection>) -> ApiResult<Started> {
    let m = parse_body(body)?;
    // Tools are chat's; what asks for none changes nothing here.
    let no_tools = matches!(m.get("tools"), None | Some(Value::Null)) || m.get("tools").and_then(Value::as_array).is_some_and(Vec::is_empty);
    let no_choice = matches!(m.get("tool_choice").map(|c| c.as_str()), None | Some(Some("none" | "auto"))) || m.get("tool_choice") == Some(&Value::Null);
    for (key, none) in [("tools", no_tools), ("tool_choice", no_choice)] {
        if !none {
            return Err(ApiError::invalid(format!("{key}: only /v1/chat/completions takes tools"), Some(key)));
        }
    }
    let mut p = params(&api, &m, &["max_tokens"])?;
    if get_bool(&m, "echo")? {
        return Err(ApiError::invalid("echo is not supported", Some("echo")));
    }
    if m.get("suffix").is_some_and(|s| !s.is_null()) {
        return Err(ApiError::invalid("suffix is not supported", Some("suffix")));
    }
    p.logprobs = get_uint(&m, "logprobs")?.map(|n| n as usize);
    let tok = api.engine.tokenizer();
    let bad_prompt = || {
        ApiError::invalid(
            "prompt must be a string, a list of token ids, or a list holding one of those",
            Some("prompt"),
        )
    };
    let prompt: Vec<u32> = match m.get("prompt") {
        Some(Value::String(s)) => tok.encode(s, true),
        Some(Value::Array(a)) => match a.as_slice() {
            [Value::String(s)] => tok.encode(s, true),
            [Value::Array(ids)] => token_ids(ids).ok_or_else(bad_prompt)?,
            [] => return Err(bad_prompt()),
            ids if ids.iter().all(Value::is_number) => token_ids(ids).ok_or_else(bad_prompt)?,
            _ => {
                return Err(ApiError::invalid(
                    "only one prompt per request is supported",
                    Some("prompt"),
                ));
            }
        },
        None => return Err(ApiError::invalid("prompt is required", Some("prompt"))),
        Some(_) => return Err(bad_prompt()),
    };
    let max_tokens = p.max_tokens.unwrap_or(16);
    start(api, prompt, max_tokens, p, Kind::Completion)
}

/// Token ids from JSON numbers (`None` if one is not a u32).
fn token_ids(ids: &[Value]) -> Option<Vec<u32>> {
    ids.iter()
        .map(|v| v.as_u64().and_then(|x| u32::try_from(x).ok()))
        .collect()
}

async fn chat(State(api): State<Arc<Api>>, body: std::result::Result<Bytes, BytesRejection>) -> Response {
    off_the_workers(move || chat_inner(api, body)).await
}

fn chat_inner(api: Arc<Api>, body: std::result::Result<Bytes, BytesRejection>) -> ApiResult<Started> {
    let m = parse_body(body)?;
    let mut p = params(&api, &m, &["max_tokens", "max_completion_tokens"])?;
    if get_bool(&m, "logprobs")? {
        let top = get_uint(&m, "top_logprobs")?.unwrap_or(0);
        p.logprobs = Some(top as usize);
    }
    let env = match &api.template {
        None => {
            return Err(ApiError {
                code: Some("chat_template_missing"),
                ..ApiError::invalid(
                    format!(
                        "the model '{}' has no chat template (GGUF tokenizer.chat_template or \
                         tokenizer_config.json): use /v1/completions with a prompt instead",
                        api.config.model_id
                    ),
                    Some("messages"),
                )
            });
        }
        Some(Err(e)) => return Err(ApiError::invalid(e.clone(), Some("messages"))),
        Some(Ok(env)) => env,
    };
    let tools = Tools::from_request(m.get("tools"), m.get("tool_choice"), api.config.chat_template.as_deref())
        .map_err(|(msg, param)| ApiError::invalid(msg, Some(param)))?;
    if let Some(t) = &tools {
        let g = t
            .grammar(api.grammars("tool_choice")?, api.engine.tokenizer())
            .map_err(|e| ApiError::invalid(e.to_string(), Some("tools")))?;
        if g.is_some() && p.grammar.is_some() {
            return Err(ApiError::invalid(
                "response_format and a required tool call cannot both constrain one reply",
                Some("response_format"),
            ));
        }
        p.grammar = g.or(p.grammar.take());
    }
    let Some(Value::Array(messages)) = m.get("messages") else {
        return Err(ApiError::invalid("messages must be a list", Some("messages")));
    };
    if messages.is_empty() {
        return Err(ApiError::invalid("messages must not be empty", Some("messages")));
    }
    let tok = api.engine.tokenizer();
    let mut msgs = Vec::with_capacity(messages.len());
    for (i, msg) in messages.iter().enumerate() {
        let role = msg.get("role").and_then(Value::as_str);
        let content = match msg.get("content") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Null) | None => Some(String::new()),
            // Content parts: the text ones, joined.
            Some(Value::Array(parts)) => parts
                .iter()
                .map(|p| match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("text"), Some(Value::String(t))) => Some(t.as_str()),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()
                .map(|v| v.concat()),
            Some(_) => None,
        };
        match (role, content) {
            (Some(role), _) if !valid_role(role) => {
                return Err(ApiError::invalid(
                    format!("messages[{i}].role must be 1 to 64 letters, digits, '_' or '-'"),
                    Some("messages"),
                ));
            }
            (Some(role), Some(content)) => {
                let mut msg = json!({"role": role, "content": mark_text(tok, &content)});
                if let Some(Value::Array(calls)) = messages[i].get("tool_calls")
                    && !calls.is_empty()
                {
                    let calls = crate::tools::calls_for_template(calls)
                        .map_err(|e| ApiError::invalid(format!("messages[{i}].{e}"), Some("messages")))?;
                    msg["tool_calls"] = Value::Array(calls);
                }
                for key in ["tool_call_id", "name"] {
                    if let Some(Value::String(v)) = messages[i].get(key) {
                        msg[key] = json!(mark_text(tok, v));
                    }
                }
                msgs.push(msg)
            }
            _ => {
                return Err(ApiError::invalid(
                    format!("messages[{i}] needs a string role and text content (a string or text parts)"),
                    Some("messages"),
                ));
            }
        }
    }
    let rendered = crate::chat::render_with_tools(env, tok, &msgs, tools.as_ref().map(|t| &t.declared), true)
        .map_err(|e| ApiError::invalid(e, Some("messages")))?;
    let prompt = chat_prompt(tok, &rendered);
    let max_tokens = p.max_tokens.unwrap_or_else(|| room(&api, prompt.len()));
    p.tools = tools;
    start(api, prompt, max_tokens, p, Kind::Chat)
}

/// The mark [`mark_text`] puts into a client's text before the chat template renders it, and
/// [`chat_prompt`] takes out: no control token is parsed over one. (A noncharacter: it is dropped
/// from the messages, where it means nothing.)
pub const MARK: char = '\u{FDD0}';

/// Whether `role` is a role name a template may be given: 1 to 64 ASCII letters, digits, `_`
/// or `-` (so no markup of the template's language can come in through it).
fn valid_role(role: &str) -> bool {
    (1..=64).contains(&role.len())
        && role
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A client's message text made ready for the chat template: [`MARK`] after the first character
/// of every control token's text in it (`</s>`, `<|im_end|>`, ...), and around it (inside any
/// whitespace at either end, so a template that trims the text still does), so that
/// [`chat_prompt`] keeps it text: a control token is parsed only where the template itself wrote
/// it. `MARK`s already in `text` are dropped.
pub fn mark_text(tok: &crate::tokenizer::Tokenizer, text: &str) -> String {
    let text: std::borrow::Cow<'_, str> = if text.contains(MARK) {
        text.replace(MARK, "").into()
    } else {
        text.into()
    };
    let core = text.trim();
    if core.is_empty() {
        return text.into_owned();
    }
    let start = core.as_ptr() as usize - text.as_ptr() as usize;
    let end = start + core.len();
    let mut at: Vec<usize> = vec![start, end];
    for pat in tok.control_texts() {
        let first = pat.chars().next().map_or(0, char::len_utf8);
        if first == 0 || first == pat.len() {
            continue;
        }
        at.extend(core.match_indices(pat).map(|(i, _)| start + i + first));
    }
    at.sort_unstable();
    at.dedup();
    let mut out = String::with_capacity(text.len() + at.len() * MARK.len_utf8());
    let mut from = 0;
    for i in at {
        out.push_str(&text[from..i]);
        out.push(MARK);
        from = i;
    }
    out.push_str(&text[from..]);
    out
}

/// The tokens of a rendered chat: special tokens the template wrote are parsed as tokens, but
/// none over a [`MARK`] (the messages' text, [`mark_text`]); the marks are taken out. BOS is
/// added (when the vocabulary adds one) unless the template wrote it.
pub fn chat_prompt(tok: &crate::tokenizer::Tokenizer, rendered: &str) -> Vec<u32> {
    let mut text = String::with_capacity(rendered.len());
    let mut breaks = Vec::new();
    for (i, part) in rendered.split(MARK).enumerate() {
        if i > 0 {
            breaks.push(text.len());
        }
        text.push_str(part);
    }
    let vocab = tok.vocab();
    let bos_text = vocab
        .bos
        .and_then(|i| vocab.tokens.get(i as usize))
        .filter(|b| !b.is_empty());
    // The template's BOS: at the start, and no message's text over it.
    let has_bos =
        bos_text.is_some_and(|b| text.as_bytes().starts_with(b) && breaks.first().is_none_or(|&x| x >= b.len()));
    tok.encode_special_except(&text, !has_bos, &breaks)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Completion,
    Chat,
}

/// Submits the request and answers it, streaming or not.
fn start(api: Arc<Api>, prompt: Vec<u32>, max_tokens: usize, p: Params, kind: Kind) -> ApiResult<Started> {
    let prompt_tokens = prompt.len();
    let id = response_id(if kind == Kind::Chat { "chatcmpl" } else { "cmpl" })?;
    let rx = api.engine.submit(Request {
        prompt,
        sampling: p.sampling.clone(),
        max_tokens,
        logprobs: p.logprobs,
        grammar: p.grammar,
    })?;
    let text = Text::new(p.stop.clone());
    let run = Run {
        api,
        rx,
        text,
        kind,
        id,
        created: now(),
        prompt_tokens,
        completion_tokens: 0,
        logprobs: p.logprobs.is_some(),
        lp: Logprobs::default(),
        tools: p.tools,
        raw: Vec::new(),
        calls: Vec::new(),
    };
    Ok(Started {
        run,
        stream: p.stream,
        include_usage: p.include_usage,
    })
}

/// `{prefix}-` and 24 characters of `[A-Za-z0-9]` from the operating system's CSPRNG: unique per
/// response whatever the request's `seed`, and telling nothing about the server (no address, no
/// clock).
fn response_id(prefix: &str) -> ApiResult<String> {
    const ALPHABET: &[u8; 62] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut id = String::with_capacity(prefix.len() + 25);
    id.push_str(prefix);
    id.push('-');
    let mut left = 24;
    while left > 0 {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|e| server_error(format!("the system's random number generator failed: {e}")))?;
        // Bytes below 248 (4 x 62) map to the alphabet without bias; the others are dropped.
        for b in bytes.into_iter().filter(|&b| b < 248).take(left) {
            id.push(ALPHABET[usize::from(b % 62)] as char);
            left -= 1;
        }
    }
    Ok(id)
}

/// A submitted request, to be answered.
struct Started {
    run: Run,
    stream: bool,
    include_usage: bool,
}

impl Started {
    /// Streams the answer, or waits for all of it. Waiting, the handler's future owns the
    /// receiver: a client that disconnects drops it, which cancels the sequence.
    async fn respond(self) -> Response {
        if self.stream {
            stream(self.run, self.include_usage)
        } else {
            collect(self.run).await
        }
    }
}

/// Text from tokens, held back where a stop string may be starting.
struct Text {
    stop: Vec<String>,
    /// Bytes not yet valid UTF-8 (a character split over tokens).
    pending: Vec<u8>,
    /// Decoded text (all of it).
    all: String,
    /// Bytes of `all` handed out.
    sent: usize,
    /// A stop string was found: `all` ends before it.
    stopped: bool,
}

impl Text {
    fn new(stop: Vec<String>) -> Text {
        Text {
            stop,
            pending: Vec::new(),
            all: String::new(),
            sent: 0,
            stopped: false,
        }
    }

    /// Adds a token's bytes; returns the text that can be handed out now.
    fn push(&mut self, piece: &[u8]) -> String {
        self.pending.extend_from_slice(piece);
        // Decoded as `String::from_utf8_lossy` of all the bytes would be: invalid sequences
        // replaced as they are found, a character split at the end kept for the next token.
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    self.all.push_str(s);
                    self.pending.clear();
                    break;
                }
                Err(e) => {
                    let end = match e.error_len() {
                        Some(n) => e.valid_up_to() + n,
                        None => e.valid_up_to(),
                    };
                    let chunk: Vec<u8> = self.pending.drain(..end).collect();
                    self.all.push_str(&String::from_utf8_lossy(&chunk));
                    if e.error_len().is_none() {
                        break;
                    }
                }
            }
        }
        // The earliest stop string in the text not yet handed out (or straddling it).
        let max_stop = self.stop.iter().map(String::len).max().unwrap_or(0);
        let mut from = self.sent.saturating_sub(max_stop);
        while !self.all.is_char_boundary(from) {
            from -= 1;
        }
        if let Some(at) = self.stop.iter().filter_map(|s| self.all[from..].find(s.as_str())).min() {
            self.all.truncate(from + at);
            self.stopped = true;
            return self.take(self.all.len());
        }
        // Hold back the longest tail that begins a stop string.
        let mut keep = self.all.len();
        for s in &self.stop {
            for k in (1..s.len()).rev() {
                if k <= self.all.len() && s.is_char_boundary(k) && self.all.ends_with(&s[..k]) {
                    keep = keep.min(self.all.len() - k);
                    break;
                }
            }
        }
        self.take(keep.max(self.sent))
    }

    fn take(&mut self, upto: usize) -> String {
        let out = self.all[self.sent..upto].to_string();
        self.sent = upto;
        out
    }

    /// Everything left (at the end).
    fn finish(&mut self) -> String {
        if !self.stopped && !self.pending.is_empty() {
            let rest = std::mem::take(&mut self.pending);
            self.all.push_str(&String::from_utf8_lossy(&rest));
        }
        self.take(self.all.len())
    }
}

/// Log-probabilities gathered for a non-streamed answer.
#[derive(Default)]
struct Logprobs {
    tokens: Vec<String>,
    token_logprobs: Vec<f32>,
    top: Vec<Vec<(String, f32, Vec<u8>)>>,
    offsets: Vec<usize>,
    bytes: Vec<Vec<u8>>,
}

/// One request in flight.
struct Run {
    api: Arc<Api>,
    rx: UnboundedReceiver<Event>,
    text: Text,
    kind: Kind,
    id: String,
    created: u64,
    prompt_tokens: usize,
    completion_tokens: usize,
    logprobs: bool,
    lp: Logprobs,
    /// The request's tools: the reply is held back and parsed for calls at the end.
    tools: Option<Tools>,
    /// With tools, the reply's bytes with the control tokens' texts kept (`[TOOL_CALLS]` …),
    /// decoded once at the end: a character split across tokens is whole only there.
    raw: Vec<u8>,
    /// With tools, the calls found in the reply at the end: (id, name, arguments).
    calls: Vec<(String, String, String)>,
}

/// What one engine event gives a response.
enum Step {
    /// New text (maybe empty) and the token's log-probabilities.
    Text(String, Option<Value>),
    /// The end, with the finish reason and the remaining text.
    End(&'static str, String),
    /// A failure.
    Failed(String),
}

impl Run {
    async fn next(&mut self) -> Step {
        match self.rx.recv().await {
            Some(Event::Token(t)) => {
                self.completion_tokens += 1;
                let tok = self.api.engine.tokenizer();
                let piece = if tok.is_eog(t.id) { Vec::new() } else { tok.piece(t.id) };
                let offset = self.text.all.len();
                let text = if self.text.stopped {
                    String::new()
                } else {
                    self.text.push(&piece)
                };
                let lp = (self.logprobs && !self.text.stopped).then(|| self.token_logprobs(&t, &piece, offset));
                let tok = self.api.engine.tokenizer();
                if self.tools.is_some() && !tok.is_eog(t.id) {
                    match piece.is_empty() {
                        // A control token (`[TOOL_CALLS]`): its text, for the parser.
                        true => self.raw.extend_from_slice(&tok.vocab().tokens[t.id as usize]),
                        false => self.raw.extend_from_slice(&piece),
                    }
                }
                if self.text.stopped {
                    // A stop string: the sequence ends here (dropping the receiver cancels it).
                    self.rx.close();
                    let rest = self.text.finish();
                    return self.end("stop", text + &rest);
                }
                // With tools, nothing is handed out before the end tells calls from prose.
                if self.tools.is_some() {
                    return Step::Text(String::new(), lp);
                }
                Step::Text(text, lp)
            }
            Some(Event::Done(d)) => {
                let reason = match d.finish {
                    Finish::Eog => "stop",
                    Finish::Length => "length",
                };
                let rest = self.text.finish();
                self.end(reason, rest)
            }
            Some(Event::Failed(e)) => Step::Failed(e.to_string()),
            None => {
                if self.text.stopped {
                    let rest = self.text.finish();
                    self.end("stop", rest)
                } else {
                    Step::Failed("the generation engine stopped".into())
                }
            }
        }
    }

    /// The end of the reply, `rest` the text not yet handed out. With tools, the whole reply is
    /// parsed: its calls go to [`Run::calls`] (the reason becomes `tool_calls`), and the text is
    /// what is left around them.
    fn end(&mut self, reason: &'static str, rest: String) -> Step {
        let Some(tools) = &self.tools else {
            return Step::End(reason, rest);
        };
        let (text, calls) = tools.extract(&String::from_utf8_lossy(&self.raw));
        if calls.is_empty() {
            return Step::End(reason, self.text.all.clone());
        }
        for (name, args) in calls {
            match response_id("call") {
                Ok(id) => self.calls.push((id, name, args)),
                Err(e) => return Step::Failed(e.message),
            }
        }
        Step::End("tool_calls", text)
    }

    /// The calls as the `tool_calls` of a message (`stream`: as deltas, with their index).
    fn tool_calls(&self, stream: bool) -> Value {
        Value::Array(
            self.calls
                .iter()
                .enumerate()
                .map(|(i, (id, name, args))| {
                    let mut c = json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}});
                    if stream {
                        c["index"] = json!(i);
                    }
                    c
                })
                .collect(),
        )
    }

    /// A token's log-probabilities in the route's shape (and, for a non-streamed answer, kept).
    fn token_logprobs(&mut self, t: &TokenEvent, piece: &[u8], offset: usize) -> Value {
        let tok = self.api.engine.tokenizer();
        let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let token = s(piece);
        let lp = t.logprob.unwrap_or(f32::NAN);
        let top: Vec<(String, f32, Vec<u8>)> = t
            .top
            .iter()
            .map(|&(id, p)| {
                let b = tok.piece(id);
                (s(&b), p, b)
            })
            .collect();
        self.lp.tokens.push(token.clone());
        self.lp.token_logprobs.push(lp);
        self.lp.top.push(top.clone());
        self.lp.offsets.push(offset);
        self.lp.bytes.push(piece.to_vec());
        match self.kind {
            Kind::Completion => {
                let mut map = serde_json::Map::new();
                for (t, p, _) in &top {
                    map.entry(t.clone()).or_insert(json!(p));
                }
                json!({
                    "tokens": [token],
                    "token_logprobs": [lp],
                    "top_logprobs": [map],
                    "text_offset": [offset],
                })
            }
            Kind::Chat => json!({"content": [chat_logprob(&token, lp, piece, &top)]}),
        }
    }

    fn usage(&self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        })
    }

    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Completion, _) => "text_completion",
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
        }
    }

    /// A streamed chunk with `text` and `finish`.
    fn chunk(&self, text: Option<String>, lp: Option<Value>, finish: Option<&str>, role: bool) -> Value {
        let choice = match self.kind {
            Kind::Completion => json!({
                "index": 0,
                "text": text.unwrap_or_default(),
                "logprobs": lp,
                "finish_reason": finish,
            }),
            Kind::Chat => {
                let mut delta = serde_json::Map::new();
                if role {
                    delta.insert("role".into(), json!("assistant"));
                }
                if let Some(t) = text {
                    delta.insert("content".into(), json!(t));
                }
                json!({"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish})
            }
        };
        json!({
            "id": self.id,
            "object": self.object(true),
            "created": self.created,
            "model": self.api.config.model_id,
            "system_fingerprint": "tensorlane",
            "choices": [choice],
        })
    }
}

fn chat_logprob(token: &str, lp: f32, bytes: &[u8], top: &[(String, f32, Vec<u8>)]) -> Value {
    json!({
        "token": token,
        "logprob": lp,
        "bytes": bytes,
        "top_logprobs": top.iter().map(|(t, p, b)| json!({"token": t, "logprob": p, "bytes": b})).collect::<Vec<_>>(),
    })
}

fn server_error(message: String) -> ApiError {
    ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message,
        kind: "server_error",
        param: None,
        code: None,
    }
}

/// The whole answer as one JSON object.
async fn collect(mut run: Run) -> Response {
    let mut text = String::new();
    let reason = loop {
        match run.next().await {
            Step::Text(t, _) => text.push_str(&t),
            Step::End(reason, t) => {
                text.push_str(&t);
                break reason;
            }
            Step::Failed(e) => return server_error(e).into_response(),
        }
    };
    let lp = &run.lp;
    let choice = match run.kind {
        Kind::Completion => {
            let logprobs = run.logprobs.then(|| {
                json!({
                    "tokens": lp.tokens,
                    "token_logprobs": lp.token_logprobs,
                    "top_logprobs": lp.top.iter().map(|top| {
                        let mut m = serde_json::Map::new();
                        for (t, p, _) in top {
                            m.entry(t.clone()).or_insert(json!(p));
                        }
                        Value::Object(m)
                    }).collect::<Vec<_>>(),
                    "text_offset": lp.offsets,
                })
            });
            json!({"index": 0, "text": text, "logprobs": logprobs, "finish_reason": reason})
        }
        Kind::Chat => {
            let logprobs = run.logprobs.then(|| {
                json!({"content": (0..lp.tokens.len())
                    .map(|i| chat_logprob(&lp.tokens[i], lp.token_logprobs[i], &lp.bytes[i], &lp.top[i]))
                    .collect::<Vec<_>>()})
            });
            let mut message = json!({"role": "assistant", "content": text});
            if !run.calls.is_empty() {
                message["tool_calls"] = run.tool_calls(false);
                if text.is_empty() {
                    message["content"] = Value::Null;
                }
            }
            json!({
                "index": 0,
                "message": message,
                "logprobs": logprobs,
                "finish_reason": reason,
            })
        }
    };
    axum::Json(json!({
        "id": run.id,
        "object": run.object(false),
        "created": run.created,
        "model": run.api.config.model_id,
        "system_fingerprint": "tensorlane",
        "choices": [choice],
        "usage": run.usage(),
    }))
    .into_response()
}

/// Server-sent events: a chunk per token (chat: the role first), the last chunk with the finish
/// reason, the usage chunk when asked for, then `data: [DONE]`. The events are made by a task
/// that ends (dropping the engine's receiver, which cancels the sequence) as soon as the client
/// is gone.
fn stream(mut run: Run, include_usage: bool) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<SseEvent>(16);
    tokio::spawn(async move {
        let send = |v: Value| SseEvent::default().data(v.to_string());
        if run.kind == Kind::Chat
            && tx
                .send(send(run.chunk(Some(String::new()), None, None, true)))
                .await
                .is_err()
        {
            return;
        }
        loop {
            let step = tokio::select! {
                s = run.next() => s,
                () = tx.closed() => return,
            };
            let ev = match step {
                Step::Text(t, lp) => {
                    if t.is_empty() && lp.is_none() {
                        continue;
                    }
                    send(run.chunk(Some(t), lp, None, false))
                }
                Step::End(reason, t) => {
                    if !t.is_empty() && tx.send(send(run.chunk(Some(t), None, None, false))).await.is_err() {
                        return;
                    }
                    if !run.calls.is_empty() {
                        let mut c = run.chunk(None, None, None, false);
                        c["choices"][0]["delta"]["tool_calls"] = run.tool_calls(true);
                        if tx.send(send(c)).await.is_err() {
                            return;
                        }
                    }
                    let mut last = run.chunk(None, None, Some(reason), false);
                    if run.kind == Kind::Completion {
                        last["choices"][0]["text"] = json!("");
                    }
                    if tx.send(send(last)).await.is_err() {
                        return;
                    }
                    if include_usage {
                        let mut u = run.chunk(None, None, None, false);
                        u["choices"] = json!([]);
                        u["usage"] = run.usage();
                        if tx.send(send(u)).await.is_err() {
                            return;
                        }
                    }
                    let _ = tx.send(SseEvent::default().data("[DONE]")).await;
                    return;
                }
                Step::Failed(e) => {
                    let err = json!({"error": {"message": e, "type": "server_error", "param": null, "code": null}});
                    let _ = tx.send(send(err)).await;
                    return;
                }
            };
            if tx.send(ev).await.is_err() {
                return;
            }
        }
    });
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::Text;

    /// Pushes `pieces`, returning what was handed out at each step and at the end.
    fn run(stop: &[&str], pieces: &[&[u8]]) -> (Vec<String>, String, bool) {
        let mut t = Text::new(stop.iter().map(|s| s.to_string()).collect());
        let mut out = Vec::new();
        for p in pieces {
            out.push(t.push(p));
            if t.stopped {
                break;
            }
        }
        let rest = t.finish();
        (out, rest, t.stopped)
    }

    #[test]
    fn text_is_lossy_utf8_of_all_bytes() {
        // "é" split over two tokens, an invalid byte, then a character split again.
        let pieces: &[&[u8]] = &[b"a\xc3", b"\xa9b", b"\x80", b"\xe2\x82", b"\xac"];
        let (out, rest, stopped) = run(&[], pieces);
        assert_eq!(out, ["a", "éb", "\u{fffd}", "", "€"]);
        assert_eq!((rest.as_str(), stopped), ("", false));
        let all: Vec<u8> = pieces.concat();
        assert_eq!(out.concat(), String::from_utf8_lossy(&all));
        // a split character left at the end is replaced
        let (out, rest, _) = run(&[], &[b"x\xe2\x82"]);
        assert_eq!((out.concat(), rest.as_str()), ("x".to_string(), "\u{fffd}"));
    }

    #[test]
    fn stop_strings_hold_back_their_prefix_and_cut_the_text() {
        // "EN" then "D" completes the stop string "END": nothing of it is handed out.
        let (out, rest, stopped) = run(&["END"], &[b"abc E", b"N", b"D more"]);
        assert_eq!(out, ["abc ", "", ""]);
        assert_eq!((rest.as_str(), stopped), ("", true));
        // a held-back prefix that does not complete is handed out later
        let (out, rest, stopped) = run(&["END"], &[b"abc E", b"Nx"]);
        assert_eq!(out, ["abc ", "ENx"]);
        assert_eq!((rest.as_str(), stopped), ("", false));
        // the earliest of several stop strings wins, inside one piece
        let (out, _, stopped) = run(&["zz", "b"], &[b"aabzz"]);
        assert_eq!((out.concat().as_str(), stopped), ("aa", true));
        // a stop string over a multi-byte character
        let (out, _, stopped) = run(&["é!"], &[b"x\xc3", b"\xa9", b"!y"]);
        assert_eq!((out.concat().as_str(), stopped), ("x", true));
    }
}
