//! Errors as `application/problem+json` (RFC 9457): the single place an [`ErrorCode`] becomes an HTTP status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sandbox_core::wire::Problem;
use sandbox_core::ErrorCode;

/// The HTTP status of each error code.
pub fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorCode::ForbiddenProfile | ErrorCode::Forbidden => StatusCode::FORBIDDEN,
        ErrorCode::ProfileNotFound | ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::QueueFull | ErrorCode::RateLimited | ErrorCode::ConcurrencyLimited => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::HostNotAllowed => StatusCode::MISDIRECTED_REQUEST,
        ErrorCode::OriginNotAllowed => StatusCode::FORBIDDEN,
        ErrorCode::BodyTooLarge | ErrorCode::InputTooLarge | ErrorCode::CodeTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::RuntimeUnavailable | ErrorCode::EnvironmentNotInstalled | ErrorCode::ShuttingDown | ErrorCode::AuditUnavailable => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        ErrorCode::InternalError | ErrorCode::InvalidConfig => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorCode::InvalidRequest
        | ErrorCode::UnsupportedLanguage
        | ErrorCode::UnsupportedHarness
        | ErrorCode::EmptyCode
        | ErrorCode::InvalidFileName
        | ErrorCode::InvalidFileContent
        | ErrorCode::TimeoutTooLarge
        | ErrorCode::InvalidTimeout
        | ErrorCode::InvalidEnv
        | ErrorCode::InvalidOutputPattern => StatusCode::BAD_REQUEST,
    }
}

fn title(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::Unauthorized => "Missing or unknown API key",
        ErrorCode::ForbiddenProfile => "Profile not allowed for this key",
        ErrorCode::Forbidden => "Not allowed for this key",
        ErrorCode::ProfileNotFound => "No such profile",
        ErrorCode::NotFound => "Not found",
        ErrorCode::QueueFull => "Too many executions",
        ErrorCode::RateLimited => "Too many refused requests",
        ErrorCode::HostNotAllowed => "Host not allowed",
        ErrorCode::OriginNotAllowed => "Origin not allowed",
        ErrorCode::BodyTooLarge => "Request body too large",
        ErrorCode::RuntimeUnavailable => "Runtime unavailable on this host",
        ErrorCode::EnvironmentNotInstalled => "Environment not installed on this host",
        ErrorCode::ShuttingDown => "Service shutting down",
        ErrorCode::ConcurrencyLimited => "Too many running executions for this key",
        ErrorCode::AuditUnavailable => "Audit log unavailable",
        ErrorCode::InternalError | ErrorCode::InvalidConfig => "Internal error",
        _ => "Invalid request",
    }
}

pub(crate) fn new(code: ErrorCode, detail: String, field: Option<String>, execution_id: Option<String>) -> Problem {
    Problem {
        type_uri: format!("urn:sandbox:error:{}", code.as_str()),
        title: title(code).into(),
        status: status_of(code).as_u16(),
        code,
        detail,
        field,
        execution_id,
    }
}

/// A problem response, with `Retry-After` (seconds) for `queue_full`, `concurrency_limited`,
/// `audit_unavailable` and `shutting_down` (`rate_limited` sets its own) and
/// `WWW-Authenticate: Bearer` for `unauthorized`.
pub(crate) struct ProblemResponse(pub Problem);

impl IntoResponse for ProblemResponse {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let code = self.0.code;
        let mut r = (status, axum::Json(self.0)).into_response();
        let h = r.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        match code {
            ErrorCode::QueueFull | ErrorCode::ConcurrencyLimited | ErrorCode::AuditUnavailable | ErrorCode::ShuttingDown => {
                h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            ErrorCode::Unauthorized => {
                h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"sandbox\""));
            }
            _ => {}
        }
        r
    }
}

/// The answer to a refusal of the execution service: its problem (with the audit record's id as
/// `executionId`), and `Retry-After` when the refusal says when to retry.
pub(crate) fn of_refusal(r: sandbox_engine::Refusal) -> Response {
    let retry_after = r.retry_after_s;
    let mut response = ProblemResponse(new(r.code, r.message, r.field, r.execution_id)).into_response();
    if let Some(s) = retry_after {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    response
}
