"""The Sandbox Service's Python template: a fork server that never runs caller code.

It runs as the program of a sandbox of its own (read-only root with the environment, no
network, its own cgroup), as root of that sandbox's user namespace. It imports the modules
named in SANDBOX_PRELOAD, exercises them once (a figure drawn and saved, a CSV parsed),
freezes its heap, and says `ready` on fd 4, a socket to the engine. Then, per `fork` message
(carrying the execution's control socket, stdin, stdout, stderr and side-channel descriptors),
it forks one child and answers `ok` with the child's pidfd. It never sees a request's code,
input, environment or files: the child reads those from its own /code once it is sandboxed.

The child calls `sandbox_warm_enter` (libsandbox_warm.so, the runtime's Rust code), which
returns only in a process that has entered the execution's namespaces, cgroup, uid, landlock
and seccomp; that process then runs the same harness as a cold execution.
"""

import gc

# What every child needs (its run file, the harness's result, its clock, what `finish` uses) is
# imported once here, not per execution.
import atexit  # noqa: F401
import io  # noqa: F401
import json
import os
import socket
import sys
import threading  # noqa: F401
import time

CHANNEL = 4


def preload():
    import importlib

    names = [m for m in os.environ.pop("SANDBOX_PRELOAD", "").split(",") if m]
    for name in names:
        importlib.import_module(name)
    try:
        warm_up()
    except Exception as e:  # noqa: BLE001 - a warm-up that fails costs speed, not correctness
        sys.stderr.write(f"template warm-up failed (executions still start warm): {e!r}\n")


def warm_up():
    """Exercises the libraries once, so lazily built state (font lists, parsers, caches) is in
    the template and not rebuilt by every execution."""
    if "matplotlib.pyplot" in sys.modules:
        import io

        plt = sys.modules["matplotlib.pyplot"]
        fig, ax = plt.subplots(figsize=(4, 3), dpi=50)
        ax.plot([1, 2, 3], [3, 1, 2], label="line")
        ax.scatter([1, 2, 3], [2, 3, 1], label="points", s=4)
        ax.bar([1, 2], [1, 2], label="bars")
        ax.set_xlabel("x")
        ax.set_ylabel("y")
        ax.set_title("warm-up")
        ax.legend()
        fig.savefig(io.BytesIO(), format="png")
        plt.close(fig)
    if "pandas" in sys.modules:
        import io

        pd = sys.modules["pandas"]
        frame = pd.read_csv(io.StringIO("a,b,c,d\n1,x,2.5,2020-01-01\n2,y,,2020-01-02\n3,x,4.0,2020-01-03\n"), parse_dates=["d"])
        frame.groupby("b")[["a", "c"]].agg(["count", "mean", "std", "min", "max"]).round(3).to_string()
        frame.dropna(subset=["c"]).describe()
        frame["a"].corr(frame["c"])
        frame.sort_values("c").merge(frame, on="b", suffixes=("", "_r"))
        frame.pivot_table(index="b", values="a", aggfunc="sum")
        frame.to_csv(io.StringIO())


def threads():
    """Threads of this process (from /proc, so native threads count too)."""
    return len(os.listdir("/proc/self/task"))


# Import path entries that are an execution's own: its code and its workspace (the harness puts
# /workspace on the path).
EXECUTION_PATHS = ("/code", "/workspace", "")

# The modules every child starts with (sys.modules once the template is ready), taken once here:
# a child that copied sys.modules itself would touch, and so copy, every module object's page.
INHERITED = {}

# Descriptors of a fork request, in order, and where the child places each: control socket (3),
# stdin, stdout, stderr, side channel (4), the execution's detached mounts (workspace, code,
# /etc/passwd, /etc/group: 5-8, which sandbox_warm_enter attaches), then the execution's cgroup
# files (9.., which sandbox_warm_enter joins before anything else).
PLACES = (3, 0, 1, 2, 4, 5, 6, 7, 8)
MAX_FDS = len(PLACES) + 8


