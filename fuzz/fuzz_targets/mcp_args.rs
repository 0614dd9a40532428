//! The arguments of an MCP `tools/call sandbox_execute_code` (a JSON object) mapped to an
//! execution request (`sandbox_mcp::execute_request`), its profile defaulted as the service does
//! for a caller that may use every profile and for one limited to a single profile, then
//! admitted: no panic, bounded memory.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sandbox_core::{admit, Config};
use sandbox_engine::service::default_profile;
use sandbox_mcp::{execute_request, Principal};

fuzz_target!(|data: &[u8]| {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    let config = CONFIG.get_or_init(Config::builtin);
    let Ok(args) = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(data) else { return };
    let everyone = Principal::local("cli:fuzz");
    let limited = Principal { audit_name: "key:fuzz".into(), profiles: vec!["typescript-default".into()], peer: None, quota: None };
    let Ok(req) = execute_request(Some(args)) else { return };
    for principal in [&everyone, &limited] {
        let mut req = req.clone();
        if req.profile.is_empty() {
            match default_profile(config, principal, req.language.as_deref()) {
                Ok(p) => req.profile = p,
                Err(_) => continue,
            }
        }
        let _ = admit(&req, config);
    }
});
