"""The Sandbox Service's Python harness (argv: MODE, `script`, `function` or `pool`).

`script` runs /code/main.py as `__main__`; `function` runs it as module `main`, then calls
`main(input)` with the JSON value of /code/input.json (awaiting it if it is a coroutine).
The return value, or an uncaught exception as {type, message, traceback, line, column},
goes to the side channel (fd 4) as one JSON object; never to stdout. Tracebacks start at the
caller's code: the harness's own frames are cut, so line numbers are the caller's.

Nothing is imported before the caller's code runs but what the interpreter has already loaded
(`json`, `traceback` and friends are imported on the way out, when they are needed), and this
file holds only what a script run needs: the rest (errors, the function harness, warm starts) is
in _sandbox_harness_lib.py, loaded only when a run needs it (a cold script run that succeeds
saves its ~3 ms). A cold run on the host's interpreter starts this file from the bytecode the
service compiled (`python -B -c BOOT MODE`, BOOT in command.rs; `code_of` loads the rest the
same way), else runs it as the script. A warm template imports this file as a module and
calls `run(mode)` in each forked child; a template or a pooled sandbox has loaded the rest, and imported what it uses,
while it waited, off the caller's clock.

`pool` (a pre-started sandbox of a warm pool): imports the modules named in SANDBOX_PRELOAD,
writes one byte "R" to fd 4 (ready; the engine consumes it), then blocks reading one byte, a
newline, from fd 0: the engine writes it once an execution takes this sandbox and its code and
/code/_sandbox_run.json, {"mode": "script"|"function", "env": {NAME: value}}, are in /code; the
rest of stdin is the program's.
"""

import sys

PATH = "/code/main.py"
LIB = "/code/_sandbox_harness_lib.py"


def run(mode):
    import os

    # Input files import, but after the standard library and the environment: an input named
    # json.py must not replace a module the harness or a library uses (a template's
    # interpreter may have put /workspace anywhere on its path).
    while "/workspace" in sys.path:
        sys.path.remove("/workspace")
    sys.path.append("/workspace")

    sys.argv = [PATH]
    side = 4
    try:
        # Children the program starts must not inherit the channel.
        os.set_inheritable(side, False)
    except OSError:
        side = None

    # matplotlib's font cache, prebuilt at `sandbox env install`: copied into the run's writable
    # config dir, so the first import does not rebuild it.
    prebuilt = "/opt/sandbox/env/mplconfig"
    config = os.environ.get("MPLCONFIGDIR")
    if config and os.path.isdir(prebuilt) and not os.path.exists(config):
        try:
            import shutil

            shutil.copytree(prebuilt, config)
        except OSError:
            pass

    try:
        # A byte order mark is not source, as `python3 main.py` reads it.
        with open(PATH, encoding="utf-8-sig") as f:
            source = f.read()
        code = compiled(source, PATH)
        name = "__main__" if mode == "script" else "main"
        module = type(sys)(name)
        module.__file__ = PATH
        # The builtins module, as `__main__` has it (a template imports this file as a module,
        # whose `__builtins__` is the module's dict).
        module.__builtins__ = sys.modules["builtins"]
        sys.modules[name] = module
        exec(code, module.__dict__)
        if mode != "function":
            return
        result = lib().call_main(module)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - every uncaught exception is reported
        lib().fail(exc, side)
    lib().report(result, side)


class _Taken(BaseException):
    """Raised by compiled()'s trace function: the module code is taken, not run."""


def compiled(source, path):
    """`source` compiled as the module code of file `path`, as `compile(source, path, "exec",
    dont_inherit=True)` does, mostly without calling `compile()`: its first call in a process
    builds every AST node type (CPython's `PyAST_Check`, ~0.5 ms on this machine kind), which a
    bare `python3 script.py` never pays. `exec` compiles the source as "<string>" (no AST
    types); a trace function takes the module's code as its frame starts, before its first
    instruction runs (only that frame's: code that runs meanwhile, a GC callback or a
    finalizer, is not traced); `_imp._fix_co_filename` (as importlib does for a cached module)
    names `path` in it and in every code object it holds. A compile-time warning would name
    "<string>": warnings are errors meanwhile (the compiler turns one into a SyntaxError), and
    any SyntaxError compiles again with `compile()`, which warns and fails as it always did.
    `compile()` serves outright where the trick would not be the same or not cheaper: a trace
    function already set (a debugger's, a coverage tool's), warnings filters the `warnings`
    module rebound, no `_warnings.filters` list or `_filters_mutated`, and Python 3.12 on (where
    a trace function, set once, instruments every code object the process runs after it)."""
    import _imp
    import _warnings

    filters, mutated = getattr(_warnings, "filters", None), getattr(_warnings, "_filters_mutated", None)
    rebound = getattr(sys.modules.get("warnings"), "filters", filters) is not filters
    if sys.version_info >= (3, 12) or sys.gettrace() is not None or rebound or not isinstance(filters, list) or mutated is None:
        return compile(source, path, "exec", dont_inherit=True)
    scope = {}
    taken = []

    def take(frame, event, arg):
        if frame.f_globals is scope and not taken:
            taken.append(frame.f_code)
            raise _Taken
        return None

    strict = ("error", None, Warning, None, 0)
    filters.insert(0, strict)
    mutated()
    sys.settrace(take)
    try:
        exec(source, scope)
    except _Taken:
        pass
    except SyntaxError:
        taken.clear()
    finally:
        sys.settrace(None)
        filters.remove(strict)
        mutated()
    if not taken:
        return compile(source, path, "exec", dont_inherit=True)
    code = taken[0]
    _imp._fix_co_filename(code, path)
    return code


def lib():
    """The rest of the harness, loaded from its file on first use (by path, not from sys.path,
    which the caller's code may have changed)."""
    module = sys.modules.get("_sandbox_harness_lib")
    if module is None:
        module = type(sys)("_sandbox_harness_lib")
        module.__file__ = LIB
        exec(code_of(LIB), module.__dict__)
        sys.modules["_sandbox_harness_lib"] = module
    return module


def code_of(path):
    """The module code of harness file `path`: its bytecode beside it (`path` + "c", which the
    service compiled with this host's interpreter) when that is this interpreter's (its magic
    number) and loads, else its source, compiled."""
    try:
        import marshal
        from _frozen_importlib_external import MAGIC_NUMBER

        with open(path + "c", "rb") as f:
            data = f.read()
        if data[:4] == MAGIC_NUMBER:
            return marshal.loads(memoryview(data)[16:])
    except Exception:  # noqa: BLE001 - missing, unreadable or not bytecode: the source serves
        pass
    with open(path, encoding="utf-8") as f:
        return compiled(f.read(), path)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "script"
    if mode == "pool":
        lib().run_and_exit(lib().pool(), run)
    run(mode)
