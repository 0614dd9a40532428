//! The MCP front door (Model Context Protocol, official Rust SDK `rmcp`): tools
//! `sandbox_execute_code` and `sandbox_list_profiles`, output files and whole streams as
//! resources; over stdio ([`McpServer::serve_stdio`], `sandbox mcp`) and streamable HTTP
//! ([`http_service`], mounted at `/mcp` by `sandbox serve`).
//!
//! Protocol revisions: 2026-07-28 (no handshake, `server/discover`, per-request `_meta`) and the
//! `initialize` handshake of 2025-11-25 and earlier, on the same endpoint (rmcp negotiates).
//!
//! Errors: a call the sandbox could not run (unknown profile, bad file name, timeout above the
//! maximum, malformed arguments, full queue) and a program that ran and failed are both tool
//! results with `isError: true` (see [`render`]); JSON-RPC errors are kept for protocol
//! problems: unknown tool or resource, missing authentication, unsupported version.

pub mod render;
pub mod schema;
mod store;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler, ServiceExt as _};
use sandbox_core::wire::ProfileInfo;
use sandbox_core::{ErrorCode, ExecutionRequest, Language};
use sandbox_engine::{Chunk, Engine, Refusal, Service};
use serde_json::{json, Value};
use tokio::sync::mpsc;

pub use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
pub use rmcp::transport::streamable_http_server::session::SessionManager;
pub use rmcp::transport::streamable_http_server::StreamableHttpService;
pub use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::schema::{ExecuteArgs, ListProfilesArgs};
use crate::store::Store;

/// Name of the tool that runs code.
pub const EXECUTE_TOOL: &str = "sandbox_execute_code";
/// Name of the tool that lists profiles.
pub const PROFILES_TOOL: &str = "sandbox_list_profiles";
/// Interval between progress notifications while a program runs.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Who calls, as the front door around the MCP service established it: for HTTP the API key
/// (the server's middleware puts it in the request's extensions, with the client's address),
/// for stdio the local user. `audit_name` is the caller outside MCP (`key:<name>`,
/// `anonymous`, `cli:<user>`); executions are recorded as `mcp:<audit_name>/<client>@<version>`.
pub type Principal = sandbox_engine::Caller;

/// The MCP server: one per service, cheap to clone (each HTTP session or request gets a clone).
#[derive(Clone)]
pub struct McpServer {
    shared: Arc<Shared>,
    /// The caller of every request (stdio); `None`: read each request's [`Principal`] from its
    /// HTTP extensions.
    local: Option<Principal>,
}

struct Shared {
    service: Arc<Service>,
    store: Store,
}

impl McpServer {
    /// A server submitting executions to `service` (shared with the other doors).
    pub fn new(service: Arc<Service>) -> Self {
        Self { shared: Arc::new(Shared { service, store: Store::default() }), local: None }
    }

    fn engine(&self) -> &Engine {
        self.shared.service.engine()
    }

    /// Serves one client over stdin/stdout until it closes stdin; every call is `principal`'s.
    /// A line (one JSON-RPC message) may be up to `max_message_bytes`. `input_closed` is told
    /// when stdin ends, at once (this returns only once the calls in flight have been
    /// answered, or after rmcp's drain timeout, 5 s): the caller ends them there.
    /// Errors: the transport failed or the client never completed a first exchange.
    pub async fn serve_stdio(mut self, principal: Principal, max_message_bytes: usize, input_closed: Arc<tokio::sync::Notify>) -> Result<(), std::io::Error> {
        self.local = Some(principal);
        let stdin = NotifyingEof { inner: tokio::io::stdin(), closed: Some(input_closed) };
        let transport = rmcp::transport::async_rw::AsyncRwTransport::new_server(stdin, tokio::io::stdout()).with_max_line_length(max_message_bytes);
        let running = self.serve(transport).await.map_err(std::io::Error::other)?;
        running.waiting().await.map_err(std::io::Error::other)?;
        Ok(())
    }

