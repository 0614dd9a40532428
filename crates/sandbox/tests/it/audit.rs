//! The audit log through the real binary: every kind of outcome recorded with its fields,
//! crash safety (kill -9 mid-run), tamper evidence, and the query API with caller isolation.

use super::http::Server;
use super::*;

/// A fresh data directory, so each test reads only its own log.
fn data_dir() -> PathBuf {
    let d = tempfile::Builder::new().prefix("audit-").tempdir_in(&env().dir).unwrap().keep();
    std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    d
}

fn cli(data: &Path, args: &[&str]) -> Output {
    Command::new(bin()).arg("--config").arg(&env().config).arg("--data-dir").arg(data).args(args).output().unwrap()
}

fn show(data: &Path, id: &str) -> Value {
    let out = cli(data, &["audit", "show", id]);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn run_in(data: &Path, profile: &str, code: &str, extra: &[&str]) -> Value {
    let mut args = vec!["run", "--json", "--profile", profile, "-c", code];
    args.extend_from_slice(extra);
    serde_json::from_slice(&cli(data, &args).stdout).unwrap()
}

#[test]
fn each_outcome_is_recorded_with_its_fields() {
    let data = data_dir();
    let input = scratch_file("in.csv", b"a,b\n1,2\n");
    let file_arg = format!("in.csv={}", input.display());
    let ok = run_in(&data, "python-default", "print(open('in.csv').read().count(','))", &["--file", &file_arg]);
    let r = show(&data, ok["executionId"].as_str().unwrap());
    assert_eq!((r["state"].as_str(), r["status"].as_str(), r["profile"].as_str()), (Some("finished"), Some("ok"), Some("python-default")));
    assert!(r["caller"].as_str().unwrap().starts_with("cli:"));
    assert_eq!(r["request"]["code"]["text"], "print(open('in.csv').read().count(','))");
    assert_eq!(r["request"]["files"][0]["name"], "in.csv");
    assert_eq!(r["request"]["files"][0]["bytes"], 8);
    assert_eq!(r["request"]["files"][0]["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(r["result"]["stdout"]["text"], "2\n");
    assert_eq!(r["result"]["exitCode"], 0);
    assert!(r["result"]["resourceUsage"]["cpuTimeMs"].is_u64() && r["result"]["timing"]["runMs"].is_u64());
    assert!(r["finishedAtMs"].as_i64().unwrap() >= r["receivedAtMs"].as_i64().unwrap());

    let t = run_in(&data, "py-small", "while True: pass", &["--timeout", "1s"]);
    let r = show(&data, t["executionId"].as_str().unwrap());
    assert_eq!((r["status"].as_str(), r["result"]["timedOut"].as_bool()), (Some("timeout"), Some(true)));

    let m = run_in(&data, "py-small", "x = []\nwhile True: x.append(b'x' * (16 << 20))", &[]);
    let r = show(&data, m["executionId"].as_str().unwrap());
    assert_eq!((r["status"].as_str(), r["result"]["oomKilled"].as_bool()), (Some("memory_limit"), Some(true)));
    assert!(r["result"]["resourceUsage"]["peakMemoryBytes"].as_u64().unwrap() > 100 << 20);

    let e = run_in(&data, "python-default", "raise KeyError('missing')", &[]);
    let r = show(&data, e["executionId"].as_str().unwrap());
    assert_eq!((r["status"].as_str(), r["result"]["exitCode"].as_i64()), (Some("error"), Some(1)));
    assert!(r["result"]["stderr"]["text"].as_str().unwrap().contains("KeyError: 'missing'"));
    assert_eq!((r["result"]["error"]["type"].as_str(), r["result"]["error"]["line"].as_u64()), (Some("KeyError"), Some(1)), "{r}");

    // The function harness: its input and its return value are in the record; a return value
    // past the output cap is kept as its prefix, full length and sha256.
    let f = run_in(&data, "python-default", "def main(i):\n    return {'got': i}\n", &["--harness", "function", "--input", "[1, 2]"]);
    let r = show(&data, f["executionId"].as_str().unwrap());
    assert_eq!(r["request"]["input"], serde_json::json!([1, 2]), "{r}");
    assert_eq!(r["result"]["returnData"], serde_json::json!({"got": [1, 2]}), "{r}");
    let big = run_in(&data, "python-default", "def main(i):\n    return 'x' * (1 << 20)\n", &["--harness", "function"]);
    assert_eq!(big["status"], "ok");
    let r = show(&data, big["executionId"].as_str().unwrap());
    assert!(r["result"].get("returnData").is_none(), "{r}");
    assert_eq!((r["result"]["returnDataCapped"]["truncated"].as_bool(), r["result"]["returnDataCapped"]["bytes"].as_u64()), (Some(true), Some((1 << 20) + 2)));

    let bad = format!("../x={}", input.display());
    let j = run_in(&data, "python-default", "print(1)", &["--file", &bad]);
    let r = show(&data, j["executionId"].as_str().unwrap());
    // Refused before it ran, as every door's refusals are: one bounded `rejected` event.
    assert_eq!((r["status"].as_str(), r["request"]["error"]["type"].as_str()), (Some("rejected"), Some("invalid_file_name")));
    assert_eq!(r["request"]["files"]["names"][0], "../x", "the attempt is kept as sent");

    let out = cli(&data, &["audit", "verify"]);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok: 13 events"), "{out:?}");
}

#[test]
fn auth_failures_and_server_refusals_are_recorded() {
    let s = Server::start(
        "[[service.api_keys]]\nname = \"a\"\nsha256 = \"31a65195ae16798d1e0d6d435b997168cc1cc4175b7f8a46c1484ed962f7c041\"\nprofiles = [\"python-default\"]\n",
    );
    let http = reqwest::blocking::Client::new();
    let body = serde_json::json!({"profile": "python-default", "code": "print(1)"});
    let r = http.post(format!("{}/v1/executions", s.url)).bearer_auth("wrong").json(&body).send().unwrap();
    assert_eq!(r.status(), 401);
    let forbidden = serde_json::json!({"profile": "typescript-default", "code": "1"});
    let r = http.post(format!("{}/v1/executions", s.url)).bearer_auth("test-key-all").json(&forbidden).send().unwrap();
    assert_eq!(r.status(), 403);
    let out = cli(&s.data, &["audit", "list", "--json"]);
    let page: Value = serde_json::from_slice(&out.stdout).unwrap();
    let got: Vec<(String, String, String)> = page["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["caller"].as_str().unwrap().into(), r["status"].as_str().unwrap().into(), r["request"]["error"]["type"].as_str().unwrap_or("").into()))
        .collect();
    assert_eq!(got, [("key:a".into(), "rejected".into(), "forbidden_profile".into()), ("unauthenticated".into(), "rejected".into(), "unauthorized".into())]);
}

#[test]
fn kill_9_mid_run_leaves_an_interrupted_record_and_nothing_on_the_host() {
    let mut s = Server::start("");
    let url = s.url.clone();
    let req = std::thread::spawn(move || {
        reqwest::blocking::Client::new()
            .post(format!("{url}/v1/executions"))
            .json(&serde_json::json!({"profile": "python-default", "code": "import time\nprint('up', flush=True)\ntime.sleep(60)"}))
            .send()
    });
    // Wait until the execution is running.
    let deadline = Instant::now() + Duration::from_secs(10);
    let id = loop {
        let out = cli(&s.data, &["audit", "list", "--json", "--status", "running"]);
        let page: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if let Some(id) = page["records"][0]["executionId"].as_str() {
            break id.to_owned();
        }
        assert!(Instant::now() < deadline, "the execution never started");
        std::thread::sleep(Duration::from_millis(100));
    };
    // A record is `running` from its `begin`, which is written while the sandbox is built: wait
    // until its cgroup is there.
    let cgroup_procs = || -> Vec<PathBuf> {
        std::fs::read_dir("/sys/fs/cgroup")
            .unwrap()
            .filter_map(Result::ok)
            .map(|h| h.path().join("sandbox").join(&id).join("cgroup.procs"))
            .chain(std::iter::once(Path::new("/sys/fs/cgroup/sandbox").join(&id).join("cgroup.procs")))
            .filter(|p| p.exists())
            .collect()
    };
    while cgroup_procs().is_empty() {
        assert!(Instant::now() < deadline, "the execution's cgroup never appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    s.kill9();
    assert!(req.join().unwrap().is_err());
    // The program dies with its service at once (the helper's and init's parent-death signals),
    // not only when the next start sweeps.
    let procs = cgroup_procs();
    assert!(!procs.is_empty(), "the execution's cgroup is there until the next start sweeps it");
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left: String = procs.iter().map(|p| std::fs::read_to_string(p).unwrap_or_default()).collect();
        if left.trim().is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the sandbox outlived its service: pids {left}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The next start sweeps what the dead service left and marks the record.
    let s2 = Server::restart(&s);
    let r = show(&s2.data, &id);
    assert_eq!((r["state"].as_str(), r["status"].as_str()), (Some("interrupted"), Some("interrupted")), "{r}");
    assert_gone(&id);
    let ps = Command::new("pgrep").args(["-f", "time.sleep\\(60\\)"]).output().unwrap();
    assert!(ps.stdout.is_empty(), "the program outlived its service: {}", String::from_utf8_lossy(&ps.stdout));
}

/// Issue 17, item 5: deleting the newest events (1, then several) is reported, through the CLI
/// a newcomer uses; the head file next to audit.db is what remembers how far the log reached.
#[test]
fn verify_names_the_newest_events_deleted_with_plain_sql() {
    let data = data_dir();
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(run_in(&data, "python-default", &format!("print({i})"), &[])["executionId"].as_str().unwrap().to_owned());
    }
    let out = cli(&data, &["audit", "verify"]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("head event 8 present"), "{out:?}");
    assert!(data.join("audit.db.head").is_file());
    let db = rusqlite::Connection::open(data.join("audit.db")).unwrap();
    // The last event (the newest execution's finish).
    db.execute("DELETE FROM audit_events WHERE seq = (SELECT MAX(seq) FROM audit_events)", []).unwrap();
    let out = cli(&data, &["audit", "verify"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("BROKEN at event 8") && text.contains(&ids[3]) && text.contains("truncated"), "{text}");
    // Several: the last three executions whole, then a new run appends behind the cut.
    db.execute("DELETE FROM audit_events WHERE seq > 2", []).unwrap();
    run_in(&data, "python-default", "print('after')", &[]);
    let out = cli(&data, &["audit", "verify"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("BROKEN at event 8") && text.contains("truncated"), "{text}");
}

#[test]
fn verify_names_the_record_changed_or_deleted_with_plain_sql() {
    let data = data_dir();
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(run_in(&data, "python-default", &format!("print({i})"), &[])["executionId"].as_str().unwrap().to_owned());
    }
    assert!(cli(&data, &["audit", "verify"]).status.success());
    let db = rusqlite::Connection::open(data.join("audit.db")).unwrap();
    let backup: Vec<(i64, String)> = {
        let mut st = db.prepare("SELECT seq, body FROM audit_events WHERE execution_id = ?1 AND kind = 'finish'").unwrap();
        st.query_map([&ids[1]], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect()
    };
    db.execute("UPDATE audit_events SET body = replace(body, '\"1\\n\"', '\"7\\n\"') WHERE execution_id = ?1 AND kind = 'finish'", [&ids[1]]).unwrap();
    let out = cli(&data, &["audit", "verify"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&ids[1]) && text.contains("changed"), "{text}");
    // Restore, then delete a whole event instead.
    db.execute("UPDATE audit_events SET body = ?1 WHERE seq = ?2", rusqlite::params![backup[0].1, backup[0].0]).unwrap();
    assert!(cli(&data, &["audit", "verify"]).status.success());
    db.execute("DELETE FROM audit_events WHERE execution_id = ?1 AND kind = 'begin'", [&ids[2]]).unwrap();
    let out = cli(&data, &["audit", "verify"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&ids[2]) && text.contains("removed"), "{text}");
}

#[test]
fn query_api_filters_paginates_and_isolates_callers() {
    let keys = "[[service.api_keys]]\nname = \"all\"\nsha256 = \"31a65195ae16798d1e0d6d435b997168cc1cc4175b7f8a46c1484ed962f7c041\"\n\
                [[service.api_keys]]\nname = \"auditor\"\nsha256 = \"8f8d178249f7491637671709aac7e001c228d082a50338b28484fc7d5408cf81\"\nroles = [\"audit\"]\n";
    let s = Server::start(keys);
    let http = reqwest::blocking::Client::new();
    let post = |key: &str, code: &str| {
        http.post(format!("{}/v1/executions", s.url)).bearer_auth(key).json(&serde_json::json!({"profile": "python-default", "code": code})).send().unwrap()
    };
    for i in 0..3 {
        assert_eq!(post("test-key-all", &format!("print({i})")).status(), 200);
    }
    assert_eq!(post("test-key-py", "import sys; sys.exit(2)").status(), 200);
    let get = |key: &str, q: &str| -> Value { http.get(format!("{}/v1/executions{q}", s.url)).bearer_auth(key).send().unwrap().json().unwrap() };
    let own = get("test-key-all", "?limit=2");
    assert_eq!(own["records"].as_array().unwrap().len(), 2);
    assert!(own["records"].as_array().unwrap().iter().all(|r| r["caller"] == "key:all"), "{own}");
    let cursor = own["nextCursor"].as_i64().unwrap();
    let rest = get("test-key-all", &format!("?limit=2&cursor={cursor}"));
    assert_eq!(rest["records"].as_array().unwrap().len(), 1);
    assert!(rest.get("nextCursor").is_none_or(Value::is_null));
    // Asking for someone else's records without the audit role still yields only one's own.
    let sneaky = get("test-key-all", "?caller=key:auditor");
    assert!(sneaky["records"].as_array().unwrap().iter().all(|r| r["caller"] == "key:all"));
    let all = get("test-key-py", "?limit=10");
    assert_eq!(all["records"].as_array().unwrap().len(), 4, "the audit role sees everyone: {all}");
    let errors = get("test-key-py", "?status=error");
    assert_eq!(errors["records"].as_array().unwrap().len(), 1);
    let theirs = errors["records"][0]["executionId"].as_str().unwrap();
    let r = http.get(format!("{}/v1/executions/{theirs}", s.url)).bearer_auth("test-key-all").send().unwrap();
    assert_eq!(r.status(), 404, "another caller's record is invisible");
    let r = http.get(format!("{}/v1/executions/{theirs}", s.url)).bearer_auth("test-key-py").send().unwrap();
    assert_eq!(r.status(), 200);
}

#[test]
fn query_api_refuses_unknown_and_malformed_parameters_by_name() {
    let keys = "[[service.api_keys]]\nname = \"all\"\nsha256 = \"31a65195ae16798d1e0d6d435b997168cc1cc4175b7f8a46c1484ed962f7c041\"\n\
                [[service.api_keys]]\nname = \"auditor\"\nsha256 = \"8f8d178249f7491637671709aac7e001c228d082a50338b28484fc7d5408cf81\"\nroles = [\"audit\"]\n";
    let s = Server::start(keys);
    let http = reqwest::blocking::Client::new();
    let r = http
        .post(format!("{}/v1/executions", s.url))
        .bearer_auth("test-key-all")
        .json(&serde_json::json!({"profile": "python-default", "code": "print(1)"}))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let get = |key: &str, q: &str| -> (u16, String, Value) {
        let r = http.get(format!("{}/v1/executions{q}", s.url)).bearer_auth(key).send().unwrap();
        let ct = r.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
        (r.status().as_u16(), ct, r.json().unwrap_or(Value::Null))
    };
    let count = |key: &str, q: &str| -> usize {
        let (status, _, body) = get(key, q);
        assert_eq!(status, 200, "{q}: {body}");
        body["records"].as_array().unwrap().len()
    };
    // Each refused query next to its accepted twin.
    for (refused, field, twin) in [
        ("?statsu=timeout", "statsu", "?status=ok"),
        ("?limit=abc", "limit", "?limit=1"),
        ("?limit=0", "limit", "?limit=1000"),
        ("?status=timout", "status", "?status=ok"),
        ("?since=2026-12-02", "since", "?since=2000-01-01T00:00:00Z"),
        ("?until=yesterday", "until", "?until=2999-01-01T00:00:00%2B02:00"),
        ("?sinceMs=2000-01-01T00:00:00Z", "sinceMs", "?sinceMs=0"),
        ("?cursor=next", "cursor", "?cursor=999999"),
        ("?status=ok&status=error", "status", "?status=ok&limit=5"),
        ("?since=2000-01-01T00:00:00Z&sinceMs=0", "sinceMs", "?since=2000-01-01T00:00:00Z&untilMs=99999999999999"),
    ] {
        let (status, ct, body) = get("test-key-py", refused);
        assert_eq!((status, ct.as_str()), (400, "application/problem+json"), "{refused}: {body}");
        assert_eq!((body["code"].as_str(), body["field"].as_str()), (Some("invalid_request"), Some(field)), "{refused}: {body}");
        assert_eq!(count("test-key-py", twin), 1, "{twin}");
    }
    // Times are honoured, not ignored.
    assert_eq!(count("test-key-py", "?since=2999-01-01T00:00:00Z"), 0);
    assert_eq!(count("test-key-py", "?until=2000-01-01T00:00:00Z"), 0);
    assert_eq!(count("test-key-py", "?sinceMs=99999999999999"), 0);
    // A caller prefix, for the audit role; others still see only their own.
    assert_eq!(count("test-key-py", "?caller=key:*"), 1);
    assert_eq!(count("test-key-py", "?caller=key:a*"), 1);
    assert_eq!(count("test-key-py", "?caller=key:all"), 1);
    assert_eq!(count("test-key-py", "?caller=key:al"), 0, "without * the name is exact");
    assert_eq!(count("test-key-py", "?caller=cli:*"), 0);
    assert_eq!(count("test-key-all", "?caller=key:*"), 1);
    assert_eq!(count("test-key-all", "?caller=cli:*"), 1, "a caller without the audit role sees its own whatever it asks");
}

#[test]
fn cli_times_callers_and_prefixes() {
    let data = data_dir();
    // Without $USER (a container, a service manager) the caller is still the account name.
    let out = Command::new(bin())
        .arg("--config")
        .arg(&env().config)
        .arg("--data-dir")
        .arg(&data)
        .args(["run", "--json", "--profile", "python-default", "-c", "print(1)"])
        .env_remove("USER")
        .env_remove("SUDO_USER")
        .output()
        .unwrap();
    let id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["executionId"].as_str().unwrap().to_owned();
    let me = nix::unistd::User::from_uid(nix::unistd::getuid()).unwrap().unwrap().name;
    let record = show(&data, &id);
    assert_eq!(record["caller"], format!("cli:{me}"), "{record}");
    let list = |args: &[&str]| -> usize {
        let mut a = vec!["audit", "list", "--json"];
        a.extend_from_slice(args);
        let out = cli(&data, &a);
        assert!(out.status.success(), "{args:?}: {out:?}");
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["records"].as_array().unwrap().len()
    };
    for (args, n) in [
        (&["--since", "1h"][..], 1),
        (&["--until", "1h"], 0),
        (&["--since", "2000-01-01"], 1),
        (&["--since", "2999-01-01"], 0),
        (&["--since", "2000-01-01T00:00:00Z"], 1),
        (&["--until", "2000-01-01T01:00:00+01:00"], 0),
        (&["--caller", "cli:*"], 1),
        (&["--caller", &format!("cli:{me}")], 1),
        (&["--caller", "cli:"], 0),
        (&["--caller", "key:*"], 0),
        (&["--status", "ok"], 1),
    ] {
        assert_eq!(list(args), n, "{args:?}");
    }
    for bad in [&["--since", "yesterday"][..], &["--since", "2026-12-32"], &["--status", "timout"]] {
        let mut a = vec!["audit", "list"];
        a.extend_from_slice(bad);
        let out = cli(&data, &a);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(bad[0]), "{out:?}");
    }
    // show, export and list print one time format.
    let table = String::from_utf8(cli(&data, &["audit", "list"]).stdout).unwrap();
    let at = record["receivedAt"].as_str().unwrap();
    assert!(table.lines().any(|l| l.contains(&id) && l.ends_with(at)), "{at} in {table}");
    let export = String::from_utf8(cli(&data, &["audit", "export"]).stdout).unwrap();
    let first: Value = serde_json::from_str(export.lines().next().unwrap()).unwrap();
    assert_eq!(first["at"].as_str(), Some(at), "{first}");
}

#[test]
fn retention_prunes_old_records_and_verify_still_passes() {
    let data = data_dir();
    for i in 0..4 {
        run_in(&data, "python-default", &format!("print({i})"), &[]);
    }
    let out = cli(&data, &["audit", "prune", "--keep-last", "4"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "pruned 4 events (through #4)\n", "{out:?}");
    let page: Value = serde_json::from_slice(&cli(&data, &["audit", "list", "--json"]).stdout).unwrap();
    assert_eq!(page["records"].as_array().unwrap().len(), 2, "{page}");
    let out = cli(&data, &["audit", "verify"]);
    assert!(out.status.success(), "{out:?}");
    let db = rusqlite::Connection::open(data.join("audit.db")).unwrap();
    db.execute("DELETE FROM audit_events WHERE kind = 'checkpoint'", []).unwrap();
    assert_eq!(cli(&data, &["audit", "verify"]).status.code(), Some(1), "the checkpoint vouches for the pruned prefix");
}

#[test]
fn postgres_backend_records_and_verifies_through_the_cli() {
    let Ok(admin) = std::env::var("SANDBOX_TEST_POSTGRES_URL") else {
        assert!(std::env::var_os("CI").is_none(), "CI must provide SANDBOX_TEST_POSTGRES_URL (scripts/test.sh starts PostgreSQL)");
        eprintln!("skipped: PostgreSQL backend (set SANDBOX_TEST_POSTGRES_URL to run it)");
        return;
    };
    let db = format!("audit_it_{}", std::process::id());
    let mut c = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
    c.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")).unwrap();
    c.batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
    let data = data_dir();
    let config = data.join("pg.toml");
    std::fs::write(&config, format!("{TEST_CONFIG}\n[audit]\nurl = \"{admin} dbname={db}\"\n")).unwrap();
    let pg_cli = |args: &[&str]| Command::new(bin()).arg("--config").arg(&config).arg("--data-dir").arg(&data).args(args).output().unwrap();
    let r: Value = serde_json::from_slice(&pg_cli(&["run", "--json", "-c", "print('pg')"]).stdout).unwrap();
    assert_eq!(r["stdout"], "pg\n");
    let id = r["executionId"].as_str().unwrap();
    let out = pg_cli(&["audit", "show", id]);
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((rec["status"].as_str(), rec["result"]["stdout"]["text"].as_str()), (Some("ok"), Some("pg\n")));
    assert!(!data.join("audit.db").exists(), "nothing went to SQLite");
    assert!(pg_cli(&["audit", "verify"]).status.success());
    let mut in_db = postgres::Client::connect(&format!("{admin} dbname={db}"), postgres::NoTls).unwrap();
    in_db.batch_execute("UPDATE audit_events SET caller = 'someone-else' WHERE kind = 'begin'").unwrap();
    drop(in_db);
    let out = pg_cli(&["audit", "verify"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains(id));
    // Issue 17, item 5: the newest events deleted in the database, one and then several, are
    // seen through this node's head file (a row in the same database would go with them).
    let mut in_db = postgres::Client::connect(&format!("{admin} dbname={db}"), postgres::NoTls).unwrap();
    let caller = rec["caller"].as_str().unwrap();
    in_db.execute("UPDATE audit_events SET caller = $1 WHERE kind = 'begin'", &[&caller]).unwrap();
    let rerun: Value = serde_json::from_slice(&pg_cli(&["run", "--json", "-c", "print(2)"]).stdout).unwrap();
    let newest = rerun["executionId"].as_str().unwrap();
    let verified = pg_cli(&["audit", "verify"]);
    assert!(verified.status.success(), "{verified:?}");
    in_db.batch_execute("DELETE FROM audit_events WHERE seq = (SELECT MAX(seq) FROM audit_events)").unwrap();
    let out = pg_cli(&["audit", "verify"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(newest) && text.contains("truncated"), "{text}");
    in_db.batch_execute("DELETE FROM audit_events WHERE seq > 1").unwrap();
    let out = pg_cli(&["audit", "verify"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("truncated"), "{out:?}");
    drop(in_db);
    drop(c);
    let mut admin_c = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
    let _ = admin_c.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
}

#[test]
fn an_execution_that_cannot_be_recorded_does_not_run() {
    let data = data_dir();
    std::fs::write(data.join("audit.db"), b"this is not a database, and no execution may run unrecorded").unwrap();
    let marker = data.join("ran");
    let out = cli(&data, &["run", "-c", "print('RAN')"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open the audit log"), "{out:?}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("RAN"));
    assert!(!marker.exists());
    assert!(!data.join("executions").exists() || std::fs::read_dir(data.join("executions")).unwrap().next().is_none());
}

/// A run starts its sandbox while its audit `begin` is written, and its program waits in the
/// sandbox for the go that follows a durable `begin`: cold (init holds it), forked from a
/// template (the child, its sandbox's init, holds it), in a child forked ahead or a pooled
/// sandbox (the go is not sent). When the `begin` fails (here a trigger refuses it, as a full
/// disk would), the run is refused and the program never starts, in any of these starts, and
/// no cold fallback starts it either: its output, streamed live by `sandbox run`, never
/// appears, and nothing of it is left.
#[test]
fn an_execution_whose_begin_fails_is_refused_before_its_program_starts() {
    let data = data_dir();
    assert_eq!(run_in(&data, "python-default", "pass", &[])["status"], "ok", "a first run creates the log");
    let db = rusqlite::Connection::open(data.join("audit.db")).unwrap();
    db.execute_batch(
        "CREATE TRIGGER refuse_begin BEFORE INSERT ON audit_events WHEN NEW.kind = 'begin' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;",
    )
    .unwrap();
    drop(db);
    let program = "import time\nprint('RAN', flush=True)\ntime.sleep(3)";
    for how in [None, Some("--warm"), Some("--warm=prefork"), Some("--warm=pool")] {
        // Streamed: a program that had started would have printed at once.
        let start = Instant::now();
        // With the engine's warnings: a warm start that fell back to cold would say so.
        let out = Command::new(bin())
            .arg("--config")
            .arg(&env().config)
            .arg("--data-dir")
            .arg(&data)
            .args([&["run"][..], how.as_slice(), &["-c", program]].concat())
            .env("SANDBOX_LOG", "sandbox_engine=warn")
            .output()
            .unwrap();
        // Exit 3: the service cannot run it now (README, `sandbox run`'s exit codes).
        assert_eq!(out.status.code(), Some(3), "{how:?}: {out:?}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("RAN"), "{how:?}: the program ran unrecorded: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("audit_unavailable"), "{how:?}: {out:?}");
        assert!(!stderr.contains("cannot start warm") && !stderr.contains("starting it cold"), "{how:?}: a cold start followed the refusal: {stderr}");
        assert!(start.elapsed() < Duration::from_secs(3) || how.is_some(), "the refusal waited for the program: {:?}", start.elapsed());
        let left: Vec<_> = std::fs::read_dir(data.join("executions")).map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect()).unwrap_or_default();
        assert!(left.is_empty(), "{how:?}: execution directories left: {left:?}");
    }
    let r = run_in(&data, "python-default", program, &[]);
    assert_eq!((r["status"].as_str(), r["error"]["type"].as_str()), (Some("rejected"), Some("audit_unavailable")), "{r}");
    let id = r["executionId"].as_str().unwrap();
    let left: Vec<_> = std::fs::read_dir(data.join("executions")).map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "execution directories left: {left:?}");
    assert!(!std::fs::read_to_string("/proc/self/mountinfo").unwrap().contains(id), "a mount of {id} is left");
    for h in std::fs::read_dir("/sys/fs/cgroup").unwrap().filter_map(Result::ok) {
        assert!(!h.path().join("sandbox").join(id).exists(), "cgroup of {id} left in {}", h.path().display());
    }
}

/// A fresh data directory whose log exists and is held by another writer (the returned
/// connection, in an exclusive transaction: `COMMIT` lets go), and `sandbox <args>` started in
/// it, stdout and stderr piped.
fn run_while_the_log_is_held(args: &[&str]) -> (PathBuf, rusqlite::Connection, std::process::Child) {
    let data = data_dir();
    assert_eq!(run_in(&data, "python-default", "pass", &[])["status"], "ok", "a first run creates the log");
    let db = rusqlite::Connection::open(data.join("audit.db")).unwrap();
    db.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let child = interruptible(Command::new(bin()).arg("--config").arg(&env().config).arg("--data-dir").arg(&data).args(args))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    (data, db, child)
}

/// A `sandbox run` opens its audit log and writes its `begin` while its sandbox is built
/// (`audit::engine_opening`), but its program starts only once the `begin` is in the log: here
/// another writer holds the log for a second, and the program's first instruction comes after
/// that writer let go (cold, or in the warm mode the suite runs in).
#[test]
fn a_cli_runs_program_starts_only_after_its_begin_is_in_the_log() {
    let (data, db, child) =
        run_while_the_log_is_held(&[&["run", "--json"][..], warm_flag().as_slice(), &["-c", "import time\nprint(time.time_ns())"]].concat());
    std::thread::sleep(Duration::from_secs(1));
    let released = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    db.execute_batch("COMMIT").unwrap();
    let out = child.wait_with_output().unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(r["status"], "ok", "{r}");
    let started: u128 = r["stdout"].as_str().unwrap().trim().parse().unwrap();
    assert!(started > released, "the program started {} ms before its begin could be written", (released - started) / 1_000_000);
    assert_eq!(show(&data, r["executionId"].as_str().unwrap())["state"], "finished");
}

/// Ctrl-C while a `sandbox run`'s `begin` waits for the audit log (another writer holds it, as
/// a busy or unanswering database would): the execution is ended without its program starting,
/// and a second Ctrl-C ends the command at once (by the signal) instead of leaving it to wait for the
/// log; the next run finds nothing of it left.
#[test]
fn a_second_signal_ends_a_cli_run_whose_begin_waits_for_the_log() {
    let (data, db, child) = run_while_the_log_is_held(&["run", "-c", "print('RAN', flush=True)"]);
    // Its sandbox is built while the log is held: then it waits for its go.
    let executions = data.join("executions");
    let deadline = Instant::now() + Duration::from_secs(10);
    let ids = loop {
        let ids: Vec<String> = std::fs::read_dir(&executions)
            .map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        if !ids.is_empty() {
            break ids;
        }
        assert!(Instant::now() < deadline, "no sandbox was built");
        std::thread::sleep(Duration::from_millis(5));
    };
    std::thread::sleep(Duration::from_millis(200));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let signalled = Instant::now();
    let out = child.wait_with_output().unwrap();
    // Ended while the log is still held: its `begin` would have waited its 10 s busy timeout.
    assert!(signalled.elapsed() < Duration::from_secs(5), "the second signal waited {:?}", signalled.elapsed());
    db.execute_batch("COMMIT").unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ended_by(out.status, nix::sys::signal::Signal::SIGINT, &stderr);
    assert!(stderr.contains("interrupted again by SIGINT"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("RAN"), "the program ran: {out:?}");
    assert_eq!(run_in(&data, "python-default", "pass", &[])["status"], "ok");
    for id in &ids {
        assert_gone_from(&data, id);
    }
}

/// Ctrl-C while a refusal is being recorded (here the log is held by another writer, so the
/// `rejected` event waits): the refusal is still recorded and reported, and the command ends by the signal
/// as interrupted, not with the refusal's code. `--warm`, whose signal handling starts before the
/// request is admitted (a cold run's starts after, and a signal before then ends it at once).
#[test]
fn a_signal_while_a_refusal_is_recorded_exits_as_interrupted() {
    let (data, db, child) = run_while_the_log_is_held(&["run", "--warm", "--profile", "no-such-profile", "-c", "pass"]);
    std::thread::sleep(Duration::from_millis(700));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()), nix::sys::signal::Signal::SIGINT).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    db.execute_batch("COMMIT").unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ended_by(out.status, nix::sys::signal::Signal::SIGINT, &stderr);
    assert!(stderr.contains("no-such-profile") && stderr.contains("interrupted by SIGINT"), "{stderr}");
    let listed: Value = serde_json::from_slice(&cli(&data, &["audit", "list", "--json", "--status", "rejected"]).stdout).unwrap();
    assert_eq!(listed["records"].as_array().map(Vec::len), Some(1), "the refusal is recorded: {listed}");
}

/// A first `sandbox run` in a data directory that does not exist yet, cold and warm: the audit
/// log's open (which makes the directory) runs beside the sandbox's preparation and a warm
/// start's template and pool, which make their directories in it; two threads making the same
/// missing parent raced, and about one warm start in three failed ("create .../executions").
#[test]
fn a_first_run_in_a_new_data_directory_starts_cold_and_warm() {
    for i in 0..6 {
        let parent = data_dir();
        let data = parent.join("data");
        let how: &[&str] = if i % 2 == 0 { &["--warm=prefork", "--profile", "py-mounts"] } else { &[] };
        let out = Command::new(bin())
            .arg("--config")
            .arg(&env().config)
            .arg("--data-dir")
            .arg(&data)
            .args([&["run"][..], how, &["-c", "print('up')"]].concat())
            .output()
            .unwrap();
        assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stdout).as_ref()), (Some(0), "up\n"), "{how:?}: {out:?}");
    }
}

/// `sandbox run` in `data` of a program that prints `up`, then runs `rest` (Python, `time`
/// imported): returned once `up` was read, with the rest of its stdout.
fn started(data: &Path, rest: &str) -> (std::process::Child, std::io::BufReader<std::process::ChildStdout>) {
    use std::io::BufRead as _;
    let mut child = Command::new(bin())
        .arg("--config")
        .arg(&env().config)
        .arg("--data-dir")
        .arg(data)
        .args(["run", "-c", &format!("import time\nprint('up', flush=True)\n{rest}")])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "up\n");
    (child, out)
}

/// An execution's directory (`<data>/executions/<id>`) keeps its scratch state (the owner file,
/// the mount points) on a small tmpfs of its own, mounted nosuid, nodev and noexec, reachable only
/// by the sandbox's root: on the data directory's filesystem there is only the directory and the
/// owner file under the tmpfs (five journaled changes, not about twelve that every fsync of the
/// audit log, on the same filesystem, would wait for). After the run nothing of it is left.
#[test]
fn an_execution_directory_is_a_tmpfs_of_its_own_and_gone_after_the_run() {
    use std::os::unix::fs::MetadataExt as _;
    let data = data_dir();
    let (mut child, _) = started(&data, "time.sleep(2)");
    let dirs: Vec<PathBuf> = std::fs::read_dir(data.join("executions")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let dir = &dirs[0];
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mount = mountinfo
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(dir.to_str().unwrap()))
        .unwrap_or_else(|| panic!("{} is not a mount point:\n{mountinfo}", dir.display()));
    let (options, fstype) = (mount.split(' ').nth(5).unwrap(), mount.split(" - ").nth(1).unwrap().split(' ').next().unwrap());
    assert_eq!(fstype, "tmpfs", "{mount}");
    for flag in ["nosuid", "nodev", "noexec"] {
        assert!(options.split(',').any(|o| o == flag), "{flag} missing: {mount}");
    }
    let owner = nix::sys::statfs::statfs(&dir.join("owner")).unwrap();
    assert_eq!(owner.filesystem_type(), nix::sys::statfs::TMPFS_MAGIC, "the owner file is not on the tmpfs");
    let meta = std::fs::metadata(dir).unwrap();
    assert_eq!((meta.mode() & 0o777, meta.uid()), (0o700, UID_BASE), "{}", dir.display());
    assert!(child.wait().unwrap().success());
    let id = dir.file_name().unwrap().to_str().unwrap();
    assert!(!dir.exists(), "{} is left", dir.display());
    assert!(!std::fs::read_to_string("/proc/self/mountinfo").unwrap().contains(id), "a mount of {id} is left");
}

/// A finished execution's directory is not removed but renamed into `<data>/executions-pool/`,
/// empty, and the next execution renames it to its own name (no directory block allocated or
/// freed on the data directory's disk, a synchronous TRIM on a `discard` mount); the pool holds
/// one directory per execution that ran at once, at most 16, and only empty ones: a teardown
/// that finds every place taken, or anything but its owner file in the directory, removes it.
#[test]
fn finished_execution_directories_are_pooled_empty_and_taken_by_the_next() {
    use std::os::unix::fs::MetadataExt as _;
    let data = data_dir();
    let (executions, pool) = (data.join("executions"), data.join("executions-pool"));
    let names = |dir: &Path| -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
        v.sort();
        v
    };
    assert_eq!(run_in(&data, "python-default", "pass", &[])["status"], "ok");
    assert_eq!((names(&executions), names(&pool)), (vec![], vec!["0".to_owned()]));
    let pooled = std::fs::metadata(pool.join("0")).unwrap();
    assert!(pooled.is_dir() && names(&pool.join("0")).is_empty(), "the pooled directory is not empty");
    assert_eq!((pooled.mode() & 0o777, pooled.uid()), (0o700, 0));

    // The next execution runs in the same directory, renamed (the entry's inode: a stat would
    // see the tmpfs mounted on it).
    let (mut child, _) = started(&data, "time.sleep(1)");
    let dirs: Vec<(String, u64)> = std::fs::read_dir(&executions)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::os::unix::fs::DirEntryExt::ino(&e)))
        .collect();
    assert_eq!((dirs.len(), names(&pool)), (1, vec![]), "{dirs:?}");
    assert_eq!(dirs[0].1, pooled.ino(), "the pooled directory was not taken");
    assert!(child.wait().unwrap().success());
    assert_gone_from(&data, &dirs[0].0);
    assert_eq!(names(&pool), vec!["0".to_owned()]);
    assert_eq!(std::fs::metadata(pool.join("0")).unwrap().ino(), pooled.ino());

    // Three at once: three directories pooled.
    let runs: Vec<_> = (0..3).map(|_| started(&data, "time.sleep(1)")).collect();
    for (mut child, _) in runs {
        assert!(child.wait().unwrap().success());
    }
    assert_eq!((names(&executions), names(&pool)), (vec![], vec!["0".to_owned(), "1".to_owned(), "2".to_owned()]));

    // A directory with something else in it is removed, not pooled.
    std::fs::write(pool.join("0").join("stray"), "x").unwrap();
    std::fs::write(pool.join("1").join("stray"), "x").unwrap();
    std::fs::write(pool.join("2").join("stray"), "x").unwrap();
    assert_eq!(run_in(&data, "python-default", "pass", &[])["status"], "ok");
    assert_eq!((names(&executions), names(&pool)), (vec![], vec!["1".to_owned(), "2".to_owned()]), "a directory with a stray file was pooled");
    for n in ["1", "2"] {
        std::fs::remove_dir_all(pool.join(n)).unwrap();
    }

    // Every place taken: the finished execution's directory is removed.
    for n in 0..16 {
        std::fs::create_dir(pool.join(n.to_string())).unwrap();
    }
    let (mut child, _) = started(&data, "time.sleep(0.5)");
    let id = names(&executions).pop().expect("the execution's directory");
    std::fs::create_dir(pool.join("0")).unwrap();
    assert!(child.wait().unwrap().success());
    assert_gone_from(&data, &id);
    assert_eq!(names(&pool).len(), 16, "{:?}", names(&pool));
    assert!(names(&executions).is_empty());
}

/// A process sharing the data directory from another mount namespace, one that the execution's
/// tmpfs does not reach (made before it), finds the owner file under it, naming the live
/// execution's process: its start-up sweep leaves the live execution alone even once the
/// directory is old (without that file it took it for a dead service's, killed its processes
/// and removed its directory). The directory's age counts from its ctime, which a rename sets
/// (a directory taken from the pool is old by its mtime), so the test reads the owner file the
/// other namespace sees rather than ageing the directory.
#[test]
fn a_sweep_from_another_mount_namespace_leaves_a_live_execution_alone() {
    use std::io::{BufRead as _, Write as _};
    let data = data_dir();
    let config = env().config.to_str().unwrap().to_owned();
    let script = "echo ready; read go; cat \"$1\"/executions/*/owner; exec \"$2\" --config \"$3\" --data-dir \"$1\" run -c 'print(7)'";
    let mut other = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script, "sh", data.to_str().unwrap(), bin(), &config])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The other namespace exists (its shell runs) before the execution's tmpfs is mounted.
    let mut other_out = std::io::BufReader::new(other.stdout.take().unwrap());
    let mut line = String::new();
    other_out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let (mut run, mut out) = started(&data, "time.sleep(3)\nprint('done')");
    other.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut swept = String::new();
    std::io::Read::read_to_string(&mut other_out, &mut swept).unwrap();
    let start = sandbox_runtime::process::start_time(run.id()).expect("the live run's process runs");
    let owner = format!("{} {start}\n", run.id());
    assert_eq!((other.wait().unwrap().code(), swept.as_str()), (Some(0), format!("{owner}7\n").as_str()), "the other namespace's owner file and run");
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "done\n", "the live execution was swept from under it");
    assert!(run.wait().unwrap().success());
}

