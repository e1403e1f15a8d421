"""kernelsup's preloaded launcher (doc/design.md, section 4, "Preloaded kernels").

kernelsupd runs this file as a context's user, with the interpreter, environment and limits a cold
kernel of that context would get, and descriptor 3 a SOCK_SEQPACKET socket to the daemon. It imports
what a kernel needs once, then forks a kernel per request, making the child look to its own code
exactly as `PYTHON -m MODULE ARGS...` started cold would: argv, orig_argv, sys.path with the cwd
entry -m adds (none with safe_path: PYTHONSAFEPATH), os.environ, cwd, stdio, signal dispositions and mask, /proc/PID/cmdline and environ.

Messages are one JSON object per datagram.
  daemon -> here   {"argv": [...], "env": ["K=V", ...], "cwd": "/x"}, with SCM_RIGHTS descriptors
                   [out, go, err]: the kernel's stdout and stderr, the read end of the pipe the daemon
                   writes one byte to once the kernel is placed, and the pipe the kernel reports a
                   failed setup step on (two native ints, step and errno, as spawn.c's child does),
                   closed on success.
  here -> daemon   {"ready": PID} once, after the imports, or {"unable": WHY} and exit;
                   then per request {"pid": KERNEL_PID}, or {"cold": WHY} (this launch cannot be
                   preloaded), or {"stale": WHY} and exit (what was imported changed on disk).
The kernel is forked twice, so that once its intermediate parent has exited (and been reaped here)
it is a child of the daemon, the child subreaper: the daemon waits for it, reads its exit status and
adopts it after a crash exactly as a cold kernel.

Everything here runs before user code; keep this module's own globals few, since they stay in
sys.modules["__main__"] of the preloader (the kernel gets a fresh __main__).
"""

import sys

# The entry for this file's directory, which a kernel does not get (-m puts the cwd there instead). With
# safe_path (PYTHONSAFEPATH, -P, -I) neither is put first: the first entry is then the user's (PYTHONPATH).
_SCRIPT_DIR = None if sys.flags.safe_path else sys.path.pop(0)

import array  # noqa: E402
import ctypes  # noqa: E402
import gc  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import runpy  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import types  # noqa: E402

# What the kernel's modules need, by the module `-m` runs. Another module (preload = yes) gets its
# package imported, and the modules every ipykernel imports.
KERNEL_MODULES = ("ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell", "ipykernel.comm")
BASE_MODULES = ("json", "socket", "asyncio", "zmq", "tornado.ioloop")

# spawn.c's step numbers, for the daemon's message ("chdir /x: No such file or directory").
STEP_SETSID, STEP_DUP2, STEP_CHDIR, STEP_CLOSE, STEP_EXEC = 1, 2, 6, 7, 8

_libc = ctypes.CDLL(None, use_errno=True)


class _MmMap(ctypes.Structure):
    """struct prctl_mm_map (linux/prctl.h)."""
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "start_code", "end_code", "start_data", "end_data", "start_brk", "brk", "start_stack",
        "arg_start", "arg_end", "env_start", "env_end", "auxv")] + [
        ("auxv_size", ctypes.c_uint32), ("exe_fd", ctypes.c_uint32)]


def _set_proc_strings(argv, env):
    """Points /proc/self/cmdline and /proc/self/environ at argv and env (PR_SET_MM_MAP, which an
    unprivileged process may use on itself without changing its executable)."""
    with open("/proc/self/stat", "rb") as f:
        stat = f.read()
    fields = stat[stat.rindex(b")") + 2:].split()
    field = lambda n: int(fields[n - 3])  # noqa: E731 (proc(5) numbers fields from 1; pid and comm are gone)
    args = b"".join(os.fsencode(a) + b"\0" for a in argv)
    envs = b"".join(os.fsencode(e) + b"\0" for e in env)
    mmap = _libc.mmap
    mmap.restype = ctypes.c_void_p
    mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    size = len(args) + len(envs)
    addr = mmap(None, size or 1, 0x1 | 0x2, 0x02 | 0x20, -1, 0)  # PROT_READ|WRITE, MAP_PRIVATE|ANONYMOUS
    if addr in (None, ctypes.c_void_p(-1).value):
        return ctypes.get_errno()
    ctypes.memmove(addr, args + envs, size)
    _libc.sbrk.restype = ctypes.c_void_p
    m = _MmMap(start_code=field(26), end_code=field(27), start_data=field(45), end_data=field(46),
               start_brk=field(47), brk=_libc.sbrk(0), start_stack=field(28), arg_start=addr,
               arg_end=addr + len(args), env_start=addr + len(args), env_end=addr + size, auxv=0,
               auxv_size=0, exe_fd=0xffffffff)
    if _libc.prctl(35, 14, ctypes.byref(m), ctypes.sizeof(m), 0) < 0:  # PR_SET_MM, PR_SET_MM_MAP
        return ctypes.get_errno()
    return 0


