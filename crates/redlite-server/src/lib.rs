//! `redlite serve`: an OpenAI- and Anthropic-compatible HTTP server for coding
//! agents, on tokio + axum.
//!
//! ```text
//! client ──HTTP──▶ axum handler: validate, render the chat template, tokenize
//!                      │ Request (token ids)            ▲ Events (token ids)
//!                      ▼                                │
//!                  compute thread: Scheduler (slots, batched decode, snapshots)
//! handler: tokens → text → stop strings → tool-call parser → JSON / SSE chunks
//! ```
//!
//! Model compute runs on its own thread ([`engine`]), never on the async
//! runtime. A request resumes from the longest state snapshot whose tokens
//! are a prefix of its prompt (see `redlite_engine::state_cache`), so an
//! agent's next turn only prefills its new tokens.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use redlite_chat::template::ChatTemplate;
use redlite_engine::{SamplingParams, Scheduler, SchedulerConfig};
use redlite_model::Model;
use redlite_tokenizer::Tokenizer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::trace::TraceLayer;

pub mod anthropic;
pub mod constrain;
pub mod engine;
pub mod error;
pub mod fields;
pub mod metrics;
pub mod misc;
pub mod net;
pub mod openai;
pub mod pi;
pub mod pipeline;
pub mod run;
pub mod security;

pub use engine::EngineHandle;
pub use error::{ApiError, Flavor};
pub use net::{Server, Shutdown};

/// Server settings.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Context window per sequence, in tokens (prompt + reply).
    pub context: usize,
    /// Sequences decoded together.
    pub parallel: usize,
    /// Bearer key clients must send (none: no check).
    pub api_key: Option<String>,
    /// Byte budget of the state-snapshot store (0 = no reuse).
    pub state_cache_bytes: usize,
    /// Snapshot long prompts every this many tokens.
    pub checkpoint_interval: usize,
    /// Message boundaries snapshotted per prompt, at most (0 = none).
    pub boundary_snapshots: usize,
    /// Tokens between two boundary snapshots of a prompt, at least.
    pub boundary_min_tokens: usize,
    /// The model id reported and echoed back.
    pub alias: String,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Prompt tokens fed per forward pass.
    pub prefill_chunk: usize,
    /// Prompt-lookup speculative decoding for every request.
    pub lookup: Option<redlite_engine::LookupParams>,
    /// Origins answered with CORS headers (`*`: any). Empty: no CORS
    /// headers at all, and requests carrying another site's `Origin` are
    /// refused.
    pub cors_origins: Vec<String>,
    /// Host names accepted besides `localhost` and loopback literals when
    /// listening on loopback (a reverse proxy's name).
    pub allowed_hosts: Vec<String>,
    /// Time to send a request's head (also the idle keep-alive timeout).
    pub header_timeout: Duration,
    /// Time to send a request's whole body.
    pub body_timeout: Duration,
    /// Open connections served at once; more are closed on accept.
    pub max_connections: usize,
    /// Requests waiting for a slot beyond which new ones get 503.
    pub max_queue: usize,
    /// Bytes all request bodies being read or parsed may hold together
    /// (each also costs up to 1.5 times its size once parsed).
    pub body_memory_bytes: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            context: 65536,
            parallel: 1,
            api_key: None,
            state_cache_bytes: 4 << 30,
            checkpoint_interval: 4096,
            boundary_snapshots: 4,
            boundary_min_tokens: 1024,
            alias: "qwen3-coder-next".into(),
            max_body_bytes: 64 << 20,
            prefill_chunk: 512,
            lookup: None,
            cors_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(60),
            max_connections: 512,
            max_queue: 64,
            body_memory_bytes: 1 << 30,
        }
    }
}

/// What every handler shares.
pub struct AppState {
    pub cfg: ServerConfig,
    pub tokenizer: Arc<Tokenizer>,
    pub template: ChatTemplate,
    pub engine: EngineHandle,
    pub metrics: metrics::Metrics,
    /// Sampling used when a request gives none (the GGUF's
    /// `general.sampling.*`, else the model card's).
    pub default_sampling: SamplingParams,
    pub n_ctx_train: usize,
    pub n_vocab: usize,
    pub n_params: u64,
    pub model_bytes: u64,
    pub created: u64,
    pub backend: String,
    /// The model (shared with the compute thread) for what `/metrics`
    /// reads directly, such as the expert cache's counters.
    pub model: Arc<Model>,
    /// The address the server listens on, once bound (the Host check
    /// compares against it; unknown in in-process tests).
    pub bound: OnceLock<SocketAddr>,
    /// The server's shutdown switch, once it serves.
    pub shutdown: OnceLock<Shutdown>,
    /// Room for request bodies in flight, in KiB (`body_memory_bytes`).
    pub body_budget: Arc<tokio::sync::Semaphore>,
    /// The vocabulary indexed for constrained output (built once at load;
    /// none if the vocabulary could not be indexed).
    pub grammar: Option<Arc<redlite_grammar::GrammarEnv>>,
}