    fn principal(&self, ctx: &RequestContext<RoleServer>) -> Result<Principal, McpError> {
        if let Some(p) = &self.local {
            return Ok(p.clone());
        }
        ctx.extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Principal>())
            .cloned()
            .ok_or_else(|| McpError::invalid_request("unauthenticated: send a valid API key as 'Authorization: Bearer <key>'", None))
    }

    fn tools(&self, principal: Option<&Principal>) -> Vec<Tool> {
        tools(self.engine().config(), principal)
    }

    fn list_profiles(&self, principal: &Principal) -> CallToolResult {
        let config = self.engine().config();
        let mut text = String::from("Profiles you may use:\n");
        let mut list = Vec::new();
        for info in config.profiles.keys().filter(|n| principal.allows(n)).filter_map(|n| ProfileInfo::in_config(n, config)) {
            text.push_str(&format!("{}\n", profile_line(&info)));
            list.push(serde_json::to_value(info).expect("profile info serializes"));
        }
        let mut out = CallToolResult::success(vec![ContentBlock::text(text)]);
        out.structured_content = Some(json!({ "profiles": list }));
        out
    }

    async fn execute(&self, principal: &Principal, args: Option<rmcp::model::JsonObject>, ctx: &RequestContext<RoleServer>) -> CallToolResult {
        let service = &self.shared.service;
        let caller = Principal { audit_name: format!("mcp:{}/{}", principal.audit_name, client_label(ctx.client_info())), ..principal.clone() };
        // Decode the arguments into a request.
        let spelling = timeout_spelling(args.as_ref());
        let request = match execute_request(args) {
            Ok(r) => r,
            Err((profile, refusal)) => return self.refused(&profile, spelling, service.refuse(&caller, None, refusal)),
        };
        // The profile the service picks when none was given, for the refusal's result.
        let profile = match request.profile.as_str() {
            "" => sandbox_engine::service::default_profile(self.engine().config(), &caller, request.language.as_deref()).unwrap_or_default(),
            p => p.to_owned(),
        };
        // Submit.
        let ticket = match service.submit(&caller, request) {
            Ok(t) => t,
            Err(refusal) => return self.refused(&profile, spelling, refusal),
        };
        // Run, with progress notifications when the client asked for them.
        let (output, progress) = match ctx.meta.get_progress_token() {
            Some(token) => {
                let (tx, rx) = mpsc::unbounded_channel();
                let task = tokio::spawn(report_progress(ctx.peer.clone(), token, ticket.timeout_ms(), rx));
                (Some(tx), Some(AbortOnDropHandle::new(task)))
            }
            None => (None, None),
        };
        let mut result = ticket.run(output).await;
        drop(progress);
        // Encode.
        if let Some(e) = &mut result.error {
            e.field = e.field.take().map(|f| argument_name(f, spelling));
        }
        let rendered = render::tool_result(&result);
        let (shared, owner) = (self.shared.clone(), principal.audit_name.clone());
        // A database round trip when the results are shared: off the async workers.
        let _ = tokio::task::spawn_blocking(move || shared.store.keep(shared.service.engine().recorder(), &owner, &result)).await;
        rendered
    }

    /// A refusal of the service as a `rejected` tool result.
    fn refused(&self, profile: &str, timeout_spelling: &str, mut refusal: Refusal) -> CallToolResult {
        refusal.field = refusal.field.take().map(|f| argument_name(f, timeout_spelling));
        render::tool_result(&refusal.into_result(profile))
    }

    async fn read(&self, principal: &Principal, uri: &str) -> Result<ReadResourceResult, McpError> {
        let not_found =
            || McpError::resource_not_found(format!("no resource {uri:?} (results are kept for the latest {} executions)", store::KEEP_RESULTS), None);
        let rest = uri.strip_prefix("sandbox://executions/").ok_or_else(not_found)?;
        let (id, what) = rest.split_once('/').ok_or_else(not_found)?;
        let (shared, owner, id) = (self.shared.clone(), principal.audit_name.clone(), id.to_owned());
        let found = tokio::task::spawn_blocking(move || shared.store.get(shared.service.engine().recorder(), &owner, &id)).await.ok().flatten();
        let result = found.ok_or_else(not_found)?;
        let contents = match what {
            "return-data" => {
                let data = result.return_data.as_ref().ok_or_else(not_found)?;
                ResourceContents::text(data.to_string(), uri).with_mime_type("application/json")
            }
            "stdout" | "stderr" => {
                let (text, b64) = if what == "stdout" { (&result.stdout, &result.stdout_base64) } else { (&result.stderr, &result.stderr_base64) };
                match b64 {
                    Some(b) => ResourceContents::blob(b.clone(), uri).with_mime_type("application/octet-stream"),
                    None => ResourceContents::text(text.clone(), uri).with_mime_type("text/plain"),
                }
            }
            _ => {
                let name = what.strip_prefix("files/").and_then(render::percent_decode).ok_or_else(not_found)?;
                let f = result.files.get(&name).ok_or_else(not_found)?;
                ResourceContents::blob(f.base64.clone(), uri).with_mime_type(f.mime_type.clone())
            }
        };
        Ok(ReadResourceResult::new(vec![contents]).with_cache_scope(CacheScope::Private))
    }
}

