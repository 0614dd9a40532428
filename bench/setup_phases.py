#!/usr/bin/env python3
"""Where the time of one cold `sandbox run -c pass` goes, phase by phase.

Runs the binary N times under strace(1), tracing only the system calls that mark a phase
(`--seccomp-bpf`: every other call runs untraced, at full speed), and prints the median of each
phase in ms. The phases, by the call that ends each:

  service start     the service's execve to its helper's clone of init with the new
                    namespaces: config load, audit log open and the `begin` record, admission,
                    the workspace tmpfs, the cgroup; beside it, the helper started ahead (forked
                    by a thread of the service, exec'd, loaded), which then reads the spec and
                    joins the cgroup
  rootfs            init's first instruction to pivot_root: every mount of the root
  walls + exec      pivot_root to the program's execve: read-only root, rlimits, landlock,
                    seccomp, the harness command
  program           the program's execve to its exit_group (the interpreter itself)
  teardown          the program's exit to the service's exit_group: init and helper reaped,
                    cgroup removed, files collected, the audit `finish` record, the output

strace adds a stop per traced call (a few dozen per run) and traces every process, so the
figures are high (on this host the total is ~1.5x an untraced run's); use them for proportions on
one machine. Not for a QEMU guest under TCG, where ptrace stops inflate the set-up ~10x
(bench/startup-guest.sh compares host and guest on the result's own timing instead).

  python3 bench/setup_phases.py SANDBOX_BIN [N] [--json OUT]
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile

PHASES = ["service start", "rootfs", "walls + exec", "program", "teardown"]
TRACED = "execve,clone,clone3,pivot_root,exit_group"


def marks(trace_path):
    """The six phase boundaries of one run, from strace -f -ttt output."""
    lines = []
    with open(trace_path) as f:
        for line in f:
            parts = line.split(None, 2)
            if len(parts) == 3 and parts[0].isdigit():
                lines.append((int(parts[0]), float(parts[1]), parts[2]))
    service = lines[0][0]
    start = lines[0][1]
    init_clone = next(t for pid, t, c in lines if c.startswith("clone") and "CLONE_NEWPID" in c)
    pivot = next(t for pid, t, c in lines if c.startswith("pivot_root("))
    prog_pid, prog_exec = next((pid, t) for pid, t, c in lines if c.startswith("execve(") and t > pivot)
    prog_exit = next(t for pid, t, c in lines if pid == prog_pid and c.startswith("exit_group("))
    end = max(t for pid, t, c in lines if pid == service and c.startswith("exit_group("))
    bounds = [start, init_clone, pivot, prog_exec, prog_exit, end]
    return {name: (bounds[i + 1] - bounds[i]) * 1000.0 for i, name in enumerate(PHASES)}


def main():
    args = sys.argv[1:]
    out = None
    if "--json" in args:
        i = args.index("--json")
        out = args[i + 1]
        del args[i : i + 2]
    binary = args[0]
    n = int(args[1]) if len(args) > 1 else 20
    data_dir = tempfile.mkdtemp(prefix="sandbox-phases.")
    os.chmod(data_dir, 0o755)
    trace = os.path.join(data_dir, "trace")
    cmd = [binary, "--data-dir", data_dir, "run", "-c", "pass"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)  # creates the data directory's files
    samples = {p: [] for p in PHASES}
    totals = []
    for _ in range(n):
        subprocess.run(["strace", "-f", "-ttt", "-qq", "--seccomp-bpf", "-e", f"trace={TRACED}", "-o", trace] + cmd,
                       check=True, stdout=subprocess.DEVNULL)
        m = marks(trace)
        for p in PHASES:
            samples[p].append(m[p])
        totals.append(sum(m.values()))
    medians = {p: statistics.median(samples[p]) for p in PHASES}
    medians["total"] = statistics.median(totals)
    print(f"phases of `sandbox run -c pass`, medians of {n} runs under strace ({os.uname().release})")
    for p in PHASES + ["total"]:
        print(f"  {p:<14} {medians[p]:9.2f} ms")
    if out:
        with open(out, "w") as f:
            json.dump({"kernel": os.uname().release, "n": n, "ms": medians}, f)
    subprocess.run(["rm", "-rf", data_dir])


if __name__ == "__main__":
    main()
