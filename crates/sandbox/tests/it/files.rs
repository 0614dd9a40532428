//! Input files in, output files out: byte-exact, symlinks never followed, bad names refused.

use super::*;

#[test]
fn binary_input_round_trips_byte_for_byte() {
    let bytes: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    let input = scratch_file("blob.bin", &bytes);
    let arg = format!("data/blob.bin={}", input.display());
    let code = "import hashlib\nb = open('data/blob.bin','rb').read()\nprint(len(b), hashlib.sha256(b).hexdigest())\nopen('out.bin','wb').write(b[::-1])";
    let r = run("python-default", code, &["--file", &arg]);
    assert_eq!(r.status(), "ok", "{r:?}");
    use sha2_free::hex_sha256;
    assert_eq!(r.stdout(), format!("300000 {}\n", hex_sha256(&bytes)));
    let mut rev = bytes.clone();
    rev.reverse();
    assert_eq!(r.file_bytes("out.bin").unwrap(), rev);
    assert_eq!(r.json["files"]["out.bin"]["size"], 300_000);
    assert_eq!(r.json["files"]["out.bin"]["sha256"], hex_sha256(&rev));
    assert!(r.json["files"].get("data/blob.bin").is_none(), "an unchanged input is not an output");
}

/// SHA-256 through the host's python3, so the test does not share the engine's hashing code.
mod sha2_free {
    pub fn hex_sha256(b: &[u8]) -> String {
        use std::io::Write;
        let mut c = std::process::Command::new("python3")
            .args(["-c", "import sys,hashlib;print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(b).unwrap();
        String::from_utf8(c.wait_with_output().unwrap().stdout).unwrap().trim().to_owned()
    }
}

#[test]
fn output_files_carry_size_sha_and_mime_and_respect_globs() {
    let code = "import os\nos.makedirs('results/deep', exist_ok=True)\nopen('chart.png','wb').write(b'\\x89PNG\\r\\n\\x1a\\n')\n\
                open('results/deep/a.csv','w').write('x,y\\n')\nopen('notes.txt','w').write('n')";
    let r = run("python-default", code, &["--output", "*.png", "--output", "results/**"]);
    let files = r.json["files"].as_object().unwrap();
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(names, ["chart.png", "results/deep/a.csv"], "{r:?}");
    assert_eq!(files["chart.png"]["mimeType"], "image/png");
    assert_eq!(files["results/deep/a.csv"]["mimeType"], "text/csv");
    let r = run("python-default", code, &[]);
    assert_eq!(r.json["files"].as_object().unwrap().len(), 3);
}

#[test]
fn symlinks_are_never_followed() {
    let code = "import os\nos.makedirs('out')\nos.symlink('/etc/passwd','out/report.txt')\nos.symlink('/etc','out/cfg')\n\
                os.symlink('../../../../etc/hostname','out/rel.txt')\nopen('out/real.txt','w').write('legit\\n')";
    let r = run("python-default", code, &[]);
    let files = r.json["files"].as_object().unwrap();
    assert_eq!(files.keys().collect::<Vec<_>>(), ["out/real.txt"], "{r:?}");
    let skipped: Vec<(&str, &str)> =
        r.json["skippedFiles"].as_array().unwrap().iter().map(|s| (s["name"].as_str().unwrap(), s["reason"].as_str().unwrap())).collect();
    assert_eq!(skipped, [("out/cfg", "symlink"), ("out/rel.txt", "symlink"), ("out/report.txt", "symlink")]);
    assert!(!r.json.to_string().contains("root:x:0:0"), "no passwd content anywhere");
}

#[test]
fn bad_names_are_rejected_before_the_run() {
    let input = scratch_file("x.txt", b"x");
    for name in ["../x", "/etc/x", "", "a/../../x", "..\\x", "a//b"] {
        let arg = format!("{name}={}", input.display());
        let r = run("python-default", "open('/tmp/ran','w')\nprint('RAN')", &["--file", &arg]);
        assert_eq!(r.status(), "rejected", "{name:?}: {r:?}");
        assert_eq!(r.json["error"]["type"], "invalid_file_name");
        assert_eq!(r.json["error"]["field"], format!("files[{name:?}]"));
        assert_eq!(r.stdout(), "");
        assert!(r.json.get("exitCode").is_none());
    }
}

#[test]
fn read_only_inputs_cannot_be_changed() {
    let input = scratch_file("in.txt", b"original");
    let arg = format!("in.txt={}", input.display());
    let code = "import errno\ntry:\n    open('in.txt','w').write('changed'); print('CHANGED')\nexcept OSError as e:\n    print(errno.errorcode[e.errno])\nprint(open('in.txt').read())";
    let r = run("py-ro-inputs", code, &["--file", &arg]);
    assert_eq!(r.stdout(), "EACCES\noriginal\n", "{r:?}");
    let r = run("python-default", code.replace("print(errno", "print('unused', errno").as_str(), &["--file", &arg]);
    assert_eq!(r.file_bytes("in.txt").unwrap(), b"changed", "a changed input is an output: {r:?}");
}

#[test]
fn out_dir_receives_the_files() {
    let out = tempfile::tempdir().unwrap();
    let o = sandbox(&["run", "--out-dir", out.path().to_str().unwrap(), "-c", "import os\nos.makedirs('a/b')\nopen('a/b/c.txt','w').write('hi')"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(std::fs::read_to_string(out.path().join("a/b/c.txt")).unwrap(), "hi");
}

#[test]
fn non_utf8_output_is_returned_intact() {
    let r = run("python-default", "import sys\nsys.stdout.buffer.write(b'ok \\xff\\x00 end\\n')", &[]);
    assert_eq!(r.status(), "ok");
    use base64::Engine as _;
    let raw = base64::engine::general_purpose::STANDARD.decode(r.json["stdoutBase64"].as_str().unwrap()).unwrap();
    assert_eq!(raw, b"ok \xff\x00 end\n");
    assert_eq!(r.stdout(), "ok \u{fffd}\u{0} end\n");
}

#[test]
fn administrator_mounts_are_read_only_or_read_write_as_configured() {
    let code = "import errno\nprint(open('/data/numbers.csv').read(), end='')\n\
                for p in ('/data/new.txt', '/mnt/share/out.txt'):\n    try:\n        open(p, 'w').write('x'); print('wrote', p)\n    \
                except OSError as e:\n        print(errno.errorcode[e.errno], p)";
    let r = run("py-mounts", code, &[]);
    assert_eq!(r.stdout(), "1,2,3\nEROFS /data/new.txt\nwrote /mnt/share/out.txt\n", "{r:?}");
    let written = env().dir.join("share/out.txt");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "x");
    std::fs::remove_file(written).unwrap();
    // Nothing else of the host appears next to them.
    let r = run("py-mounts", "import os\nprint(sorted(os.listdir('/mnt')), os.path.exists(os.environ.get('HOME') + '/../root'))", &[]);
    assert_eq!(r.stdout(), "['share'] False\n", "{r:?}");
}

#[test]
fn output_file_count_cap_skips_the_rest() {
    let r = run("py-two-files", "for n in 'abcd':\n    open(n + '.txt', 'w').write(n)", &[]);
    let names: Vec<&str> = r.json["files"].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(names, ["a.txt", "b.txt"], "{r:?}");
    let skipped: Vec<(&str, &str)> =
        r.json["skippedFiles"].as_array().unwrap().iter().map(|s| (s["name"].as_str().unwrap(), s["reason"].as_str().unwrap())).collect();
    assert_eq!(skipped, [("c.txt", "count_cap"), ("d.txt", "count_cap")]);
}

/// `sandbox run --out-dir DIR <code>` (JSON off), returning the CLI's exit code and stderr.
fn write_out(dir: &Path, code: &str, extra: &[&str]) -> (Option<i32>, String) {
    let mut args = vec!["run", "--out-dir", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["-c", code]);
    let o = sandbox(&args).output().unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// `--out-dir` names what the collection left out, the first 20 by name and then a count: a
/// program that makes 50 symlinks gets 20 lines and "30 more", not 50 (nor 1,000) lines; one
/// that makes 1,234 gets the count of all the rest, past the skipped list's cap too, which the
/// list's last entry carries as a number (`count`).
#[test]
fn out_dir_names_the_first_entries_left_out_and_counts_the_rest() {
    let scratch = tempfile::Builder::new().prefix("outdir-").tempdir_in(&env().dir).unwrap().keep();
    let out = scratch.join("out");
    let code = "import os\nopen('kept.txt','w').write('x')\nfor i in range(50): os.symlink('/etc/passwd', f'l{i:02}')";
    let (status, stderr) = write_out(&out, code, &[]);
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(std::fs::read_to_string(out.join("kept.txt")).unwrap(), "x");
    let named = stderr.lines().filter(|l| l.ends_with("not written: not collected (symlink)")).count();
    assert_eq!(named, 20, "{stderr}");
    assert!(stderr.contains("output file l00 not written") && !stderr.contains("output file l49 "), "{stderr}");
    assert!(stderr.contains("sandbox: 30 more entries not collected (--json lists them in skippedFiles)"), "{stderr}");
    // Past the skipped list's 1,000 entries, the rest are counted too: 1,234 symlinks are 20
    // named and 1,214 more (the list's own "… and 234 more" entry is not one of them).
    let out = scratch.join("out-many");
    let code = "import os\nopen('kept.txt','w').write('x')\nfor i in range(1234): os.symlink('/etc/passwd', f'l{i:04}')";
    let (status, stderr) = write_out(&out, code, &[]);
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(stderr.lines().filter(|l| l.ends_with("not written: not collected (symlink)")).count(), 20, "{stderr}");
    assert!(stderr.contains("sandbox: 1214 more entries not collected (--json lists the first 1,000 in skippedFiles)"), "{stderr}");
    // On the wire: 1,000 entries, then the `list_cap` one with the rest's number in `count`.
    let r = run("python-default", code, &[]);
    let skipped = r.json["skippedFiles"].as_array().unwrap();
    assert_eq!(skipped.len(), 1001, "{r:?}");
    assert_eq!(skipped[1000], serde_json::json!({ "name": "… and 234 more", "reason": "list_cap", "count": 234 }), "{r:?}");
    assert!(skipped[..1000].iter().all(|s| s["reason"] == "symlink" && s.get("count").is_none()), "{r:?}");
}

/// Issue 12, finding 4: the program chooses the names of its output files, and the CLI writes
/// them as root. It plants `.git/config` (a hidden name host tools run), `link/x` through a
/// symlink the out dir already holds (pointing at a victim directory), and replaces an
/// existing file that is a hard link to a victim file. Hidden names are refused, the symlink
/// is not followed (ELOOP from openat2), the existing file is kept without `--overwrite` and
/// with it the entry is replaced (the victim's inode untouched); what is written belongs to the
/// out dir's owner, not root. An out dir that is itself a symlink is refused.
#[test]
fn out_dir_refuses_hidden_names_symlinks_and_overwrites_and_writes_as_its_owner() {
    use std::os::unix::fs::MetadataExt as _;
    let scratch = tempfile::Builder::new().prefix("outdir-").tempdir_in(&env().dir).unwrap().keep();
    let (out, victim) = (scratch.join("out"), scratch.join("victim"));
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(victim.join("secret"), "victim").unwrap();
    std::os::unix::fs::symlink(&victim, out.join("link")).unwrap();
    std::fs::hard_link(victim.join("secret"), out.join("kept.txt")).unwrap();
    nix::unistd::chown(&out, Some(nix::unistd::Uid::from_raw(4242)), Some(nix::unistd::Gid::from_raw(4343))).unwrap();
    let code = "import os\nos.makedirs('.git'); open('.git/config','w').write('[core]\\nfsmonitor = evil')\n\
                os.makedirs('link'); open('link/x','w').write('planted')\nos.makedirs('sub'); open('sub/new.txt','w').write('new')\n\
                open('kept.txt','w').write('replaced')\nos.symlink('/etc/passwd', 'passwd-link')";

    let (status, stderr) = write_out(&out, code, &[]);
    assert_eq!(status, Some(0), "{stderr}");
    assert!(!out.join(".git").exists(), "a hidden directory was written");
    assert!(stderr.contains("output file .git/config not written: hidden name \".git\" refused"), "{stderr}");
    assert!(stderr.contains("output file link/x not written") && stderr.contains("ELOOP"), "{stderr}");
    // A symlink in the workspace is never collected, so never written: named too.
    assert!(stderr.contains("output file passwd-link not written: not collected (symlink)"), "{stderr}");
    assert!(!out.join("passwd-link").exists());
    assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 1, "something was written through the symlink");
    assert!(stderr.contains("kept.txt exists (pass --overwrite to replace it)"), "{stderr}");
    assert_eq!(std::fs::read_to_string(out.join("kept.txt")).unwrap(), "victim");
    assert_eq!(std::fs::read_to_string(out.join("sub/new.txt")).unwrap(), "new");
    for p in [out.join("sub"), out.join("sub/new.txt")] {
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!((m.uid(), m.gid()), (4242, 4343), "{} is not the out dir owner's", p.display());
    }

    let (status, stderr) = write_out(&out, code, &["--overwrite"]);
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(std::fs::read_to_string(out.join("kept.txt")).unwrap(), "replaced");
    assert_eq!(std::fs::read_to_string(victim.join("secret")).unwrap(), "victim", "the hard link was written through");
    assert_eq!(std::fs::metadata(out.join("kept.txt")).unwrap().uid(), 4242);
    assert!(!out.join(".git").exists() && std::fs::read_dir(&victim).unwrap().count() == 1, "{stderr}");

    let linked = scratch.join("linked-out");
    std::os::unix::fs::symlink(&victim, &linked).unwrap();
    let (status, stderr) = write_out(&linked, "open('y','w').write('y')", &[]);
    assert_ne!(status, Some(0), "{stderr}");
    assert!(stderr.contains("a symlink is refused"), "{stderr}");
    assert!(!victim.join("y").exists());
}
