use super::*;

#[test]
fn builtin_parses_and_has_both_defaults() {
    let c = Config::builtin();
    assert_eq!(c.profiles["python-default"].language, Language::Python);
    assert_eq!(c.profiles["typescript-default"].language, Language::Typescript);
    assert_eq!(c.profiles["python-default"].network, Network::None);
    assert_ne!(c.runtime.uid_base, 0);
}

#[test]
fn builtin_is_the_validated_parse_of_defaults_toml() {
    // builtin() reads the JSON that build.rs makes of defaults.toml, without validating it.
    let mut parsed = Config::parse(DEFAULTS_TOML, "<built-in>").expect("defaults.toml is a valid configuration");
    let builtin = Config::builtin();
    for (name, env) in &mut parsed.environments {
        env.locks = builtin.environments[name].locks.clone();
    }
    assert_eq!(builtin, parsed);
    assert!(builtin.environments.values().any(|e| e.locks.python.is_some()), "the built-in locks are attached");
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
    check(
        "[profiles.p]\nlanguage = \"python\"\n[[profiles.p.filesystem.mounts]]\nhost = \"/srv\"\nsandbox = \"/etc/x\"\n",
        "profiles.p.filesystem.mounts[0]",
        "reserved",
    );
    check(
        "[profiles.p]\nlanguage = \"python\"\n[[profiles.p.filesystem.mounts]]\nhost = \"srv\"\nsandbox = \"/data\"\n",
        "profiles.p.filesystem.mounts[0]",
        "not absolute",
    );
    check("[profiles.p]\nlanguage = \"python\"\n[profiles.p.env]\n\"A-B\" = \"x\"\n", "profiles.p.env.A-B", "invalid variable name");
    check("[runtime]\nuid_base = 0\n", "runtime.uid_base", "host root");
    check("[profiles.\"a b\"]\nlanguage = \"python\"\n", "profiles.a b", "letters");
    check("[profiles.p\nlanguage", "<syntax>", "line 1");
    // A misspelt role would silently grant nothing (or not what was meant).
    let key = "[[service.api_keys]]\nname = \"k\"\nsha256 = \"0c9165ea8a25209d04bfa8954b5d232f1915e1db4b6637fd0f21ee6d41b88659\"\n";
    check(&format!("{key}roles = [\"metric\"]\n"), "service.api_keys[0].roles", "unknown role \"metric\": roles are audit, metrics");
    let scraper = Config::parse(&format!("{key}profiles = []\nroles = [\"metrics\"]\n"), "scraper.toml").expect("a key with role metrics and no profile");
    assert_eq!((scraper.service.api_keys[0].roles.as_slice(), scraper.service.metrics_unauthenticated), (&["metrics".to_owned()][..], false));
    // A template's child cannot get a TUN device of its own; a pool can (issue 11).
    let allowlist = "[profiles.p]\nlanguage = \"python\"\n[profiles.p.network]\nallow = [\"api.example.com:443\"]\n[profiles.p.warm]\n";
    check(&format!("{allowlist}mode = \"template\"\n"), "profiles.p.warm.mode", "an allowlist profile can keep a pool");
    let pool = Config::parse(&format!("{allowlist}mode = \"pool\"\n"), "pool.toml").expect("an allowlist profile may keep a pool");
    assert_eq!(pool.profiles["p"].warm.mode, WarmMode::Pool);
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

/// A file's table of a built-in profile's name is merged into it key by key: one setting
/// changed, the rest of the profile kept (found by a new-user trial: the README's "set `mode =
/// "template"`" for `python-3.13-analysis` was refused for a missing `language`, and with it the
/// profile was silently replaced by one without its environment and limits).
#[test]
fn a_built_in_profiles_table_in_a_file_changes_only_what_it_sets() {
    let builtin = Config::builtin();
    let text = "[profiles.\"python-3.13-analysis\".warm]\nmode = \"template\"\n\
                [profiles.python-default.warm]\npool_size = 5\n\
                [profiles.python-default.limits]\ntimeout_ms = 20000\n\
                [profiles.python-default.env]\nMY_VAR = \"1\"\n";
    let c = Config::builtin().parse_layered(text, "x.toml").expect("a partial table of a built-in profile is accepted");
    let (before, after) = (&builtin.profiles["python-3.13-analysis"], &c.profiles["python-3.13-analysis"]);
    assert_eq!(after.warm.mode, WarmMode::Template);
    assert_eq!(Profile { warm: before.warm.clone(), ..after.clone() }, *before, "only the warm mode changed");
    let (before, after) = (&builtin.profiles["python-default"], &c.profiles["python-default"]);
    assert_eq!((after.warm.pool_size, after.warm.mode, after.limits.timeout_ms), (5, before.warm.mode, 20000));
    assert_eq!(after.limits.memory_max_bytes, before.limits.memory_max_bytes);
    assert_eq!(after.env.get("MY_VAR").map(String::as_str), Some("1"));
    assert_eq!(after.description, before.description);
    // A value of the wrong type in such a table is named with its line in the file.
    let e = Config::builtin().parse_layered("\n[profiles.python-default.limits]\ntimeout_ms = \"soon\"\n", "x.toml").unwrap_err();
    assert_eq!(e.field, "profiles.python-default.limits.timeout_ms");
    assert!(e.message.contains("(line 3)"), "{e}");
    // An unknown key is refused as in any profile.
    let e = Config::builtin().parse_layered("[profiles.python-default.warm]\npool = 5\n", "x.toml").unwrap_err();
    assert_eq!(e.field, "profiles.python-default.warm.pool", "{e}");
}

#[track_caller]
fn check_landlock_min_abi(value: &str, want_err: Option<&str>) {
    let text = format!("[profiles.p]\nlanguage = \"python\"\nlandlock_min_abi = {value}\n");
    match want_err {
        None => {
            let c = Config::parse(&text, "my.toml").expect("must be accepted");
            assert_eq!(c.profiles["p"].landlock_min_abi.to_string(), value);
        }
        Some(needle) => check(&text, "profiles.p.landlock_min_abi", needle),
    }
}

#[test]
fn landlock_min_abi_is_bounded_by_the_newest_abi_known() {
    check_landlock_min_abi("0", None);
    check_landlock_min_abi("1", None);
    check_landlock_min_abi(&LANDLOCK_ABI_MAX.to_string(), None);
    check_landlock_min_abi(&(LANDLOCK_ABI_MAX + 1).to_string(), Some("outside 0..=10"));
    check_landlock_min_abi("99", Some("newest landlock ABI"));
    check_landlock_min_abi("-1", Some("invalid value"));
    check_landlock_min_abi("\"3\"", Some("invalid type"));
}

#[test]
fn landlock_min_abi_defaults_to_any_kernel_with_landlock() {
    let c = Config::parse("[profiles.p]\nlanguage = \"python\"\n", "my.toml").unwrap();
    assert_eq!(c.profiles["p"].landlock_min_abi, 1, "Ubuntu 22.04 (ABI 1) and Debian 12 (ABI 2) must run the default");
    for (name, p) in &Config::builtin().profiles {
        assert_eq!(p.landlock_min_abi, LANDLOCK_MIN_ABI_DEFAULT, "built-in profile {name}");
    }
}

/// Errors found after parsing (validation) carry the line of the field too, as parse errors do.
#[test]
fn validation_errors_name_the_line() {
    let hosts = "[profiles.api]\nlanguage = \"python\"\n[profiles.api.network]\nallow = [\"api.example.com:443\"]\n\
                 hosts = { \"warehouse.internal\" = \"10.1.2.3\" }\n";
    check(hosts, "profiles.api.network.hosts.warehouse.internal", "(line 5)");
    check(hosts, "profiles.api.network.hosts.warehouse.internal", "\"warehouse.internal:PORT\"");
    let allowed = hosts.replace("\"api.example.com:443\"]", "\"api.example.com:443\", \"warehouse.internal:5432\"]");
    Config::parse(&allowed, "my.toml").expect("a hosts name with a rule is accepted");
    check("[profiles.p]\nlanguage = \"python\"\n\n[profiles.p.limits]\nmemory_max_bytes = 5\n", "profiles.p.limits.memory_max_bytes", "(line 5)");
    check(
        "[profiles.p]\nlanguage = \"python\"\n[[profiles.p.filesystem.mounts]]\nhost = \"/srv\"\nsandbox = \"/data\"\n\
         [[profiles.p.filesystem.mounts]]\nhost = \"/srv\"\nsandbox = \"/etc/x\"\n",
        "profiles.p.filesystem.mounts[1]",
        "(line 6)",
    );
    check("[profiles.p]\nlanguage = \"python\"\nenvironment = \"nope\"\n", "profiles.p.environment", "(line 3)");
}

/// The Rust `Default`s and `defaults.toml` say the same: `[runtime]` is `RuntimeConfig::default()`
/// field for field, and the built-in `*-default` profiles write out exactly the defaults of a
/// profile that names nothing (limits, filesystem, output, harness, network, landlock, warm),
/// but for the deliberate differences listed here.
#[test]
fn defaults_toml_and_the_rust_defaults_agree() {
    /// (profile, table, key): values of a default profile that deliberately differ from the
    /// Rust default of the field.
    const DELIBERATE: &[(&str, &str, &str)] = &[
        // A short Python program starts quickest with more than two sandboxes waiting.
        ("python-default", "warm", "pool_size"),
        // A default profile starts warm; Warm::default() is off (set a mode to opt in).
        ("python-default", "warm", "mode"),
        ("typescript-default", "warm", "mode"),
    ];
    let file: toml::Table = DEFAULTS_TOML.parse().expect("defaults.toml is TOML");
    fn table(v: &toml::Value) -> toml::Table {
        v.as_table().cloned().expect("a table")
    }
    fn rust(v: &impl Serialize) -> toml::Table {
        table(&toml::Value::try_from(v).expect("a Rust default serializes"))
    }
    assert_eq!(table(&file["runtime"]), rust(&RuntimeConfig::default()), "[runtime] of defaults.toml and RuntimeConfig::default()");
    let defaults: [(&str, toml::Table); 4] = [
        ("limits", rust(&Limits::default())),
        ("filesystem", rust(&Filesystem::default())),
        ("output", rust(&OutputCaps::default())),
        ("warm", rust(&Warm::default())),
    ];
    let scalars = toml::Table::from_iter([
        ("harness".to_owned(), toml::Value::try_from(Harness::default()).unwrap()),
        ("network".to_owned(), toml::Value::from("none")),
        ("landlock_min_abi".to_owned(), toml::Value::from(i64::from(LANDLOCK_MIN_ABI_DEFAULT))),
    ]);
    assert_eq!(Network::default(), Network::None, "the scalar above");
    for name in ["python-default", "typescript-default"] {
        let profile = table(&file["profiles"][name]);
        let deliberate = |t: &str, k: &str| DELIBERATE.contains(&(name, t, k));
        for (key, want) in &scalars {
            assert_eq!(profile.get(key), Some(want), "profiles.{name}.{key} of defaults.toml and the Rust default");
        }
        for (t, rust) in &defaults {
            let written = table(&profile[*t]);
            for (key, value) in &written {
                let want = rust.get(key).unwrap_or_else(|| panic!("profiles.{name}.{t}.{key}: no such field"));
                assert!(deliberate(t, key) || value == want, "profiles.{name}.{t}.{key} = {value} in defaults.toml, {want} in the Rust default");
                assert!(!deliberate(t, key) || value != want, "profiles.{name}.{t}.{key} agrees now: drop it from DELIBERATE");
            }
            // Every field is written out, but for warm settings that do not apply to the mode.
            if *t != "warm" {
                let missing: Vec<&String> = rust.keys().filter(|k| !written.contains_key(*k)).collect();
                assert!(missing.is_empty(), "profiles.{name}.{t} of defaults.toml leaves out {missing:?}");
            }
        }
    }
}

/// `base = "debian"` needs its `[debian]` table and the table needs the base; suite, package
/// names and mirror are checked; a Debian base runs Python only (no npm, no TypeScript profile).
#[test]
fn debian_base_tables_are_checked() {
    let env = |base: &str, table: &str| format!("[environments.e]\n{base}{table}");
    let good = "\n[environments.e.debian]\nsuite = \"trixie\"\npackages = [\"python3\", \"libstdc++6\", \"libgdal36:amd64\"]\n";
    let c = Config::parse(&env("base = \"debian\"", good), "my.toml").expect("a whole debian table");
    assert_eq!(
        (c.environments["e"].base, c.environments["e"].debian.as_ref().unwrap().mirror.as_str()),
        (EnvironmentBase::Debian, "http://deb.debian.org/debian")
    );
    check(&env("base = \"debian\"", ""), "environments.e.debian", "needs a [debian] table");
    check(&env("base = \"host\"", good), "environments.e.debian", "needs base = \"debian\"");
    check(&env("base = \"debian\"", &good.replace("trixie", "Trixie")), "environments.e.debian.suite", "not a suite name");
    check(
        &env("base = \"debian\"", &good.replace("\"python3\", ", "\"python3; rm -rf /\", ")),
        "environments.e.debian.packages[0]",
        "not a Debian package name",
    );
    check(
        &env("base = \"debian\"", &good.replace("[\"python3\", \"libstdc++6\", \"libgdal36:amd64\"]", "[]")),
        "environments.e.debian.packages",
        "at least one",
    );
    let mirror = |m: &str| env("base = \"debian\"", &format!("{good}mirror = \"{m}\"\n"));
    Config::parse(&mirror("https://mirror.example/debian"), "my.toml").expect("an https mirror");
    check(&mirror("ftp://mirror.example/debian"), "environments.e.debian.mirror", "not an http");
    check(&mirror("http://mirror.example/debian main"), "environments.e.debian.mirror", "not an http");
    check(&env("base = \"debian\"\nnpm = [\"zod@4.6.7\"]", good), "environments.e.npm", "need base = \"host\"");
    let ts = format!("{}[profiles.t]\nlanguage = \"typescript\"\nenvironment = \"e\"\n", env("base = \"debian\"", good));
    check(&ts, "profiles.t.environment", "runs Python only");
    // Names may carry a version (`python-3.13-analysis`), never start with a dot.
    Config::parse("[profiles.\"py-3.13\"]\nlanguage = \"python\"\n", "my.toml").expect("a dotted name");
    check("[profiles.\".hidden\"]\nlanguage = \"python\"\n", "profiles..hidden", "not first");
}

#[test]
fn oci_environments_are_validated_field_by_field() {
    let env = |base: &str, table: &str| format!("[environments.img]\nbase = \"{base}\"\n{table}");
    let oci = |body: &str| env("oci", &format!("[environments.img.oci]\n{body}"));
    let ok = Config::parse(&oci("source = \"/srv/images/python\"\nreference = \"3.13\"\npython = \"/usr/local/bin/python3\"\n"), "x.toml").unwrap();
    let o = ok.environments["img"].oci.as_ref().expect("the [oci] table");
    assert_eq!(
        (o.python.as_str(), o.reference.as_deref(), o.python_version.as_deref(), o.skip_device_nodes),
        ("/usr/local/bin/python3", Some("3.13"), None, false)
    );
    assert_eq!(Config::parse(&oci("source = \"/srv/i.tar\"\n"), "x.toml").unwrap().environments["img"].oci.as_ref().unwrap().python, "/usr/bin/python3");
    check(&env("oci", ""), "environments.img.oci", "needs an [oci] table");
    check(&env("host", "[environments.img.oci]\nsource = \"/srv/i\"\n"), "environments.img.oci", "needs base = \"oci\"");
    check(
        &env("oci", "[environments.img.oci]\nsource = \"/srv/i\"\n[environments.img.debian]\nsuite = \"trixie\"\npackages = [\"python3\"]\n"),
        "environments.img.debian",
        "needs base = \"debian\"",
    );
    check(&oci("source = \"images/python\"\n"), "environments.img.oci.source", "not an absolute path");
    check(&oci("source = \"/srv/../etc\"\n"), "environments.img.oci.source", "without '..'");
    check(&oci("source = \"/srv/i\"\nreference = \"a b\"\n"), "environments.img.oci.reference", "not a reference name");
    check(&oci("source = \"/srv/i\"\npython = \"/opt/python/bin/python3\"\n"), "environments.img.oci.python", "under /usr, /bin or /sbin");
    check(&oci("source = \"/srv/i\"\npython = \"/usr/../opt/python3\"\n"), "environments.img.oci.python", "not an absolute path");
    check(&oci("source = \"/srv/i\"\npython_version = \"3\"\n"), "environments.img.oci.python_version", "major.minor");
    check(&oci("source = \"/srv/i\"\nsha = \"x\"\n"), "environments.img.oci.sha", "unknown field");
    check(&env("oci", "npm = [\"zod@3.25.76\"]\n[environments.img.oci]\nsource = \"/srv/i\"\n"), "environments.img.npm", "a oci base has no Node.js");
}

/// Warm settings are checked whatever the mode: `mode = "off"` with `pool_size = 1000` or
/// `max_forks = 0` is refused (a new-user trial saw both accepted and printed by `profiles show`),
/// as they would be once the mode is turned on or `sandbox run --warm` uses them.
#[test]
fn warm_settings_are_checked_whatever_the_mode() {
    for (setting, field) in
        [("pool_size = 1000", "warm.pool_size"), ("max_forks = 0", "warm.max_forks"), ("template_memory_max_bytes = 1", "warm.template_memory_max_bytes")]
    {
        for mode in ["off", "pool", "template"] {
            let text = format!("[profiles.p]\nlanguage = \"python\"\n[profiles.p.warm]\nmode = \"{mode}\"\n{setting}\n");
            let e = Config::parse(&text, "x.toml").expect_err(&text);
            assert_eq!(e.field, format!("profiles.p.{field}"), "{text}: {e}");
        }
    }
    // A pool needs a member; a template's pool may be empty (children forked at the start).
    let e = Config::parse("[profiles.p]\nlanguage = \"python\"\n[profiles.p.warm]\nmode = \"pool\"\npool_size = 0\n", "x.toml").unwrap_err();
    assert_eq!(e.field, "profiles.p.warm.pool_size");
    Config::parse("[profiles.p]\nlanguage = \"python\"\n[profiles.p.warm]\nmode = \"template\"\npool_size = 0\n", "x.toml")
        .expect("a template without children ahead");
    Config::parse("[profiles.p]\nlanguage = \"python\"\n[profiles.p.warm]\nmode = \"off\"\npool_size = 0\n", "x.toml").expect("off with no pool");
}
