//! The router in process (`app(state).oneshot(request)`, no socket): what every request passes
//! before a handler (Host/Origin, API key), the problem+json shape, the health probe and the
//! profile list. Nothing here runs a program; the binary's suite does, through a real socket.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt as _;
use sandbox_core::profile::ApiKey;
use sandbox_engine::{Engine, EngineOptions, NoRecorder};
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use tower::ServiceExt as _;

use crate::{app, AppState};

/// The API key of the test caller, who may use `python-default` only.
const KEY: &str = "router-test-key";

fn state() -> AppState {
    let mut config = sandbox_core::Config::builtin();
    config.service.api_keys = vec![ApiKey {
        name: "tester".into(),
        sha256: hex::encode(Sha256::digest(KEY)),
        profiles: vec!["python-default".into()],
        roles: Vec::new(),
        max_concurrent: None,
    }];
    let opts = EngineOptions {
        config,
        data_dir: std::env::temp_dir().join("sandbox-server-router-tests"),
        helper: "/nonexistent/sandbox".into(),
        cgroup_parent: String::new(),
        command: String::new(),
        environment_builds: Default::default(),
    };
    AppState::new(Arc::new(Engine::new(opts, Arc::new(NoRecorder))), None)
}

/// A request as a well-behaved client sends it: Host `localhost`, the test key.
fn request(method: Method, path: &str) -> axum::http::request::Builder {
    request_to("localhost:8080", method, path)
}

/// A request with the test key for Host `host`.
fn request_to(host: &str, method: Method, path: &str) -> axum::http::request::Builder {
    Request::builder().method(method).uri(path).header(header::HOST, host).header(header::AUTHORIZATION, format!("Bearer {KEY}"))
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

async fn send(request: Request<Body>) -> Answer {
    let response = app(state()).oneshot(request).await.expect("the router answers");
    let (parts, body) = response.into_parts();
    Answer { status: parts.status, headers: parts.headers, body: body.collect().await.expect("a body").to_bytes().to_vec() }
}

/// `answer` is a problem (RFC 9457) with `status` and `code`, in the shape every door documents.
#[track_caller]
fn check_problem(answer: &Answer, status: StatusCode, code: &str) -> Value {
    assert_eq!(answer.status, status, "{}", String::from_utf8_lossy(&answer.body));
    assert_eq!(answer.headers.get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap()), Some("application/problem+json"));
    let p = answer.json();
    let keys: Vec<&str> = p.as_object().expect("an object").keys().map(String::as_str).collect();
    for k in ["type", "title", "status", "code", "detail"] {
        assert!(keys.contains(&k), "{k} missing: {p}");
    }
    assert!(keys.iter().all(|k| ["type", "title", "status", "code", "detail", "field", "executionId"].contains(k)), "{p}");
    assert_eq!((p["status"].as_u64(), p["code"].as_str()), (Some(u64::from(status.as_u16())), Some(code)), "{p}");
    assert_eq!(p["type"], format!("urn:sandbox:error:{code}"), "{p}");
    assert!(!p["title"].as_str().unwrap_or_default().is_empty() && !p["detail"].as_str().unwrap_or_default().is_empty(), "{p}");
    p
}

#[tokio::test]
async fn healthz_answers_whatever_the_host() {
    for host in ["localhost", "node-7.internal:8080"] {
        let a = send(Request::get("/healthz").header(header::HOST, host).body(Body::empty()).unwrap()).await;
        assert_eq!((a.status, a.body.as_slice()), (StatusCode::OK, b"ok\n".as_slice()), "Host {host}");
    }
}

