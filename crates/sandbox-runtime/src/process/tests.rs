use super::*;

#[test]
fn this_process_is_alive_and_a_recycled_pid_is_not_its_owner() {
    let me = Owner::current();
    assert!(me.alive(), "{me:?}");
    assert_ne!(me.start, 0);
    assert!(!Owner { start: me.start + 1, ..me }.alive());
    assert!(!Owner { pid: 0, start: 0 }.alive());
    assert_eq!(parent_of(me.pid), Some(std::os::unix::process::parent_id()));
}

#[test]
fn owner_lines_round_trip() {
    let check = |line: &str, want: Option<(u32, u64)>| assert_eq!(Owner::parse(line).map(|o| (o.pid, o.start)), want, "{line:?}");
    check("12 345\n", Some((12, 345)));
    check(&Owner { pid: 7, start: 8 }.to_string(), Some((7, 8)));
    check("12", None);
    check("12 x", None);
    check("12 3 4", None);
    check("", None);
}