pub type App = Arc<AppState>;

impl AppState {
    /// Load everything around `model` and start the compute thread.
    pub fn new(model: Model, cfg: ServerConfig) -> Result<AppState, String> {
        let tokenizer = Tokenizer::from_gguf(model.gguf()).map_err(|e| e.to_string())?;
        let template = ChatTemplate::from_gguf(model.gguf()).map_err(|e| e.to_string())?;
        let default_sampling = default_sampling(model.gguf());
        let n_ctx_train = model.config().context_length;
        let n_vocab = model.config().vocab_size;
        let model_bytes = model.gguf().file_bytes();
        let n_params = model
            .gguf()
            .tensors
            .iter()
            .map(|t| t.n_elements())
            .sum::<u64>();
        let backend = model.backend().name();
        let eog = tokenizer.eog_ids().to_vec();
        let tokenizer = Arc::new(tokenizer);
        let grammar = match redlite_grammar::GrammarEnv::new(tokenizer.clone(), &eog, n_vocab) {
            Ok(g) => Some(Arc::new(g)),
            Err(e) => {
                tracing::warn!("constrained output is off: {e}");
                None
            }
        };
        // At least one largest body always fits.
        let cfg_body_kib = cfg.body_memory_bytes.max(cfg.max_body_bytes).div_ceil(1024);
        let model = Arc::new(model);
        let sched = Scheduler::new(
            model.clone(),
            eog,
            SchedulerConfig {
                parallel: cfg.parallel.max(1),
                prefill_chunk: cfg.prefill_chunk.max(1),
                checkpoint_interval: cfg.checkpoint_interval,
                state_cache_bytes: cfg.state_cache_bytes,
                boundary_snapshots: cfg.boundary_snapshots,
                boundary_min_tokens: cfg.boundary_min_tokens,
            },
        );
        let engine = EngineHandle::spawn(sched, cfg.parallel.max(1))
            .map_err(|e| format!("starting the engine thread: {e}"))?;
        Ok(AppState {
            cfg,
            tokenizer,
            grammar,
            template,
            engine,
            metrics: metrics::Metrics::default(),
            default_sampling,
            n_ctx_train,
            n_vocab,
            n_params,
            model_bytes,
            model,
            created: now(),
            backend,
            bound: OnceLock::new(),
            shutdown: OnceLock::new(),
            body_budget: Arc::new(tokio::sync::Semaphore::new(
                (cfg_body_kib).clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
            )),
        })
    }

    /// Resolves once the server is shutting down (never without one).
    pub async fn stopping(&self) {
        match self.shutdown.get() {
            Some(s) => s.wait().await,
            None => std::future::pending().await,
        }
    }

    /// Check a prompt against the context and turn a requested reply length
    /// into the effective one.
    pub fn budget(
        &self,
        prompt_len: usize,
        max_tokens: Option<usize>,
        param: &str,
    ) -> Result<usize, ApiError> {
        let ctx = self.cfg.context;
        if prompt_len == 0 {
            return Err(ApiError::invalid(
                "the prompt is empty: at least one token is needed",
            ));
        }
        if prompt_len >= ctx {
            return Err(ApiError::context(prompt_len + 1, ctx));
        }
        if let Some(m) = max_tokens {
            if m == 0 {
                return Err(ApiError::param(
                    param,
                    format!("'{param}' must be at least 1"),
                ));
            }
            if m > ctx {
                return Err(ApiError::param(
                    param,
                    format!(
                        "'{param}' is {m}, beyond the context size of {ctx} tokens \
                         (the server's --context)"
                    ),
                ));
            }
        }
        let room = ctx - prompt_len;
        Ok(max_tokens.map_or(room, |m| m.min(room)))
    }
}

