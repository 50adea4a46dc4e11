//! Driving one generation for a handler, streaming (SSE) or not, whatever
//! the API: the API-specific part is a [`Format`].

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::response::sse::{Event as SseSend, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use redlite_engine::{Event, FinishReason, Request, TokenLogprobs};
use serde_json::Value;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;

use crate::engine::{SubmitError, Submitted};
use crate::error::ApiError;
use crate::App;

/// Why a generation ended, as the APIs distinguish it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// The model ended its turn.
    EndOfTurn,
    /// A stop string matched (it is not part of the output).
    StopString(String),
    /// The token limit (or the context) was reached.
    Length,
}

/// Counts and timings of a finished generation.
#[derive(Clone, Debug)]
pub struct End {
    pub reason: EndReason,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub generated_tokens: usize,
    pub prefill_seconds: f64,
    pub decode_seconds: f64,
}

impl End {
    /// llama-server's `timings` object.
    pub fn timings(&self) -> Value {
        let prompt_n = self.prompt_tokens - self.cached_tokens;
        let per_s = |n: usize, t: f64| if t > 0.0 { n as f64 / t } else { 0.0 };
        serde_json::json!({
            "cache_n": self.cached_tokens,
            "prompt_n": prompt_n,
            "prompt_ms": self.prefill_seconds * 1e3,
            "prompt_per_second": per_s(prompt_n, self.prefill_seconds),
            "predicted_n": self.generated_tokens,
            "predicted_ms": self.decode_seconds * 1e3,
            "predicted_per_second": per_s(self.generated_tokens, self.decode_seconds),
        })
    }
}

/// One server-sent event: an optional event name and its data line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chunk {
    pub event: Option<&'static str>,
    pub data: String,
}

impl Chunk {
    /// A `data:` line only.
    pub fn new() -> Chunk {
        Chunk::default()
    }

    pub fn event(mut self, name: &'static str) -> Chunk {
        self.event = Some(name);
        self
    }

    pub fn data(mut self, data: impl Into<String>) -> Chunk {
        self.data = data.into();
        self
    }

    fn into_sse(self) -> SseSend {
        let e = SseSend::default().data(self.data);
        match self.event {
            Some(n) => e.event(n),
            None => e,
        }
    }
}

/// The API-specific half of a generation.
pub trait Format: Send + 'static {
    /// Events sent as soon as the request is accepted (before any prefill).
    fn head(&mut self) -> Vec<Chunk>;
    /// One generated token. With `stream`, returns the events to send.
    fn token(&mut self, id: u32, lp: Option<&TokenLogprobs>, stream: bool) -> Vec<Chunk>;
    /// A stop string matched: generation must end.
    fn stopped(&self) -> Option<String>;
    /// The end: remaining events (streaming).
    fn tail(&mut self, end: &End) -> Vec<Chunk>;
    /// The end: the whole response body (not streaming).
    fn body(&mut self, end: &End) -> Value;
    /// An error after the response has started (streaming).
    fn error_event(&self, msg: &str) -> Chunk;
    /// The finish reason as this API names it (for the log and metrics).
    fn reason_name(&self, end: &End) -> String;
}

enum Next {
    Token(u32, Option<TokenLogprobs>),
    End(End),
    Error(String),
}

/// One submitted generation, as the handler sees it. Dropped before its
/// end (the client went away, the server is shutting down), it cancels the
/// generation and logs it as `finish=cancelled`.
struct Run {
    app: App,
    sub: Submitted,
    id: String,
    prompt_tokens: usize,
    cached: usize,
    generated: usize,
    t_submit: Instant,
    t_first: Option<Instant>,
    /// The end was logged.
    logged: bool,
    /// Why it is being cancelled, for the log line.
    cancel_why: &'static str,
}

impl Drop for Run {
    fn drop(&mut self) {
        if self.logged {
            return;
        }
        self.sub.cancel.store(true, Ordering::Relaxed);
        self.app.metrics.finished("cancelled");
        tracing::info!(
            target: "redlite::request",
            "{} prompt={} reused={} generated={} finish=cancelled ({})",
            self.id,
            self.prompt_tokens,
            self.cached,
            self.generated,
            self.cancel_why
        );
    }
}

