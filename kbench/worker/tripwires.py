"""Worker-side tripwires: record what the submission does that it should not, for the parent to flag.

The worker shares its process with untrusted code, so nothing here is a sandbox: a
determined submission can switch these off (the parent's own clock and checks are the
backstop, see docs/threat-model.md). They catch the common and accidental cases:

- ``AuditLog``: a ``sys.addaudithook`` hook that records, when the nearest non-stdlib frame
  belongs to the submission, file reads and writes outside its own folder, sockets,
  subprocesses, signals sent and file-system changes;
- ``Watch``: identities of the timer and channel functions the worker relies on
  (``time.perf_counter``, ``torch.cuda.synchronize``, ``torch.cuda.Event``, kbench's own
  modules...), compared after every request to spot monkeypatching.
"""
from __future__ import annotations

import os
import site
import sys
import sysconfig
import threading

MAX_EVENTS = 20


def _prefixes(paths) -> tuple[str, ...]:
    out = set()
    for p in paths:
        if p:
            for q in (os.path.abspath(p), os.path.realpath(p)):
                out.add(q.rstrip(os.sep) + os.sep)
    return tuple(sorted(out))


# The base interpreter's library only: a venv's "platstdlib" holds its site-packages too.
_STDLIB = _prefixes({sysconfig.get_paths()["stdlib"]})
_LIBRARIES = _prefixes([*_STDLIB, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                        *site.getsitepackages(), site.getusersitepackages(), sys.prefix, sys.base_prefix])
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PROCESS_EVENTS = {"subprocess.Popen": "started a process", "os.system": "ran a shell command",
                   "os.exec": "exec'd a program", "os.posix_spawn": "started a process",
                   "os.spawn": "started a process", "os.fork": "forked", "os.forkpty": "forked",
                   "pty.spawn": "started a process"}
_SOCKET_EVENTS = {"socket.__new__": "created a socket", "socket.connect": "connected a socket",
                  "socket.bind": "bound a socket", "socket.sendto": "sent on a socket",
                  "socket.getaddrinfo": "looked up a host"}
_FS_EVENTS = {"os.remove": "removed", "os.rename": "renamed", "os.rmdir": "removed", "os.mkdir": "created",
              "os.chmod": "changed the mode of", "os.symlink": "linked", "os.link": "linked",
              "os.truncate": "truncated", "os.utime": "touched", "shutil.rmtree": "removed",
              "shutil.copyfile": "copied to"}


class AuditLog:
    """Records the submission's file, network and process activity (never blocks it)."""

    def __init__(self, own_dirs, writable_dirs=()):
        self.own = _prefixes(own_dirs)
        self.writable = _prefixes([*own_dirs, *writable_dirs])
        self.readable = self.writable + _LIBRARIES
        self._seen: set = set()
        self._pending: list[str] = []
        self._local = threading.local()

    def add_own_dir(self, path) -> None:
        extra = _prefixes([path])
        self.own += extra
        self.writable += extra
        self.readable += extra

    def install(self) -> None:
        sys.addaudithook(self._hook)

    def take(self) -> list[str]:
        out, self._pending = self._pending, []
        return out

    def _culprit(self):
        """The nearest frame outside the standard library if it is the submission's code, and
        whether the event came through the import system (reads made to import are fine)."""
        frame, importing = sys._getframe(2), False
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith("<frozen") or (name.startswith(_STDLIB) and "-packages" not in name):
                importing = importing or name.startswith("<frozen importlib")
                frame = frame.f_back
                continue
            # code compiled from a string (exec) counts as the submission's
            return (frame if name.startswith(self.own) or name.startswith("<") else None), importing
        return None, importing

    def _record(self, what: str, frame) -> None:
        key = what
        if key in self._seen or len(self._seen) >= MAX_EVENTS:
            return
        self._seen.add(key)
        where = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        self._pending.append(f"{what} (at {where})")

    def _hook(self, event: str, args) -> None:
        if getattr(self._local, "busy", False):
            return
        if not (event == "open" or event in _PROCESS_EVENTS or event in _SOCKET_EVENTS
                or event in _FS_EVENTS or event == "os.kill"):
            return
        self._local.busy = True
        try:
            what = self._describe(event, args)
            if what:
                frame, importing = self._culprit()
                # The import system reads modules and writes their bytecode cache: not the
                # submission's doing, even when its import statement set it off.
                if frame is not None and not (importing and (what.startswith("read ")
                                                             or _bytecode_cache(event, args))):
                    self._record(what, frame)
        except Exception:  # noqa: BLE001 - a tripwire must never break the call it watches
            pass
        finally:
            self._local.busy = False

    def _describe(self, event: str, args) -> str | None:
        if event == "open":
            path, mode, flags = (list(args) + [None, None, None])[:3]
            if not isinstance(path, (str, bytes)):
                return None
            path = os.path.abspath(os.fsdecode(path))
            writing = any(c in str(mode or "") for c in "wax+") or bool((flags or 0) & _WRITE_FLAGS)
            if writing and not path.startswith(self.writable) and path != os.devnull:
                return f"opened {path} for writing, outside its folder"
            if not writing and not path.startswith(self.readable) and path != os.devnull:
                return f"read {path}, outside its folder"
            return None
        if event in _PROCESS_EVENTS:
            return f"{_PROCESS_EVENTS[event]} ({_short(args)})"
        if event in _SOCKET_EVENTS:
            return f"{_SOCKET_EVENTS[event]} ({_short(args[1:] if event != 'socket.getaddrinfo' else args)})"
        if event == "os.kill":
            return f"sent signal {args[1]} to process {args[0]}" if args[0] != os.getpid() else None
        paths = [a for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))]
        outside = [os.path.abspath(os.fsdecode(p)) for p in paths
                   if not os.path.abspath(os.fsdecode(p)).startswith(self.writable)]
        if outside:
            return f"{_FS_EVENTS[event]} {outside[-1]}, outside its folder"
        return None


def _bytecode_cache(event: str, args) -> bool:
    """An event on the interpreter's bytecode cache only (a __pycache__ folder, or under
    sys.pycache_prefix): the file, its temporary name, the folders made for it."""
    if event not in ("open", "os.mkdir", "os.rename"):
        return False
    prefix = sys.pycache_prefix and os.path.abspath(sys.pycache_prefix) + os.sep
    paths = [os.path.abspath(os.fsdecode(a)) for a in (args[:1] if event != "os.rename" else args[:2])
             if isinstance(a, (str, bytes, os.PathLike))]
    return bool(paths) and all((prefix and (p + os.sep).startswith(prefix)) or "__pycache__" in p.split(os.sep)
                               for p in paths)


def _short(args) -> str:
    text = ", ".join(repr(a) for a in args if a is not None)
    return text if len(text) <= 120 else text[:117] + "..."


class Watch:
    """Identities of the attributes the worker's timing and channel rely on."""

    def __init__(self):
        self._targets: dict[str, tuple[object, tuple[str, ...] | None]] = {}
        self._saved: dict[str, object] = {}

    def add(self, label: str, namespace, names: tuple[str, ...] | None = None) -> None:
        """Watch ``names`` of ``namespace`` (a module, class or instance); all of them if None."""
        if namespace is None:
            return
        self._targets[label] = (namespace, names)
        for key, value in self._items(label):
            self._saved[key] = value

    def _items(self, label: str):
        namespace, names = self._targets[label]
        space = vars(namespace)
        for name in (names if names is not None else list(space)):
            yield f"{label}.{name}", space.get(name)

    def changed(self) -> list[str]:
        return [key for label in self._targets for key, value in self._items(label)
                if key in self._saved and self._saved[key] is not value]
