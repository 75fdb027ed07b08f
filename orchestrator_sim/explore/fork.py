"""A fork server for the schedule explorer: one warm interpreter that has imported the CLI (and
what its commands load) once, then forks one child per `orchestrate` command.

Each command still is a real, separate process (its own pid, its own session and process group,
its own SQLite connections and event loop), so the explorer SIGKILLs, SIGSTOPs/SIGCONTs and
SIGINTs (a Ctrl-C) it exactly as a command started with `python -m orchestrator.cli`; what it
saves is the interpreter start and the import of the CLI (~0.7 CPU-s per command on this machine).

Protocol (JSON lines): the explorer writes `{"argv": [...], "env": {...}, "cwd": DIR, "out": PATH}`
on the server's stdin; the server forks, answers `{"pid": N}` and, when the child ends,
`{"exit": N, "status": S}` (S as `subprocess.Popen.returncode`: negative for a signal). The child
replaces its environment by `env`, sends its stdout and stderr to PATH, applies the explorer's
test hooks (crash.py: a kill after journal write N, a stepped clock) and runs `orchestrate`.

`ForkServer` (the explorer's side) hands back `Forked` objects with the parts of `Popen` the
explorer uses (pid, poll, wait, communicate, send_signal, returncode).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

#: modules the CLI imports lazily (per command); importing them in the server shares them by fork
PRELOAD = ("orchestrator.cli", "orchestrator.service.runner", "orchestrator.service.commands", "orchestrator.service.oncall",
           "orchestrator.service.admission", "orchestrator.engine.fleet", "orchestrator.engine.executor", "orchestrator.engine.executor.loop",
           "orchestrator.engine.executor.runtime", "orchestrator.journal.sql", "orchestrator.engine.steps", "orchestrator.previews.plan",
           "orchestrator.previews.live_plan", "orchestrator.teamserver.app", "orchestrator.teamserver.worker", "orchestrator.teamserver.cli",
           "orchestrator.teamserver.client", "orchestrator.teamserver.remote", "orchestrator.teamserver.pages", "orchestrator.service.incident",
           "orchestrator.util.settings", "orchestrator.hosts.host_clients", "orchestrator.service.startup", "orchestrator.service.activity",
           "httpx", "structlog", "tenacity", "uvicorn", "fastapi", "yaml", "rich.console", "rich.live", "sqlite3")


# ------------------------------------------------------------------------------------ the server
def _child(req: dict[str, Any]) -> None:
    """In the forked child: become the command (never returns)."""
    code = 1
    try:
        fd = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a Ctrl-C, as in a fresh interpreter
        os.chdir(req.get("cwd") or os.getcwd())
        os.environ.clear()
        os.environ.update(req["env"])
        sys.stdin = open(os.devnull)  # noqa: SIM115 - the child's stdin for the rest of its life, closed at its exit
        from orchestrator_sim.explore import crash

        crash.configure()
        sys.argv = ["orchestrate", *req["argv"]]
        crash.run_cli()
        code = 0
    except SystemExit as exc:
        c = exc.code
        code = c if isinstance(c, int) else (0 if c is None else 1)
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # noqa: BLE001 - the child must end, and say why
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - whatever failed, the child still ends and reports
            pass
        os._exit(code)


def serve() -> None:
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - an older `orchestrator/` (ORCHESTRATOR_EXPLORE_SRC) may lack one
            pass
    from orchestrator_sim.explore import crash

    crash.install()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server is in its own session; a child resets it
    sel = selectors.DefaultSelector()
    stdin_fd = sys.stdin.fileno()
    sel.register(stdin_fd, selectors.EVENT_READ)
    pending = b""
    children: set[int] = set()
    open_ = True
    while open_ or children:
        if open_:
            for _key, _ in sel.select(timeout=0.005):
                chunk = os.read(stdin_fd, 65536)
                if not chunk:
                    open_ = False
                    break
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    if not line.strip():
                        continue
                    req = json.loads(line)
                    sys.stdout.flush()
                    sys.stderr.flush()
                    r, w = os.pipe()
                    pid = os.fork()
                    if pid == 0:
                        sel.close()
                        out.close()  # the protocol pipe is the server's alone
                        os.close(r)
                        os.setsid()  # its own session and process group: killpg reaches it alone
                        os.close(w)
                        _child(req)
                    os.close(w)
                    os.read(r, 1)  # the child has its own process group before its pid is told
                    os.close(r)
                    children.add(pid)
                    out.write(json.dumps({"pid": pid, "tag": req.get("tag")}) + "\n")
        else:
            threading.Event().wait(0.005)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                children.clear()
                break
            if pid == 0:
                break
            children.discard(pid)
            rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            out.write(json.dumps({"exit": pid, "status": rc}) + "\n")


# ------------------------------------------------------------------------------------ the client
class Forked:
    """A command run by the fork server: the parts of `subprocess.Popen` the explorer uses."""

    def __init__(self, pid: int, out: Path) -> None:
        self.pid = pid
        self.out = out
        self.returncode: int | None = None
        self.stdin = None
        self._ended = threading.Event()

    def _end(self, status: int) -> None:
        self.returncode = status
        self._ended.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"orchestrate (pid {self.pid})", timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, None]:
        self.wait(timeout)
        try:
            return self.out.read_text(errors="replace"), None
        except OSError:
            return "", None

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """The explorer's handle on one fork server (one per explorer process, started on first use)."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
        self.proc = subprocess.Popen([sys.executable, "-m", "orchestrator_sim.explore.fork"], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.lock = threading.Lock()
        self.by_pid: dict[int, Forked] = {}
        self.early: dict[int, int] = {}
        self.started: dict[int, Any] = {}
        self.n = 0
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            msg = json.loads(line)
            with self.lock:
                if "pid" in msg:
                    box = self.started.pop(msg["tag"])
                    box.append(msg["pid"])
                    box_ev = box[0]
                    box_ev.set()
                else:
                    f = self.by_pid.pop(msg["exit"], None)
                    if f is None:
                        self.early[msg["exit"]] = msg["status"]
                    else:
                        f._end(msg["status"])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(self, argv: list[str], env: dict[str, str], out: Path) -> Forked:
        ev = threading.Event()
        box: list[Any] = [ev]
        with self.lock:
            self.n += 1
            tag = self.n
            self.started[tag] = box
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"argv": argv, "env": env, "cwd": str(self.cwd), "out": str(out),
                                              "tag": tag}) + "\n")
            self.proc.stdin.flush()
        if not ev.wait(60):
            raise RuntimeError("the explorer's fork server did not answer")
        pid = box[1]
        f = Forked(pid, out)
        with self.lock:
            if pid in self.early:
                f._end(self.early.pop(pid))
            else:
                self.by_pid[pid] = f
        return f

    def close(self) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(30)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            self.proc.kill()


_SERVERS: dict[str, ForkServer] = {}
_SERVERS_LOCK = threading.Lock()


def server_for(cwd: Path) -> ForkServer:
    """This process's fork server for CLI working directory `cwd` (started on first use)."""
    with _SERVERS_LOCK:
        s = _SERVERS.get(str(cwd))
        if s is None or not s.alive():
            if not _SERVERS:
                import atexit
                import multiprocessing.util

                # waited for at exit, so its CPU (and its commands') counts as this process's: atexit
                # for a plain process, a finalizer for a multiprocessing worker (which skips atexit)
                atexit.register(close_all)
                multiprocessing.util.Finalize(None, close_all, exitpriority=0)
            s = _SERVERS[str(cwd)] = ForkServer(cwd)
        return s


def close_all() -> None:
    with _SERVERS_LOCK:
        for s in _SERVERS.values():
            s.close()
        _SERVERS.clear()


def spawn(argv: list[str], env: dict[str, str], cwd: Path, out: Path) -> Forked:
    return server_for(cwd).spawn(argv, env, out)


if __name__ == "__main__":
    serve()
