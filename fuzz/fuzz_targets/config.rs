//! A configuration file (TOML) through the loader: parsed alone (`Config::parse`) and laid over
//! the built-in profiles (`Config::parse_layered`, what `sandbox serve --config` does), and an
//! accepted configuration's profiles used for admission once: no panic, bounded memory.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sandbox_core::{admit, Config, ExecutionRequest};

fuzz_target!(|data: &[u8]| {
    static BUILTIN: OnceLock<Config> = OnceLock::new();
    let builtin = BUILTIN.get_or_init(Config::builtin);
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = Config::parse(text, "fuzz.toml");
    if let Ok(config) = builtin.clone().parse_layered(text, "fuzz.toml") {
        for name in config.profiles.keys() {
            let req = ExecutionRequest { profile: name.clone(), code: "print(1)".into(), ..Default::default() };
            let _ = admit(&req, &config);
        }
    }
});
