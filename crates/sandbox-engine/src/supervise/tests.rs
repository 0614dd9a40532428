use super::*;

#[track_caller]
fn check(e: SuperviseError, want: &str) {
    assert_eq!(e.message(), want);
}

#[test]
fn a_supervision_failure_names_its_step_then_its_cause() {
    let io = || std::io::Error::from_raw_os_error(24);
    check(SuperviseError::Descriptor { what: "socketpair", source: io() }, "socketpair: Too many open files (os error 24)");
    check(SuperviseError::SpawnHelper { helper: "/x/sandbox".into(), source: io() }, "spawning the helper /x/sandbox: Too many open files (os error 24)");
    check(SuperviseError::SendSpec(io()), "sending the spec: Too many open files (os error 24)");
    check(SuperviseError::SetUp { step: "pivot_root".into(), message: "EINVAL".into() }, "sandbox set-up failed at pivot_root: EINVAL");
    check(SuperviseError::ShutDown, "the service shut down (or `sandbox run` was interrupted) before the execution ended");
    check(SuperviseError::OpenTree { path: "/d/code".into(), source: io() }, "open_tree /d/code: Too many open files (os error 24)");
}