def _stat_key(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _pth_files(dirs):
    """The .pth files of dirs: one edited in place changes its own mtime and size, not its directory's."""
    found = set()
    for d in dirs:
        try:
            found.update(os.path.join(d, e) for e in os.listdir(d) if e.endswith(".pth"))
        except OSError:
            pass
    return found


def _path_dirs():
    import site
    return set(sys.path) | {p for p in (site.getusersitepackages() if site.ENABLE_USER_SITE else None,) if p}


def _path_fingerprint():
    """The sys.path directories and their .pth files as site.py found them: taken first thing, so that a .pth
    written while the launcher imports is a change, not part of what it started with."""
    dirs = _path_dirs()
    return {p: _stat_key(p) for p in dirs | _pth_files(dirs)}


def _fingerprint(early):
    """What decides what a cold start would import: every imported file, every sys.path directory
    (a package installed or removed changes its mtime, as does a new .pth), each .pth file in them,
    and the user's site directory, which site.py adds only when it exists. What early (_path_fingerprint()
    at the start) already holds keeps its value from then."""
    files = {m.__file__ for m in list(sys.modules.values()) if isinstance(getattr(m, "__file__", None), str)}
    dirs = _path_dirs()
    now = {p: _stat_key(p) for p in files | dirs | _pth_files(dirs)}
    now.update(early)
    return now


def _changed(before):
    for path, key in before.items():
        if _stat_key(path) != key:
            return path
    return None


def _shadowed(cwd, names):
    """A top-level module a cold start would import from the cwd (sys.path[0]) instead."""
    try:
        entries = os.listdir(cwd)
    except OSError:
        return None
    for e in entries:
        base = e.split(".", 1)[0]
        if base in names and (e == base or e.endswith((".py", ".pyc")) or ".cpython-" in e or e.endswith(".so")):
            return e
    return None


def _send(sock, obj):
    sock.send(json.dumps(obj).encode())


def _fail(errfd, step, err):
    os.write(errfd, array.array("i", [step, err]).tobytes())
    os._exit(127)


def _run_kernel(req, out, go, err, dispositions, base_path, env_by_imports):
    """In the kernel: lead a session, wait to be placed, set up as a cold start, run the module."""
    argv, env, cwd = req["argv"], req["env"], req["cwd"]
    try:
        os.setsid()
    except OSError as e:
        _fail(err, STEP_SETSID, e.errno)
    # Until it runs the module it is as a cold kernel before exec: every signal's default action, none blocked
    # (the daemon's SIGTERM ends a kernel still waiting for its scope).
    for sig in dispositions:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    # The daemon's go comes once the pid is on disk and the kernel is in its cgroup or scope.
    if os.read(go, 1) != b"g":
        os._exit(127)
    step = STEP_DUP2
    try:
        null = os.open("/dev/null", os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        step = STEP_CHDIR
        os.chdir(cwd)
        step = STEP_CLOSE
        keep = err
        os.closerange(3, keep)
        os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
        step = STEP_EXEC
        e = _set_proc_strings(argv, env)
        if e:
            raise OSError(e, os.strerror(e))
    except OSError as e:
        _fail(err, step, e.errno or 5)
    # os.environ as startup builds it (putenv keeps the C environment in step), in the same order.
    os.environ.clear()
    for kv in env:
        k, _, v = kv.partition("=")
        os.environ[k] = v
    # And what the preloaded imports did to it (debugpy sets PYDEVD_USE_FRAME_EVAL), which a cold start's
    # imports would do too: its environment is the launcher's but for the per-launch variables.
    for k, v in env_by_imports.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    # Python's startup dispositions, as at the launcher's start (which a cold start shares).
    for sig, handler in dispositions.items():
        signal.signal(sig, handler)
    sys.path[:] = ([] if sys.flags.safe_path else [os.getcwd()]) + base_path
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    sys.orig_argv = list(argv)
    sys.argv = ["-m"] + list(argv[3:])
    main = types.ModuleType("__main__")
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    os.close(err)
    runpy._run_module_as_main(argv[2], alter_argv=True)


def _launch(sock, req, fds, fingerprint, names, *kernel_state):
    """One request: a kernel forked twice (its pid to the daemon), or why not. Returns False when
    this launcher must end (stale)."""
    changed = _changed(fingerprint)
    if changed:
        _send(sock, {"stale": f"{changed} changed on disk since the preloaded launcher started"})
        return False
    shadow = _shadowed(req["cwd"], names)
    if shadow:
        _send(sock, {"cold": f"{req['cwd']}/{shadow} would shadow a preloaded module"})
        return True
    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    # No signal reaches the Python side of the intermediate or of the kernel before the kernel has set up
    # its own dispositions and mask.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    mid = os.fork()
    if mid:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    else:
        os.close(r)
        sock.close()
        kid = os.fork()
        if kid == 0:
            os.close(w)
            _run_kernel(req, *fds, *kernel_state)
            raise SystemExit(0)  # the module returned: exit as the interpreter would
        os.write(w, str(kid).encode() if kid > 0 else b"")
        os._exit(0)
    os.close(w)
    kid = os.read(r, 32)
    os.close(r)
    os.waitpid(mid, 0)
    # The intermediate is reaped, so the kernel is an orphan now: the daemon's child.
    _send(sock, {"pid": int(kid)} if kid else {"cold": "the preloaded launcher could not fork"})
    return True


def _serve(sock, *state):
    me = os.getpid()
    while True:
        fds = array.array("i")
        try:
            msg, anc, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(3 * fds.itemsize))
        except InterruptedError:
            continue
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
        if not msg:
            return  # the daemon is gone
        try:
            if len(fds) != 3 or not _launch(sock, json.loads(msg), list(fds), *state):
                return
        finally:
            # Only here: the kernel's own copies are its stdio and pipes, the intermediate exits.
            if os.getpid() == me:
                for fd in fds:
                    os.close(fd)


def main():
    early = _path_fingerprint()
    sock = socket.socket(fileno=3)
    os.set_inheritable(3, False)
    module = sys.argv[1]
    dispositions = {s: signal.getsignal(s) for s in signal.valid_signals()
                    if s not in (signal.SIGKILL, signal.SIGSTOP) and signal.getsignal(s) is not None}
    # The launcher's user may signal it: SIGINT would end it with a KeyboardInterrupt in the middle of a
    # request. A kernel gets Python's own handler back.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    base_path = list(sys.path)
    startup_env = dict(os.environ)
    wanted = KERNEL_MODULES if module in ("ipykernel_launcher", "ipykernel") else (module.rpartition(".")[0],)
    try:
        for name in BASE_MODULES + wanted:
            if name:
                importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 (any import error means: launch cold, and say why)
        _send(sock, {"unable": f"importing {name}: {type(e).__name__}: {e}"})
        return 1
    why = None
    if "usercustomize" in sys.modules:
        why = "a usercustomize module runs at every cold start"
    elif len(os.listdir("/proc/self/task")) > 1:
        why = "the imports started a thread, which a fork does not carry"
    elif _set_proc_strings(sys.orig_argv, [f"{k}={v}" for k, v in os.environ.items()]):
        why = "prctl(PR_SET_MM_MAP) is refused here, so the kernel's command line would show the launcher"
    if why:
        _send(sock, {"unable": why})
        return 1
    names = {n.split(".", 1)[0] for n in sys.modules} - set(sys.builtin_module_names)
    env_by_imports = {k: v for k, v in os.environ.items() if startup_env.get(k) != v}
    env_by_imports.update({k: None for k in startup_env if k not in os.environ})
    fingerprint = _fingerprint(early)
    # Imported objects stay out of the collector's way, so the kernels share their pages longer.
    gc.freeze()
    _send(sock, {"ready": os.getpid()})
    _serve(sock, fingerprint, names, dispositions, base_path, env_by_imports)
    return 0


if __name__ == "__main__":
    sys.exit(main())
