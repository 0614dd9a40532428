# The integration tests the v2 guest stage runs (exact names; sourced by inside.sh). Chosen
# for limits and isolation, where cgroup v2 and the kernel's version matter; Python runs ~25x
# slower under TCG, so each one counts. What each v2 code path is hit by:
#   nsdelegate (mount option; cgroup namespace root)  attacks::host_processes_and_pid1_are_invisible
#   memory.max, memory.events oom_kill, memory.peak   limits::memory_past_the_limit_is_memory_limit, cases::c05
#   pids.max, pids.events                             cases::c04, limits::fork_bomb_is_contained_and_host_still_forks (warm)
#   cpu.max, cpu.stat                                 limits::half_cpu_profile_gets_about_half_a_cpu
#   cgroup.kill                                       every warm run (the template's teardown), timeouts
#   nested placement (subtree_control at each level)  placement::executions_live_under_the_services_own_cgroup
#   clone3 CLONE_INTO_CGROUP (init born in its cgroup) placement::executions_live_under_the_services_own_cgroup
#   a pooled sandbox (TypeScript, warm pass)          harness::typescript_function_returns_data (warm)
#   readiness self-test, its not-ready cases          selftest::*
#   environments as overlays in a user namespace      attacks::environment_mounts_do_not_reveal_host_paths
COLD=(
  basics::python_prints_42
  placement::executions_live_under_the_services_own_cgroup
  limits::memory_past_the_limit_is_memory_limit
  limits::half_cpu_profile_gets_about_half_a_cpu
  timeouts::busy_loop_times_out
  cases::c11
  cases::c02
  attacks::host_secret_file_is_invisible
  attacks::host_processes_and_pid1_are_invisible
  attacks::no_host_paths_leak_through_mountinfo_or_cmdline
  attacks::root_filesystem_is_read_only
  attacks::host_loopback_services_are_unreachable
  attacks::dangerous_syscalls_fail_with_eperm
  attacks::new_namespaces_via_clone_are_refused
  attacks::cannot_become_root_and_holds_no_capabilities
  attacks::landlock_blocks_paths_outside_the_rules_even_through_proc
  attacks::landlock_stops_truncate_and_device_ioctl_as_far_as_the_enforced_abi_reaches
  attacks::unlisted_syscalls_fail_with_enosys
  attacks::environment_mounts_do_not_reveal_host_paths
  selftest::self_test_does_every_step_of_an_execution_once
  selftest::seccomp_forbidding_user_namespaces_makes_the_node_not_ready_naming_the_step
  selftest::read_only_cgroupfs_makes_the_node_not_ready_naming_the_step
  attacks::workspace_is_unreachable_for_other_host_users_while_running
  cases::c01
  cases::c04
  cases::c05
  cases::c10
  network::network_none_has_only_loopback
  network::python_reaches_allowed_servers_by_name_and_address
)
WARM=(
  basics::python_prints_42
  limits::memory_past_the_limit_is_memory_limit
  limits::fork_bomb_is_contained_and_host_still_forks
  timeouts::busy_loop_times_out
  attacks::host_secret_file_is_invisible
  attacks::dangerous_syscalls_fail_with_eperm
  harness::typescript_function_returns_data
)
# Again with each Python execution in a child its template forked ahead (SANDBOX_TEST_WARM=prefork):
# the lifted SCHED_IDLE and the pages it copied while waiting, charged to its v2 cgroup.
PREFORK=(
  basics::python_prints_42
  limits::memory_past_the_limit_is_memory_limit
  attacks::host_secret_file_is_invisible
)
# Left out on one kernel, and why.
case "$(uname -r)" in
  6.1.*)
    # It proves ENOSYS for calls the kernel knows (listmount, 6.8+): 6.1 knows none of them.
    COLD=("${COLD[@]/attacks::unlisted_syscalls_fail_with_enosys}")
    # A warm child at its memory limit on 6.1 under TCG is still reclaiming (the template's
    # shared pages; the root is 9p) when py-small's 10 s timeout fires, so it ends timeout, not
    # memory_limit. Cold OOM on 6.1 passes. Open: issue 14 notes.
    WARM=("${WARM[@]/limits::memory_past_the_limit_is_memory_limit}")
    PREFORK=("${PREFORK[@]/limits::memory_past_the_limit_is_memory_limit}")
    ;;
esac
COLD=(${COLD[@]})
WARM=(${WARM[@]})
PREFORK=(${PREFORK[@]})
