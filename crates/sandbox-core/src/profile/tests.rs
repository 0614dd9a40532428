use super::*;

#[test]
fn builtin_parses_and_has_both_defaults() {
    let c = Config::builtin();
    assert_eq!(c.profiles["python-default"].language, Language::Python);
    assert_eq!(c.profiles["typescript-default"].language, Language::Typescript);
    assert_eq!(c.profiles["python-default"].network, Network::None);
    assert_ne!(c.runtime.uid_base, 0);
}

#[track_caller]
fn check(text: &str, field: &str, needle: &str) {
    let e = Config::parse(text, "my.toml").expect_err("must be rejected");
    assert_eq!(e.file, "my.toml");
    assert_eq!(e.field, field, "{e}");
    assert!(e.message.contains(needle), "{e}");
}

#[test]
fn bad_configs_name_file_field_and_reason() {
    check("[profiles.p]\nlanguage = \"cobol\"\n", "profiles.p.language", "unknown variant");
    check("[profiles.p]\nlanguage = \"python\"\n[profiles.p.limits]\nmemory_max = 5\n", "profiles.p.limits.memory_max", "unknown field");
    check("[profiles.p]\nlanguage = \"python\"\n[profiles.p.limits]\nmemory_max_bytes = 5\n", "profiles.p.limits.memory_max_bytes", "outside");
    check("[profiles.p]\nlanguage = \"python\"\n[profiles.p.limits]\ncpu_max = 0.0\n", "profiles.p.limits.cpu_max", "outside");
    check("[profiles.p]\nlanguage = \"python\"\n[profiles.p.limits]\ntimeout_ms = 10\ntimeout_max_ms = 5\n", "profiles.p.limits.timeout_ms", "outside");
    check("[profiles.p]\nlanguage = \"python\"\n[profiles.p.limits]\npids_max = \"many\"\n", "profiles.p.limits.pids_max", "invalid type");
    check("[profiles.p]\nlanguage = \"python\"\n[[profiles.p.filesystem.mounts]]\nhost = \"/srv\"\nsandbox = \"/etc/x\"\n", "profiles.p.filesystem.mounts[0]", "reserved");
    check("[profiles.p]\nlanguage = \"python\"\n[[profiles.p.filesystem.mounts]]\nhost = \"srv\"\nsandbox = \"/data\"\n", "profiles.p.filesystem.mounts[0]", "not absolute");
    check("[profiles.p]\nlanguage = \"python\"\n[profiles.p.env]\n\"A-B\" = \"x\"\n", "profiles.p.env.A-B", "invalid variable name");
    check("[runtime]\nuid_base = 0\n", "runtime.uid_base", "host root");
    check("[profiles.\"a b\"]\nlanguage = \"python\"\n", "profiles.a b", "letters");
    check("[profiles.p\nlanguage", "<syntax>", "line 1");
}

#[test]
fn good_config_layers_over_builtin() {
    let text = "[profiles.small]\nlanguage = \"python\"\n[profiles.small.limits]\nmemory_max_bytes = 33554432\ncpu_max = 0.5\n\
                [[profiles.small.filesystem.mounts]]\nhost = \"/srv/data\"\nsandbox = \"/data\"\n";
    let c = Config::builtin().layered(Config::parse(text, "x.toml").unwrap());
    assert!(c.profiles.contains_key("python-default"));
    let small = &c.profiles["small"];
    assert_eq!(small.limits.memory_max_bytes, 32 << 20);
    assert_eq!(small.limits.pids_max, Limits::default().pids_max);
    assert!(small.filesystem.mounts[0].read_only, "mounts are read-only unless said otherwise");
}
