//! Lock files of package environments: what they must agree with and the built-in ones.
//!
//! A Python lock is a pip requirements file in which every line pins `name==version` and
//! carries at least one `--hash=sha256:...` (what `uv pip compile --generate-hashes` writes);
//! the installer runs `uv pip install --require-hashes -r` against it. An npm lock is a
//! `package-lock.json` (lockfile version 2 or 3) whose root dependencies are the environment's
//! pins and whose every package has an `integrity`; the installer runs `npm ci` against it.
//! Both are checked against the `python` and `npm` pins when the configuration is loaded.

use std::collections::BTreeMap;

/// The lock texts of one environment, loaded with the configuration (never from TOML itself).
/// The built-in environments' are borrowed from the binary ([`BUILTIN`], ~68 KB each), so
/// loading or cloning a configuration does not copy them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Locks {
    /// The Python lock (requirements with hashes), if any.
    pub python: Option<std::borrow::Cow<'static, str>>,
    /// The npm `package-lock.json`, if any.
    pub npm: Option<std::borrow::Cow<'static, str>>,
}

/// The locks committed with the built-in environments (`scripts/lock-environments.sh` writes
/// them): `(environment, python lock, npm lock)`.
pub const BUILTIN: &[(&str, Option<&str>, Option<&str>)] = &[
    ("python-analysis", Some(include_str!("locks/python-analysis.python-lock.txt")), None),
    ("python-3.13-analysis", Some(include_str!("locks/python-3.13-analysis.python-lock.txt")), None),
    ("typescript-analysis", None, Some(include_str!("locks/typescript-analysis.package-lock.json"))),
];

/// PEP 503 normalized name: lowercase, runs of `-`, `_`, `.` as one `-`.
pub fn normalize_python_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// The `(normalized name, version) -> hashes` of a Python lock's requirements. Comments,
/// blank lines and line continuations are understood; anything but `name==version` followed
/// by `--hash=ALGO:HEX` options is refused.
/// Errors: the first offending requirement, as text.
pub fn python_lock_entries(lock: &str) -> Result<BTreeMap<(String, String), Vec<String>>, String> {
    let joined = lock.replace("\\\n", " ");
    let mut out = BTreeMap::new();
    for line in joined.lines() {
        let line = line.split(" #").next().unwrap_or("").trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let req = words.next().unwrap_or_default();
        let Some((name, version)) = req.split_once("==") else {
            return Err(format!("{req:?} is not name==version"));
        };
        let mut hashes = Vec::new();
        for w in words {
            match w.strip_prefix("--hash=") {
                Some(h) if h.split_once(':').is_some_and(|(alg, hex)| !alg.is_empty() && !hex.is_empty()) => hashes.push(h.to_owned()),
                _ => return Err(format!("{req}: {w:?} is not a --hash=ALGORITHM:HEX option")),
            }
        }
        if hashes.is_empty() {
            return Err(format!("{req} has no --hash (generate the lock with --generate-hashes)"));
        }
        out.insert((normalize_python_name(name), version.to_owned()), hashes);
    }
    Ok(out)
}

/// Checks that a Python lock pins exactly `pins` (`name==version`, names compared normalized),
/// each with a hash.
/// Errors: what is missing, extra or malformed, as text.
pub fn check_python_lock(pins: &[String], lock: &str) -> Result<(), String> {
    let entries = python_lock_entries(lock)?;
    let wanted: BTreeMap<String, String> = pins.iter().filter_map(|p| p.split_once("==")).map(|(n, v)| (normalize_python_name(n), v.to_owned())).collect();
    let locked: BTreeMap<String, String> = entries.into_keys().collect();
    for (name, version) in &wanted {
        match locked.get(name) {
            None => return Err(format!("the lock has no {name} (pinned {name}=={version}); regenerate it")),
            Some(v) if v != version => return Err(format!("the lock has {name}=={v}, the pins say {name}=={version}; regenerate it")),
            Some(_) => {}
        }
    }
    if let Some((name, version)) = locked.iter().find(|(n, _)| !wanted.contains_key(*n)) {
        return Err(format!("the lock has {name}=={version}, which `python` does not pin (list the whole closure)"));
    }
    Ok(())
}

