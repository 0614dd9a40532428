use axum::http::{HeaderMap, HeaderValue, Uri};
use sandbox_core::ErrorCode;

use super::HostPolicy;

fn policy() -> HostPolicy {
    let mut p = HostPolicy::default();
    p.allowed_hosts.extend(["sandbox.example.com:8443".to_owned(), "[2001:db8::1]".to_owned()]);
    p.allowed_origins.extend(["https://app.example.com".to_owned(), "http://localhost:*".to_owned()]);
    p
}

#[track_caller]
fn check(host: Option<&str>, origin: Option<&str>, want: Option<ErrorCode>) {
    let mut headers = HeaderMap::new();
    if let Some(h) = host {
        headers.insert("host", HeaderValue::from_str(h).unwrap());
    }
    if let Some(o) = origin {
        headers.insert("origin", HeaderValue::from_str(o).unwrap());
    }
    let got = policy().check(&Uri::from_static("/v1/profiles"), &headers).err().map(|r| r.code);
    assert_eq!(got, want, "host {host:?} origin {origin:?}");
}

#[test]
fn hosts() {
    check(Some("127.0.0.1:8080"), None, None);
    check(Some("evil.example:8080"), None, Some(ErrorCode::HostNotAllowed));
    check(Some("LOCALHOST"), None, None);
    check(Some("localhost.evil.example"), None, Some(ErrorCode::HostNotAllowed));
    check(Some("[::1]:8080"), None, None);
    check(Some("[::2]:8080"), None, Some(ErrorCode::HostNotAllowed));
    check(Some("sandbox.example.com:8443"), None, None);
    check(Some("sandbox.example.com:80"), None, Some(ErrorCode::HostNotAllowed));
    check(Some("[2001:db8::1]:9000"), None, None);
    check(Some("[2001:db8::2]:9000"), None, Some(ErrorCode::HostNotAllowed));
    check(None, None, Some(ErrorCode::HostNotAllowed));
    check(Some("a b"), None, Some(ErrorCode::HostNotAllowed));
}

#[test]
fn origins() {
    check(Some("localhost:8080"), Some("https://app.example.com"), None);
    check(Some("localhost:8080"), Some("https://evil.example"), Some(ErrorCode::OriginNotAllowed));
    check(Some("localhost:8080"), Some("https://app.example.com:443"), None);
    check(Some("localhost:8080"), Some("https://app.example.com:8443"), Some(ErrorCode::OriginNotAllowed));
    check(Some("localhost:8080"), Some("http://app.example.com"), Some(ErrorCode::OriginNotAllowed));
    check(Some("localhost:8080"), Some("http://localhost:3000"), None);
    check(Some("localhost:8080"), Some("http://localhost.evil.example:3000"), Some(ErrorCode::OriginNotAllowed));
    check(Some("localhost:8080"), Some("null"), Some(ErrorCode::OriginNotAllowed));
    check(Some("localhost:8080"), Some("not a url"), Some(ErrorCode::OriginNotAllowed));
}

#[test]
fn default_policy_allows_loopback_and_no_origin() {
    let p = HostPolicy::default();
    let mut headers = HeaderMap::new();
    headers.insert("host", HeaderValue::from_static("127.0.0.1:8080"));
    assert_eq!(p.check(&Uri::from_static("/"), &headers), Ok(()));
    headers.insert("origin", HeaderValue::from_static("http://127.0.0.1:8080"));
    assert_eq!(p.check(&Uri::from_static("/"), &headers).err().map(|r| r.code), Some(ErrorCode::OriginNotAllowed));
}