/// `general.sampling.*` from the file, else Qwen3-Coder's recommended
/// settings (temperature 0.7, top-p 0.8, top-k 20).
fn default_sampling(g: &redlite_gguf::GgufFile) -> SamplingParams {
    let f = |k: &str| g.get_f64(k).ok().flatten();
    let u = |k: &str| g.get_u64(k).ok().flatten();
    SamplingParams {
        temperature: f("general.sampling.temp").unwrap_or(0.7) as f32,
        top_k: u("general.sampling.top_k").unwrap_or(20) as usize,
        top_p: f("general.sampling.top_p").unwrap_or(0.8) as f32,
        min_p: f("general.sampling.min_p").unwrap_or(0.0) as f32,
        seed: None,
    }
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A random id with a prefix (`chatcmpl-…`, `msg_…`).
pub fn new_id(prefix: &str) -> String {
    use rand::Rng;
    let n: u128 = rand::thread_rng().gen();
    format!("{prefix}{:024x}", n & ((1u128 << 96) - 1))
}

/// The body as bytes, with axum's rejections turned into API errors.
pub fn body_bytes(body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Bytes, ApiError> {
    body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(limit)
        } else {
            ApiError::invalid(format!("reading the request body: {}", r.body_text()))
        }
    })
}

/// Every route, with its layers (outermost last): tracing, the Host and
/// Origin checks, CORS (only with `--cors-origin`), body limits, metrics;
/// the API routes add the key check and the JSON content-type check.
pub fn router(app: App) -> Router {
    let limit = app.cfg.max_body_bytes;
    let api = Router::new()
        .route("/v1/chat/completions", post(openai::chat))
        .route("/chat/completions", post(openai::chat))
        .route("/v1/completions", post(openai::completions))
        .route("/completions", post(openai::completions))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/tokenize", post(misc::tokenize))
        .route("/detokenize", post(misc::detokenize))
        .route("/metrics", get(metrics::metrics))
        .layer(middleware::from_fn_with_state(app.clone(), net::read_body))
        .layer(middleware::from_fn(security::require_json))
        .layer(middleware::from_fn_with_state(app.clone(), security::auth));
    let mut r = Router::new()
        .route("/health", get(misc::health))
        .route("/v1/health", get(misc::health))
        .route("/v1/models", get(misc::models))
        .route("/models", get(misc::models))
        .merge(api)
        .fallback(misc::not_found)
        .method_not_allowed_fallback(misc::method_not_allowed)
        .layer(middleware::from_fn_with_state(app.clone(), metrics::count))
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(app.clone(), json_413));
    if let Some(cors) = cors_layer(&app.cfg.cors_origins) {
        r = r.layer(cors);
    }
    r.layer(middleware::from_fn_with_state(
        app.clone(),
        security::host_check,
    ))
    .layer(TraceLayer::new_for_http())
    .with_state(app)
}

/// CORS headers for the `--cors-origin` origins (none when empty).
fn cors_layer(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o.trim_end_matches('/')).ok()),
        )
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
            .allow_headers(tower_http::cors::AllowHeaders::mirror_request())
            .max_age(std::time::Duration::from_secs(600)),
    )
}

/// The body-limit layer answers in plain text; clients expect the JSON
/// error shape (OpenAI's, or Anthropic's on its routes).
async fn json_413(
    axum::extract::State(app): axum::extract::State<App>,
    req: axum::extract::Request,
    next: middleware::Next,
) -> Response {
    let flavor = security::flavor_of(req.uri().path());
    let r = next.run(req).await;
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE
        && !r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"))
    {
        return ApiError::too_large(app.cfg.max_body_bytes)
            .with_flavor(flavor)
            .into_response();
    }
    r
}

/// Bind `addr` and serve `app` until Ctrl-C (then drain for up to 5 s).
/// `on_bound` gets the bound address (useful with port 0).
pub async fn serve(
    app: App,
    addr: SocketAddr,
    on_bound: impl FnOnce(SocketAddr),
) -> std::io::Result<()> {
    let server = Server::bind(addr, app.cfg.clone())?;
    server.set_app(app);
    on_bound(server.addr());
    let stop = server.shutdown().clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            stop.begin();
        }
    });
    server.run(Duration::from_secs(5)).await
}

/// The tiny fixture model behind an [`AppState`], for unit tests.
#[cfg(test)]
pub(crate) fn test_app() -> App {
    let model = Model::load(&redlite_testkit::fixture("tiny-s-bf16.gguf")).expect("fixture model");
    Arc::new(AppState::new(model, ServerConfig::default()).expect("app"))
}

/// A generation that ended its turn, for unit tests of the formats.
#[cfg(test)]
pub(crate) fn test_end(generated: usize) -> run::End {
    run::End {
        reason: run::EndReason::EndOfTurn,
        prompt_tokens: 10,
        cached_tokens: 4,
        generated_tokens: generated,
        prefill_seconds: 0.1,
        decode_seconds: 0.2,
    }
}

/// Token ids of `text` as the model would generate them.
#[cfg(test)]
pub(crate) fn test_tokens(app: &App, text: &str) -> Vec<u32> {
    app.tokenizer.tokenize(text, false, true)
}
