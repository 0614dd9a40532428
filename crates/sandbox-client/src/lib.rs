//! Rust client of the Sandbox Service HTTP API (`sandbox serve`), on the same wire types the
//! server uses. Plain HTTP; put TLS in front of the service (a reverse proxy) for remote use.
//!
//! ```no_run
//! # async fn demo() -> Result<(), sandbox_client::ClientError> {
//! use sandbox_core::ExecutionRequest;
//! let client = sandbox_client::Client::new("http://127.0.0.1:8080", None);
//! let result = client
//!     .execute(&ExecutionRequest { profile: "python-default".into(), code: "print(6*7)".into(), ..Default::default() })
//!     .await?;
//! assert_eq!(result.stdout, "42\n");
//! # Ok(()) }
//! ```

use futures_util::StreamExt as _;
use sandbox_core::wire::{Problem, ProfileInfo, ProfileList};
use sandbox_core::{ExecutionRequest, ExecutionResult};

/// A failed call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The service refused or failed the request (`application/problem+json`); `retry_after`
    /// (seconds) comes from the header of a 429.
    #[error("{} ({}): {}", .problem.code, .problem.status, .problem.detail)]
    Problem {
        /// The problem body.
        problem: Problem,
        /// `Retry-After` in seconds, if sent.
        retry_after: Option<u64>,
    },
    /// The request did not complete (connection refused, reset, ...).
    #[error("request to the sandbox service failed")]
    Http(#[from] reqwest::Error),
    /// The service answered something this client does not understand.
    #[error("unexpected answer from the sandbox service: {0}")]
    Protocol(String),
}

/// Which stream a streamed chunk belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// A client for one service.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    api_key: Option<String>,
    http: reqwest::Client,
}

impl Client {
    /// A client for `base_url` (e.g. `http://127.0.0.1:8080`), sending `api_key` as a bearer token.
    pub fn new(base_url: &str, api_key: Option<String>) -> Self {
        Self { base: base_url.trim_end_matches('/').to_owned(), api_key, http: reqwest::Client::new() }
    }

    fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.auth(self.http.post(format!("{}{path}", self.base)))
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.auth(self.http.get(format!("{}{path}", self.base)))
    }

    fn auth(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.api_key {
            Some(k) => r.bearer_auth(k),
            None => r,
        }
    }

    /// Runs one execution and waits for its result (`POST /v1/executions`).
    /// Errors: [`ClientError::Problem`] for a refusal (bad request, auth, queue full, ...).
    pub async fn execute(&self, request: &ExecutionRequest) -> Result<ExecutionResult, ClientError> {
        let resp = self.post("/v1/executions").json(request).send().await?;
        decode(resp).await
    }

    /// Runs one execution, calling `on_output` with each stdout/stderr chunk as it arrives
    /// (server-sent events), and returns the result.
    /// Errors: as [`Client::execute`].
    pub async fn execute_stream(&self, request: &ExecutionRequest, mut on_output: impl FnMut(Stream, &str)) -> Result<ExecutionResult, ClientError> {
        let resp = self.post("/v1/executions").header(reqwest::header::ACCEPT, "text/event-stream").json(request).send().await?;
        if !resp.status().is_success() {
            return Err(problem(resp).await);
        }
        let mut events = eventsource_stream::Eventsource::eventsource(resp.bytes_stream());
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| ClientError::Protocol(e.to_string()))?;
            match event.event.as_str() {
                "stdout" | "stderr" => {
                    #[derive(serde::Deserialize)]
                    struct Text {
                        text: String,
                    }
                    let t: Text = serde_json::from_str(&event.data).map_err(|e| ClientError::Protocol(e.to_string()))?;
                    on_output(if event.event == "stdout" { Stream::Stdout } else { Stream::Stderr }, &t.text);
                }
                "result" => return serde_json::from_str(&event.data).map_err(|e| ClientError::Protocol(e.to_string())),
                "error" => {
                    let problem: Problem = serde_json::from_str(&event.data).map_err(|e| ClientError::Protocol(e.to_string()))?;
                    return Err(ClientError::Problem { problem, retry_after: None });
                }
                _ => {}
            }
        }
        Err(ClientError::Protocol("the event stream ended without a result".into()))
    }

    /// The profiles this caller may use (`GET /v1/profiles`).
    /// Errors: [`ClientError::Problem`] (e.g. `unauthorized`).
    pub async fn profiles(&self) -> Result<Vec<ProfileInfo>, ClientError> {
        let list: ProfileList = decode(self.get("/v1/profiles").send().await?).await?;
        Ok(list.profiles)
    }

    /// One profile (`GET /v1/profiles/{name}`).
    /// Errors: [`ClientError::Problem`] with `profile_not_found` or `forbidden_profile`.
    pub async fn profile(&self, name: &str) -> Result<ProfileInfo, ClientError> {
        decode(self.get(&format!("/v1/profiles/{name}")).send().await?).await
    }
}

async fn decode<T: serde::de::DeserializeOwned>(resp: reqwest::Response) -> Result<T, ClientError> {
    if !resp.status().is_success() {
        return Err(problem(resp).await);
    }
    let bytes = resp.bytes().await?;
    serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))
}

async fn problem(resp: reqwest::Response) -> ClientError {
    let status = resp.status();
    let retry_after = resp.headers().get(reqwest::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    match resp.bytes().await {
        Ok(b) => match serde_json::from_slice::<Problem>(&b) {
            Ok(problem) => ClientError::Problem { problem, retry_after },
            Err(_) => ClientError::Protocol(format!("HTTP {status}: {}", String::from_utf8_lossy(&b))),
        },
        Err(e) => ClientError::Http(e),
    }
}