/// The request the `sandbox_execute_code` arguments `args` describe (not yet admitted: the
/// service does that); without a profile, `profile` is empty and the service picks one by the
/// rule every door shares ([`sandbox_engine::service::default_profile`]). `timeout_ms` is the
/// older name of `timeout`. Errors: the profile asked for (or none) and why the arguments are
/// not a request.
pub fn execute_request(args: Option<rmcp::model::JsonObject>) -> Result<ExecutionRequest, (String, Refusal)> {
    let args: ExecuteArgs = serde_json::from_value(Value::Object(args.unwrap_or_default()))
        .map_err(|e| (String::new(), Refusal::new(ErrorCode::InvalidRequest, format!("the arguments do not match the input schema: {e}"), None)))?;
    let profile = args.profile.unwrap_or_default();
    let timeout = match (args.timeout, args.timeout_ms) {
        (Some(a), Some(b)) if a != b => {
            let message = format!("timeout ({a}) and timeout_ms ({b}) are two names of one argument (ms); give one");
            return Err((profile, Refusal::new(ErrorCode::InvalidRequest, message, Some("timeout".into()))));
        }
        (a, b) => a.or(b),
    };
    Ok(ExecutionRequest {
        profile,
        language: Some(args.language.as_str().into()),
        code: args.code,
        harness: args.harness.map(|h| h.as_str().into()),
        timeout,
        files: args.files,
        input: args.input,
        ..Default::default()
    })
}

/// The tool argument named by an HTTP request field: the same (e.g. `timeout`,
/// `files["a.csv"]`), but `timeout_ms` for `timeout` when the caller spelled it so.
fn argument_name(field: String, timeout_spelling: &str) -> String {
    if field == "timeout" {
        timeout_spelling.into()
    } else {
        field
    }
}

/// The name the arguments gave the timeout: `timeout_ms` (the older name) or `timeout`.
fn timeout_spelling(args: Option<&rmcp::model::JsonObject>) -> &'static str {
    if args.is_some_and(|a| a.contains_key("timeout_ms") && !a.contains_key("timeout")) {
        "timeout_ms"
    } else {
        "timeout"
    }
}