#[tokio::test]
async fn requests_without_a_valid_key_are_refused_before_the_handler() {
    let none = Request::get("/v1/profiles").header(header::HOST, "localhost").body(Body::empty()).unwrap();
    let wrong = Request::get("/v1/profiles").header(header::HOST, "localhost").header(header::AUTHORIZATION, "Bearer nope").body(Body::empty()).unwrap();
    let run = Request::post("/v1/executions")
        .header(header::HOST, "localhost")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(r#"{"code":"print(1)"}"#))
        .unwrap();
    for r in [none, wrong, run] {
        let a = send(r).await;
        check_problem(&a, StatusCode::UNAUTHORIZED, "unauthorized");
        let challenge = a.headers.get(header::WWW_AUTHENTICATE).map(|v| v.to_str().unwrap().to_owned());
        assert!(challenge.as_deref().is_some_and(|c| c.starts_with("Bearer")), "{challenge:?}");
    }
    // Its twin: the same key passes.
    assert_eq!(send(request(Method::GET, "/v1/profiles").body(Body::empty()).unwrap()).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_foreign_host_or_origin_is_refused_even_with_a_key() {
    let a = send(request_to("attacker.example", Method::GET, "/v1/profiles").body(Body::empty()).unwrap()).await;
    check_problem(&a, StatusCode::MISDIRECTED_REQUEST, "host_not_allowed");
    let a = send(request(Method::GET, "/v1/profiles").header(header::ORIGIN, "https://attacker.example").body(Body::empty()).unwrap()).await;
    check_problem(&a, StatusCode::FORBIDDEN, "origin_not_allowed");
    // A request without a Host (HTTP/2 puts it in the URI) for an allowed authority passes.
    let a = send(Request::get("http://127.0.0.1:8080/v1/profiles").header(header::AUTHORIZATION, format!("Bearer {KEY}")).body(Body::empty()).unwrap()).await;
    assert_eq!(a.status, StatusCode::OK);
}

#[tokio::test]
async fn refusals_are_problems_with_a_stable_code() {
    let body = |json: &str| request(Method::POST, "/v1/executions").header(header::CONTENT_TYPE, "application/json").body(Body::from(json.to_owned())).unwrap();
    let a = send(body(r#"{"profile":"python-analysis","language":"python","code":"print(1)"}"#)).await;
    let p = check_problem(&a, StatusCode::FORBIDDEN, "forbidden_profile");
    assert!(p["executionId"].as_str().is_some_and(|id| !id.is_empty()), "a refusal is audited under an id: {p}");
    let a = send(body(r#"{"language":"python","code":"print(1)","bogus":1}"#)).await;
    check_problem(&a, StatusCode::BAD_REQUEST, "invalid_request");
    let a = send(body(r#"{"profile":"python-default","language":"python","code":"print(1)","files":{"../x":"y"}}"#)).await;
    let p = check_problem(&a, StatusCode::BAD_REQUEST, "invalid_file_name");
    assert_eq!(p["field"], r#"files["../x"]"#, "{p}");
    let a = send(request(Method::GET, "/v2/nothing").body(Body::empty()).unwrap()).await;
    check_problem(&a, StatusCode::NOT_FOUND, "not_found");
    let a = send(request(Method::DELETE, "/v1/profiles").body(Body::empty()).unwrap()).await;
    check_problem(&a, StatusCode::METHOD_NOT_ALLOWED, "not_found");
}

#[tokio::test]
async fn profiles_lists_what_the_key_may_use_with_availability() {
    let a = send(request(Method::GET, "/v1/profiles").body(Body::empty()).unwrap()).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.headers.get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap()), Some("application/json"));
    let v = a.json();
    let profiles = v["profiles"].as_array().expect("a profiles array");
    let names: Vec<&str> = profiles.iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(names, ["python-default"], "{v}");
    let p = &profiles[0];
    assert_eq!((p["language"].as_str(), p["harness"].as_str()), (Some("python"), Some("script")), "{p}");
    // The engine's one verdict, and its reason when the profile cannot run here.
    let verdict = state().engine.availability("python-default");
    assert_eq!(p["available"], verdict.is_ok(), "{p}");
    assert_eq!(p["unavailableReason"].as_str(), verdict.as_ref().err().map(|u| u.reason.as_str()), "{p}");
    let a = send(request(Method::GET, "/v1/profiles/python-analysis").body(Body::empty()).unwrap()).await;
    assert!(a.status.is_client_error(), "a profile the key may not use is not shown: {}", a.status);
}
