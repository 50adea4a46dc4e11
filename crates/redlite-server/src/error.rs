//! API errors in the shapes clients parse: OpenAI's
//! `{"error":{"message","type","param","code"}}` and Anthropic's
//! `{"type":"error","error":{"type","message"}}`.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Which API family a route belongs to (decides the error shape).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    OpenAi,
    Anthropic,
}

/// An error answered to the client.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI `type` (Anthropic's is derived from the status).
    pub kind: &'static str,
    pub code: Option<&'static str>,
    pub param: Option<String>,
    pub flavor: Flavor,
    pub retry_after: Option<u32>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            code: None,
            param: None,
            flavor: Flavor::OpenAi,
            retry_after: None,
        }
    }

    /// 400: the request itself is wrong.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 naming the parameter at fault.
    pub fn param(param: &str, message: impl Into<String>) -> ApiError {
        let mut e = ApiError::invalid(message);
        e.param = Some(param.to_string());
        e
    }

    /// 400 `context_length_exceeded`, worded so agents that match the
    /// message (pi) recognise it and compact their history.
    pub fn context(requested: usize, available: usize) -> ApiError {
        let mut e = ApiError::invalid(format!(
            "the request exceeds the available context size ({requested} tokens requested, \
             {available} available); context_length_exceeded"
        ));
        e.code = Some("context_length_exceeded");
        e
    }

    pub fn unauthorized() -> ApiError {
        let mut e = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid or missing API key (send `Authorization: Bearer <key>` or `x-api-key`)",
        );
        e.code = Some("invalid_api_key");
        e
    }

    /// 403: the Host or Origin check refused the request.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "permission_error", message)
    }

    /// 415: an API POST without `Content-Type: application/json`.
    pub fn unsupported_media(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            message,
        )
    }

    /// 405: the route exists, not with this method.
    pub fn method_not_allowed(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            message,
        )
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found_error", message)
    }

    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("the request body is larger than the server's limit of {limit} bytes"),
        )
    }

    pub fn busy(message: impl Into<String>) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable_error",
            message,
        );
        e.retry_after = Some(1);
        e
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    pub fn anthropic(mut self) -> ApiError {
        self.flavor = Flavor::Anthropic;
        self
    }

    pub fn with_flavor(mut self, f: Flavor) -> ApiError {
        self.flavor = f;
        self
    }

    /// Anthropic's error `type` for this status.
    fn anthropic_type(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 | 529 => "overloaded_error",
            s if s >= 500 => "api_error",
            _ => "invalid_request_error",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        match self.flavor {
            Flavor::OpenAi => json!({"error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }}),
            Flavor::Anthropic => json!({"type": "error", "error": {
                "type": self.anthropic_type(),
                "message": self.message,
            }}),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut().insert("retry-after", HeaderValue::from(s));
        }
        r
    }
}