/// The two tools as `principal` sees them (all profiles with `None`): schemas, and descriptions
/// that list the profiles the caller may use with their limits.
pub fn tools(config: &sandbox_core::Config, principal: Option<&Principal>) -> Vec<Tool> {
    let mut profiles_text = String::new();
    for name in config.profiles.keys() {
        if principal.is_none_or(|pr| pr.allows(name)) {
            if let Some(info) = ProfileInfo::in_config(name, config) {
                profiles_text.push_str(&format!("\n{}", profile_line(&info)));
            }
        }
    }
    let execute_description = format!(
        "Runs a Python or TypeScript program in a fresh, isolated Linux sandbox (no access to the host; no \
         network unless the profile's network is `allowlist`, and then only its listed endpoints) and returns its exit status, stdout, stderr and output files. Each call is a new sandbox: \
         nothing persists between calls, so pass input data as `files`. Files the program writes to its \
         working directory come back: PNG/JPEG as images, others as embedded resources, large ones as \
         resource links (sandbox://executions/ID/files/NAME, read with resources/read).\n\n\
         Result: structuredContent holds the full result (status, exitCode, stdout, stderr, files, \
         resourceUsage, timing, error; for allowlist profiles a network report of what was reached and what \
         was refused); the first text block summarizes it.\n\
         isError is false only when the program ran and exited 0 (status `ok`). isError is true when the \
         program ran and failed (status `error`: an exception or a non-zero exit code; fix the code), when a \
         limit ended it (status `timeout`, `memory_limit` or `output_limit`), when the sandbox refused the \
         request and ran nothing (status `rejected`, with error.type naming the cause, e.g. \
         `profile_not_found`, `invalid_file_name`, `timeout_too_large`, `unsupported_language`, \
         `invalid_request`; fix the arguments), or when the service failed (status `internal_error`).\n\n\
         Profiles you may use:{profiles_text}"
    );
    let mut input = (*rmcp::handler::server::common::schema_for_input::<ExecuteArgs>().expect("an object schema")).clone();
    if let Some(Value::Object(props)) = input.get_mut("properties") {
        if let Some(Value::Object(profile)) = props.get_mut("profile") {
            let base = profile.get("description").and_then(Value::as_str).unwrap_or_default().to_owned();
            profile.insert("description".into(), json!(format!("{base} Profiles you may use:{profiles_text}")));
        }
    }
    let execute = Tool::new(EXECUTE_TOOL, execute_description, Arc::new(input))
        .with_title("Execute code in a sandbox")
        .with_raw_output_schema(schema::execute_output_schema())
        .with_annotations(ToolAnnotations::new().read_only(true).destructive(false).idempotent(false).open_world(false));
    let profiles = Tool::new(
        PROFILES_TOOL,
        "Lists the sandbox profiles you may pass as `profile` to sandbox_execute_code: language, libraries \
         available, limits (memory, CPU, processes, timeout default and maximum in ms, workspace size, output \
         caps) and network policy.",
        rmcp::handler::server::common::schema_for_input::<ListProfilesArgs>().expect("an object schema"),
    )
    .with_title("List sandbox profiles")
    .with_raw_output_schema(schema::profiles_output_schema())
    .with_annotations(ToolAnnotations::new().read_only(true).destructive(false).idempotent(true).open_world(false));
    vec![execute, profiles]
}

/// One line describing a profile for a model: name, language, libraries, limits, network.
fn profile_line(p: &ProfileInfo) -> String {
    format!(
        "- {} ({}, {}): {} MiB memory, {} CPU, {} processes, timeout {} ms by default and at most {} ms, \
         {} MiB /workspace, stdout cap {} KiB, network {}{}",
        p.name,
        p.language.as_str(),
        libraries(p),
        p.memory_max_bytes >> 20,
        p.cpu_max,
        p.pids_max,
        p.timeout_ms,
        p.timeout_max_ms,
        p.workspace_max_bytes >> 20,
        p.stdout_max_bytes >> 10,
        p.network,
        if p.description.is_empty() { String::new() } else { format!(". {}", p.description) },
    )
}

/// What code can use beyond the language's standard library, for descriptions.
fn libraries(p: &ProfileInfo) -> String {
    let base = match p.language {
        Language::Python => "Python standard library",
        Language::Typescript => "Node.js built-in modules",
    };
    if p.libraries.is_empty() {
        format!("{base} only")
    } else {
        format!("{base} plus {}", p.libraries.join(", "))
    }
}

