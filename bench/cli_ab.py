#!/usr/bin/env python3
"""Interleaved A/B of `sandbox run` builds, each binary's page cache made alike first.

    python3 bench/cli_ab.py [-n ROUNDS] [--orders K] [--data-dir DIR] NAME=BINARY ... [-- RUN ARGS]

Copies each BINARY (with the libsandbox_warm.so beside it, if any) into a temporary directory
under this repository (a disk file system, as an installed binary is: a copy on tmpfs holds 4 kB
pages where ext4's page cache holds large folios, and faulted ~0.5 ms more per run here), drops
each copy's cached pages (posix_fadvise DONTNEED) and reads it back in full, so that no build
runs from pages the linker or a copy left in small pieces. Then runs `BINARY --data-dir DIR run
RUN ARGS` (default `-c pass`) round-robin, ROUNDS timed rounds after 5 warm-ups, in K orders
(the list rotated each time), and prints each build's p50, p25 and mean wall time (ms, from
posix_spawn to waitpid) and its p50 against the first build's. One data directory serves all
builds (default: a new one), so their audit logs grow alike. Compare ratios and differences,
never absolute times: this machine's speed varies by the hour.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def equalize(path):
    """Drops `path`'s cached pages and reads it back sequentially."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        while os.read(fd, 1 << 20):
            pass
    finally:
        os.close(fd)


def main():
    argv = sys.argv[1:]
    run_args = ["-c", "pass"]
    if "--" in argv:
        i = argv.index("--")
        argv, run_args = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=200, help="timed rounds per order")
    p.add_argument("--orders", type=int, default=2, help="how many rotations of the build list")
    p.add_argument("--data-dir", help="the data directory all builds share (default: a new one)")
    p.add_argument("builds", nargs="+", metavar="NAME=BINARY")
    a = p.parse_args(argv)
    work = tempfile.mkdtemp(prefix=".cli-ab-", dir=ROOT)
    os.chmod(work, 0o755)
    data = a.data_dir or tempfile.mkdtemp(prefix="sandbox-ab-data.", dir="/tmp")
    os.chmod(data, 0o755)
    try:
        builds = []
        for spec in a.builds:
            name, _, binary = spec.partition("=")
            d = os.path.join(work, name)
            os.mkdir(d)
            shutil.copy(binary, os.path.join(d, "sandbox"))
            lib = os.path.join(os.path.dirname(binary), "libsandbox_warm.so")
            if os.path.exists(lib):
                shutil.copy(lib, d)
            builds.append((name, os.path.join(d, "sandbox")))
        os.sync()
        for _, b in builds:
            equalize(b)
        devnull = os.open(os.devnull, os.O_WRONLY)
        times = {name: [] for name, _ in builds}
        for order in range(a.orders):
            k = order % len(builds)
            rotated = builds[k:] + builds[:k]
            for i in range(a.n + 5):
                for name, b in rotated:
                    cmd = [b, "--data-dir", data, "run", *run_args]
                    t = time.perf_counter()
                    pid = os.posix_spawn(b, cmd, os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1)])
                    _, status = os.waitpid(pid, 0)
                    if i >= 5:
                        times[name].append((time.perf_counter() - t) * 1e3)
                    if status != 0:
                        sys.exit(f"{name}: {cmd} ended with status {status}")
        base = statistics.median(times[builds[0][0]])
        print(f"{a.n} rounds x {a.orders} orders, data directory {data}")
        print(f"{'build':14s} {'p50 ms':>8s} {'p25 ms':>8s} {'mean ms':>8s} {'p50 vs first':>13s}")
        for name, _ in builds:
            v = sorted(times[name])
            p50 = statistics.median(v)
            print(f"{name:14s} {p50:8.3f} {v[len(v) // 4]:8.3f} {statistics.mean(v):8.3f} {p50 - base:+13.3f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not a.data_dir:
            shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
