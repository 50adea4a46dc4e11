//! Small endpoints: health, models, tokenize, detokenize, unknown routes.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::fields::{opt_array, opt_bool, opt_str, parse_known};
use crate::openai::blocking;
use crate::{body_bytes, App};

pub async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

pub async fn models(State(app): State<App>) -> Json<Value> {
    let ctx = app.cfg.context;
    Json(json!({
        "object": "list",
        "data": [{
            "id": app.cfg.alias,
            "object": "model",
            "created": app.created,
            "owned_by": "redlite",
            "max_model_len": ctx,
            "context_length": ctx,
            "meta": {
                "n_ctx": ctx,
                "n_ctx_train": app.n_ctx_train,
                "n_vocab": app.n_vocab,
                "n_params": app.n_params,
                "size": app.model_bytes,
            }
        }]
    }))
}

pub async fn not_found(uri: Uri) -> Response {
    let flavor = if uri.path().starts_with("/v1/messages") {
        crate::Flavor::Anthropic
    } else {
        crate::Flavor::OpenAi
    };
    ApiError::not_found(format!("no route for {}", uri.path()))
        .with_flavor(flavor)
        .into_response()
}

/// A known route with the wrong method: 405 with the JSON error shape.
pub async fn method_not_allowed(method: axum::http::Method, uri: Uri) -> Response {
    ApiError::method_not_allowed(format!("{} does not accept {method}", uri.path()))
        .with_flavor(crate::security::flavor_of(uri.path()))
        .into_response()
}

/// `{content, add_special?, parse_special?, with_pieces?}` → `{tokens}`.
pub async fn tokenize(
    State(app): State<App>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let bytes = body_bytes(body, app.cfg.max_body_bytes)?;
    blocking(move || tokenize_body(&app, &bytes))
        .await
        .map(Json)
}

fn tokenize_body(app: &App, bytes: &[u8]) -> Result<Value, ApiError> {
    let o = parse_known(
        bytes,
        &["content", "add_special", "parse_special", "with_pieces"],
    )?;
    let content = opt_str(&o, "content")?
        .ok_or_else(|| ApiError::param("content", "'content' is required"))?;
    let add_special = opt_bool(&o, "add_special")?.unwrap_or(false);
    let parse_special = opt_bool(&o, "parse_special")?.unwrap_or(true);
    let with_pieces = opt_bool(&o, "with_pieces")?.unwrap_or(false);
    let tok = &app.tokenizer;
    let ids = tok.tokenize(content, add_special && tok.add_bos(), parse_special);
    if !with_pieces {
        return Ok(json!({ "tokens": ids }));
    }
    let pieces: Vec<Value> = ids
        .iter()
        .map(|&id| {
            let bytes = tok.token_bytes(id).unwrap_or(&[]);
            let piece = match std::str::from_utf8(bytes) {
                Ok(s) => json!(s),
                Err(_) => json!(bytes),
            };
            json!({"id": id, "piece": piece})
        })
        .collect();
    Ok(json!({ "tokens": pieces }))
}

/// `{tokens}` → `{content}`.
pub async fn detokenize(
    State(app): State<App>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let bytes = body_bytes(body, app.cfg.max_body_bytes)?;
    blocking(move || {
        let o = parse_known(&bytes, &["tokens"])?;
        let toks = opt_array(&o, "tokens")?
            .ok_or_else(|| ApiError::param("tokens", "'tokens' is required"))?;
        let ids = token_ids(toks, "tokens", app.n_vocab)?;
        let content = app
            .tokenizer
            .decode(&ids)
            .map_err(|e| ApiError::param("tokens", e.to_string()))?;
        Ok(Json(json!({ "content": content })))
    })
    .await
}

/// An array of token ids, each checked against the vocabulary.
pub fn token_ids(v: &[Value], param: &str, n_vocab: usize) -> Result<Vec<u32>, ApiError> {
    v.iter()
        .enumerate()
        .map(|(i, x)| match x.as_u64() {
            Some(id) if (id as usize) < n_vocab => Ok(id as u32),
            _ => Err(ApiError::param(
                param,
                format!("'{param}[{i}]' must be a token id below {n_vocab}, got {x}"),
            )),
        })
        .collect()
}