/// `<name>@<version>` of the MCP client, restricted to printable ASCII and 64 bytes each, for
/// the audit log's caller; `unknown` when the client did not say.
fn client_label(info: Option<Implementation>) -> String {
    let clean = |s: &str| -> String { s.chars().filter(|c| c.is_ascii_graphic() && !matches!(c, '/' | '@')).take(64).collect() };
    match info {
        Some(i) if !clean(&i.name).is_empty() => format!("{}@{}", clean(&i.name), clean(&i.version)),
        _ => "unknown".into(),
    }
}

/// Sends `notifications/progress` at once and every [`PROGRESS_EVERY`] while the program's
/// output channel is open: progress and total in ms (elapsed of `timeout_ms`), with a message.
async fn report_progress(peer: Peer<RoleServer>, token: ProgressToken, timeout_ms: u64, mut output: mpsc::UnboundedReceiver<Chunk>) {
    let start = Instant::now();
    let mut bytes = 0usize;
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    loop {
        tokio::select! {
            chunk = output.recv() => match chunk {
                Some(c) => bytes += c.data.len(),
                None => return,
            },
            _ = tick.tick() => {
                let elapsed = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
                let message = format!("running for {:.1} s of the {:.1} s timeout; {bytes} bytes of output so far", elapsed as f64 / 1000.0, timeout_ms as f64 / 1000.0);
                let param = ProgressNotificationParam::new(token.clone(), elapsed as f64).with_total(timeout_ms as f64).with_message(message);
                if peer.notify_progress(param).await.is_err() {
                    return;
                }
            }
        }
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_resources().build())
            .with_server_info(Implementation::new("sandbox", env!("CARGO_PKG_VERSION")).with_title("Sandbox Service"))
            .with_instructions(
                "Runs Python and TypeScript programs in isolated, network-less Linux sandboxes. Use \
                 sandbox_execute_code to run code (each call is a fresh sandbox; pass data as files) and \
                 sandbox_list_profiles to see the profiles and limits you may use. Output files that do not \
                 fit a result are resources: sandbox://executions/{executionId}/files/{name}.",
            )
    }

    async fn list_tools(&self, _request: Option<PaginatedRequestParams>, ctx: RequestContext<RoleServer>) -> Result<ListToolsResult, McpError> {
        let principal = self.principal(&ctx)?;
        let mut list = ListToolsResult::with_all_items(self.tools(Some(&principal)));
        // The profile list in the descriptions is the caller's own.
        list.cache_scope = Some(CacheScope::Private);
        Ok(list)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools(None).into_iter().find(|t| t.name == name)
    }

    async fn call_tool(&self, request: CallToolRequestParams, ctx: RequestContext<RoleServer>) -> Result<CallToolResponse, McpError> {
        let principal = self.principal(&ctx)?;
        match request.name.as_ref() {
            EXECUTE_TOOL => {
                let ct = ctx.ct.clone();
                tokio::select! {
                    result = self.execute(&principal, request.arguments, &ctx) => Ok(result.into()),
                    // `notifications/cancelled` (or, over HTTP, the client closing the request's
                    // stream): dropping the execution tears its sandbox down.
                    () = ct.cancelled() => {
                        tracing::info!(caller = %principal.audit_name, "mcp execution cancelled by the client");
                        Ok(CallToolResult::error(vec![ContentBlock::text("cancelled by the client")]).into())
                    }
                }
            }
            PROFILES_TOOL => Ok(self.list_profiles(&principal).into()),
            other => Err(McpError::invalid_params(format!("unknown tool {other:?}; tools: {EXECUTE_TOOL}, {PROFILES_TOOL}"), None)),
        }
    }

    async fn list_resources(&self, _request: Option<PaginatedRequestParams>, ctx: RequestContext<RoleServer>) -> Result<ListResourcesResult, McpError> {
        let principal = self.principal(&ctx)?;
        let mut resources = Vec::new();
        let (shared, owner) = (self.shared.clone(), principal.audit_name.clone());
        let kept = tokio::task::spawn_blocking(move || shared.store.list(shared.service.engine().recorder(), &owner)).await.unwrap_or_default();
        for r in kept {
            for (name, f) in &r.files {
                resources.push(
                    Resource::new(render::file_uri(&r.execution_id, name), name.clone())
                        .with_mime_type(f.mime_type.clone())
                        .with_size(f.size)
                        .with_description(format!("output file of execution {}", r.execution_id)),
                );
            }
        }
        let mut list = ListResourcesResult::with_all_items(resources);
        list.cache_scope = Some(CacheScope::Private);
        list.ttl_ms = Some(0);
        Ok(list)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let templates = vec![
            ResourceTemplate::new("sandbox://executions/{executionId}/files/{name}", "output file")
                .with_description(format!("An output file of one of your latest {} executions", store::KEEP_RESULTS)),
            ResourceTemplate::new("sandbox://executions/{executionId}/{stream}", "stdout, stderr or return data").with_description(
                "The whole captured stdout or stderr, or the returnData (stream: stdout, stderr or return-data) of one of your latest executions",
            ),
        ];
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(&self, request: ReadResourceRequestParams, ctx: RequestContext<RoleServer>) -> Result<ReadResourceResponse, McpError> {
        let principal = self.principal(&ctx)?;
        self.read(&principal, &request.uri).await.map(Into::into)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [rmcp::model::ProtocolVersion]> {
        Cow::Borrowed(rmcp::model::ProtocolVersion::KNOWN_VERSIONS)
    }
}

/// Settings of the streamable HTTP endpoint.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// `Host` values accepted (name or `name:port`); others get 403 (DNS rebinding defence).
    pub allowed_hosts: Vec<String>,
    /// `Origin` values accepted (`scheme://host[:port]`, `:*` for any port); a request with any
    /// other `Origin` gets 403, one without `Origin` (not a browser) passes.
    pub allowed_origins: Vec<String>,
    /// Largest request body in bytes (413 past it).
    pub body_max_bytes: usize,
    /// Cancelled at shutdown: ends every session and stream.
    pub shutdown: CancellationToken,
}