/// Every start sweeps what dead processes left in `executions/`, while other processes create
/// theirs beside it: a directory whose owner file is missing or not yet whole is one being
/// created (kept while young), a dead owner's is swept. (A template's launch wrote its owner
/// file in place, and a concurrent sweep that read it empty removed the directory under it.)
#[test]
fn the_start_up_sweep_keeps_a_directory_being_created_and_removes_a_dead_owners() {
    let data = data_dir();
    assert_eq!(run_in(&data, "python-default", "pass", &[])["status"], "ok");
    let executions = data.join("executions");
    let (young_empty, young_missing, dead) = (executions.join("being-made-1"), executions.join("being-made-2"), executions.join("dead-owner"));
    for d in [&young_empty, &young_missing, &dead] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(young_empty.join("owner"), "").unwrap();
    // A directory just taken from the pool, before its owner file: old by its mtime, young by
    // its ctime (the rename's).
    let pooled = data.join("executions-pool").join("0");
    std::fs::create_dir_all(&pooled).unwrap();
    let long_ago = nix::sys::time::TimeSpec::new(1_000_000_000, 0);
    nix::sys::stat::utimensat(nix::fcntl::AT_FDCWD, &pooled, &long_ago, &long_ago, nix::sys::stat::UtimensatFlags::NoFollowSymlink).unwrap();
    let young_taken = executions.join("being-made-3");
    std::fs::rename(&pooled, &young_taken).unwrap();
    // pid 1 with a start time one tick after its real one: a dead owner (a pid reused since).
    let pid1_start = sandbox_runtime::process::start_time(1).expect("pid 1 runs");
    std::fs::write(dead.join("owner"), format!("1 {}\n", pid1_start + 1)).unwrap();
    assert_eq!(run_in(&data, "python-default", "pass", &[])["status"], "ok");
    assert!(young_empty.exists(), "a young directory with an empty owner file was swept");
    assert!(young_missing.exists(), "a young directory without an owner file was swept");
    assert!(young_taken.exists(), "a directory just taken from the pool (an old mtime) was swept");
    assert!(!dead.exists(), "a dead owner's directory was kept");
}

