use super::*;
use crate::wire::FileContent;

fn req(profile: &str, code: &str) -> ExecutionRequest {
    ExecutionRequest { profile: profile.into(), code: code.into(), ..Default::default() }
}

#[track_caller]
fn check(r: ExecutionRequest, want: Option<(ErrorCode, &str)>) {
    let got = admit(&r, &Config::builtin());
    match (got, want) {
        (Ok(_), None) => {}
        (Err(e), Some((code, field))) => {
            assert_eq!(e.code, code, "{e:?}");
            assert_eq!(e.field.as_deref(), Some(field), "{e:?}");
            assert!(!e.message.is_empty());
        }
        (got, want) => panic!("got {got:?}, want {want:?}"),
    }
}

#[test]
fn profile_language_harness_code_timeout() {
    check(req("python-default", "print(1)"), None);
    check(req("nope", "print(1)"), Some((ErrorCode::ProfileNotFound, "profile")));
    check(ExecutionRequest { language: Some("ts".into()), ..req("typescript-default", "1") }, None);
    check(ExecutionRequest { language: Some("cobol".into()), ..req("python-default", "1") }, Some((ErrorCode::UnsupportedLanguage, "language")));
    check(ExecutionRequest { language: Some("typescript".into()), ..req("python-default", "1") }, Some((ErrorCode::UnsupportedLanguage, "language")));
    check(ExecutionRequest { harness: Some("repl".into()), ..req("python-default", "1") }, Some((ErrorCode::UnsupportedHarness, "harness")));
    check(req("python-default", "  \n"), Some((ErrorCode::EmptyCode, "code")));
    check(req("python-default", &"#".repeat(2 << 20)), Some((ErrorCode::CodeTooLarge, "code")));
    check(ExecutionRequest { timeout: Some(0), ..req("python-default", "1") }, Some((ErrorCode::InvalidTimeout, "timeout")));
    check(ExecutionRequest { timeout: Some(20), ..req("python-default", "1") }, Some((ErrorCode::InvalidTimeout, "timeout")));
    check(ExecutionRequest { timeout: Some(MIN_TIMEOUT_MS - 1), ..req("python-default", "1") }, Some((ErrorCode::InvalidTimeout, "timeout")));
    check(ExecutionRequest { timeout: Some(MIN_TIMEOUT_MS), ..req("python-default", "1") }, None);
    check(ExecutionRequest { timeout: Some(300_000), ..req("python-default", "1") }, None);
    check(ExecutionRequest { timeout: Some(300_001), ..req("python-default", "1") }, Some((ErrorCode::TimeoutTooLarge, "timeout")));
}

fn with_file(name: &str, content: FileContent) -> ExecutionRequest {
    ExecutionRequest { files: [(name.to_owned(), content)].into(), ..req("python-default", "1") }
}

#[test]
fn files_outputs_env() {
    let text = |s: &str| FileContent::Text(s.into());
    check(with_file("data.csv", text("a,b")), None);
    check(with_file("../../escape.txt", text("x")), Some((ErrorCode::InvalidFileName, "files[\"../../escape.txt\"]")));
    check(with_file("/etc/x", text("x")), Some((ErrorCode::InvalidFileName, "files[\"/etc/x\"]")));
    check(with_file("", text("x")), Some((ErrorCode::InvalidFileName, "files[\"\"]")));
    check(with_file("b.bin", FileContent::Base64 { base64: "AAEC/w==".into() }), None);
    check(with_file("b.bin", FileContent::Base64 { base64: "!!".into() }), Some((ErrorCode::InvalidFileContent, "files[\"b.bin\"]")));
    check(with_file("big", text(&"x".repeat(65 << 20))), Some((ErrorCode::InputTooLarge, "files[\"big\"]")));
    let both = ExecutionRequest { files: [("a".into(), text("1")), ("a/b".into(), text("2"))].into(), ..req("python-default", "1") };
    check(both, Some((ErrorCode::InvalidFileName, "files[\"a/b\"]")));
    // Not neighbours in name order ("a.txt" sorts between them), and deeper: still refused.
    let apart =
        ExecutionRequest { files: [("a".into(), text("1")), ("a.txt".into(), text("2")), ("a/b".into(), text("3"))].into(), ..req("python-default", "1") };
    check(apart, Some((ErrorCode::InvalidFileName, "files[\"a/b\"]")));
    let deep = ExecutionRequest { files: [("x/y".into(), text("1")), ("x/y/z/w".into(), text("2"))].into(), ..req("python-default", "1") };
    check(deep, Some((ErrorCode::InvalidFileName, "files[\"x/y/z/w\"]")));
    // Its allowed twin: siblings and a shared directory are fine.
    let fine =
        ExecutionRequest { files: [("a.txt".into(), text("1")), ("a/b".into(), text("2")), ("a/c".into(), text("3"))].into(), ..req("python-default", "1") };
    check(fine, None);
    check(ExecutionRequest { outputs: vec!["*.png".into(), "results/**".into()], ..req("python-default", "1") }, None);
    check(ExecutionRequest { outputs: vec!["[".into()], ..req("python-default", "1") }, Some((ErrorCode::InvalidOutputPattern, "outputs[0]")));
    check(ExecutionRequest { env: [("OK_1".into(), "v".into())].into(), ..req("python-default", "1") }, None);
    check(ExecutionRequest { env: [("1BAD".into(), "v".into())].into(), ..req("python-default", "1") }, Some((ErrorCode::InvalidEnv, "env.1BAD")));
}

#[test]
fn decodes_binary_files_exactly() {
    let a = admit(&with_file("b.bin", FileContent::Base64 { base64: "AAEC/w==".into() }), &Config::builtin()).unwrap();
    assert_eq!(a.files[0].bytes, vec![0, 1, 2, 255]);
    assert_eq!(a.timeout_ms, 30_000);
}

#[test]
fn output_globs_match_top_level_and_subtrees() {
    let a = admit(&ExecutionRequest { outputs: vec!["*.png".into(), "results/**".into()], ..req("python-default", "1") }, &Config::builtin()).unwrap();
    let set = a.outputs.unwrap();
    assert!(set.is_match("plot.png"));
    assert!(!set.is_match("sub/plot.png"));
    assert!(set.is_match("results/a/b.csv"));
    assert!(!set.is_match("data.csv"));
}

/// A timeout that is almost surely seconds is refused with a hint naming the unit.
#[test]
fn a_timeout_in_seconds_gets_a_hint() {
    let e = admit(&ExecutionRequest { timeout: Some(20), ..req("python-default", "1") }, &Config::builtin()).unwrap_err();
    assert_eq!(e.message, "timeout 20 is below the minimum of 100: the timeout is in milliseconds (for 20 seconds, send 20000)");
}