impl HttpOptions {
    /// Loopback hosts only, no browser origins, `body_max_bytes`.
    pub fn new(body_max_bytes: usize) -> Self {
        Self {
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into(), "[::1]".into()],
            allowed_origins: Vec::new(),
            body_max_bytes,
            shutdown: CancellationToken::new(),
        }
    }
}

/// The streamable HTTP service for `server` (a tower service; mount it at `/mcp` behind a layer
/// that puts the caller's [`Principal`] into each request's extensions), keeping its sessions
/// in `sessions` (the caller caps them: [`LocalSessionManager::close_session`] ends one).
pub fn http_service(server: McpServer, opts: &HttpOptions, sessions: Arc<LocalSessionManager>) -> StreamableHttpService<McpServer, LocalSessionManager> {
    let config = rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default()
        .with_allowed_hosts(opts.allowed_hosts.clone())
        .with_allowed_origins(opts.allowed_origins.clone())
        .enforce_origin_validation()
        .with_max_request_body_bytes(opts.body_max_bytes)
        // 2026-07-28 answers without notifications (resources/read of a large file) come as one
        // JSON body rather than an SSE event, which some clients cap at 1 MiB.
        .with_json_response(true)
        .with_cancellation_token(opts.shutdown.clone());
    StreamableHttpService::new(move || Ok(server.clone()), sessions, config)
}

#[cfg(test)]
mod tests;

/// A reader that tells `closed` (once) when `inner` reaches its end: the stdio server's stdin,
/// whose end is the client's request to shut down (MCP's stdio transport: "the client SHOULD
/// initiate shutdown by first closing the input stream"), which rmcp only sees after the calls
/// in flight have ended.
struct NotifyingEof<R> {
    inner: R,
    closed: Option<Arc<tokio::sync::Notify>>,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for NotifyingEof<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let (before, room) = (buf.filled().len(), buf.remaining());
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, std::task::Poll::Ready(Ok(()))) && room > 0 && buf.filled().len() == before {
            if let Some(closed) = self.closed.take() {
                closed.notify_one();
            }
        }
        polled
    }
}