impl Run {
    async fn next(&mut self) -> Next {
        loop {
            let Some(ev) = self.sub.events.recv().await else {
                return Next::Error("the engine stopped".into());
            };
            match ev {
                Event::Started {
                    prompt_tokens,
                    cached_tokens,
                } => {
                    self.prompt_tokens = prompt_tokens;
                    self.cached = cached_tokens;
                }
                Event::Token { id, logprobs } => {
                    if self.t_first.is_none() {
                        self.t_first = Some(Instant::now());
                    }
                    self.generated += 1;
                    return Next::Token(id, logprobs);
                }
                Event::Finished(f) => {
                    let reason = match f.reason {
                        FinishReason::EndOfGeneration(_) | FinishReason::ConstraintComplete => {
                            EndReason::EndOfTurn
                        }
                        FinishReason::Length => EndReason::Length,
                        FinishReason::Cancelled => EndReason::EndOfTurn,
                    };
                    return Next::End(End {
                        reason,
                        prompt_tokens: f.prompt_tokens,
                        cached_tokens: f.cached_tokens,
                        generated_tokens: f.generated_tokens,
                        prefill_seconds: f.prefill_seconds,
                        decode_seconds: f.decode_seconds,
                    });
                }
                Event::Error(e) => return Next::Error(e),
            }
        }
    }

    /// The end when the handler stops it (stop string).
    fn stop_now(&self, stop: String) -> End {
        self.sub.cancel.store(true, Ordering::Relaxed);
        let first = self.t_first.unwrap_or_else(Instant::now);
        End {
            reason: EndReason::StopString(stop),
            prompt_tokens: self.prompt_tokens,
            cached_tokens: self.cached,
            generated_tokens: self.generated,
            prefill_seconds: first.duration_since(self.t_submit).as_secs_f64(),
            decode_seconds: first.elapsed().as_secs_f64(),
        }
    }

    fn log(&mut self, app: &App, end: &End, reason: &str) {
        self.logged = true;
        app.metrics.finished(reason);
        app.metrics
            .context_seen(end.prompt_tokens + end.generated_tokens);
        let prefilled = end.prompt_tokens - end.cached_tokens;
        let tps = |n: usize, t: f64| if t > 0.0 { n as f64 / t } else { 0.0 };
        tracing::info!(
            target: "redlite::request",
            "{} prompt={} reused={} generated={} prefill={:.1} tok/s decode={:.1} tok/s finish={}",
            self.id,
            end.prompt_tokens,
            end.cached_tokens,
            end.generated_tokens,
            tps(prefilled, end.prefill_seconds),
            tps(end.generated_tokens, end.decode_seconds),
            reason
        );
    }
}

/// The final HTTP status of a streamed response, known only when the
/// stream ends (200, or 499 when it was cancelled): the metrics middleware
/// counts the request then, not when the headers went out.
pub struct StreamOutcome(pub std::sync::Mutex<Option<oneshot::Receiver<u16>>>);

/// What a streamed response reports when a client went away or the server
/// stopped it (nginx's "client closed request").
pub const STATUS_CANCELLED: u16 = 499;

