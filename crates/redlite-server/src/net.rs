//! The listening socket and the connections on it: what keeps a slow,
//! stuck or hostile client from taking the server's file descriptors,
//! memory or time, and the server's lifecycle.
//!
//! - **Connection cap** (`max_connections`): a connection accepted beyond
//!   it is closed at once; connections being served are unaffected.
//! - **Header timeout** (`header_timeout`, hyper's header-read timer): a
//!   client must send a request's whole head within it, counted from the
//!   connection opening or from the end of the previous response, so it is
//!   also the idle keep-alive timeout.
//! - **Body timeout** (`body_timeout`, [`read_body`]): an API request's
//!   body must arrive whole within it (408 and the connection closed
//!   otherwise), read into one buffer of its declared length (no copy
//!   growing by doubling), up to `max_body_bytes` (413). Bodies in flight
//!   share `body_memory_bytes`: a body waits for room (half the body
//!   timeout, at most 5 s; then 503), and holds it until the handler has
//!   parsed it.
//! - **Queue** (`max_queue`): requests waiting for a slot beyond it get 503
//!   with `Retry-After` (see [`crate::engine::EngineHandle::submit`]).
//!
//! Lifecycle: [`Server::bind`] takes the port first (a taken port fails
//! before any model is read); while the model loads, `/health` answers 503
//! `{"status":"loading","progress":…}` and every other route 503. Once
//! [`Server::set_app`] is called the full router answers. [`Shutdown`]
//! stops accepting, tells each running generation to end (a final event on
//! streams, 503 otherwise; see [`crate::run`]), lets hyper close idle
//! connections, and waits a bounded time for the rest.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use tokio::sync::{watch, Semaphore};

use crate::error::ApiError;
use crate::security::{check_host_and_origin, flavor_of};
use crate::{App, ServerConfig};

/// The switch that stops the server: [`Shutdown::begin`] is seen by the
/// accept loop, by every connection and by every running generation.
#[derive(Clone, Debug)]
pub struct Shutdown(Arc<watch::Sender<bool>>);

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown(Arc::new(watch::channel(false).0))
    }
}

impl Shutdown {
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// Start shutting down; returns false when it had already begun.
    pub fn begin(&self) -> bool {
        !self.0.send_replace(true)
    }

    pub fn started(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once shutdown has begun.
    pub async fn wait(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|v| *v).await;
    }
}

/// A bound server, serving as soon as [`Server::run`] is polled, with or
/// without its model.
pub struct Server {
    /// Taken by [`Server::run`], which closes it when shutdown begins.
    listener: std::sync::Mutex<Option<std::net::TcpListener>>,
    addr: SocketAddr,
    cfg: ServerConfig,
    shutdown: Shutdown,
    router: OnceLock<Router>,
    /// Load progress as f64 bits (0 to 1).
    progress: AtomicU64,
}