def child(fds, lib, harness):
    """In the forked child: descriptors in place, then into the sandbox."""
    # Move every received descriptor above the places first, so no dup2 overwrites one still needed.
    high = [os.dup(fd) for fd in fds]
    for fd in fds:
        os.close(fd)
    places = PLACES + tuple(range(len(PLACES), len(high)))
    for fd, place in zip(high, places):
        os.dup2(fd, place)
    # Nothing of the template's but these descriptors reaches the execution.
    os.closerange(len(places), 1 << 20)
    if lib.sandbox_warm_enter(3) != 0:
        os._exit(127)
    # From here on: the execution's sandboxed program, uid, cwd /workspace.
    with open("/code/_sandbox_run.json", encoding="utf-8") as f:
        run = json.load(f)
    os.environ.clear()
    os.environ.update(run["env"])
    # matplotlib's font list is already in memory: the harness need not copy the prebuilt cache.
    config = os.environ.get("MPLCONFIGDIR")
    if config and "matplotlib" in sys.modules:
        os.makedirs(config, exist_ok=True)
    time.tzset()
    # Fresh random state: `random` reseeds itself after fork; numpy's global generator would not.
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    blas_threads(run["env"].get("OPENBLAS_NUM_THREADS"))
    # The execution's own directories get fresh import finders; every other path entry is a
    # read-only directory the template saw as it is, so its finder and cached listing stay
    # valid. (Dropping them all would free every cached listing, and so copy the pages that
    # hold them: ~20 ms for the analysis environment.)
    for entry in EXECUTION_PATHS:
        sys.path_importer_cache.pop(entry, None)
    # The side channel must not reach children the program starts.
    os.set_inheritable(4, False)
    harness.lib().run_and_exit(run["mode"], harness.run, INHERITED)


def blas_threads(n):
    """The template keeps BLAS single-threaded (it must be when it forks); the child gets the
    profile's thread count, as a cold run gets from OPENBLAS_NUM_THREADS."""
    if not n or n == "1" or "numpy" not in sys.modules:
        return
    import ctypes

    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line and line.rstrip().endswith(".so")}
    except OSError:
        return
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for symbol in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_", "openblas_set_num_threads"):
            setter = getattr(lib, symbol, None)
            if setter is not None:
                setter(int(n))
                break


def serve(channel, lib, harness):
    forks = 0
    while True:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(channel, 64, MAX_FDS)
        except InterruptedError:
            continue
        if not msg:
            return
        # Reap children that have ended (each waits for its execution's pid 1 and exits).
        try:
            while os.waitpid(-1, os.WNOHANG)[0] != 0:
                pass
        except ChildProcessError:
            pass
        if msg != b"fork\n" or len(fds) <= len(PLACES):
            for fd in fds:
                os.close(fd)
            channel.sendall(b"err bad request\n")
            continue
        # A fork copies one thread only: a second thread (a BLAS pool, a library's helper)
        # could hold a lock the child would wait on forever. Checked every time.
        n = threads()
        if n != 1:
            for fd in fds:
                os.close(fd)
            channel.sendall(b"err %d threads\n" % n)
            return
        pid = os.fork()
        if pid == 0:
            channel.detach()
            child(fds, lib, harness)
        for fd in fds:
            os.close(fd)
        forks += 1
        pidfd = os.pidfd_open(pid)
        try:
            socket.send_fds(channel, [b"ok\n"], [pidfd])
        finally:
            os.close(pidfd)


def main():
    channel = socket.socket(fileno=CHANNEL)
    import ctypes
    import importlib.util

    lib = ctypes.CDLL(os.environ.pop("SANDBOX_WARM_LIB"))
    lib.sandbox_warm_enter.argtypes = [ctypes.c_int]
    lib.sandbox_warm_enter.restype = ctypes.c_int
    spec = importlib.util.spec_from_file_location("_sandbox_harness", "/code/_sandbox_harness.py")
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    # The rest of the harness (errors, the function harness, the warm exit) is every child's.
    harness.lib()
    preload()
    INHERITED.update(sys.modules)
    gc.collect()
    gc.freeze()
    channel.sendall(b"ready\n")
    serve(channel, lib, harness)
    # Told to stop: let running executions finish (each child exits with its execution).
    try:
        while True:
            os.wait()
    except ChildProcessError:
        pass


main()