/// A power loss right after a fresh data directory's first run: the head file holds its marks
/// after the remount, and the next run and `verify` succeed. The head's writes are not synced,
/// but those that make the file longer are: a file system with delayed allocation (ext4, XFS)
/// commits a new file's size before its data, and an unsynced first write left a head of zeros
/// or none, which refused every later run. The power loss is `FS_IOC_SHUTDOWN` with
/// `FS_GOING_DOWN_NOLOGFLUSH` on an ext4 image: nothing written after it reaches the image.
#[test]
fn a_power_loss_after_a_fresh_logs_first_run_leaves_a_usable_head() {
    struct Mounted(PathBuf);
    impl Drop for Mounted {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let mount = |image: &Path, at: &Path| -> Mounted {
        // A journal commit every second (the default is 5): the wait below has room on a busy host.
        let out = Command::new("mount").arg("-o").arg("loop,commit=1").arg(image).arg(at).output().unwrap();
        assert!(out.status.success(), "mount: {out:?}");
        Mounted(at.to_owned())
    };
    let dir = data_dir();
    let image = dir.join("ext4.img");
    std::fs::File::create(&image).unwrap().set_len(64 << 20).unwrap();
    let out = Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image).output().unwrap();
    assert!(out.status.success(), "mkfs.ext4: {out:?}");
    let at = dir.join("mnt");
    std::fs::create_dir(&at).unwrap();
    let mounted = mount(&image, &at);
    let data = at.join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    assert_eq!(run_in(&data, "python-default", "print(1)", &[])["status"], "ok");
    // ext4 commits its journal every second here: the head file's creation and size are on the
    // image.
    std::thread::sleep(Duration::from_secs(7));
    let shutdown = "import fcntl, os, struct, sys; fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.ioctl(fd, 0x8004587d, struct.pack('I', 2))";
    let out = Command::new("python3").args(["-c", shutdown]).arg(&at).output().unwrap();
    assert!(out.status.success(), "FS_IOC_SHUTDOWN: {out:?}");
    drop(mounted);
    let _mounted = mount(&image, &at);
    let head = std::fs::read(data.join("audit.db.head")).unwrap();
    assert_eq!(head.len(), 1024, "both slots on the image: {:?}", String::from_utf8_lossy(&head));
    let out = cli(&data, &["audit", "verify"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(run_in(&data, "python-default", "print(2)", &[])["status"], "ok", "the next run is recorded");
    let out = cli(&data, &["audit", "verify"]);
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("head event 4 present"), "{out:?}");
}

/// Each `sandbox run` opens the log on a connection of its own, and SQLite syncs the directory
/// at a connection's first WAL sync: one more disk flush per run (0.25 ms to milliseconds,
/// beside the `begin`'s own) for an entry on the disk since the log's first run. The bundled
/// SQLite is built without those syncs (`.cargo/config.toml`); the log's open syncs the
/// directory itself when the WAL is new, before any commit. Traced (`strace -y`): the first
/// run in a new data directory syncs it before its first commit's sync, a later run syncs only
/// the log's files.
#[test]
fn a_run_on_an_existing_log_syncs_no_directory() {
    // strace itself may fail on a busy host ("ptrace(PTRACE_LISTEN, ...): Input/output error",
    // after which it SIGTERMs the command it traces): that attempt is strace's, and the whole
    // check starts again on a fresh data directory (its first run must be the log's first).
    for attempt in 1..=3 {
        let data = data_dir();
        let traced = |name: &str| -> Option<Vec<String>> {
            let trace = env().dir.join(format!("{}.{name}.strace", data.file_name().unwrap().to_string_lossy()));
            let out = Command::new("strace")
                .args(["-f", "-qq", "-y", "-e", "trace=fsync,fdatasync,syncfs,sync_file_range", "-o"])
                .arg(&trace)
                .arg(bin())
                .arg("--config")
                .arg(&env().config)
                .arg("--data-dir")
                .arg(&data)
                .args(["run", "-c", "print(1)"])
                .output()
                .unwrap();
            if !out.status.success() && String::from_utf8_lossy(&out.stderr).starts_with("strace: ") && attempt < 3 {
                let _ = std::fs::remove_file(&trace);
                return None;
            }
            assert!(out.status.success(), "{out:?}");
            // A call another thread interrupts is two lines, "… <unfinished ...>" (with the
            // file) and "<... fdatasync resumed>": only the first names what was synced.
            let lines =
                std::fs::read_to_string(&trace).unwrap().lines().filter(|l| l.contains("sync") && !l.contains(" resumed>")).map(str::to_owned).collect();
            std::fs::remove_file(&trace).unwrap();
            Some(lines)
        };
        // "fsync(5</dir>)", or "fsync(5</dir> <unfinished ...>" when another thread's call
        // interleaved.
        let the_directory = [format!("<{}>)", data.display()), format!("<{}> <unfinished", data.display())];
        let Some(first) = traced("first") else { continue };
        let dir_synced = first.iter().position(|l| the_directory.iter().any(|d| l.contains(d.as_str())));
        let wal_synced = first.iter().position(|l| l.contains("/audit.db-wal>"));
        assert!(dir_synced.is_some() && dir_synced < wal_synced, "the first run made the log: its directory is synced before the first commit\n{first:#?}");
        let Some(second) = traced("second") else { continue };
        assert!(second.iter().any(|l| l.contains("/audit.db-wal>")), "the commits are synced\n{second:#?}");
        let others: Vec<&String> = second.iter().filter(|l| !["/audit.db-wal>", "/audit.db>", "/audit.db.head>"].iter().any(|f| l.contains(f))).collect();
        assert!(others.is_empty(), "a later run syncs only the log's files: {others:#?}");
        return;
    }
}