impl Server {
    /// Bind `addr` now (before any model is loaded).
    pub fn bind(addr: SocketAddr, cfg: ServerConfig) -> std::io::Result<Arc<Server>> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        Ok(Arc::new(Server {
            listener: std::sync::Mutex::new(Some(listener)),
            addr,
            cfg,
            shutdown: Shutdown::new(),
            router: OnceLock::new(),
            progress: AtomicU64::new(0f64.to_bits()),
        }))
    }

    /// The bound address (the port chosen when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    /// Loading progress for `/health` (a fraction, clamped to 0..1).
    pub fn set_progress(&self, fraction: f64) {
        let f = if fraction.is_finite() {
            fraction.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self.progress.store(f.to_bits(), Ordering::Relaxed);
    }

    pub fn loaded(&self) -> bool {
        self.router.get().is_some()
    }

    /// The model is loaded: serve the API. The app takes this server's
    /// address and shutdown switch.
    pub fn set_app(&self, app: App) {
        let _ = app.bound.set(self.addr);
        let _ = app.shutdown.set(self.shutdown.clone());
        let _ = self.router.set(crate::router(app));
    }

    /// What answers while the model loads.
    fn loading(&self, req: &Request) -> Response {
        let path = req.uri().path();
        if let Some(r) = check_host_and_origin(
            req.headers(),
            path,
            Some(self.addr),
            &self.cfg.allowed_hosts,
            &self.cfg.cors_origins,
        ) {
            return r;
        }
        let progress = f64::from_bits(self.progress.load(Ordering::Relaxed));
        if path == "/health" || path == "/v1/health" {
            let mut r = (
                StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(
                    json!({"status": "loading", "progress": (progress * 1000.0).round() / 1000.0}),
                ),
            )
                .into_response();
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return r;
        }
        ApiError::busy(format!(
            "the model is loading ({:.0} %); try again shortly",
            progress * 100.0
        ))
        .with_flavor(flavor_of(path))
        .into_response()
    }

    async fn handle(self: Arc<Self>, req: Request) -> Response {
        match self.router.get() {
            Some(r) => {
                use tower::ServiceExt;
                match r.clone().oneshot(req).await {
                    Ok(r) => r,
                    Err(e) => match e {},
                }
            }
            None => self.loading(&req),
        }
    }

    /// Accept and serve connections until shutdown; then close the
    /// listening socket (new connections are refused) and wait up to
    /// `drain` for open connections to finish. Runs once.
    pub async fn run(self: Arc<Self>, drain: Duration) -> std::io::Result<()> {
        let std_listener = self
            .listener
            .lock()
            .ok()
            .and_then(|mut l| l.take())
            .ok_or_else(|| std::io::Error::other("the server is already running"))?;
        let listener = tokio::net::TcpListener::from_std(std_listener)?;
        let max = self.cfg.max_connections.clamp(1, Semaphore::MAX_PERMITS);
        let slots = Arc::new(Semaphore::new(max));
        let mut refused: u64 = 0;
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = self.shutdown.wait() => break,
            };
            let stream = match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of file descriptors and the like: back off
                    // instead of spinning.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(permit) = slots.clone().try_acquire_owned() else {
                refused += 1;
                if refused.is_power_of_two() {
                    tracing::warn!(
                        "{refused} connection(s) refused: {max} already open (--max-connections)"
                    );
                }
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            let server = self.clone();
            tokio::spawn(async move {
                server.connection(stream).await;
                drop(permit);
            });
        }
        drop(listener);
        // Wait for the connections to finish (bounded).
        let all = u32::try_from(max).unwrap_or(u32::MAX);
        let _ = tokio::time::timeout(drain, slots.acquire_many(all)).await;
        Ok(())
    }

    async fn connection(self: Arc<Self>, stream: tokio::net::TcpStream) {
        let server = self.clone();
        let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let server = server.clone();
            async move { Ok::<_, Infallible>(server.handle(req.map(Body::new)).await) }
        });
        let mut b = hyper::server::conn::http1::Builder::new();
        b.timer(TokioTimer::new())
            .header_read_timeout(self.cfg.header_timeout)
            .keep_alive(true);
        let conn = b.serve_connection(TokioIo::new(stream), svc);
        let mut conn = std::pin::pin!(conn);
        let stop = self.shutdown.wait();
        let mut stop = std::pin::pin!(stop);
        let mut stopping = false;
        loop {
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!("connection closed: {e}");
                    }
                    return;
                }
                _ = stop.as_mut(), if !stopping => {
                    stopping = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// Middleware on the API routes: read the whole body within the body
/// timeout and the size limit, into one buffer of its declared length.
pub async fn read_body(State(app): State<App>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let flavor = flavor_of(parts.uri.path());
    let limit = app.cfg.max_body_bytes;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return close(
            ApiError::too_large(limit)
                .with_flavor(flavor)
                .into_response(),
        );
    }
    // Room for the body in the budget shared by every request's body.
    let want = declared.map_or(limit, |n| n as usize);
    let kib = u32::try_from(want.div_ceil(1024).max(1)).unwrap_or(u32::MAX);
    let wait = (app.cfg.body_timeout / 2).min(Duration::from_secs(5));
    let permit =
        match tokio::time::timeout(wait, app.body_budget.clone().acquire_many_owned(kib)).await {
            Ok(Ok(p)) => p,
            _ => {
                return close(
                    ApiError::busy(format!(
                        "too many large request bodies at once (the server's budget for bodies in \
                     flight is {} bytes); retry shortly",
                        app.cfg.body_memory_bytes
                    ))
                    .with_flavor(flavor)
                    .into_response(),
                )
            }
        };
    let read = collect(body, declared.unwrap_or(0) as usize, limit, permit);
    let bytes = match tokio::time::timeout(app.cfg.body_timeout, read).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => return close(e.with_flavor(flavor).into_response()),
        Err(_) => {
            let mut e = ApiError::invalid(format!(
                "the request body did not arrive within {} s (the server's --body-timeout)",
                app.cfg.body_timeout.as_secs_f64()
            ));
            e.status = StatusCode::REQUEST_TIMEOUT;
            return close(e.with_flavor(flavor).into_response());
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// `Connection: close` on an answer given before the body was read.
fn close(mut r: Response) -> Response {
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// A body's bytes, holding its share of the body budget until they are
/// dropped (when the handler has parsed them).
struct Budgeted {
    buf: Vec<u8>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl AsRef<[u8]> for Budgeted {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

async fn collect(
    body: Body,
    declared: usize,
    limit: usize,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> Result<Bytes, ApiError> {
    let mut body = body;
    let mut buf = Vec::with_capacity(declared.min(limit));
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| ApiError::invalid(format!("reading the request body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > limit {
                return Err(ApiError::too_large(limit));
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from_owner(Budgeted {
        buf,
        _permit: permit,
    }))
}
