use super::*;

/// Debian's and Ubuntu's `useradd` defaults: 65536 ids per user from 100000.
const DEBIAN: &str = "alice:100000:65536\nbob:165536:65536\ncarol:231072:65536\n";

#[track_caller]
fn check(text: &str, uid_base: u32, want: &[&str]) {
    let got: Vec<String> = overlaps(text, &sandbox_ids(uid_base)).iter().map(ToString::to_string).collect();
    assert_eq!(got, want);
}

#[test]
fn the_default_base_misses_debian_ranges_the_old_one_hit() {
    let default = crate::profile::RuntimeConfig::default().uid_base;
    check(DEBIAN, default, &[]);
    // 200000 was the default until issue 12, finding 5: the second and third users own it.
    check(DEBIAN, 200_000, &["line 2: bob owns 165536..231072", "line 3: carol owns 231072..296608"]);
    // Debian's SUB_UID_MAX: the last range useradd can hand out ends below the default.
    check("u:600034464:65536\n", default, &[]);
}

#[test]
fn edges_comments_and_junk() {
    check("a:300000:100\n", 300_100, &[]);
    check("a:300000:101\n", 300_100, &["line 1: a owns 300000..300101"]);
    check("a:365536:1\n", 300_000, &[]);
    check("a:365535:1\n", 300_000, &["line 1: a owns 365535..365536"]);
    check("# a:300000:65536\n\nnot a line\nb:x:1\nc:300000:0\nd:300000:1:extra\n1001:300000:5\n", 300_000, &["line 7: 1001 owns 300000..300005"]);
}
