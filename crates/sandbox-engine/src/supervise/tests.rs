use super::*;

#[track_caller]
fn check(e: SuperviseError, want: &str) {
    assert_eq!(e.message(), want);
}

#[test]
fn a_supervision_failure_names_its_step_then_its_cause() {
    let io = || std::io::Error::from_raw_os_error(24);
    // The C library's text for EMFILE ("Too many open files" in glibc, not in musl).
    let emfile = io().to_string();
    check(SuperviseError::Descriptor { what: "socketpair", source: io() }, &format!("socketpair: {emfile}"));
    check(SuperviseError::SpawnHelper { helper: "/x/sandbox".into(), source: io() }, &format!("spawning the helper /x/sandbox: {emfile}"));
    check(SuperviseError::SendSpec(io()), &format!("sending the spec: {emfile}"));
    check(SuperviseError::SetUp { step: "pivot_root".into(), message: "EINVAL".into() }, "sandbox set-up failed at pivot_root: EINVAL");
    check(SuperviseError::ShutDown, "the service shut down (or the `sandbox` command running it was interrupted) before the execution ended");
    check(SuperviseError::OpenTree { path: "/d/code".into(), source: io() }, &format!("open_tree /d/code: {emfile}"));
}
