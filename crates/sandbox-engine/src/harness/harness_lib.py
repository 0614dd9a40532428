"""The rest of the Sandbox Service's Python harness (see _sandbox_harness.py): what a run needs
only on the way out of an error, for the function harness, or for a warm start. A cold script
run that succeeds never compiles this file; a template and a pooled sandbox load it before
their caller's code arrives."""

import sys

PATH = "/code/main.py"
HARNESS = "/code/_sandbox_harness.py"


def send(obj, side):
    import json

    write(json.dumps(obj, ensure_ascii=False, allow_nan=False), side)


def write(text, side):
    import os

    if side is None:
        return
    view = memoryview(text.encode())
    while view:
        view = view[os.write(side, view):]


def qualified(t):
    mod = getattr(t, "__module__", "builtins")
    return t.__qualname__ if mod in ("builtins", "__main__", "main") else f"{mod}.{t.__qualname__}"


def fail(exc, side, kind=None):
    """Reports `exc` (on stderr and the side channel) as an uncaught exception would end the
    program, then raises SystemExit(1)."""
    import traceback

    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in (HARNESS, __file__):
        tb = tb.tb_next
    te = traceback.TracebackException(type(exc), exc, tb)
    text = f"{kind}: {exc}\n" if kind else "".join(te.format())
    line = column = None
    if isinstance(exc, SyntaxError) and exc.filename == PATH:
        line, column = exc.lineno, exc.offset
    else:
        for frame in te.stack:
            if frame.filename == PATH:
                line = frame.lineno
    try:
        sys.stdout.flush()
    except Exception:
        pass
    # As the interpreter prints an uncaught exception: nothing when sys.stderr is None, and a
    # stream that fails to take it loses it (the report below still goes out).
    stream = getattr(sys, "stderr", None)
    if stream is not None:
        try:
            stream.write(text)
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ itself fails
        message = f"<unprintable {type(exc).__name__} object>"
    err = {"type": kind or qualified(type(exc)), "message": message, "traceback": text}
    if line is not None:
        err["line"] = line
    if column is not None:
        err["column"] = column
    send({"error": err}, side)
    # As an uncaught exception would: exit status 1 after atexit handlers and non-daemon
    # threads, nothing more printed.
    raise SystemExit(1) from None


class ReturnValueNotSerializable(TypeError):
    pass


def jsonable(v, where, depth=0, seen=()):
    if depth > 500:
        raise ReturnValueNotSerializable(f"{where} is nested more than 500 levels deep")
    if isinstance(v, (dict, list, tuple)):
        if id(v) in seen:
            raise ReturnValueNotSerializable(f"{where} contains itself (a cycle), which JSON cannot represent")
        seen = seen + (id(v),)
    if v is None or isinstance(v, (bool, str, int)):
        return v
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise ReturnValueNotSerializable(f"{where} is {v!r}, which JSON cannot represent; return None or a string instead")
        return v
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if isinstance(k, bool) or not isinstance(k, (str, int)):
                raise ReturnValueNotSerializable(f"{where} has a key {k!r} of type {type(k).__name__}; JSON object keys are strings")
            out[str(k)] = jsonable(x, f"{where}[{k!r}]", depth + 1, seen)
        return out
    if isinstance(v, (list, tuple)):
        return [jsonable(x, f"{where}[{i}]", depth + 1, seen) for i, x in enumerate(v)]
    # numpy scalars and arrays become Python values (int64 -> int, ndarray -> list).
    if type(v).__module__ == "numpy" and hasattr(v, "tolist"):
        return jsonable(v.tolist(), where, depth + 1)
    hint = ""
    if type(v).__module__.startswith("pandas"):
        hint = " (for a pandas object use .to_dict() or .tolist())"
    raise ReturnValueNotSerializable(f"{where} is a {qualified(type(v))}, which JSON cannot represent{hint}")


def call_main(module):
    """The function harness: `main(input)` of the caller's module, with /code/input.json's value
    (None without one), awaited if it is a coroutine. Returns its value."""
    main = module.__dict__.get("main")
    if not callable(main):
        raise NameError("the function harness calls main(input), but the code defines no function named main")
    import json
    import types

    try:
        with open("/code/input.json", encoding="utf-8") as f:
            value = json.load(f)
    except FileNotFoundError:
        value = None
    result = main(value)
    if isinstance(result, types.CoroutineType):
        import asyncio

        result = asyncio.run(result)
    return result


