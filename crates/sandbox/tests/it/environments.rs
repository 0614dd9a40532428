//! Package environments: install (progress, idempotent, atomic, verified), the message when one
//! is missing, the libraries working headless inside, and the host's packages staying outside.

use super::*;

/// A configuration whose environments live in a fresh, empty directory: a new machine.
fn fresh_config() -> (PathBuf, PathBuf) {
    let dir = tempfile::Builder::new().prefix("envs-").tempdir_in(&env().dir).unwrap().keep();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let envs = dir.join("environments");
    let config = dir.join("config.toml");
    std::fs::write(&config, format!("[runtime]\nenvironments_dir = {:?}\n", envs.display().to_string())).unwrap();
    (config, envs)
}

fn cli(config: &Path, args: &[&str]) -> Output {
    Command::new(bin()).arg("--config").arg(config).arg("--data-dir").arg(&env().data).args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_fresh_install_shows_progress_a_second_is_a_no_op_and_a_missing_one_names_the_command() {
    let (config, envs) = fresh_config();
    let code = "import _ from 'lodash';\nconsole.log(_.sum([1, 2, 3]));\n";
    // Missing: refused before anything runs, naming the command that installs it.
    let out = cli(&config, &["run", "--json", "-p", "typescript-analysis", "-c", code]);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((out.status.code(), r["status"].as_str(), r["error"]["type"].as_str()), (Some(3), Some("rejected"), Some("environment_not_installed")), "{r}");
    let hint = format!("`sandbox --config {} --data-dir {} env install typescript-analysis`", config.display(), env().data.display());
    assert!(r["error"]["message"].as_str().unwrap().contains(&hint), "{r}");

    let out = cli(&config, &["env", "install", "typescript-analysis"]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("[1/3] npm packages: papaparse@5.7.1"), "progress names the step: {err}");
    assert!(err.contains("[3/3] switching in"), "{err}");
    assert!(err.contains("npm: date-fns@4.4.0 lodash@4.18.1 papaparse@5.7.1 simple-statistics@7.12.1 zod@4.6.7"), "{err}");
    let installed: Vec<_> = std::fs::read_dir(&envs).unwrap().filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(installed.iter().any(|n| n.starts_with("typescript-analysis-")), "{installed:?}");
    assert!(!installed.iter().any(|n| n.starts_with(".build-")), "the build directory was switched in: {installed:?}");

    let again = cli(&config, &["env", "install", "typescript-analysis"]);
    assert!(again.status.success());
    assert!(text(&again.stderr).contains("installed already") && !text(&again.stderr).contains("[1/3]"), "{}", text(&again.stderr));

    let list = text(&cli(&config, &["env", "list"]).stdout);
    assert!(list.lines().any(|l| l.starts_with("typescript-analysis") && l.contains(" installed ")), "{list}");
    assert!(list.lines().any(|l| l.starts_with("python-analysis") && l.contains("not installed")), "{list}");

    let out = cli(&config, &["run", "--json", "-p", "typescript-analysis", "-c", code]);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((r["status"].as_str(), r["stdout"].as_str()), (Some("ok"), Some("6\n")), "{r}");

    // verify: files against the manifest, then imports inside a sandbox.
    let out = cli(&config, &["env", "verify", "typescript-analysis"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("every package imports inside the sandbox"), "{}", text(&out.stderr));
    // A changed file is found.
    let dir =
        std::fs::read_dir(&envs).unwrap().filter_map(Result::ok).find(|e| e.file_name().to_string_lossy().starts_with("typescript-analysis-")).unwrap().path();
    let victim = dir.join("node/node_modules/lodash/sum.js");
    let mut content = std::fs::read(&victim).unwrap();
    content.extend_from_slice(b"\n// changed\n");
    std::fs::write(&victim, content).unwrap();
    let out = cli(&config, &["env", "verify", "typescript-analysis"]);
    assert_eq!(out.status.code(), Some(4), "changed files exit 4: {}", text(&out.stderr));
    assert!(text(&out.stderr).contains("was changed after install"), "{}", text(&out.stderr));

    // remove, then `run --install` installs it first.
    let out = cli(&config, &["env", "remove", "typescript-analysis"]);
    assert!(out.status.success() && text(&out.stderr).contains("removed"), "{}", text(&out.stderr));
    assert!(!dir.exists());
    let out = cli(&config, &["run", "--install", "-p", "typescript-analysis", "-c", code]);
    assert_eq!((out.status.code(), text(&out.stdout).as_str()), (Some(0), "6\n"), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("[1/3] npm packages"), "{}", text(&out.stderr));
    std::fs::remove_dir_all(envs).unwrap();
}

#[test]
fn python_analysis_runs_numpy_pandas_scipy_and_matplotlib_headless_and_quietly() {
    environments_installed();
    let code = "import os, numpy as np, pandas as pd, scipy.stats as st\nimport matplotlib\nimport matplotlib.pyplot as plt\n\
                print(matplotlib.get_backend(), os.environ['OMP_NUM_THREADS'], os.environ['OPENBLAS_NUM_THREADS'])\n\
                df = pd.DataFrame({'x': np.arange(100.0), 'y': np.arange(100.0) * 2 + 1})\n\
                print(round(st.pearsonr(df.x, df.y)[0], 6), df.y.sum())\n\
                a = np.random.default_rng(1).random((400, 400)); print((a @ a).shape)\n\
                fig, ax = plt.subplots(figsize=(4, 3), dpi=100); ax.plot(df.x, df.y); fig.savefig('chart.png')\n";
    let r = run("python-analysis", code, &[]);
    assert_eq!(r.status(), "ok", "{r:?}");
    assert_eq!(r.stdout(), "Agg 2 2\n1.0 10000.0\n(400, 400)\n", "{r:?}");
    assert_eq!(r.stderr_of_program(), "", "matplotlib neither warns nor fails (writable config and cache in /tmp): {r:?}");
    let png = r.file_bytes("chart.png").expect("chart returned");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!((u32::from_be_bytes(png[16..20].try_into().unwrap()), u32::from_be_bytes(png[20..24].try_into().unwrap())), (400, 300));
    // The environment is read-only inside.
    let r = run("python-analysis", "import numpy, pathlib\np = pathlib.Path(numpy.__file__)\ntry:\n    p.write_text('x')\nexcept OSError as e:\n    print('denied' if e.errno in (13, 30) else e)\n", &[]);
    assert_eq!(r.stdout(), "denied\n", "read-only mount (EROFS) behind landlock (EACCES): {r:?}");
}

/// The font cache `env install` built in a sandbox is the one runs use: matplotlib reads it
/// (no rebuild) and every font it names exists at the path a run sees.
#[test]
fn the_font_cache_built_at_install_is_used_as_is() {
    environments_installed();
    let code = "import logging, os, sys\nlogging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format='%(message)s')\n\
                print('preloaded', 'matplotlib.font_manager' in sys.modules)\n\
                import matplotlib.font_manager as fm\n\
                print('fonts', len(fm.fontManager.ttflist) > 0 and all(os.path.exists(f.fname) for f in fm.fontManager.ttflist))\n";
    let r = run("python-analysis", code, &[]);
    assert_eq!(r.status(), "ok", "{r:?}");
    if warm_mode() {
        // The template imported matplotlib (the environment's `preload`) before this execution
        // was forked from it: the font manager is there already, nothing reads or builds a cache.
        assert!(r.stdout().starts_with("preloaded True\n"), "{r:?}");
    } else {
        assert!(r.stdout().starts_with("preloaded False\n"), "{r:?}");
        assert!(r.stdout().contains("Using fontManager instance from /tmp/.config/matplotlib/fontlist-v"), "the prebuilt cache is read: {r:?}");
    }
    assert!(!r.stdout().contains("generated new fontManager") && !r.stderr_of_program().contains("building the font cache"), "{r:?}");
    assert!(r.stdout().ends_with("fonts True\n"), "{r:?}");
}

#[test]
fn a_small_pids_limit_does_not_break_numpy() {
    // Thread pools are sized to the profile's CPUs (2), not the host's cores: 12 pids suffice.
    environments_installed();
    let code = "import numpy as np\na = np.ones((300, 300))\nprint(float((a @ a).sum()))\n";
    let r = run("py-analysis-few-pids", code, &[]);
    assert_eq!((r.status(), r.stdout()), ("ok", "27000000.0\n"), "{r:?}");
}

#[test]
fn typescript_analysis_imports_by_bare_specifier() {
    environments_installed();
    let code = "import Papa from 'papaparse';\nimport { mean } from 'simple-statistics';\nimport { format } from 'date-fns';\n\
                import { z } from 'zod';\nimport _ from 'lodash';\nimport { createRequire } from 'node:module';\n\
                const rows = Papa.parse<{ v: number }>('v\\n1\\n2\\n6', { header: true, dynamicTyping: true }).data;\n\
                const n = z.number().parse(mean(rows.map((r) => r.v)));\n\
                const cjs = createRequire(import.meta.url)('lodash');\n\
                console.log(n, format(new Date(0), 'yyyy-MM-dd'), _.chunk([1, 2, 3], 2).length, typeof cjs.sum);\n";
    let r = run("typescript-analysis", code, &[]);
    assert_eq!((r.status(), r.stdout()), ("ok", "3 1970-01-01 2 function\n"), "{r:?}");
}

#[test]
fn the_hosts_python_packages_stay_outside() {
    // Debian's python3-yaml (and whatever pip put under /usr/local) is on the host, not inside.
    let code = "import sys, os\nfor d in ['/usr/lib/python3/dist-packages', '/usr/local/lib/python3.11/dist-packages']:\n    \
                print(d, os.path.isdir(d) and os.listdir(d))\ntry:\n    import yaml\n    print('yaml importable')\nexcept ImportError:\n    print('no yaml')\n";
    let r = run("python-default", code, &[]);
    assert_eq!(r.status(), "ok", "{r:?}");
    for line in r.stdout().lines().take(2) {
        assert!(line.ends_with(" []") || line.ends_with(" False"), "{line}: {r:?}");
    }
    assert!(r.stdout().ends_with("no yaml\n"), "{r:?}");
}

#[test]
fn bad_environment_declarations_name_the_field() {
    for (toml, field, needle) in [
        ("[environments.e]\npython = [\"numpy>=2\"]\n", "environments.e.python[0]", "not pinned"),
        ("[environments.e]\nnpm = [\"lodash@^4\"]\n", "environments.e.npm[0]", "exact version"),
        ("[environments.e]\npython_imports = [\"no-dash\"]\n", "environments.e.python_imports[0]", "not a module name"),
        ("[profiles.p]\nlanguage = \"python\"\nenvironment = \"nope\"\n", "profiles.p.environment", "no environment named \"nope\""),
    ] {
        let path = scratch_file("bad.toml", toml.as_bytes());
        let out = Command::new(bin()).arg("--config").arg(&path).args(["profiles", "list"]).output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(field) && err.contains(needle), "{field} / {needle}: {err}");
    }
}

#[test]
fn python_analysis_installs_on_a_fresh_machine_as_the_readme_says() {
    let (config, envs) = fresh_config();
    let out = cli(&config, &["env", "install", "python-analysis"]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("[1/3] Python packages for /usr/bin/python3 with uv: numpy==2.4.6 pandas==3.1.1"), "{err}");
    assert!(err.contains("uv: ") && err.contains("+ matplotlib==3.11.2"), "uv's own progress is shown: {err}");
    assert!(err.contains("python-analysis installed:"), "{err}");
    let again = cli(&config, &["env", "install", "python-analysis"]);
    assert!(again.status.success() && text(&again.stderr).contains("nothing to do"), "{}", text(&again.stderr));
    let out = cli(&config, &["run", "-p", "python-analysis", "-c", "import numpy, pandas, scipy, matplotlib\nprint(numpy.__version__, pandas.__version__)"]);
    assert_eq!(text(&out.stdout), "2.4.6 3.1.1\n", "{}", text(&out.stderr));
    std::fs::remove_dir_all(envs).unwrap(); // 380 MiB
}

#[test]
fn an_environment_the_sandbox_cannot_reach_is_refused_before_it_runs() {
    // environments_dir below a 0700 directory: install warns, runs are refused (not an
    // internal error at mount time).
    let dir = tempfile::Builder::new().prefix("envs-private-").tempdir_in(&env().dir).unwrap().keep();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(&config, format!("[runtime]\nenvironments_dir = {:?}\n", dir.join("environments").display().to_string())).unwrap();
    let out = cli(&config, &["env", "install", "typescript-analysis"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("is not searchable by others"), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("Node.js compile cache: skipped"), "the optional step that needs a sandbox is skipped: {}", text(&out.stderr));
    let out = cli(&config, &["run", "--json", "-p", "typescript-analysis", "-c", "console.log(1)"]);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((out.status.code(), r["error"]["type"].as_str()), (Some(3), Some("runtime_unavailable")), "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("not searchable"), "{r}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// The command between the first pair of backticks of `text` that starts with `sandbox`, run
/// as written (this test binary's `sandbox` in place of the one on PATH).
fn run_hint(text: &str, extra_env: &[(&str, &Path)]) -> Output {
    let hint = text.split('`').skip(1).step_by(2).find(|c| c.starts_with("sandbox ")).unwrap_or_else(|| panic!("no command in {text}"));
    let words: Vec<&str> = hint.split_whitespace().collect();
    let mut c = Command::new(bin());
    c.args(&words[1..]);
    for (k, v) in extra_env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// Issue 17, item 1: another `--data-dir` has its own environments; the refusal says where it
/// looked, its command installs there as written, and the original command then runs. An
/// environment installed in the default data directory is named with the setting that shares
/// it, and that setting works too. `doctor` exits 1 while a built-in profile cannot run.
#[test]
fn a_missing_environment_names_where_it_looked_and_a_command_that_works_as_written() {
    let dir = tempfile::Builder::new().prefix("datadirs-").tempdir_in(&env().dir).unwrap().keep();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(&config, "[environments.tiny]\ndescription = \"no packages\"\n[profiles.tiny-py]\nlanguage = \"python\"\nenvironment = \"tiny\"\n").unwrap();
    let (default, other) = (dir.join("default"), dir.join("other"));
    // The default data directory ($SANDBOX_DATA_DIR here) has it installed.
    let with_default = |data: Option<&Path>, args: &[&str]| {
        let mut c = Command::new(bin());
        c.env("SANDBOX_DATA_DIR", &default).arg("--config").arg(&config);
        if let Some(d) = data {
            c.arg("--data-dir").arg(d);
        }
        c.args(args).output().unwrap()
    };
    let out = with_default(None, &["env", "install", "tiny"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let original = ["run", "-p", "tiny-py", "-c", "print(6*7)"];
    assert_eq!(text(&with_default(None, &original).stdout), "42\n");

    let out = with_default(Some(&other), &original);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains(&format!("not installed in {}/environments, the data directory's", other.display())), "{err}");
    assert!(err.contains(&format!("`sandbox --config {} --data-dir {} env install tiny`", config.display(), other.display())), "{err}");
    // The note names the installed copy and the setting that shares it; that setting works.
    let note = err.lines().find(|l| l.contains("note:")).unwrap_or_else(|| panic!("no note: {err}"));
    assert!(note.contains(&format!("installed in {}/environments, the default data directory's", default.display())), "{note}");
    let setting = note.split('`').nth(1).unwrap();
    let shared = dir.join("shared.toml");
    std::fs::write(&shared, format!("[runtime]\n{setting}\n{}", std::fs::read_to_string(&config).unwrap())).unwrap();
    let out = Command::new(bin()).arg("--config").arg(&shared).arg("--data-dir").arg(&other).args(original).output().unwrap();
    assert_eq!((out.status.code(), text(&out.stdout).as_str()), (Some(0), "42\n"), "{}", text(&out.stderr));

    // The command the refusal gave, run as written, then the original command.
    let out = run_hint(&err, &[("SANDBOX_DATA_DIR", &default)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(other.join("environments").read_dir().unwrap().any(|e| e.unwrap().file_name().to_string_lossy().starts_with("tiny-")));
    let out = with_default(Some(&other), &original);
    assert_eq!((out.status.code(), text(&out.stdout).as_str()), (Some(0), "42\n"), "{}", text(&out.stderr));

    // Built-in python-analysis is not installed in `other`: doctor fails, with the same command.
    let out = with_default(Some(&other), &["doctor"]);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(report.contains(&format!("`sandbox --config {} --data-dir {} env install python-analysis`", config.display(), other.display())), "{report}");
}

/// `cli` with extra environment variables for the installers (e.g. uv's `UV_FIND_LINKS`).
fn cli_with(config: &Path, vars: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(bin());
    c.arg("--config").arg(config).arg("--data-dir").arg(&env().data).args(args);
    for (k, v) in vars {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// A directory of its own (environments included) with `toml` as its config file.
fn own_dir(prefix: &str, toml: &str) -> (PathBuf, PathBuf) {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir_in(&env().dir).unwrap().keep();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(&config, format!("[runtime]\nenvironments_dir = {:?}\n{toml}", dir.join("environments").display().to_string())).unwrap();
    (dir, config)
}

/// The Node.js compile cache `env install` built in a sandbox is the one runs use: a Node.js the
/// program starts (same sandbox, uid and environment, with Node's compile-cache log on) takes
/// its code for zod, lodash and papaparse from the cache at the path a run sees, under its own
/// uid's name; the program cannot write into the cache. On the host: one directory of entries
/// and every other execution uid's name a link to it.
#[test]
fn the_node_compile_cache_built_at_install_is_used_by_runs_and_read_only() {
    environments_installed();
    let code = "import module from 'node:module';\nimport { spawnSync } from 'node:child_process';\nimport { writeFileSync } from 'node:fs';\n\
                const dir = module.getCompileCacheDir();\n\
                console.log('dir', dir === `/opt/sandbox/env/node-compile-cache/${dir?.split('/').pop()}` && dir.endsWith(`-${process.getuid()}`));\n\
                let write = 'written';\ntry { writeFileSync(`${dir}/00000000`, 'x'); } catch (e) { write = e.code; }\nconsole.log('write', write);\n\
                const child = spawnSync(process.execPath, ['--input-type=module', '-e', \"import 'zod'; import 'lodash'; import 'papaparse';\"],\n\
                  { env: { ...process.env, NODE_DEBUG_NATIVE: 'COMPILE_CACHE' }, encoding: 'utf8' });\n\
                for (const m of ['zod/index.js', 'lodash/lodash.js', 'papaparse/papaparse.js']) {\n\
                  console.log(m, new RegExp(`V8 code cache for \\\\w+ (file://)?/node_modules/${m} was accepted`).test(child.stderr));\n}\n\
                if (child.status !== 0) console.log(child.stderr);\n";
    let r = run("typescript-analysis", code, &[]);
    assert_eq!(r.status(), "ok", "{r:?}");
    assert_eq!(r.stdout(), "dir true\nwrite EROFS\nzod/index.js true\nlodash/lodash.js true\npapaparse/papaparse.js true\n", "{r:?}");

    let installed = installed_dir("typescript-analysis").join("node-compile-cache");
    assert!(installed.is_dir(), "an installed typescript-analysis has a node-compile-cache directory");
    let (mut dirs, mut links) = (Vec::new(), 0);
    for e in std::fs::read_dir(&installed).unwrap().filter_map(Result::ok) {
        let meta = std::fs::symlink_metadata(e.path()).unwrap();
        if meta.file_type().is_symlink() {
            links += 1;
        } else {
            dirs.push(e.path());
        }
    }
    assert_eq!(dirs.len(), 1, "one directory of entries: {dirs:?}");
    assert!(dirs[0].to_string_lossy().ends_with("-1000"), "{dirs:?}");
    assert_eq!(links, 4095, "every other execution uid's name links to it");
    let entries = std::fs::read_dir(&dirs[0]).unwrap().count();
    assert!(entries > 50, "zod alone is dozens of modules: {entries}");
}

/// Issue 12, finding 8: the install step that imports package code (matplotlib's font cache)
/// used to run as host root. A fake `matplotlib` wheel whose import writes a host file and
/// reads /etc/shadow, then leaves a font list and another file for the install to pick up:
/// the install succeeds with the hook contained (no host file, no shadow, not root), and only
/// the font list reaches the environment.
#[test]
fn an_install_step_that_runs_package_code_runs_in_a_sandbox() {
    let (dir, config) = own_dir("env-hook-", "[environments.hooked]\npython = [\"matplotlib==0.0.1\"]\n");
    let marker = dir.join("written-by-the-package");
    let init = format!(
        "import os\ndef _try(f):\n    try:\n        return repr(f())\n    except Exception as e:\n        return type(e).__name__\n\
         wrote = _try(lambda: open({:?}, 'w').write('pwned'))\nshadow = _try(lambda: open('/etc/shadow').read()[:8])\n",
        marker.display().to_string()
    );
    let font_manager = "import json, os, matplotlib\nd = os.environ['MPLCONFIGDIR']\nos.makedirs(d, exist_ok=True)\n\
                        json.dump({'wrote': matplotlib.wrote, 'shadow': matplotlib.shadow, 'uid': os.getuid()}, open(os.path.join(d, 'fontlist-v0.0.1.json'), 'w'))\n\
                        open(os.path.join(d, 'extra.json'), 'w').write('{}')\n";
    let wheels = fake_matplotlib_wheel(&dir, &init, font_manager);
    let wheels = wheels.display().to_string();
    let out = cli_with(&config, &[("UV_FIND_LINKS", &wheels), ("UV_NO_INDEX", "1")], &["env", "install", "hooked"]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "the install succeeds with the hook contained: {err}");
    assert!(err.contains("font cache built in a sandbox"), "{err}");
    assert!(!marker.exists(), "the package wrote a host file at install time: {err}");
    let installed = std::fs::read_dir(dir.join("environments"))
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with("hooked-"))
        .unwrap()
        .path();
    let report: Value = serde_json::from_slice(&std::fs::read(installed.join("mplconfig/fontlist-v0.0.1.json")).unwrap()).unwrap();
    assert!(report["wrote"].as_str().is_some_and(|w| w.ends_with("Error")), "the write failed inside: {report}");
    assert!(report["shadow"].as_str().is_some_and(|s| s.ends_with("Error")), "/etc/shadow unreadable inside: {report}");
    assert_ne!(report["uid"], 0, "not root inside: {report}");
    assert!(!installed.join("mplconfig/extra.json").exists(), "only font lists are copied into the environment");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A fake `matplotlib` 0.0.1 wheel in `dir/wheels` (returned) whose `__init__` and
/// `font_manager` are the code given: what `env install`'s font-cache step imports in its sandbox.
fn fake_matplotlib_wheel(dir: &Path, init: &str, font_manager: &str) -> PathBuf {
    let wheels = dir.join("wheels");
    std::fs::create_dir_all(&wheels).unwrap();
    // A wheel is a zip: the package, METADATA, WHEEL and RECORD.
    let build = "import zipfile, sys\nwith zipfile.ZipFile(sys.argv[1] + '/matplotlib-0.0.1-py3-none-any.whl', 'w') as z:\n    \
                 z.writestr('matplotlib/__init__.py', sys.argv[2])\n    z.writestr('matplotlib/font_manager.py', sys.argv[3])\n    \
                 z.writestr('matplotlib-0.0.1.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: matplotlib\\nVersion: 0.0.1\\n')\n    \
                 z.writestr('matplotlib-0.0.1.dist-info/WHEEL', 'Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n    \
                 z.writestr('matplotlib-0.0.1.dist-info/RECORD', 'matplotlib/__init__.py,,\\nmatplotlib/font_manager.py,,\\nmatplotlib-0.0.1.dist-info/METADATA,,\\nmatplotlib-0.0.1.dist-info/WHEEL,,\\nmatplotlib-0.0.1.dist-info/RECORD,,\\n')\n";
    let out = Command::new("python3").args(["-c", build]).arg(&wheels).arg(init).arg(font_manager).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    wheels
}

/// A SIGINT or SIGTERM to `env install` while a step that runs package code runs in its sandbox
/// (matplotlib's font cache; here a fake one that sleeps): the sandbox is ended (killed, torn
/// down, its record finished), the install fails leaving no build behind, and the command ends
/// by the signal (a shell sees 128+signal). It used to die at once and leave the sandbox's
/// cgroups, mounts and directory, and an unfinished record, for the next start's recovery.
#[test]
fn an_interrupted_install_ends_the_sandbox_of_its_step_and_leaves_nothing_behind() {
    use std::os::unix::process::CommandExt as _;
    for sig in [nix::sys::signal::Signal::SIGINT, nix::sys::signal::Signal::SIGTERM] {
        let (dir, config) = own_dir("env-int-", "[environments.sleepy]\npython = [\"matplotlib==0.0.1\"]\n");
        let data = dir.join("data");
        let wheels = fake_matplotlib_wheel(&dir, "", "import time\nopen('/workspace/started', 'w').close()\ntime.sleep(100)\n");
        let child = interruptible(
            Command::new(bin())
                .arg("--config")
                .arg(&config)
                .arg("--data-dir")
                .arg(&data)
                .args(["env", "install", "sleepy"])
                .env("UV_FIND_LINKS", &wheels)
                .env("UV_NO_INDEX", "1"),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
        let id = started_execution(&data.join("executions"));
        // SIGINT to the whole process group, as a terminal's Ctrl-C (the sandbox's helper gets
        // it too, and its death alone would end the execution); SIGTERM to the command alone,
        // as a supervisor's: that one's end is the abort's (`Engine::abort_all`).
        let pid = i32::try_from(child.id()).unwrap();
        let to = if sig == nix::sys::signal::Signal::SIGINT { -pid } else { pid };
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(to), sig).unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        assert_ended_by(out.status, sig, &stderr);
        assert!(stderr.contains(&format!("interrupted by {sig}")) && stderr.contains(&id), "{sig}: {stderr}");
        assert_gone_from(&data, &id);
        let left: Vec<String> = std::fs::read_dir(dir.join("environments"))
            .map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        // (`.lock-sleepy`, the install's lock file, stays as after any install.)
        assert!(!left.iter().any(|n| n.starts_with("sleepy-") || n.starts_with(".build-sleepy")), "{sig}: no build and no install of sleepy: {left:?}");
        // Its record is finished, not left for a recovery to mark.
        let shown = Command::new(bin()).arg("--config").arg(&config).arg("--data-dir").arg(&data).args(["audit", "show", &id]).output().unwrap();
        let shown = text(&shown.stdout);
        assert!(shown.contains("internal_error") && shown.contains("cli:env-install"), "{sig}: {shown}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// `run --install` and `env verify`: the handling of the signals during the install passes to
/// the run once it runs (a SIGTERM while the program runs ends it as an interrupted `sandbox run`
/// does, rather than exiting at once), and a SIGINT while `env verify`'s import check runs in
/// its sandbox ends that sandbox (torn down, recorded), then the command by the signal.
#[test]
fn an_interrupted_run_after_its_install_and_an_interrupted_verify_leave_nothing_behind() {
    let (dir, config) = own_dir(
        "env-vint-",
        "[environments.slowimport]\npython = [\"matplotlib==0.0.1\"]\npython_imports = [\"matplotlib\"]\n\
         [profiles.slowimport]\nlanguage = \"python\"\nenvironment = \"slowimport\"\n",
    );
    let data = dir.join("data");
    // The install's font-cache step sets MPLCONFIGDIR to its workspace before it imports; the
    // check's import is the one that sleeps.
    let init = "import os, time\nif os.environ.get('MPLCONFIGDIR') != '/workspace/mplconfig':\n    \
                open('/workspace/started', 'w').close()\n    time.sleep(100)\n";
    let wheels = fake_matplotlib_wheel(
        &dir,
        init,
        "import os\nd = os.environ['MPLCONFIGDIR']\nos.makedirs(d, exist_ok=True)\nopen(d + '/fontlist-v0.0.1.json', 'w').write('{}')\n",
    );
    let cli = |args: &[&str]| {
        let mut c = Command::new(bin());
        c.arg("--config").arg(&config).arg("--data-dir").arg(&data).args(args).env("UV_FIND_LINKS", &wheels).env("UV_NO_INDEX", "1");
        let mut c = interruptible(&c);
        c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
        c
    };
    let interrupted = |args: &[&str], sig: nix::sys::signal::Signal| {
        let child = cli(args).spawn().unwrap();
        let id = started_execution(&data.join("executions"));
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()), sig).unwrap();
        let out = child.wait_with_output().unwrap();
        assert_gone_from(&data, &id);
        let shown = text(&cli(&["audit", "show", &id]).stdout(std::process::Stdio::piped()).output().unwrap().stdout);
        (out.status, text(&out.stderr), shown)
    };
    let code = "open('/workspace/started', 'w').close()\nimport time\ntime.sleep(100)\n";
    let (status, stderr, shown) = interrupted(&["run", "--install", "-p", "slowimport", "-c", code], nix::sys::signal::Signal::SIGTERM);
    assert_ended_by(status, nix::sys::signal::Signal::SIGTERM, &stderr);
    assert!(stderr.contains("slowimport installed") && stderr.contains("interrupted by SIGTERM: the execution was ended"), "{stderr}");
    assert!(shown.contains("internal_error") && shown.contains("cli:"), "{shown}");

    let (status, stderr, shown) = interrupted(&["env", "verify", "slowimport"], nix::sys::signal::Signal::SIGINT);
    assert_ended_by(status, nix::sys::signal::Signal::SIGINT, &stderr);
    assert!(stderr.contains("interrupted by SIGINT") && stderr.contains("internal_error in the sandbox"), "{stderr}");
    assert!(shown.contains("internal_error") && shown.contains("cli:env-verify"), "{shown}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// The id of the execution whose program made `/workspace/started` (its workspace is a mount
/// under `executions`, the data directory's), waiting up to 120 s for one.
fn started_execution(executions: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let started = std::fs::read_dir(executions)
            .map(|d| d.filter_map(Result::ok).find(|e| e.path().join("workspace/started").exists()).map(|e| e.file_name().to_string_lossy().into_owned()))
            .unwrap_or_default();
        if let Some(id) = started {
            return id;
        }
        assert!(Instant::now() < deadline, "no program started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Issue 12, finding 8: `sandbox env lock` writes a hash lock; a lock that disagrees with the
/// pins is refused at load; an altered hash fails the install, naming the package, and leaves
/// it not installed; a changed lock is a new environment version.
#[test]
fn a_python_lock_with_an_altered_hash_fails_the_install_naming_the_package() {
    let decl = "[environments.tiny]\npython = [\"idna==3.20\"]\n";
    let (dir, config) = own_dir("env-pylock-", decl);
    let out = cli(&config, &["env", "lock", "tiny", "--dir", &dir.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lock = dir.join("tiny.python-lock.txt");
    assert_eq!(text(&out.stdout), format!("python_lock = {:?}\n", lock.display().to_string()));
    let good = std::fs::read_to_string(&lock).unwrap();
    assert!(good.contains("idna==3.20") && good.contains("--hash=sha256:"), "{good}");
    let with_lock = format!("{decl}python_lock = \"tiny.python-lock.txt\"\n");
    std::fs::write(&config, format!("{}{with_lock}", std::fs::read_to_string(&config).unwrap().replace(decl, ""))).unwrap();
    let out = cli(&config, &["env", "install", "tiny"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("(every hash checked against the lock)"), "{}", text(&out.stderr));
    let spec = |config: &Path| {
        let list = text(&cli(config, &["env", "list"]).stdout);
        list.lines().find(|l| l.starts_with("tiny ")).unwrap_or_else(|| panic!("{list}")).to_owned()
    };
    let installed = spec(&config);
    assert!(installed.contains(" installed "), "{installed}");

    // A lock pinning another version is refused when the configuration loads.
    std::fs::write(&lock, good.replace("idna==3.20", "idna==3.19")).unwrap();
    let out = cli(&config, &["env", "list"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("environments.tiny.python_lock") && text(&out.stderr).contains("idna==3.19"), "{}", text(&out.stderr));

    // Every hash of idna altered: a new version of the environment, whose install fails.
    let altered: String = good
        .lines()
        .map(|l| match l.split_once("--hash=sha256:") {
            Some((head, hex)) => format!("{head}--hash=sha256:{}{}\n", if hex.starts_with('0') { '1' } else { '0' }, &hex[1..]),
            None => format!("{l}\n"),
        })
        .collect();
    assert_ne!(altered, good);
    std::fs::write(&lock, &altered).unwrap();
    let now = spec(&config);
    assert!(now.contains("not installed"), "a changed lock is a new environment: {installed} / {now}");
    let out = cli(&config, &["env", "install", "tiny"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("idna==3.20 does not match its hash in the uv lock"), "{err}");
    assert!(spec(&config).contains("not installed"));
    let left: Vec<_> =
        std::fs::read_dir(dir.join("environments")).unwrap().filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(!left.iter().any(|n| n.starts_with(".build-") || n.starts_with(".python-lock")), "{left:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Issue 12, finding 8: npm installs run `npm ci` against the lock; a tampered integrity fails
/// the install, naming the package.
#[test]
fn an_npm_lock_with_a_tampered_integrity_fails_the_install_naming_the_package() {
    let decl = "[environments.tinyjs]\nnpm = [\"papaparse@5.7.1\"]\nnpm_lock = \"tinyjs.package-lock.json\"\n";
    let (dir, config) = own_dir("env-npmlock-", decl);
    // Without the lock file the configuration does not load.
    let out = cli(&config, &["env", "list"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("environments.tinyjs.npm_lock"), "{}", text(&out.stderr));
    let bare = dir.join("bare.toml");
    std::fs::write(&bare, std::fs::read_to_string(&config).unwrap().replace("npm_lock = \"tinyjs.package-lock.json\"\n", "")).unwrap();
    let out = cli(&bare, &["env", "lock", "tinyjs", "--dir", &dir.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lock = dir.join("tinyjs.package-lock.json");
    let good = std::fs::read_to_string(&lock).unwrap();
    let out = cli(&config, &["env", "install", "tinyjs"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("npm ci"), "{}", text(&out.stderr));

    let v: Value = serde_json::from_str(&good).unwrap();
    let integrity = v["packages"]["node_modules/papaparse"]["integrity"].as_str().unwrap().to_owned();
    let tampered = integrity.replacen(&integrity[7..17], "AAAAAAAAAA", 1);
    assert_ne!(tampered, integrity);
    std::fs::write(&lock, good.replace(&integrity, &tampered)).unwrap();
    let out = cli(&config, &["env", "install", "tinyjs"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("papaparse@5.7.1 does not match its hash in the npm lock"), "{err}");
    let list = text(&cli(&config, &["env", "list"]).stdout);
    assert!(list.lines().any(|l| l.starts_with("tinyjs ") && l.contains("not installed")), "{list}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Two configurations sharing `[runtime] environments_dir` declare `tiny` differently: installing
/// one keeps the other's version (it is that configuration's current one, and still verifies),
/// `env gc` asked for by one removes the other's; a data directory's own `environments/` (no
/// sharing setting) drops the older version at install, as before.
#[test]
fn an_install_keeps_another_configurations_version_in_a_shared_environments_dir() {
    let (dir, a) = own_dir("env-shared-", "[environments.tiny]\npython = [\"idna==3.20\"]\n");
    let b = dir.join("b.toml");
    std::fs::write(&b, std::fs::read_to_string(&a).unwrap().replace("python = [\"idna==3.20\"]", "python = []")).unwrap();
    let versions = |envs: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(envs)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("tiny-"))
            .collect();
        v.sort();
        v
    };
    let envs = dir.join("environments");
    let out = cli(&a, &["env", "install", "tiny"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let a_dir = envs.join(versions(&envs).pop().unwrap());
    let out = cli(&b, &["env", "install", "tiny"]);
    let err = text(&out.stderr);
    assert!(out.status.success() && err.contains(&format!("kept the other version {}", a_dir.display())), "{err}");
    assert_eq!(versions(&envs).len(), 2, "{:?}", versions(&envs));
    let out = cli(&a, &["env", "install", "tiny"]);
    assert!(text(&out.stderr).contains("installed already"), "{}", text(&out.stderr));
    let out = cli(&a, &["env", "verify", "tiny"]);
    assert!(out.status.success(), "a's version is whole after b's install: {}", text(&out.stderr));
    // gc, asked for under b, removes a's.
    let out = cli(&b, &["env", "gc"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!a_dir.exists() && versions(&envs).len() == 1, "{:?}", versions(&envs));

    // A data directory's own environments: b's install removes a's older version.
    let own = dir.join("own");
    for (config, decl) in [("own-a.toml", "[environments.tiny]\npython = [\"idna==3.20\"]\n"), ("own-b.toml", "[environments.tiny]\npython = []\n")] {
        std::fs::write(dir.join(config), decl).unwrap();
        let out = Command::new(bin()).arg("--config").arg(dir.join(config)).arg("--data-dir").arg(&own).args(["env", "install", "tiny"]).output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        if config == "own-b.toml" {
            assert!(text(&out.stderr).contains("removed the older version"), "{}", text(&out.stderr));
        }
    }
    assert_eq!(versions(&own.join("environments")).len(), 1, "{:?}", versions(&own.join("environments")));
    std::fs::remove_dir_all(dir).unwrap();
}