/// Checks that an npm `package-lock.json` (version 2 or 3) has `pins` (`name@version`) as its
/// root dependencies, each at that version, and an `integrity` for every package it installs.
/// Errors: what differs, as text.
pub fn check_npm_lock(pins: &[String], lock: &str) -> Result<(), String> {
    let v: serde_json::Value = serde_json::from_str(lock).map_err(|e| format!("not JSON: {e}"))?;
    if !matches!(v["lockfileVersion"].as_u64(), Some(2 | 3)) {
        return Err("lockfileVersion must be 2 or 3 (npm 7 or later)".into());
    }
    let packages = v["packages"].as_object().ok_or("no \"packages\" object")?;
    let wanted: BTreeMap<&str, &str> = pins.iter().filter_map(|p| crate::profile::split_npm_pin(p)).collect();
    let root: BTreeMap<&str, &str> = packages
        .get("")
        .and_then(|r| r["dependencies"].as_object())
        .map(|d| d.iter().filter_map(|(k, v)| v.as_str().map(|v| (k.as_str(), v))).collect())
        .unwrap_or_default();
    if root != wanted {
        return Err(format!("its root dependencies {root:?} are not the pins {wanted:?}; regenerate it"));
    }
    for (name, version) in &wanted {
        let got = packages.get(&format!("node_modules/{name}")).and_then(|p| p["version"].as_str());
        if got != Some(*version) {
            return Err(format!("it locks {name} at {got:?}, the pins say {version}; regenerate it"));
        }
    }
    for (path, p) in packages {
        if path.is_empty() || p["link"].as_bool() == Some(true) {
            continue;
        }
        if p["integrity"].as_str().is_none_or(str::is_empty) {
            return Err(format!("{path} has no integrity hash"));
        }
    }
    Ok(())
}

/// `(package path, version)` of the package whose `integrity` is `integrity`, e.g. to name it
/// when npm reports a mismatch.
pub fn npm_package_with_integrity(lock: &str, integrity: &str) -> Option<(String, String)> {
    let v: serde_json::Value = serde_json::from_str(lock).ok()?;
    v["packages"]
        .as_object()?
        .iter()
        .find(|(_, p)| p["integrity"].as_str() == Some(integrity))
        .map(|(path, p)| (path.rsplit_once("node_modules/").map_or(path.as_str(), |(_, n)| n).to_owned(), p["version"].as_str().unwrap_or("?").to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pins(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_builtin_locks_lock_exactly_the_builtin_pins() {
        let config = crate::Config::builtin();
        for (name, python, npm) in BUILTIN {
            let env = &config.environments[*name];
            if let Some(lock) = python {
                assert_eq!(check_python_lock(&env.python, lock), Ok(()), "{name}: scripts/lock-environments.sh regenerates it");
            }
            if let Some(lock) = npm {
                assert_eq!(check_npm_lock(&env.npm, lock), Ok(()), "{name}: scripts/lock-environments.sh regenerates it");
            }
            assert_eq!((env.locks.python.as_deref(), env.locks.npm.as_deref()), (*python, *npm));
        }
    }

    #[test]
    fn python_lock_must_pin_the_same_names_and_versions_each_with_a_hash() {
        let lock = "# c\nIdna==3.20 \\\n    --hash=sha256:aa \\\n    --hash=sha256:bb\ncharset_normalizer==3.5.3 --hash=sha256:cc\n";
        assert_eq!(check_python_lock(&pins(&["idna==3.20", "charset-normalizer==3.5.3"]), lock), Ok(()));
        let e = check_python_lock(&pins(&["idna==3.21", "charset-normalizer==3.5.3"]), lock).unwrap_err();
        assert!(e.contains("idna==3.20") && e.contains("idna==3.21"), "{e}");
        let e = check_python_lock(&pins(&["idna==3.20"]), lock).unwrap_err();
        assert!(e.contains("charset-normalizer==3.5.3") && e.contains("does not pin"), "{e}");
        let e = check_python_lock(&pins(&["idna==3.20"]), "idna==3.20\n").unwrap_err();
        assert!(e.contains("no --hash"), "{e}");
        let e = check_python_lock(&pins(&["idna==3.20"]), "idna>=3 --hash=sha256:aa\n").unwrap_err();
        assert!(e.contains("not name==version"), "{e}");
    }

    #[test]
    fn npm_lock_must_have_the_pins_at_the_root_and_an_integrity_for_each_package() {
        let lock = r#"{"lockfileVersion":3,"packages":{"":{"dependencies":{"a":"1.0.0"}},
            "node_modules/a":{"version":"1.0.0","integrity":"sha512-x"},"node_modules/b":{"version":"2.0.0","integrity":"sha512-y"}}}"#;
        assert_eq!(check_npm_lock(&pins(&["a@1.0.0"]), lock), Ok(()));
        assert!(check_npm_lock(&pins(&["a@1.0.1"]), lock).unwrap_err().contains("not the pins"));
        assert!(check_npm_lock(&pins(&["a@1.0.0"]), &lock.replace(r#","integrity":"sha512-y""#, "")).unwrap_err().contains("node_modules/b has no integrity"));
        assert!(check_npm_lock(&pins(&["a@1.0.0"]), &lock.replace("3,", "1,")).unwrap_err().contains("lockfileVersion"));
        assert_eq!(npm_package_with_integrity(lock, "sha512-y"), Some(("b".into(), "2.0.0".into())));
    }
}
