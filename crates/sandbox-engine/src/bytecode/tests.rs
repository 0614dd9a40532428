use super::*;

const PYTHON: &str = "/usr/bin/python3";

/// The magic number of the host's interpreter, as it reports it.
fn magic() -> Vec<u8> {
    let out =
        std::process::Command::new(PYTHON).args(["-c", "import importlib.util, sys; sys.stdout.buffer.write(importlib.util.MAGIC_NUMBER)"]).output().unwrap();
    assert!(out.status.success());
    out.stdout
}

#[test]
fn the_host_interpreter_compiles_every_harness_file_to_loadable_bytecode() {
    let compiled = compile(Path::new(PYTHON)).unwrap();
    let files = crate::command::harness_files(sandbox_core::Language::Python);
    assert_eq!(compiled.len(), files.len());
    let magic = magic();
    for pyc in &compiled {
        assert_eq!(&pyc[..4], &magic[..], "the interpreter's own magic number");
    }
    // The interpreter loads it and finds the harness's functions, named by their sandbox path.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("h.pyc"), &compiled[0]).unwrap();
    let check = "import marshal, sys\nd = open(sys.argv[1], 'rb').read()\nc = marshal.loads(d[16:])\ng = {'__name__': 'x'}\nexec(c, g)\nprint(c.co_filename, callable(g['run']), callable(g['compiled']))";
    let out = std::process::Command::new(PYTHON).args(["-c", check]).arg(dir.path().join("h.pyc")).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "/code/_sandbox_harness.py True True\n", "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn the_bytecode_is_cached_owner_only_and_read_back() {
    let data = tempfile::tempdir().unwrap();
    let got = harness(data.path(), Path::new(PYTHON)).expect("compiled");
    let dir = data.path().join("bytecode");
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "one cache file, nothing left aside: {files:?}");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(std::fs::metadata(&files[0]).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(parse(&std::fs::read(&files[0]).unwrap()).as_ref(), Some(&*got));
    // A cache file that is not bytecode is replaced by the next compile.
    std::fs::write(&files[0], b"not bytecode").unwrap();
    let (real, _) = key(Path::new(PYTHON)).unwrap();
    store(&files[0], &compile(&real).unwrap(), true).unwrap();
    assert!(parse(&std::fs::read(&files[0]).unwrap()).is_some());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "nothing left aside");
}

#[test]
fn another_interpreter_file_has_another_key() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("python3");
    std::fs::copy(std::fs::canonicalize(PYTHON).unwrap(), &copy).unwrap();
    let (a, b) = (key(Path::new(PYTHON)).unwrap().1, key(&copy).unwrap().1);
    assert_ne!(a, b);
    assert_eq!(key(Path::new(PYTHON)).unwrap().1, a, "stable for the same interpreter");
}

#[test]
fn what_is_not_the_harness_bytecode_is_refused() {
    let good = compile(Path::new(PYTHON)).unwrap();
    let framed = |pycs: &[Vec<u8>]| pycs.iter().flat_map(|p| (p.len() as u64).to_le_bytes().into_iter().chain(p.iter().copied())).collect::<Vec<u8>>();
    assert!(parse(&framed(&good)).is_some());
    let whole = framed(&good);
    assert!(parse(&whole[..whole.len() - 1]).is_none(), "truncated");
    assert!(parse(&framed(&good[..1])).is_none(), "a file missing");
    let mut other_magic = good.clone();
    other_magic[1][0] ^= 1;
    assert!(parse(&framed(&other_magic)).is_none(), "two magic numbers");
    assert!(parse(b"").is_none() && parse(b"garbage!").is_none());
    // A program that is not Python gives no bytecode, no cache file, and a note of why, which
    // spares later runs the attempt.
    let data = tempfile::tempdir().unwrap();
    assert!(harness(data.path(), Path::new("/bin/true")).is_none());
    let names: Vec<String> = std::fs::read_dir(data.path().join("bytecode")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.len() == 1 && names[0].ends_with(".failed"), "{names:?}");
    let why = std::fs::read_to_string(data.path().join("bytecode").join(&names[0])).unwrap();
    assert!(why.contains("is not the harness's bytecode"), "{why}");
}

#[test]
fn a_compile_that_may_pass_next_time_is_not_remembered_as_failed() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    // An "interpreter" killed by a signal, as a Ctrl-C to its process group would.
    let killed = dir.path().join("killed-python");
    std::fs::write(&killed, "#!/bin/sh\nkill -9 $$\n").unwrap();
    std::fs::set_permissions(&killed, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = compile(&killed).unwrap_err();
    assert!(!e.lasting && e.why.contains("signal 9"), "{e:?}");
    let data = tempfile::tempdir().unwrap();
    assert!(!ready(data.path(), &killed));
    assert!(harness(data.path(), &killed).is_none());
    assert_eq!(std::fs::read_dir(data.path().join("bytecode")).map_or(0, Iterator::count), 0, "no note");
    assert!(!ready(data.path(), &killed), "tried again by the next run");
    // One that fails for good is noted, and then known without a compile.
    let failing = dir.path().join("failing-python");
    std::fs::write(&failing, "#!/bin/sh\necho broken >&2\nexit 3\n").unwrap();
    std::fs::set_permissions(&failing, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = compile(&failing).unwrap_err();
    assert!(e.lasting && e.why.contains("broken"), "{e:?}");
    assert!(harness(data.path(), &failing).is_none());
    assert!(ready(data.path(), &failing));
}
