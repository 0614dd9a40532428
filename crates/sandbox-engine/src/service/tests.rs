use super::*;

#[test]
fn slots_then_queue_places_then_full() {
    let slots = Slots::new(1, 1);
    let running = slots.place().expect("a free slot");
    assert!(matches!(running, Place::Slot(_)));
    assert_eq!(slots.in_flight(), 1);
    let queued = slots.place().expect("a queue place");
    assert!(matches!(queued, Place::Queued(_)));
    assert_eq!(slots.waiting.load(Ordering::SeqCst), 1);
    assert!(slots.place().is_none(), "slot and queue taken");
    // A ticket dropped while queued gives its place back.
    drop(queued);
    assert_eq!(slots.waiting.load(Ordering::SeqCst), 0);
    drop(running);
    assert_eq!(slots.in_flight(), 0);
}

#[test]
fn a_queued_place_becomes_a_slot_when_one_frees() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let slots = Slots::new(1, 4);
    let running = slots.place().unwrap();
    let queued = slots.place().unwrap();
    rt.block_on(async {
        let waiter = queued.into_slot(&slots);
        tokio::pin!(waiter);
        assert!(tokio::time::timeout(std::time::Duration::from_millis(20), &mut waiter).await.is_err(), "waits while the slot is taken");
        drop(running);
        assert!(waiter.await.is_some());
    });
    assert_eq!(slots.waiting.load(Ordering::SeqCst), 0);
}

#[test]
fn callers_allow_their_profiles_only() {
    let c = Caller { audit_name: "key:a".into(), profiles: vec!["python-default".into()], peer: None, quota: None };
    assert!(c.allows("python-default"));
    assert!(!c.allows("typescript-default"));
    assert!(Caller::local("cli:me").allows("anything"));
}

#[test]
fn refusals_become_rejected_results() {
    let r = Refusal { execution_id: Some("id".into()), ..Refusal::new(ErrorCode::TimeoutTooLarge, "too long", Some("timeout".into())) };
    let result = r.into_result("p");
    assert_eq!((result.status, result.execution_id.as_str(), result.profile.as_str()), (Status::Rejected, "id", "p"));
    let e = result.error.unwrap();
    assert_eq!((e.kind.as_str(), e.message.as_str(), e.field.as_deref()), ("timeout_too_large", "too long", Some("timeout")));
}

#[test]
fn the_count_of_left_out_refusals_comes_first() {
    assert_eq!(audit_message("bad", 0), "bad");
    assert!(audit_message(&"x".repeat(5000), 7).starts_with("[7 earlier refusals"));
}

#[track_caller]
fn check_default(may_use: &[&str], language: Option<&str>, want: Result<&str, ErrorCode>) {
    let caller = Caller { audit_name: "t".into(), profiles: may_use.iter().map(|s| s.to_string()).collect(), peer: None, quota: None };
    let got = default_profile(&sandbox_core::Config::builtin(), &caller, language);
    assert_eq!(got.as_deref().map_err(|r| r.code), want.map(str::to_owned).as_deref().map_err(|c| *c));
}

/// One rule on every door for a request without a profile.
#[test]
fn the_default_profile_is_the_languages_default_the_caller_may_use() {
    check_default(&["*"], None, Ok("python-default"));
    check_default(&["*"], Some("python"), Ok("python-default"));
    check_default(&["*"], Some("ts"), Ok("typescript-default"));
    check_default(&["python-default"], Some("typescript"), Err(ErrorCode::ProfileNotFound));
    check_default(&["*"], Some("cobol"), Err(ErrorCode::UnsupportedLanguage));
}

/// The built-in pools hold 3 + 2 sandboxes of 512 MiB profiles, 2 of a 2 GiB one and one
/// pre-forked template child of another 2 GiB one (8.5 GiB); the largest profile is 2 GiB.
#[test]
fn default_concurrency_counts_each_pooled_sandbox_as_a_run_of_its_own_profile() {
    let config = sandbox_core::Config::builtin();
    const GIB: u64 = 1 << 30;
    assert_eq!(concurrency_for(&config, 8, 16 * GIB), 3);
    assert_eq!(concurrency_for(&config, 2, 24 * GIB), 2);
    assert_eq!(concurrency_for(&config, 64, 64 * GIB), 27);
    // Never below one slot, however little memory.
    assert_eq!(concurrency_for(&config, 8, 4 * GIB), 1);
}
