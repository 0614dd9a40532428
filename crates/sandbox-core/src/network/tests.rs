use super::*;
use crate::Config;

#[track_caller]
fn check(rule: &str, want_err: Option<&str>) {
    match (Rule::parse(rule), want_err) {
        (Ok(_), None) => {}
        (Err(e), Some(w)) => assert!(e.contains(w), "{rule}: {e:?} lacks {w:?}"),
        (r, w) => panic!("{rule}: got {r:?}, wanted error {w:?}"),
    }
}

#[test]
fn rules_parse_or_say_why() {
    check("api.example.com:443", None);
    check("api.example.com", Some("has no port"));
    check("*.example.com:443", None);
    check("*example.com:443", Some("invalid label"));
    check("a.*.example.com:443", Some("invalid label"));
    check("10.0.0.5:80", None);
    check("10.0.0.0/8:8000-8100", None);
    check("10.0.0.1/8:80", Some("host bits set"));
    check("10.0.0.0/33:80", Some("prefix length"));
    check("[2001:db8::1]:443", None);
    check("2001:db8::1:443", Some("brackets"));
    check("host:0", Some("1..=65535"));
    check("host:90-80", Some("empty"));
    check("host:http", Some("not a number"));
    check("-bad.example:1", Some("invalid label"));
    check("127.0.0.2:80", Some("loopback is the sandbox's own"));
    check("[::1]:80", Some("loopback is the sandbox's own"));
}

#[test]
fn names_and_wildcards_match_exactly() {
    let exact = Rule::parse("API.example.com:443").unwrap();
    assert!(exact.matches_name("api.example.com"));
    assert!(!exact.matches_name("x.api.example.com"));
    let wild = Rule::parse("*.example.com:443").unwrap();
    assert!(wild.matches_name("a.example.com") && wild.matches_name("a.b.example.com"));
    assert!(!wild.matches_name("example.com"));
    assert!(!wild.matches_name("badexample.com"));
    assert!(wild.allows_port(443) && !wild.allows_port(80));
}

#[test]
fn cidrs_match_their_range_only() {
    let r = Rule::parse("10.1.0.0/16:80").unwrap();
    assert!(r.matches_ip("10.1.200.3".parse().unwrap()));
    assert!(r.matches_ip("::ffff:10.1.0.1".parse().unwrap()));
    assert!(!r.matches_ip("10.2.0.1".parse().unwrap()));
    let all = Rule::parse("0.0.0.0/0:443").unwrap();
    assert!(all.matches_ip("1.2.3.4".parse().unwrap()));
    assert!(!all.matches_ip("2001:db8::1".parse().unwrap()));
}

#[track_caller]
fn config_error(network: &str) -> Option<(String, String)> {
    let text = format!("[profiles.p]\nlanguage = \"python\"\n{network}\n");
    Config::parse(&text, "t.toml").err().map(|e| (e.field, e.message))
}

#[test]
fn profiles_take_none_or_an_allowlist() {
    assert_eq!(config_error("network = \"none\""), None);
    assert_eq!(config_error("[profiles.p.network]\nallow = [\"api.test:443\"]\nhosts = { \"api.test\" = \"10.9.0.2\" }"), None);
    let (field, msg) = config_error("network = \"open\"").unwrap();
    assert!(field.starts_with("profiles.p.network") && msg.contains("unknown network"), "{field} {msg}");
    let (field, msg) = config_error("[profiles.p.network]\nallow = [\"ok.test:1\", \"bad\"]").unwrap();
    assert_eq!(field, "profiles.p.network.allow[1]");
    assert!(msg.contains("has no port"), "{msg}");
    let (field, msg) = config_error("[profiles.p.network]\nallow = [\"api.test:443\"]\nhosts = { \"other.test\" = \"10.9.0.2\" }").unwrap();
    assert_eq!(field, "profiles.p.network.hosts.other.test");
    assert!(msg.contains("no rule"), "{msg}");
    let (field, _) = config_error("[profiles.p.network]\nallow = []").unwrap();
    assert_eq!(field, "profiles.p.network.allow");
    let (field, _) = config_error("[profiles.p.network]\nallow = [\"a.test:1\"]\nports = 3").unwrap();
    assert!(field.starts_with("profiles.p.network"), "{field}");
    let c = Config::parse("[network]\nupstream_dns = \"127.0.0.1:5353\"\n", "t.toml").unwrap();
    assert_eq!(c.network.upstream_dns, Some("127.0.0.1:5353".parse().unwrap()));
}
