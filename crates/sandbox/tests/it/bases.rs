//! Environments on a Debian base: the built-in `python-3.13-analysis` (CPython 3.13 from a
//! trixie root built by mmdebstrap) runs the data-analyst example with the host's results; a
//! representative subset of the isolation and limit tests passes on it exactly as on the host
//! base; garbage collection never removes a base a running execution uses.

use super::examples::{dataset, on_host, png_size, repo};
use super::*;

/// The test profile on the Debian base (`py-small`'s limits).
const DEBIAN: &str = "py313-small";

fn cli(config: &Path, args: &[&str]) -> Output {
    Command::new(bin()).arg("--config").arg(config).arg("--data-dir").arg(&env().data).args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn the_data_analyst_example_runs_on_python_3_13_from_a_debian_base_with_the_hosts_figures() {
    debian_environment_installed();
    let script = repo().join("examples/data-analyst/analysis.py");
    let file_arg = format!("data.csv={}", dataset().display());
    let code = std::fs::read_to_string(&script).unwrap() + "import sys\nprint('python', sys.version)\n";
    let r = run("python-3.13-analysis", &code, &["--file", &file_arg]);
    assert_eq!(r.status(), "ok", "{r:?}");
    let (stats, version) = r.stdout().rsplit_once("python ").expect("the version line");
    assert!(version.starts_with("3.13."), "the base's CPython 3.13 ran it: {r:?}");
    // The same statistics as pandas computes on the host (CPython 3.11, the host base's).
    let (host_stdout, _) = on_host(&script, &[]);
    assert_eq!(stats, host_stdout, "{r:?}");
    assert_eq!(r.stderr_of_program(), "", "{r:?}");
    assert_eq!(png_size(&r.file_bytes("output.png").expect("output.png returned")), (1000, 600));
    // The host base is untouched: its profile still runs the host's Python.
    let host = run("python-analysis", "import sys, pandas\nprint(sys.version_info[:2] != (3, 13), sys.executable)", &[]);
    assert_eq!(host.stdout(), "True /usr/bin/python3\n", "{host:?}");
}

#[test]
fn a_debian_base_run_sees_the_bases_system_and_nothing_of_the_hosts() {
    debian_environment_installed();
    let code = "import os, sys, ssl\nprint(sys.executable, sys.version_info[:2])\nprint(sorted(os.listdir('/')))\n\
                print(os.readlink('/lib64'), os.path.exists('/usr/lib/python3.11'), os.path.exists('/usr/local/lib/sandbox'))\n\
                print(open('/etc/passwd').read().splitlines()[1].split(':')[0])\nprint(ssl.OPENSSL_VERSION.split()[0])\n\
                print(ssl.create_default_context().cert_store_stats()['x509_ca'] > 100)";
    let r = run(DEBIAN, code, &[]);
    assert_eq!(r.status(), "ok", "{r:?}");
    let lines: Vec<&str> = r.stdout().lines().collect();
    assert_eq!(lines[0], "/usr/bin/python3 (3, 13)", "{r:?}");
    // The same in a warm start: the warm library's mount point left with the template's /tmp.
    assert_eq!(lines[1], "['bin', 'code', 'dev', 'etc', 'lib', 'lib64', 'opt', 'proc', 'sbin', 'tmp', 'usr', 'workspace']", "{r:?}");
    // The base's merged-/usr link; the host's Python 3.11 and its tools are not there.
    assert_eq!(lines[2], "usr/lib64 False False", "{r:?}");
    assert_eq!(lines[3], "sandbox", "the synthesized /etc/passwd: {r:?}");
    assert_eq!(lines[4], "OpenSSL", "{r:?}");
    // The CA bundle made at build time from ca-certificates' files (its script never ran).
    assert_eq!(lines[5], "True", "{r:?}");
    // `profiles list` names each profile's interpreter: the base's Python, the host's.
    let list = text(&sandbox(&["profiles", "list"]).output().unwrap().stdout);
    let row = |name: &str| list.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{name} in {list}")).to_owned();
    assert!(row("python-3.13-analysis").contains(" python 3.13 (trixie base) "), "{list}");
    assert!(row("python-default").contains(" python 3.11"), "{list}");
    assert!(row("typescript-default").contains(" node "), "{list}");
    // doctor reports the base, its size and who uses it.
    let out = sandbox(&["doctor", "--json"]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let base = v["bases"].as_array().unwrap().iter().find(|b| b["environments"] == serde_json::json!(["python-3.13-analysis"])).expect("the base in doctor");
    assert_eq!((base["installed"].as_bool(), base["python"].as_str()), (Some(true), Some("3.13")), "{base}");
    assert!(base["bytes"].as_u64().unwrap() > 20 << 20 && base["packages"].as_u64().unwrap() > 20, "{base}");
}

// The isolation subset, on the Debian base: the same programs and the same expected outcomes
// as attacks.rs and limits.rs on the host base.

#[test]
fn debian_base_host_secret_file_is_invisible() {
    debian_environment_installed();
    attacks::host_secret_file_is_invisible_on(DEBIAN);
}

#[test]
fn debian_base_host_processes_and_pid1_are_invisible() {
    debian_environment_installed();
    attacks::host_processes_and_pid1_are_invisible_on(DEBIAN);
}

#[test]
fn debian_base_no_host_paths_leak_through_mountinfo_or_cmdline() {
    debian_environment_installed();
    attacks::no_host_paths_leak_through_mountinfo_or_cmdline_on(DEBIAN);
}

#[test]
fn debian_base_root_filesystem_is_read_only() {
    debian_environment_installed();
    attacks::root_filesystem_is_read_only_on(DEBIAN);
}

#[test]
fn debian_base_host_loopback_services_are_unreachable() {
    debian_environment_installed();
    attacks::host_loopback_services_are_unreachable_on(DEBIAN);
    attacks::only_loopback_interface_exists_on(DEBIAN);
}

#[test]
fn debian_base_dangerous_syscalls_fail_with_eperm() {
    debian_environment_installed();
    attacks::dangerous_syscalls_fail_with_eperm_on(DEBIAN);
    attacks::new_namespaces_via_clone_are_refused_on(DEBIAN);
    attacks::unlisted_syscalls_fail_with_enosys_on(DEBIAN);
}

#[test]
fn debian_base_cannot_become_root_and_holds_no_capabilities() {
    debian_environment_installed();
    attacks::cannot_become_root_and_holds_no_capabilities_on(DEBIAN);
}

#[test]
fn debian_base_landlock_blocks_paths_outside_the_rules() {
    debian_environment_installed();
    attacks::landlock_blocks_paths_outside_the_rules_even_through_proc_on(DEBIAN);
}

#[test]
fn debian_base_memory_past_the_limit_is_memory_limit() {
    debian_environment_installed();
    limits::memory_past_the_limit_is_memory_limit_on(DEBIAN);
}

#[test]
fn debian_base_fork_bomb_is_contained_and_host_still_forks() {
    debian_environment_installed();
    limits::fork_bomb_is_contained_and_host_still_forks_on(DEBIAN);
}

/// A small base of its own (python3 alone) in a fresh environments directory: a run holds it,
/// `env gc` keeps it (and says so) while the run lasts, and removes it once the run is over and
/// no environment names it.
#[test]
fn gc_never_removes_a_base_a_running_execution_uses() {
    let dir = tempfile::Builder::new().prefix("bases-").tempdir_in(&env().dir).unwrap().keep();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let envs = dir.join("environments");
    let runtime = format!("[runtime]\nenvironments_dir = {:?}\n", envs.display().to_string());
    let with = dir.join("with.toml");
    std::fs::write(
        &with,
        format!(
            "{runtime}[environments.tiny]\nbase = \"debian\"\n[environments.tiny.debian]\nsuite = \"trixie\"\npackages = [\"python3\"]\n\
             [profiles.tiny]\nlanguage = \"python\"\nenvironment = \"tiny\"\n"
        ),
    )
    .unwrap();
    let without = dir.join("without.toml");
    std::fs::write(&without, &runtime).unwrap();
    let out = cli(&with, &["env", "install", "tiny"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("base debian-") && text(&out.stderr).contains("python 3.13"), "{}", text(&out.stderr));
    let bases = envs.join("bases");
    let base = std::fs::read_dir(&bases)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("debian-"))
        .unwrap();
    let list = text(&cli(&with, &["env", "list"]).stdout);
    assert!(list.lines().any(|l| l.starts_with("debian-") && l.contains("installed") && l.ends_with("tiny")), "{list}");

    // A run that lasts, holding the base; meanwhile the environment goes and gc runs.
    let (config, data) = (with.clone(), env().data.clone());
    let running = std::thread::spawn(move || {
        Command::new(bin())
            .arg("--config")
            .arg(&config)
            .arg("--data-dir")
            .arg(&data)
            .args(["run", "--json", "-p", "tiny", "-c", "import time, sys\ntime.sleep(6)\nprint(sys.version_info[:2])"])
            .output()
            .unwrap()
    });
    std::thread::sleep(Duration::from_secs(3));
    let out = cli(&with, &["env", "remove", "tiny"]);
    assert!(out.status.success() && text(&out.stderr).contains("its base debian-"), "the base stays, named: {}", text(&out.stderr));
    let out = cli(&without, &["env", "gc"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains(&format!("kept {} (a running execution uses it)", base.display())), "{}", text(&out.stderr));
    assert!(base.join("manifest.json").is_file(), "the base in use is still there");
    let out = running.join().unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((r["status"].as_str(), r["stdout"].as_str()), (Some("ok"), Some("(3, 13)\n")), "{r}");

    // The run is over: now it goes.
    let out = cli(&without, &["env", "gc"]);
    assert!(text(&out.stderr).contains(&format!("removed {}", base.display())), "{}", text(&out.stderr));
    assert!(!base.exists());
}
