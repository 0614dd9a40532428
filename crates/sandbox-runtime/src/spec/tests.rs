use super::*;

fn spec_with(files: &[(&str, &[u8])]) -> SpawnSpec {
    SpawnSpec {
        hostname: "sandbox".into(),
        root_files: files.iter().map(|(path, content)| RootFile { sandbox_path: (*path).into(), content: content.to_vec(), mode: 0o444 }).collect(),
        ..Default::default()
    }
}

#[test]
fn a_frame_reads_back_whole_and_nothing_after_it_is_read() {
    let spec = spec_with(&[("/code/main.py", b"print(1)\n"), ("/code/x.pyc", &[0, 0xff, b'\n', b'\n']), ("/etc/empty", b"")]);
    let mut stream = spec.frame();
    stream.extend_from_slice(b"the next message");
    let mut r = &stream[..];
    let read = SpawnSpec::read_frame(&mut r).unwrap();
    assert_eq!(r, b"the next message", "read_frame reads its frame and nothing more");
    let files: Vec<_> = read.root_files.iter().map(|f| (f.sandbox_path.as_str(), f.content.as_slice())).collect();
    assert_eq!(files, [("/code/main.py", &b"print(1)\n"[..]), ("/code/x.pyc", &[0, 0xff, b'\n', b'\n'][..]), ("/etc/empty", &b""[..])]);
    assert_eq!(read.hostname, "sandbox");
}

#[test]
fn the_json_holds_lengths_not_contents() {
    let frame = spec_with(&[("/code/main.py", b"secret = 42\n")]).frame();
    let line = &frame[..frame.iter().position(|&b| b == b'\n').unwrap()];
    let json: serde_json::Value = serde_json::from_slice(line).unwrap();
    assert_eq!(json["root_files"][0]["len"], 12);
    assert!(!String::from_utf8_lossy(line).contains("secret"));
}

#[test]
fn a_frame_cut_short_or_misread_fails_its_step() {
    let frame = spec_with(&[("/code/main.py", b"print(1)\n")]).frame();
    let step_of = |bytes: &[u8]| SpawnSpec::read_frame(&mut &bytes[..]).unwrap_err().step;
    // The bytes end early, the line never ends, nothing came.
    assert_eq!(step_of(&frame[..frame.len() - 1]), "read_spec");
    let newline = frame.iter().position(|&b| b == b'\n').unwrap();
    assert_eq!(step_of(&frame[..newline]), "read_spec");
    assert_eq!(step_of(b""), "read_spec");
    // Not a spec; a length past the cap is refused before anything is allocated for it.
    assert_eq!(step_of(b"{\"hostname\": 1}\n"), "parse_spec");
    let huge = String::from_utf8(frame[..newline].to_vec()).unwrap().replace("\"len\":9", &format!("\"len\":{}", ROOT_FILES_MAX_BYTES + 1));
    assert!(huge.contains(&format!("{}", ROOT_FILES_MAX_BYTES + 1)));
    assert_eq!(step_of(format!("{huge}\n").as_bytes()), "parse_spec");
    // Each file under the cap, together past it.
    let mut two = spec_with(&[("/a", b"x"), ("/b", b"y")]);
    let line = String::from_utf8(two.frame()).unwrap();
    let half = ROOT_FILES_MAX_BYTES / 2 + 1;
    let line = line.split('\n').next().unwrap().replace("\"len\":1", &format!("\"len\":{half}"));
    assert_eq!(step_of(format!("{line}\n").as_bytes()), "parse_spec");
    two.root_files.clear();
    // from_frame: all of it, nothing after.
    let mut trailing = two.frame();
    assert!(SpawnSpec::from_frame(&trailing).is_ok());
    trailing.push(b'x');
    assert!(SpawnSpec::from_frame(&trailing).unwrap_err().contains("1 bytes after"));
}
