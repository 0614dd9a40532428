//! The `Host` and `Origin` policy of every route (DNS rebinding and cross-origin defence): a
//! request must name a `Host` the service answers to (loopback names, the listen address,
//! `--allowed-host`), else 421 `host_not_allowed`; a request carrying an `Origin` (a browser
//! page) must come from an allowed origin (`--allowed-origin`, none by default), else 403
//! `origin_not_allowed`. `/healthz` and `/readyz` are exempt: they run nothing and tell nothing
//! of executions, and load balancers probe them by whatever address they know the host by.
//!
//! A rebinding page's requests carry its own name in `Host` (the browser does not know the
//! name now points at loopback), so they fail the first check; a page that calls the service
//! by a loopback name is cross-origin and fails the second.

use axum::http::{header, HeaderMap, Uri};
use sandbox_core::ErrorCode;

/// Paths answered whatever the `Host` and `Origin` (health probes).
pub const EXEMPT_PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// Which `Host` and `Origin` values the service answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPolicy {
    /// `Host` values accepted: a name or address (any port), or `name:port` (that port only).
    /// IPv6 addresses with or without brackets.
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted: `scheme://host` (the scheme's default port),
    /// `scheme://host:port`, `scheme://host:*` (any port), or `null`. Requests without an
    /// `Origin` header (not sent by a browser page) pass.
    pub allowed_origins: Vec<String>,
}

impl Default for HostPolicy {
    /// Loopback names only (`localhost`, `127.0.0.1`, `::1`), no browser origin.
    fn default() -> Self {
        Self { allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()], allowed_origins: Vec::new() }
    }
}

/// Why a request was refused: the code and a detail for the problem body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// [`ErrorCode::HostNotAllowed`] or [`ErrorCode::OriginNotAllowed`].
    pub code: ErrorCode,
    /// What was wrong, naming the value (cut to 128 bytes).
    pub detail: String,
}

impl HostPolicy {
    /// Checks the request's `Host` (or, without one, the URI's authority, as HTTP/2 sends it)
    /// and `Origin`.
    /// Errors: `Refused` with [`ErrorCode::HostNotAllowed`] for a missing, malformed or
    /// unlisted host, [`ErrorCode::OriginNotAllowed`] for a malformed or unlisted origin.
    pub fn check(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), Refused> {
        let host = match headers.get(header::HOST) {
            Some(h) => h.to_str().ok().and_then(|h| h.parse::<axum::http::uri::Authority>().ok()),
            None => uri.authority().cloned(),
        };
        let Some(host) = host else {
            return Err(refused(ErrorCode::HostNotAllowed, "the request names no valid Host".into()));
        };
        let (name, port) = (normalize(host.host()), host.port_u16());
        if !self.allowed_hosts.iter().filter_map(|a| parse_host(a)).any(|(n, p)| n == name && p.is_none_or(|p| Some(p) == port)) {
            return Err(refused(ErrorCode::HostNotAllowed, format!("this service does not answer to Host {:?}", cut(host.as_str()))));
        }
        let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
        let text = origin.to_str().unwrap_or("");
        let allowed = parse_origin(text).is_some_and(|o| self.allowed_origins.iter().filter_map(|a| parse_allowed(a)).any(|a| a.admits(&o)));
        if allowed {
            Ok(())
        } else {
            Err(refused(ErrorCode::OriginNotAllowed, format!("requests from browser pages of Origin {:?} are not allowed", cut(text))))
        }
    }
}

fn refused(code: ErrorCode, detail: String) -> Refused {
    Refused { code, detail }
}

/// At most 128 bytes of a value the caller sent, for a message.
fn cut(s: &str) -> &str {
    let mut end = s.len().min(128);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn normalize(host: &str) -> String {
    host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase()
}

/// An allowed host entry: `name`, `name:port`, `::1`, `[::1]:8080`.
fn parse_host(entry: &str) -> Option<(String, Option<u16>)> {
    let entry = entry.trim();
    if entry.is_empty() {
        return None;
    }
    match entry.parse::<axum::http::uri::Authority>() {
        Ok(a) => Some((normalize(a.host()), a.port_u16())),
        // A bare IPv6 address (`::1`) is not an authority.
        Err(_) => Some((normalize(entry), None)),
    }
}

/// An origin as browsers send it: `null`, or scheme, host and port (the scheme's default when absent).
#[derive(Debug, PartialEq, Eq)]
enum Origin {
    Null,
    Tuple { scheme: String, host: String, port: Option<u16> },
}

fn parse_origin(value: &str) -> Option<Origin> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("null") {
        return Some(Origin::Null);
    }
    let uri: Uri = value.parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let authority = uri.authority()?;
    let port = authority.port_u16().or(match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    });
    Some(Origin::Tuple { host: normalize(authority.host()), scheme, port })
}

/// An allowed origin entry; `port: None` is `:*`.
struct Allowed(Origin);

impl Allowed {
    fn admits(&self, o: &Origin) -> bool {
        match (&self.0, o) {
            (Origin::Null, Origin::Null) => true,
            (Origin::Tuple { scheme, host, port }, Origin::Tuple { scheme: s, host: h, port: p }) => {
                scheme == s && host == h && port.is_none_or(|want| *p == Some(want))
            }
            _ => false,
        }
    }
}

fn parse_allowed(entry: &str) -> Option<Allowed> {
    let entry = entry.trim();
    let Some(base) = entry.strip_suffix(":*") else { return parse_origin(entry).map(Allowed) };
    // `https://host:443:*` names a port twice.
    if base.parse::<Uri>().ok()?.authority()?.port().is_some() {
        return None;
    }
    match parse_origin(base)? {
        Origin::Tuple { scheme, host, .. } => Some(Allowed(Origin::Tuple { scheme, host, port: None })),
        Origin::Null => None,
    }
}

#[cfg(test)]
mod tests;
