"""The Sandbox Service's Python template: a fork server that never runs caller code.

It runs as the program of a sandbox of its own (read-only root with the environment, no
network, its own cgroup), as root of that sandbox's user namespace. It imports the modules
named in SANDBOX_PRELOAD, exercises them once (a figure drawn and saved, a CSV parsed),
freezes its heap, and says `ready` on fd 4, a socket to the engine. Then, per `fork ahead BYTES`
message (carrying the execution's control socket, stdin, stdout, stderr and side-channel
descriptors, and its empty /workspace and /code), it forks one child, pid 1 of a pid namespace
of its own (the execution's init), and answers `ok` with the child's pidfd. It never sees a
request's code, input, environment or files: the engine writes those once the child is forked,
and the child reads them from its own /code once it is sandboxed and told to go. Sandboxed, the
child says ready on its side channel and waits for one byte on its stdin (go), copying meanwhile
(up to BYTES: a pool's member, forked before its request; 0 for a child its execution waits
for) the template's pages that a job writes, as a probe measured once at the template's start,
so that the caller's code does not pay those copy-on-write faults.

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
import select
import socket
import sys
import threading  # noqa: F401
import time

CHANNEL = 4
# The template's own pid namespace (/proc/self/ns/pid, opened at its start): each execution's
# child is forked into a new pid namespace, and the template's children's pid namespace is set
# back to this one right after.
OWN_PID_NAMESPACE = -1


def preload(channel):
    import importlib

    names = [m for m in os.environ.pop("SANDBOX_PRELOAD", "").split(",") if m]
    for name in names:
        try:
            importlib.import_module(name)
        except BaseException as e:  # noqa: BLE001 - the engine is told which module and why
            # The environment's `preload` names a module it cannot import: the template cannot
            # serve (its profile runs cold), and the engine says which module and why.
            why = f"preloading {name!r}: {type(e).__name__}: {e}".replace("\n", " ")[:400]
            channel.sendall(b"err " + why.encode("utf-8", "replace") + b"\n")
            os._exit(1)
    try:
        warm_up()
    except Exception as e:  # noqa: BLE001 - a warm-up that fails costs speed, not correctness
        sys.stderr.write(f"template warm-up failed (executions still start warm): {e!r}\n")


def warm_up(rounds=2):
    """Exercises the libraries the way a typical analysis does (a CSV file read, cleaned,
    grouped and summarised; a chart drawn and saved as a PNG file), at a realistic size and
    `rounds` times (twice in the template, so that lazily built state (font lists and glyphs,
    parsers, caches, the interpreter's specialized bytecode) is in the template and not rebuilt
    by every execution; once in the probe, which only needs what a job writes)."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        csv = os.path.join(scratch, "warm-up.csv")
        if "pandas" in sys.modules:
            write_warm_up_csv(csv)
        for _ in range(rounds):
            if "pandas" in sys.modules:
                warm_up_pandas(sys.modules["pandas"], csv)
            if "matplotlib.pyplot" in sys.modules:
                warm_up_pyplot(sys.modules["matplotlib.pyplot"], os.path.join(scratch, "warm-up.png"))


def write_warm_up_csv(path):
    """400 rows of mixed columns: categories, integers, floats with gaps, dates, text."""
    import random

    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as f:
        f.write("group,kind,count,value,weight,date,note\n")
        for i in range(400):
            value = "" if i % 17 == 0 else f"{rng.gauss(50, 10):.2f}"
            f.write(f"{'abc'[i % 3]},{'xy'[i % 2]},{i % 23},{value},{rng.uniform(1, 9):.3f},2020-01-{1 + i % 28:02d},note {i}\n")


def warm_up_pandas(pd, csv):
    frame = pd.read_csv(csv)
    dated = pd.read_csv(csv, parse_dates=["date"])
    numeric = ["count", "value", "weight"]
    frame.dropna(subset=numeric)
    frame.groupby("group")[numeric].agg(["count", "mean", "std", "min", "max", "sum", "median"]).round(3).to_string()
    frame.groupby(["group", "kind"]).size().unstack(fill_value=0).to_string()
    frame.describe().to_string()
    frame[numeric].corr().round(3).to_string()
    frame["value"].corr(frame["weight"])
    frame.sort_values("value").head(10).to_string()
    frame.merge(frame[["group", "count"]].drop_duplicates(), on="group", suffixes=("", "_r"))
    frame.pivot_table(index="group", columns="kind", values="value", aggfunc="mean")
    frame["value"].fillna(frame["value"].mean()).value_counts(bins=5)
    dated.set_index("date")["value"].resample("W").mean()
    frame.to_csv(io.StringIO(), index=False)
    frame.to_json()


def warm_up_pyplot(plt, png):
    fig, ax = plt.subplots(figsize=(10, 6), dpi=100)
    for i, label in enumerate("abc"):
        ax.scatter([1 + i, 2, 3, 4], [3, 1 + i, 2, 4], label=label, s=14, alpha=0.8)
    ax.plot([1, 2, 3, 4], [2, 3, 1, 4], label="line")
    ax.set_xlabel("x (unit)")
    ax.set_ylabel("y (unit)")
    ax.set_title("warm-up: a title (r = 0.123)")
    ax.legend()
    fig.savefig(png)
    plt.close(fig)
    fig, axes = plt.subplots(1, 2, figsize=(8, 4))
    axes[0].bar(["a", "b", "c"], [1, 3, 2])
    axes[1].hist([1, 2, 2, 3, 3, 3, 4], bins=4)
    fig.tight_layout()
    fig.savefig(io.BytesIO(), format="png")
    plt.close(fig)


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


def child(fds, lib, harness, ahead):
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
    if ahead > 0:
        # Its copying runs only when a CPU has nothing else to do; the engine lifts this (it
        # cannot be undone from inside) when an execution takes the child. A child its
        # execution waits for (`fork ahead 0`) copies nothing and stays as it is.
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except OSError:
            pass
    os.write(4, b"R")
    # EOF: the engine discarded this sandbox unused, or its execution was refused.
    if wait_for_go(ahead) != b"\n":
        os._exit(0)
    with open("/code/_sandbox_run.json", encoding="utf-8") as f:
        run = json.load(f)
    os.environ.clear()
    os.environ.update(run["env"])
    harness.lib().show_environ(os.environ)
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
    fresh_stdin()
    harness.lib().run_and_exit(run["mode"], harness.run, INHERITED)


def fresh_stdin():
    """sys.stdin (and sys.__stdin__) made again over the execution's fd 0, as the interpreter
    makes it at its start (CPython's `create_stdio`): the template's was made over the
    template's own stdin, and what it learnt of it stays cached (`seekable()` True over the
    execution's pipe, so a library that seeks failed with ESPIPE where a cold run reads)."""
    old = sys.__stdin__
    if old is None:
        return
    try:
        buffer = io.open(0, "rb", -1, None, None, None, False)
        buffer.raw.name = "<stdin>"
        stream = io.TextIOWrapper(buffer, old.encoding, old.errors, "\n", False, False)
        stream.mode = "r"
    except (OSError, ValueError, AttributeError):
        return
    if sys.stdin is old:
        sys.stdin = stream
    sys.__stdin__ = stream


# MADV_POPULATE_WRITE (Linux 5.14): fault pages in writable, copying those shared copy-on-write.
MADV_POPULATE_WRITE = 23
PAGE = os.sysconf("SC_PAGE_SIZE")
# Bytes copied per madvise call at most, and between two looks for the go byte (~2 ms): the
# go byte waits at most one step. (The hot ranges are small, ~22 KiB on average for
# python-analysis: a look before each of them cost ~1,200 select calls per child.)
PREFAULT_STEP = 2 << 20


def wait_for_go(budget):
    """A child forked ahead waits for its execution: returns the byte read from stdin (b"" at
    EOF). Until it comes, the template's pages that a typical execution writes (HOT, measured
    once by the template's probe), or where that is unknown every page it shares with the
    template, are copied, a step at a time, `budget` bytes at most (the rest of its memory limit
    is the execution's)."""
    if LIBC is not None and budget > 0:
        try:
            since_look = PREFAULT_STEP  # look before the first copy
            for start, end in HOT or shared_ranges(LIBC):
                while start < end and budget > 0:
                    n = min(PREFAULT_STEP, end - start, budget)
                    if since_look + n > PREFAULT_STEP:
                        if select.select([0], [], [], 0)[0]:
                            return os.read(0, 1)
                        since_look = 0
                    if LIBC.madvise(start, n, MADV_POPULATE_WRITE) != 0:
                        # EINVAL before Linux 5.14 (every call fails at once: the faults happen
                        # on demand); ENOMEM for a range the template has unmapped since.
                        break
                    start += n
                    budget -= n
                    since_look += n
        except OSError:
            pass  # the faults happen on demand
    return os.read(0, 1)


# The template's pages that a child's job writes, and so copies: (start, end) address ranges,
# measured once by probe_hot_pages(). Empty when unknown.
HOT = []
# /proc/self/pagemap (Documentation/admin-guide/mm/pagemap.rst): 8 bytes a page, little-endian;
# the last byte holds bit 63 "page present" (0x80) and bit 56 "page exclusively mapped" (0x01,
# since Linux 4.2: a page this process has copied or made, no longer shared with the template).
PRESENT = bytes(1 if b & 0x80 else 0 for b in range(256))
COPIED = bytes(1 if b & 0x81 == 0x81 else 0 for b in range(256))


def probe_hot_pages():
    """Forks a probe that does what a child's typical job does (the warm-up, once more) and
    returns the ranges of this template's present pages that the probe wrote, so copied: about
    a third of them for python-analysis (26 of 73 MiB, covering 96% of what the data-analyst
    job copies). A child forked ahead copies only these while it waits, not every shared page
    (which cost CPU and memory for pages no job writes). The probe reads its own pagemap (it is
    this template's plain fork: same credentials, so /proc/self is its own to read); the flags
    need no privilege, only page frame numbers do. Returns [] where anything fails."""
    import re

    if LIBC is None or threads() != 1:
        return []
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(r)
            # Its copies are charged to the template's cgroup: if they reach its limit, the
            # kernel's OOM killer ends the probe, not the template (raising one's own score
            # needs no privilege).
            try:
                with open("/proc/self/oom_score_adj", "w", encoding="ascii") as f:
                    f.write("1000")
            except OSError:
                pass
            with open("/proc/self/maps", encoding="ascii") as f:
                maps = [line.split() for line in f]
            with open("/proc/self/pagemap", "rb", buffering=0) as pagemap:
                before = []
                for fields in maps:
                    if fields[1] == "rw-p":
                        lo, hi = (int(x, 16) for x in fields[0].split("-"))
                        before.append((lo, hi, page_flags(pagemap, lo, hi).translate(PRESENT)))
                try:
                    warm_up(rounds=1)
                except Exception:  # noqa: BLE001 - what it wrote before failing still counts
                    pass
                lines = []
                for lo, hi, present in before:
                    copied = page_flags(pagemap, lo, hi).translate(COPIED)
                    both = (int.from_bytes(present, "big") & int.from_bytes(copied, "big")).to_bytes(len(present), "big")
                    lines += (f"{lo + m.start() * PAGE:x} {lo + m.end() * PAGE:x}\n" for m in re.finditer(rb"\x01+", both))
            with os.fdopen(w, "w", encoding="ascii") as out:
                out.write("".join(lines))
            status = 0
        finally:
            os._exit(status)
    os.close(w)
    with os.fdopen(r, encoding="ascii") as f:
        text = f.read()
    _, status = os.waitpid(pid, 0)
    if status != 0:
        sys.stderr.write(f"template: the probe of the pages a job writes failed (wait status {status}); children forked ahead copy every shared page\n")
        return []
    return [tuple(int(x, 16) for x in line.split()) for line in text.splitlines()]


def page_flags(pagemap, lo, hi):
    """The flag byte of each page in [lo, hi) (the last of its 8-byte pagemap entry)."""
    return os.pread(pagemap.fileno(), (hi - lo) // PAGE * 8, lo // PAGE * 8)[7::8]


def shared_ranges(libc):
    """Address ranges (start, end) of this process's writable private mappings whose pages are
    present (mincore(2): for anonymous memory, pages with a page table entry; a page never
    touched has none, and is not made here). A child does not read its own pagemap: right after
    the fork every page is shared, and which ones a job writes only a job's run tells."""
    import ctypes
    import re

    with open("/proc/self/maps", encoding="ascii") as f:
        maps = [line.split() for line in f]
    for fields in maps:
        if fields[1] != "rw-p":
            continue
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        vec = ctypes.create_string_buffer((hi - lo) // PAGE)
        if libc.mincore(lo, hi - lo, vec) != 0:
            continue
        for m in re.finditer(rb"[\x01-\xff]+", vec.raw):
            yield lo + m.start() * PAGE, lo + m.end() * PAGE


# libc, with madvise and mincore typed, bound once in the template by main() (None where ctypes
# cannot reach them).
LIBC = None


def blas_threads(n):
    """The template keeps BLAS single-threaded (it must be when it forks); the child gets the
    profile's thread count, as a cold run gets from OPENBLAS_NUM_THREADS."""
    if not n or n == "1":
        return
    for setter in BLAS_SETTERS:
        setter(int(n))


def blas_setters():
    """The thread-count setters of the OpenBLAS libraries loaded now (numpy's, scipy's), found
    once in the template, so no child reads its memory map for them."""
    if "numpy" not in sys.modules:
        return []
    import ctypes

    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line and line.rstrip().endswith(".so")}
    except OSError:
        return []
    setters = []
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for symbol in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_", "openblas_set_num_threads"):
            setter = getattr(lib, symbol, None)
            if setter is not None:
                setters.append(setter)
                break
    return setters


# Filled in by main() once the environment's modules are imported.
BLAS_SETTERS = []


def parse_fork(msg):
    """`fork ahead BYTES` -> BYTES (the copying budget); else None."""
    words = msg.split()
    if len(words) == 3 and words[:2] == [b"fork", b"ahead"] and words[2].isdigit() and msg.endswith(b"\n"):
        return int(words[2])
    return None


def serve(channel, lib, harness):
    forks = 0
    while True:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(channel, 64, MAX_FDS)
        except InterruptedError:
            continue
        if not msg:
            return
        # Reap children that have ended (each is an execution's pid 1, gone with its execution).
        try:
            while os.waitpid(-1, os.WNOHANG)[0] != 0:
                pass
        except ChildProcessError:
            pass
        ahead = parse_fork(msg)
        if ahead is None or len(fds) <= len(PLACES):
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
        # The child is pid 1 of a pid namespace of its own: the execution's init, no copy of
        # this process between them. Every other fork of the template stays in its own.
        err = lib.sandbox_warm_new_pid_namespace()
        if err != 0:
            for fd in fds:
                os.close(fd)
            channel.sendall(b"err pid namespace: %s\n" % os.strerror(err).encode())
            return
        try:
            pid = os.fork()
        except OSError:
            lib.sandbox_warm_own_pid_namespace(OWN_PID_NAMESPACE)
            raise
        if pid == 0:
            channel.detach()
            child(fds, lib, harness, ahead)
        err = lib.sandbox_warm_own_pid_namespace(OWN_PID_NAMESPACE)
        for fd in fds:
            os.close(fd)
        if err != 0:
            # Its next children would share this one's pid namespace: no more forks.
            channel.sendall(b"err pid namespace: %s\n" % os.strerror(err).encode())
            return
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
    lib.sandbox_warm_new_pid_namespace.argtypes = []
    lib.sandbox_warm_new_pid_namespace.restype = ctypes.c_int
    lib.sandbox_warm_own_pid_namespace.argtypes = [ctypes.c_int]
    lib.sandbox_warm_own_pid_namespace.restype = ctypes.c_int
    global OWN_PID_NAMESPACE
    OWN_PID_NAMESPACE = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    global LIBC
    try:
        libc = ctypes.CDLL(None)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
        LIBC = libc
    except (OSError, AttributeError):
        pass
    spec = importlib.util.spec_from_file_location("_sandbox_harness", "/code/_sandbox_harness.py")
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    # The rest of the harness (errors, the function harness, the warm exit, what sets a
    # child's /proc/self/environ) is every child's.
    harness.lib().environ_setter()
    preload(channel)
    BLAS_SETTERS.extend(blas_setters())
    INHERITED.update(sys.modules)
    gc.collect()
    gc.freeze()
    try:
        HOT.extend(probe_hot_pages())
    except OSError as e:
        sys.stderr.write(f"template: no probe of the pages a job writes (children forked ahead copy every shared page): {e!r}\n")
    # A fork copies one thread only (see serve): a template with more (a module that started
    # one at import) can never fork, so it says why instead of ready, and its profile runs cold.
    n = threads()
    if n != 1:
        channel.sendall(b"err %d threads after its imports (a module started a thread); a template forks only single-threaded\n" % n)
        os._exit(1)
    channel.sendall(b"ready\n")
    serve(channel, lib, harness)
    # Told to stop: let running executions finish (each child exits with its execution).
    try:
        while True:
            os.wait()
    except ChildProcessError:
        pass


main()
