"""Run train.py and evaluate.py as child processes without paying their imports each time.

A fresh ``python train.py`` spends about 6 CPU-seconds importing JAX, orbax and
tensorboardX (which imports torch) before it does anything. The reliability tests start
the programs some thirty times, so they use a server: one process that imports those
libraries once (without starting a JAX backend, so forking is safe) and forks a child
for each run. A child is an ordinary process running the program file as ``__main__``
with its own argv, environment, stdout/stderr files, signals and exit status, like
``python train.py ...`` started from a shell.

    server = ProgramServer()                      # the client, in the test process
    run = server.start("train.py", ["--config", ...], stdout=..., stderr=...)
    os.kill(run.pid, signal.SIGTERM); status = run.wait(timeout=60)
"""

import json
import os
import runpy
import signal
import subprocess
import sys
import time

from paths import REPO

# ----------------------------------------------------------------------- client (test side)


class Run:
    """One started program: its pid, output files and exit status."""

    def __init__(self, server: "ProgramServer", pid: int, stdout: str, stderr: str):
        self.server, self.pid, self.stdout_path, self.stderr_path = server, pid, stdout, stderr
        self.returncode: int | None = None

    def wait(self, timeout: float = 300.0) -> int:
        """Exit status (negative: killed by that signal); raises TimeoutError."""
        if self.returncode is None:
            self.returncode = self.server.wait(self.pid, timeout)
        return self.returncode

    @property
    def stdout(self) -> str:
        with open(self.stdout_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    @property
    def stderr(self) -> str:
        with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def wait_for_output(self, text: str, timeout: float = 300.0) -> None:
        """Block until ``text`` appears on stdout (fails if the program ends first)."""
        deadline = time.monotonic() + timeout
        while text not in self.stdout:
            if self.server.poll(self.pid) is not None:
                raise AssertionError(f"ended before printing {text!r}:\n{self.stderr}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {text!r} on stdout after {timeout} s")
            time.sleep(0.01)


class ProgramServer:
    """Client of the server process (see the module docstring)."""

    def __init__(self):
        self.process = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )

    def _ask(self, request: dict) -> dict:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the program server died")
        return json.loads(line)

    def start(
        self,
        program: str,
        args: list[str],
        *,
        stdout: str,
        stderr: str,
        env: dict[str, str] | None = None,
        prelude: str = "",
    ) -> Run:
        """Fork a child running ``python PROGRAM ARGS`` in the repository root.

        env: extra environment variables. prelude: Python code the child runs before the
        program (to simulate faults, e.g. a full disk)."""
        reply = self._ask(
            {
                "cmd": "start",
                "program": program,
                "args": list(args),
                "env": env or {},
                "prelude": prelude,
                "stdout": stdout,
                "stderr": stderr,
            }
        )
        return Run(self, reply["pid"], stdout, stderr)

    def run(self, program: str, args: list[str], *, outdir: str, timeout=300.0, **kwargs) -> Run:
        """Start and wait; output goes to OUTDIR/<n>.stdout|stderr."""
        os.makedirs(outdir, exist_ok=True)
        n = len([f for f in os.listdir(outdir) if f.endswith(".stdout")])
        base = os.path.join(outdir, str(n))
        run = self.start(program, args, stdout=base + ".stdout", stderr=base + ".stderr", **kwargs)
        run.wait(timeout)
        return run

    def wait(self, pid: int, timeout: float) -> int:
        reply = self._ask({"cmd": "wait", "pid": pid, "timeout": timeout})
        if reply["status"] is None:
            os.kill(pid, signal.SIGKILL)
            self._ask({"cmd": "wait", "pid": pid, "timeout": 60})
            raise TimeoutError(f"pid {pid} still running after {timeout} s (killed)")
        return reply["status"]

    def poll(self, pid: int) -> int | None:
        return self._ask({"cmd": "wait", "pid": pid, "timeout": 0})["status"]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(timeout=30)


# ---------------------------------------------------------------------- server (own process)


def _status(wait_status: int) -> int:
    return os.waitstatus_to_exitcode(wait_status)


def _child(request: dict, outputs: list[int]) -> None:
    """In the forked child: become ``python PROGRAM ARGS``; never returns to the server."""
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, output in zip((1, 2), outputs, strict=True):
        os.dup2(output, fd)
        os.close(output)
    os.environ.update(request["env"])
    os.chdir(REPO)
    sys.argv = [request["program"], *request["args"]]
    if request["prelude"]:
        exec(request["prelude"], {"__name__": "prelude"})
    runpy.run_path(request["program"], run_name="__main__")
    sys.exit(0)  # SystemExit unwinds the server's frames; the interpreter exits normally


def serve() -> None:
    # What train.py and evaluate.py import; no JAX backend is started, so forking is safe.
    import jaxtrans.programs.evaluate  # noqa: F401
    import jaxtrans.programs.train  # noqa: F401
    import jaxtrans.tasks.translation.translation_task  # noqa: F401
    import jaxtrans.training.loop  # noqa: F401

    finished: dict[int, int] = {}
    for line in sys.stdin:
        request = json.loads(line)
        if request["cmd"] == "start":
            # Created before the reply, so that the client can read them at once.
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
            outputs = [os.open(request[name], flags, 0o644) for name in ("stdout", "stderr")]
            pid = os.fork()
            if pid == 0:
                _child(request, outputs)
            for output in outputs:
                os.close(output)
            reply = {"pid": pid}
        else:  # wait
            pid, status = request["pid"], finished.get(request["pid"])
            deadline = time.monotonic() + request["timeout"]
            while status is None:
                done, wait_status = os.waitpid(pid, os.WNOHANG)
                if done:
                    status = finished[pid] = _status(wait_status)
                elif time.monotonic() >= deadline:
                    break
                else:
                    time.sleep(0.02)
            reply = {"status": status}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    serve()
