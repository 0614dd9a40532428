//! Values with their units, for people: `profiles show` and the tables.

/// `ms` milliseconds as the CLI's `--timeout` takes them: `30s`, `1500ms`, `5min`.
pub fn ms(ms: u64) -> String {
    if ms == 0 || !ms.is_multiple_of(1000) {
        format!("{ms}ms")
    } else if ms.is_multiple_of(60_000) {
        format!("{}min", ms / 60_000)
    } else {
        format!("{}s", ms / 1000)
    }
}

/// `bytes` in the largest binary unit that keeps it whole: `512 MiB`, `1536 KiB`, `100 bytes`.
pub fn bytes(bytes: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes != 0 && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} bytes")
}

/// One field of a profile, by its TOML key, as `value unit (explanation)`: `_bytes` fields in
/// bytes with their binary size, `_ms` fields in milliseconds with their duration, and the
/// unitless counts named.
pub fn field(key: &str, value: &serde_json::Value) -> String {
    let text = match value {
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    let Some(n) = value.as_u64() else {
        return match key.rsplit('.').next() {
            Some("cpu_max") => format!("{text} CPUs (cpu.max quota per period)"),
            _ => text,
        };
    };
    match key.rsplit('.').next().unwrap_or(key) {
        k if k.ends_with("_bytes") => format!("{n} bytes ({})", bytes(n)),
        k if k.ends_with("_ms") => format!("{n} ms ({})", ms(n)),
        "cpu_max" => format!("{n} CPUs (cpu.max quota per period)"),
        "pids_max" => format!("{n} processes and threads"),
        "nofile" => format!("{n} open files"),
        "max_forks" => format!("{n} forks"),
        "landlock_min_abi" => format!("ABI {n}"),
        _ => text,
    }
}

/// Every leaf of `v` with its dotted key (`limits.memory_max_bytes`), in order; arrays of
/// scalars stay one value, arrays of tables are numbered (`filesystem.mounts.0.host`).
pub fn leaves(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, serde_json::Value)>) {
    let key = |k: &str| if prefix.is_empty() { k.to_owned() } else { format!("{prefix}.{k}") };
    match v {
        serde_json::Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                leaves(&key(k), v, out);
            }
        }
        serde_json::Value::Array(a) if a.iter().any(|x| x.is_object()) => {
            for (i, v) in a.iter().enumerate() {
                leaves(&key(&i.to_string()), v, out);
            }
        }
        v => out.push((prefix.to_owned(), v.clone())),
    }
}