def report(result, side):
    """The function's return value to the side channel as {"returnData": value}; a value JSON
    cannot hold is a ReturnValueNotSerializable error instead."""
    try:
        payload = jsonable(result, "return value")
    except ReturnValueNotSerializable as exc:
        exc.__traceback__ = None
        fail(exc, side, "ReturnValueNotSerializable")
    import json

    try:
        text = json.dumps({"returnData": payload}, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:  # e.g. an int past the 4300-digit conversion limit
        exc.__traceback__ = None
        fail(ReturnValueNotSerializable(f"return value cannot be written as JSON: {exc}"), side, "ReturnValueNotSerializable")
    sys.stdout.flush()
    write(text, side)


def exit_status(code):
    """The exit status the interpreter gives an uncaught SystemExit (CPython 3.11's
    `handle_system_exit`): None 0; an int its low byte, or 255 past a C long (its conversion
    fails: -1); anything else is printed on sys.stderr, as str() with a newline (on fd 2 when
    sys.stderr is None; the newline on fd 2 when sys.stderr fails to take it), and gives 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if -(1 << 63) <= code < (1 << 63) else 255
    stream = getattr(sys, "stderr", None)
    if stream is None:
        try:
            fd2(f"{code}\n")
        except Exception:  # noqa: BLE001 - an unprintable message is dropped
            pass
        return 1
    try:
        stream.write(str(code))
    except Exception:  # noqa: BLE001 - as the interpreter does, an unprintable message is dropped
        pass
    try:
        stream.write("\n")
    except Exception:  # noqa: BLE001 - PySys_WriteStderr falls back to the C stderr
        fd2("\n")
    return 1


def fd2(text):
    """Writes `text` to fd 2 as it is (the C stderr the interpreter falls back to)."""
    import os

    try:
        os.write(2, text.encode("utf-8", "backslashreplace"))
    except OSError:
        pass


def flush_std_files():
    """CPython's `flush_std_files`: flushes sys.stdout, then sys.stderr (each unless None or
    closed). A stdout that fails is reported as an unraisable exception ("Exception ignored
    in: ..."), a stderr that fails is not; either makes the exit status 120. Returns whether
    both flushed."""
    ok = True
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name, None)
        try:
            if stream is None or stream.closed:
                continue
        except Exception:  # noqa: BLE001 - a stream without `closed` is flushed as it is
            pass
        try:
            stream.flush()
        except Exception as exc:  # noqa: BLE001
            ok = False
            if name == "stdout":
                unraisable(exc, stream)
    return ok


def unraisable(exc, obj):
    """Reports `exc`, raised by `obj`'s finalization, as the interpreter's default
    `sys.unraisablehook` does: "Exception ignored in: <repr>" and the exception, on sys.stderr."""
    try:
        what = repr(obj)
    except Exception:  # noqa: BLE001
        what = "<object repr() failed>"
    try:
        detail = str(exc)
    except Exception:  # noqa: BLE001
        detail = "<exception str() failed>"
    # traceback.format_exception_only's form, without importing anything (imports may fail
    # this late: sys.meta_path is None).
    name = qualified(type(exc))
    text = f"Exception ignored in: {what}\n{name}: {detail}\n" if detail else f"Exception ignored in: {what}\n{name}\n"
    stream = getattr(sys, "stderr", None)
    try:
        stream.write(text)
        stream.flush()
    except Exception:  # noqa: BLE001 - the interpreter falls back to the C stderr
        fd2(text)


def finish(code, inherited, builtins_at_start):
    """What a normal interpreter exit does that a program can observe, in CPython 3.11's order
    (`Py_FinalizeEx`), then _exit: in a template's child the interpreter's own teardown would
    touch, and so copy, every object inherited from the template (~50 MB, ~100 ms for pandas); in
    a pooled sandbox it would tear down every preloaded module (~3 ms for the standard library
    alone). Non-daemon threads joined; atexit handlers; sys.stdout and sys.stderr flushed; a
    collection while every module is intact; the run's modules finalized (`finalize`); the
    standard streams flushed again. A flush of sys.stdout or sys.stderr that failed makes the
    status 120, as `Py_RunMain` does."""
    import os

    try:
        import threading

        threading._shutdown()
    except Exception:  # noqa: BLE001 - a thread that fails to join does not change the status
        pass
    import atexit
    import gc

    atexit._run_exitfuncs()
    flushed = flush_std_files()
    if gc.isenabled():
        gc.collect()
    finalize(inherited, builtins_at_start)
    flushed = flush_std_files() and flushed
    os._exit(code if flushed else 120)


def finalize(inherited, builtins_at_start):
    """The part of the interpreter's finalization (CPython 3.11's `finalize_modules`) that
    reaches the program's own objects, in its order, so a warm run ends as a cold one does:

    1. `sys` is emptied as `finalize_modules_delete_special` does: `path`, `argv`, `meta_path`,
       `path_hooks`, `path_importer_cache` and the like become None (an import in a `__del__`
       fails as it does cold), and sys.stdin, sys.stdout and sys.stderr are set back to
       `sys.__stdin__` and the others (a `__del__` prints to the real stdout, and a file the
       program made its stdout is closed when nothing else holds it).
    2. The modules the execution added (its `__main__` or `main`, what it imported) leave
       `sys.modules`, the builtins are set back to what they were before the run
       (`finalize_restore_builtins`), and a collection runs. What only those modules kept alive
       is garbage, and its finalizers (`__del__`, PEP 442) run before anything is cleared: a
       `__del__` still finds the module globals it uses (`os.remove(self.path)`). Clearing the
       globals first, as this did before, handed such a `__del__` None for `os` where a cold
       run gives the module.
    3. The globals of those modules still alive (kept by something else) are set to None, names
       starting with `_` first (`_PyModule_Clear`), and a collection runs again.

    Every open file object is flushed before the first collection: the collector finalizes a
    buffered file and its raw file in no set order, and the raw one closed first loses the
    buffer (CPython's bpo-17852), which a module-level `f = open("out.csv", "w"); f.write(...)`
    must not. Files still open after the collections are flushed once more (one a `__del__`
    wrote to, one kept by a module of the template). Objects from before the run (the
    template's, or a pooled sandbox's preloads) are frozen (gc.freeze): neither collected,
    cleared nor flushed here, so a template's pages stay shared; objects the program attached to
    them are not finalized (a cold exit would, clearing those modules too). Returns nothing;
    errors are swallowed, as a normal exit's are."""
    import _weakref  # the C module: `weakref` is not loaded in a pooled sandbox (~0.6 ms)
    import builtins
    import gc

    flush_open_files()
    try:
        builtins.__dict__["_"] = None
        for name in ("path", "argv", "ps1", "ps2", "last_type", "last_value", "last_traceback",
                     "path_hooks", "path_importer_cache", "meta_path", "__interactivehook__"):
            setattr(sys, name, None)
        for name in ("stdin", "stdout", "stderr"):
            setattr(sys, name, getattr(sys, f"__{name}__", None))
    except Exception:  # noqa: BLE001
        pass
    left = []
    for name in [name for name, module in sys.modules.items() if inherited.get(name) is not module]:
        module = sys.modules.pop(name)
        if isinstance(module, type(sys)):
            left.append(_weakref.ref(module))
    module = None
    namespace = None
    try:
        current = dict(builtins.__dict__)
        builtins.__dict__.clear()
        builtins.__dict__.update(builtins_at_start)
        current = None
        gc.collect()
        namespaces = []
        for ref in left:
            module = ref()
            if module is not None:
                namespaces.append(module.__dict__)
        module = None
        # Usually none are left (nothing else held them): then no second pass over the run's
        # objects (a few ms after a data-analysis job).
        survivors = bool(namespaces)
        while namespaces:
            namespace = namespaces.pop()
            for underscored in (True, False):
                for key in [k for k in namespace if isinstance(k, str) and k.startswith("_") == underscored and k != "__builtins__"]:
                    namespace[key] = None
        namespace = None
        if survivors:
            gc.collect()
    except Exception:  # noqa: BLE001 - as at a normal exit, finalization errors change no status
        pass
    flush_open_files()


def flush_open_files():
    """Flushes every open file object the collector tracks (not the frozen ones); a file that
    cannot flush is left, as at a normal exit."""
    import _io
    import gc

    # Every file object derives from the C base class (io.IOBase, an ABC, derives from it too):
    # a plain subtype check, ~10x quicker than the ABC's over thousands of objects.
    for obj in gc.get_objects():
        try:
            if isinstance(obj, _io._IOBase) and not obj.closed:
                obj.flush()
        except Exception:  # noqa: BLE001 - a file that cannot flush is dropped, as at a normal exit
            pass


def run_and_exit(mode, run, inherited=None):
    """Runs the caller's code with `run` (the harness's) in a warm process (a template's child,
    a pooled sandbox) and ends it as a normal interpreter exit would, through `finish`: never
    returns. `inherited`: the modules that are not the run's ({name: module}; default: those
    loaded now)."""
    import builtins

    if inherited is None:
        inherited = dict(sys.modules)
    # What the interpreter restores at its exit (its copy is taken at its start).
    builtins_at_start = dict(builtins.__dict__)
    # tempfile's directory is chosen at its first use, from TMPDIR and the like: one a template
    # or a pooled sandbox chose while it waited is not the run's.
    tempfile = sys.modules.get("tempfile")
    if tempfile is not None:
        tempfile.tempdir = None
    try:
        run(mode)
        code = 0
    except SystemExit as e:
        code = exit_status(e.code)
    except BaseException:  # noqa: BLE001 - what the interpreter would print for an escape from run
        if getattr(sys, "stderr", None) is not None:
            import traceback

            traceback.print_exc()
        code = 1
    finish(code, inherited, builtins_at_start)


# Kept alive for the program's life: the kernel shows /proc/self/environ from this block.
ENVIRON_BLOCK = None
# (struct prctl_mm_map as a ctypes class, libc), made once before a caller's code is waited for.
_MM_MAP = None


def environ_setter():
    """Makes, once, what `show_environ` calls with: a template and a pooled sandbox make it
    while they wait, so an execution does not (~0.1 ms). Imports ctypes. Returns None where
    that cannot be made (an interpreter without ctypes, a libc without sbrk): the block then
    stays the starting one, and nothing else changes."""
    global _MM_MAP
    if _MM_MAP is None:
        try:
            import ctypes

            class MmMap(ctypes.Structure):  # struct prctl_mm_map, <linux/prctl.h>
                _fields_ = [(name, ctypes.c_uint64) for name in (
                    "start_code", "end_code", "start_data", "end_data", "start_brk", "brk",
                    "start_stack", "arg_start", "arg_end", "env_start", "env_end")] + [
                    ("auxv", ctypes.c_void_p), ("auxv_size", ctypes.c_uint32), ("exe_fd", ctypes.c_uint32)]

            libc = ctypes.CDLL(None, use_errno=True)
            libc.sbrk.restype = ctypes.c_void_p
            libc.sbrk.argtypes = [ctypes.c_ssize_t]
            libc.prctl  # noqa: B018  (present, or AttributeError now rather than per run)
        except (ImportError, OSError, AttributeError):
            _MM_MAP = False
            return None
        _MM_MAP = (MmMap, libc)
    return _MM_MAP or None


def show_environ(env):
    """Makes /proc/self/environ list `env`, the run's environment (a mapping of str). A warm
    program never execs: the kernel shows the block its template or pooled interpreter started
    with (the profile's environment without the request's variables, with SANDBOX_PRELOAD),
    where a cold program's shows what it was started with, `os.environ`. prctl(PR_SET_MM,
    PR_SET_MM_MAP) (Linux 3.18+, CONFIG_CHECKPOINT_RESTORE; no capability while the executable
    stays) points env_start/env_end at a block of ours, every other field given as it is
    (/proc/self/stat, and the break from sbrk(0) right before the call). Best effort: where the
    kernel refuses, the block stays the starting one, as before. Returns whether it was set."""
    global ENVIRON_BLOCK
    made = environ_setter()
    if made is None:
        return False
    import ctypes

    mm_map, libc = made
    block = b"".join(f"{k}={v}".encode("utf-8", "surrogateescape") + b"\0" for k, v in env.items())
    if not block:
        return False
    buffer = ctypes.create_string_buffer(block, len(block))
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        # proc(5): fields 26-28 and 45-51, counted from 1; the command name may hold spaces.
        field = stat[stat.rindex(b")") + 2:].split()
        at = lambda n: int(field[n - 3])  # noqa: E731
        start = ctypes.addressof(buffer)
        mm = mm_map(start_code=at(26), end_code=at(27), start_data=at(45), end_data=at(46),
                    start_brk=at(47), start_stack=at(28), arg_start=at(48), arg_end=at(49),
                    env_start=start, env_end=start + len(block), auxv=None, auxv_size=0,
                    exe_fd=0xFFFFFFFF)
        mm.brk = libc.sbrk(0) or 0
        done = libc.prctl(35, 14, ctypes.byref(mm), ctypes.sizeof(mm), 0) == 0  # PR_SET_MM, PR_SET_MM_MAP
    except (OSError, ValueError, IndexError):
        return False
    if done:
        ENVIRON_BLOCK = buffer
    return done


def pool():
    """Waits as a pooled sandbox (see the module's doc); returns the mode to run."""
    import os

    for name in filter(None, os.environ.pop("SANDBOX_PRELOAD", "").split(",")):
        try:
            __import__(name)
        except Exception:  # It fails again, with its message, in the caller's code.
            pass
    # Imported while waiting, not on the caller's clock: json (the run file and the result) and
    # what `finish` uses.
    import atexit  # noqa: F401
    import gc
    import io  # noqa: F401
    import json
    import threading  # noqa: F401

    environ_setter()
    # What is loaded now is not the run's: `finish` leaves it alone, as a template's child does.
    gc.collect()
    gc.freeze()
    os.write(4, b"R")
    # One byte: nothing of the program's stdin after it is consumed (os.read retries EINTR,
    # PEP 475). EOF instead: the engine ended the execution here before its go (it starts it
    # cold elsewhere, or the engine is gone), though its code and run file may be in /code
    # already: nothing of it may run here, or it would run twice.
    if os.read(0, 1) != b"\n":
        os._exit(75)
    with open("/code/_sandbox_run.json", encoding="utf-8") as f:
        header = json.load(f)
    for k, v in (header.get("env") or {}).items():
        os.environ[k] = str(v)
    show_environ(os.environ)
    return "function" if header.get("mode") == "function" else "script"
