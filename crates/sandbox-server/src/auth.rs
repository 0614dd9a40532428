//! API keys: `Authorization: Bearer <key>`, compared by SHA-256 in constant time against the
//! hashes in the configuration.

use axum::http::HeaderMap;
use sandbox_core::profile::ApiKey;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// No keys are configured (loopback only): anyone may use every profile, and reads the
    /// audit records of `anonymous` only.
    Anonymous,
    /// The holder of this key.
    Key(ApiKey),
}

impl Caller {
    /// The caller as the execution service knows it: audit name, profiles, address `peer`.
    pub fn submitter(&self, peer: Option<std::net::IpAddr>) -> sandbox_engine::Caller {
        let profiles = match self {
            Self::Anonymous => vec!["*".to_owned()],
            Self::Key(k) => k.profiles.clone(),
        };
        let quota = match self {
            Self::Anonymous => None,
            Self::Key(k) => k.max_concurrent.map(|max_concurrent| sandbox_engine::Quota { key: self.audit_name(), max_concurrent }),
        };
        sandbox_engine::Caller { audit_name: self.audit_name(), profiles, peer, quota }
    }

    /// A name for logs (`anonymous` or the key's name).
    pub fn name(&self) -> &str {
        match self {
            Self::Anonymous => "anonymous",
            Self::Key(k) => &k.name,
        }
    }

    /// The caller as the audit log records it: `key:<name>` or `anonymous`.
    pub fn audit_name(&self) -> String {
        match self {
            Self::Anonymous => "anonymous".into(),
            Self::Key(k) => format!("key:{}", k.name),
        }
    }

    /// Whether this caller reads every caller's audit records (the `audit` role). Anonymous
    /// callers (no keys configured, loopback only) read only the records of `anonymous`: what
    /// was run through this API without a key, not `sandbox run`'s `cli:<user>` records nor
    /// MCP's; the whole log is for `sandbox audit` (file permissions) or a key with the role.
    pub fn can_audit_all(&self) -> bool {
        match self {
            Self::Anonymous => false,
            Self::Key(k) => k.roles.iter().any(|r| r == "audit"),
        }
    }
}

/// Finds the key in `headers` among `keys`; `None` when it is missing or unknown.
pub(crate) fn authenticate(headers: &HeaderMap, keys: &[ApiKey]) -> Option<Caller> {
    let value = headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    let token = value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer "))?.trim();
    let digest = Sha256::digest(token.as_bytes());
    let mut found = None;
    for k in keys {
        let Ok(want) = hex::decode(&k.sha256) else { continue };
        // Constant-time per key, and every key is compared, so timing says nothing of which matched.
        if bool::from(want.as_slice().ct_eq(digest.as_slice())) {
            found = Some(Caller::Key(k.clone()));
        }
    }
    found
}
