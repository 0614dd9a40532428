use super::*;

#[track_caller]
fn check(name: &str, ok: bool) {
    let got = WorkspacePath::parse(name);
    assert_eq!(got.is_ok(), ok, "{name:?}: {got:?}");
    if let Err(e) = got {
        assert_eq!(e.code(), ErrorCode::InvalidFileName);
    }
}

#[test]
fn accepts_relative_names_and_unicode() {
    check("data.csv", true);
    check("out/plot.png", true);
    check("données_📊.csv", true);
    check("résultat_分析 (final).txt", true);
    check(".hidden", true);
    check("a..b", true);
}

#[test]
fn rejects_escapes_and_odd_names() {
    check("", false);
    check("/etc/x", false);
    check("../x", false);
    check("../../escape.txt", false);
    check("a/../../x", false);
    check("a/./b", false);
    check("a//b", false);
    check("a/", false);
    check("..\\x", false);
    check("a\0b", false);
    check("a\nb", false);
    check(&"x".repeat(256), false);
    check(&"x/".repeat(2100), false);
}

#[test]
fn keeps_unicode_exactly() {
    // NFC and NFD forms stay distinct: no normalisation.
    let nfc = "caf\u{e9}.txt";
    let nfd = "cafe\u{301}.txt";
    assert_eq!(WorkspacePath::parse(nfc).unwrap().as_str(), nfc);
    assert_eq!(WorkspacePath::parse(nfd).unwrap().as_str(), nfd);
}
