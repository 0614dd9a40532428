use super::symlink_escapes;

/// `depth`: how many directories below the root the link sits.
#[track_caller]
fn check(depth: usize, target: &str, escapes: bool) {
    assert_eq!(symlink_escapes(depth, target.as_bytes()), escapes, "link at depth {depth} -> {target:?}");
}

#[test]
fn symlink_targets_that_stay_inside_the_root_are_accepted() {
    check(0, "/usr/bin/python3", false);
    check(0, "usr/bin", false);
    check(2, "../lib/libc.so.6", false);
    check(2, "../../etc/alternatives/x", false);
    check(1, "./a/../b", false);
    check(0, "/", false);
    check(3, "/etc/./passwd", false);
}

#[test]
fn symlink_targets_that_climb_above_the_root_are_refused() {
    check(0, "../etc", true);
    check(2, "../../../etc/shadow", true);
    check(5, "/../etc", true);
    check(1, "a/../../..", true);
    check(0, "/usr/../../x", true);
}
