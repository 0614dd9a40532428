//! The Linux isolation runtime: everything that touches the kernel to run one program in a
//! fresh container. It knows nothing of profiles, HTTP, MCP or audit: the engine hands it a
//! [`spec::SpawnSpec`] and reads back [`spec::Event`]s.
//!
//! Process tree of one execution (host view):
//!
//! ```text
//! engine (daemon or CLI, multi-threaded)
//!  └─ helper  "sandbox-init", our binary re-executed: clones ↓ (on cgroup v2 into the execution's
//!      │       cgroup), writes its id maps; never in the execution's cgroup itself
//!      └─ init  pid 1 of new user/pid/mount/net/ipc/uts/cgroup namespaces (on v1 it joins the
//!          │     cgroup itself first, then makes its cgroup namespace): builds the rootfs,
//!          │     pivot_root, forwards signals, reaps, kills everything when the program ends
//!          └─ program  uid 1000, no capabilities, no_new_privs, landlock, seccomp, rlimits
//! ```

pub mod cgroup;
mod helper;
mod init;
pub mod probe;
pub mod process;
mod rootfs;
mod seccomp;
pub mod selftest;
pub mod spec;
mod step;
pub(crate) mod sys;
pub mod tun;
pub mod wall;
pub mod warm;

pub use helper::{helper_main, HELPER_ARGV0};
pub use rootfs::InotifyShare;
pub use seccomp::program as seccomp_program;
pub use selftest::{selftest_main, SELFTEST_ARGV0};
pub use sys::warm_ffi as warm_entry;
pub use sys::{
    die_by_signal, dup_above, fork_helper, open_tree_clone, pidfd_open, pidfd_send_signal, pipe_reader, pipe_unread, recv_fd, recv_with_fds, sched_normal,
    send_fds, signal_ignored,
};
