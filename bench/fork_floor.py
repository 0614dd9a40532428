"""bench/warm.sh's fork floor: the data-analyst job in a child forked, per request, from a host
Python that has imported its libraries, run the job twice and frozen its heap (gc.freeze), with
no sandbox at all: what any fork-based warm start costs on this machine before isolation adds
anything (the copy of the page tables at fork, the copy-on-write of every page the job writes,
the exit). A warm execution cannot beat it; the distance to it is the sandbox's own cost.

Serves a Unix socket: each "\\n" a client sends forks one child that runs the job in a fresh
temporary directory (data.csv linked in, stdout discarded) and exits; when the server has reaped
it, it answers "<status> <ms>\\n" on that connection (ms: fork to reap, as measured here). It is
single-threaded (select over the listener, the connections and a pidfd per child), so it forks
from one thread, as a template must, and serves any number of concurrent clients.

  python3 -S bench/fork_floor.py CSV PROGRAM SOCKET    (PYTHONPATH: the environment's site)
Prints "ready" once it listens.
"""

import contextlib
import gc
import io
import os
import runpy
import select
import socket
import sys
import tempfile
import time

import matplotlib.pyplot as plt
import pandas  # noqa: F401 - imported ahead, as a template's preload

csv, program, path = sys.argv[1:4]


def job():
    d = tempfile.mkdtemp()
    os.symlink(csv, os.path.join(d, "data.csv"))
    os.chdir(d)
    with contextlib.redirect_stdout(io.StringIO()):
        runpy.run_path(program, run_name="__main__")
    plt.close("all")


# Everything the job loads and caches is in the parent before the first fork: the best case.
job()
job()
gc.collect()
gc.freeze()

listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(path)
listener.listen(64)
print("ready", flush=True)
conns = {}  # fd -> connection
children = {}  # pidfd -> (connection, pid, start)
while True:
    readable, _, _ = select.select([listener, *conns.values(), *children], [], [])
    for r in readable:
        if r is listener:
            c, _ = listener.accept()
            conns[c.fileno()] = c
        elif isinstance(r, int):
            c, pid, start = children.pop(r)
            _, status = os.waitpid(pid, 0)
            ms = (time.perf_counter() - start) * 1000
            os.close(r)
            try:
                c.sendall(f"{os.waitstatus_to_exitcode(status)} {ms:.3f}\n".encode())
            except OSError:
                pass  # its client went away meanwhile
        else:
            data = r.recv(64)
            if not data:
                del conns[r.fileno()]
                r.close()
                continue
            for _ in range(data.count(b"\n")):
                start = time.perf_counter()
                pid = os.fork()
                if pid == 0:
                    code = 1
                    try:
                        job()
                        code = 0
                    finally:
                        os._exit(code)
                children[os.pidfd_open(pid)] = (r, pid, start)