/// Submit `req` and answer with `fmt`, as an SSE stream or one JSON body.
pub async fn respond<F: Format>(
    app: App,
    id: String,
    req: Request,
    mut fmt: F,
    stream: bool,
) -> Result<Response, ApiError> {
    let sub = app
        .engine
        .submit(req, app.cfg.max_queue)
        .map_err(|e| match e {
            SubmitError::QueueFull(n) => ApiError::busy(format!(
                "the server is busy: {n} requests already wait for a slot (its --max-queue); \
                 retry shortly"
            )),
            SubmitError::Stopped => ApiError::internal("the engine thread has stopped"),
        })?;
    let mut run = Run {
        app: app.clone(),
        sub,
        id,
        prompt_tokens: 0,
        cached: 0,
        generated: 0,
        t_submit: Instant::now(),
        t_first: None,
        logged: false,
        cancel_why: "client gone",
    };
    if !stream {
        let end = loop {
            let next = tokio::select! {
                n = run.next() => n,
                _ = app.stopping() => {
                    run.cancel_why = "shutdown";
                    return Err(ApiError::busy("the server is shutting down"));
                }
            };
            match next {
                Next::Token(id, lp) => {
                    fmt.token(id, lp.as_ref(), false);
                    if let Some(s) = fmt.stopped() {
                        break run.stop_now(s);
                    }
                }
                Next::End(end) => break end,
                Next::Error(e) => {
                    // An engine error, not a cancellation.
                    tracing::error!("{}: {e}", run.id);
                    run.logged = true;
                    app.metrics.finished("error");
                    return Err(ApiError::internal(e));
                }
            }
        };
        let body = fmt.body(&end);
        run.log(&app, &end, &fmt.reason_name(&end));
        return Ok(Json(body).into_response());
    }

    let (tx, rx) = mpsc::channel::<Result<SseSend, Infallible>>(64);
    let (status_tx, status_rx) = oneshot::channel::<u16>();
    let head = fmt.head();
    tokio::spawn(async move {
        let status = stream_events(&app, &mut run, &mut fmt, head, &tx).await;
        let _ = status_tx.send(status);
    });
    let sse = Sse::new(ReceiverStream::new(rx)).keep_alive(
        KeepAlive::new()
            .interval(Duration::from_secs(15))
            .text("ping"),
    );
    let mut r = sse.into_response();
    r.headers_mut().insert(
        "cache-control",
        axum::http::HeaderValue::from_static("no-cache"),
    );
    r.extensions_mut()
        .insert(Arc::new(StreamOutcome(std::sync::Mutex::new(Some(
            status_rx,
        )))));
    Ok(r)
}

/// Drive a streamed generation; returns the status to count it under.
async fn stream_events<F: Format>(
    app: &App,
    run: &mut Run,
    fmt: &mut F,
    head: Vec<Chunk>,
    tx: &mpsc::Sender<Result<SseSend, Infallible>>,
) -> u16 {
    for e in head {
        if tx.send(Ok(e.into_sse())).await.is_err() {
            return STATUS_CANCELLED;
        }
    }
    loop {
        let next = tokio::select! {
            n = run.next() => n,
            // The client went away: dropping `run` cancels the request.
            _ = tx.closed() => return STATUS_CANCELLED,
            _ = app.stopping() => {
                run.cancel_why = "shutdown";
                let _ = tx.send(Ok(fmt.error_event("the server is shutting down").into_sse())).await;
                return STATUS_CANCELLED;
            }
        };
        let (events, end) = match next {
            Next::Token(id, lp) => {
                let ev = fmt.token(id, lp.as_ref(), true);
                match fmt.stopped() {
                    Some(s) => (ev, Some(run.stop_now(s))),
                    None => (ev, None),
                }
            }
            Next::End(end) => (Vec::new(), Some(end)),
            Next::Error(e) => {
                tracing::error!("{}: {e}", run.id);
                run.logged = true;
                app.metrics.finished("error");
                let _ = tx.send(Ok(fmt.error_event(&e).into_sse())).await;
                return 500;
            }
        };
        for e in events {
            if tx.send(Ok(e.into_sse())).await.is_err() {
                return STATUS_CANCELLED;
            }
        }
        if let Some(end) = end {
            for e in fmt.tail(&end) {
                if tx.send(Ok(e.into_sse())).await.is_err() {
                    break;
                }
            }
            run.log(app, &end, &fmt.reason_name(&end));
            return 200;
        }
    }
}

/// OpenAI's `bytes` and display text of a token.
pub fn token_text(app: &App, id: u32) -> (String, Vec<u8>) {
    let b = app
        .tokenizer
        .decode_bytes_opts(&[id], true)
        .unwrap_or_default();
    (String::from_utf8_lossy(&b).into_owned(), b)
}

/// One chat `logprobs.content` entry.
pub fn chat_logprob_entry(app: &App, id: u32, lp: &TokenLogprobs) -> Value {
    let (text, bytes) = token_text(app, id);
    let top: Vec<Value> = lp
        .top
        .iter()
        .map(|&(t, l)| {
            let (tt, tb) = token_text(app, t);
            serde_json::json!({"token": tt, "logprob": l, "bytes": tb})
        })
        .collect();
    serde_json::json!({"token": text, "logprob": lp.logprob, "bytes": bytes, "top_logprobs": top})
}
