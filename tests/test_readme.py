"""Every code block of README.md runs as written (issue 16, item 1).

The README's fenced blocks are read in order. Each is labelled:

- ``python``: run whole, in a fresh namespace, as a script would be (``__name__ == "__main__"``);
- ``bash``: every line is a command, ``remat ...`` (or ``.venv/bin/remat ...``) or ``python ...``
  (``.venv/bin/python ...``), optionally after ``NAME=value`` settings; a trailing
  ``# exit code N`` comment says the exit status the line must end with (default 0);
- ``text``: sample output, not run.

A block that cannot run here (it needs a GPU, installs packages, or is a benchmark run of
minutes to hours) carries, on the line just before its fence, a visible marker with the reason:
``<!-- readme-test: skip (the reason) -->``; the test checks that every marker gives one and
that no code hides in an unlabelled or indented block.

The blocks run in one worker process on the venv's own Python (``sys.executable``), started
once, so that torch is imported once rather than once per command (the machine has 2 cores):
``remat`` lines call ``remat.cli.main`` in that process, which is the ``remat`` console script's
entry point (checked below), and ``python`` lines run as subprocesses of the same interpreter.
The working directory is a fresh temporary folder holding ``bench/graphs`` (a link to the
repo's graphs), so that the paths the README uses resolve and whatever a command writes
(``remat-bench/``, ``remat-explain-*.png``, ``plan.png``) lands outside the repository.
The worker runs torch on one thread (``OMP_NUM_THREADS=1`` unless set): on a shared 2-core
machine two threads contend with the other test processes and make each step several times
slower (``remat run resnet18 --batch 1``: 12 s on one thread, 72 s on two under load).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

SHELL = {"bash", "sh", "shell"}
LANGS = {"python", "text", *SHELL}
FENCE = re.compile(r"^```\s*([\w+-]*)\s*$")
MARKER = re.compile(r"^<!--\s*readme-test:(.*?)-->\s*$")
SKIP = re.compile(r"^\s*skip\s*\((.+)\)\s*$")
EXIT = re.compile(r"#\s*exit code (\d+)\b")
ASSIGN = re.compile(r"^[A-Z_][A-Z0-9_]*=")
BLOCK_TIMEOUT = 300  # seconds one block may take before the worker is stopped


@dataclass
class Block:
    line: int           # 1-based line of the opening fence
    lang: str
    code: str
    skip: str | None    # the reason given in its marker, or None
    marker: str | None  # the marker's raw text, if any

    @property
    def id(self) -> str:
        return f"L{self.line}-{self.lang}"


def blocks(text: str | None = None) -> list[Block]:
    """The README's fenced blocks in order, each with the marker on the line before its fence."""
    lines = (README.read_text() if text is None else text).splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        assert j < len(lines), f"README.md:{i + 1}: code fence never closed"
        prev = lines[i - 1].strip() if i > 0 else ""
        marker = MARKER.match(prev)
        raw = marker.group(1).strip() if marker else None
        skip = SKIP.match(raw) if raw is not None else None
        out.append(Block(i + 1, m.group(1).lower(), "\n".join(lines[i + 1:j]) + "\n",
                         skip.group(1).strip() if skip else None, raw))
        i = j + 1
    return out


def indented_code(text: str | None = None) -> list[int]:
    """Lines that start an indented (4-space) code block outside any fence: code the test would miss."""
    lines = (README.read_text() if text is None else text).splitlines()
    found, fenced = [], False
    for k, line in enumerate(lines):
        if FENCE.match(line) or (fenced and line.rstrip() == "```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        prev = lines[k - 1] if k else ""
        if line.startswith("    ") and line.strip() and not prev.strip():
            found.append(k + 1)
    return found


@dataclass
class Command:
    env: dict[str, str]
    argv: list[str]
    expect: int
    text: str


def commands(block: Block) -> list[Command]:
    """The commands of a shell block, one a line (``#`` starts a comment; blank lines skipped)."""
    out = []
    for raw in block.code.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        m = EXIT.search(raw)
        words = shlex.split(raw, comments=True)
        env = {}
        while words and ASSIGN.match(words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        out.append(Command(env, words, int(m.group(1)) if m else 0, raw.strip()))
    return out


def runnable(c: Command) -> bool:
    return bool(c.argv) and c.argv[0] in ("remat", ".venv/bin/remat", "python", ".venv/bin/python")


README_BLOCKS = blocks()


# ---- the structure of the README ------------------------------------------------------------------

def test_every_code_block_is_fenced_and_labelled():
    assert README_BLOCKS, "README.md has no fenced code blocks"
    bad = [f"README.md:{b.line}: ```{b.lang}" for b in README_BLOCKS if b.lang not in LANGS]
    assert not bad, f"label every fence python, bash or text (output): {bad}"
    lines = indented_code()
    assert not lines, f"README.md lines {lines}: indented code blocks are not run; use a fenced block"


def test_every_skipped_block_gives_its_reason():
    lines = README.read_text().splitlines()
    markers = [k + 1 for k, line in enumerate(lines) if "readme-test" in line]
    attached = {b.line - 1 for b in README_BLOCKS if b.marker is not None}
    loose = [k for k in markers if k not in attached]
    assert not loose, f"README.md lines {loose}: a readme-test marker must sit on the line just before a fence"
    for b in README_BLOCKS:
        if b.marker is not None:
            assert b.skip, f"README.md:{b.line}: marker {b.marker!r} must read 'skip (the reason)'"
            assert len(b.skip.split()) >= 2, f"README.md:{b.line}: give a real reason, not {b.skip!r}"
            assert b.lang in ("python", *SHELL), f"README.md:{b.line}: only code blocks are skipped"


def test_shell_blocks_run_only_commands_the_test_can_run():
    for b in README_BLOCKS:
        if b.lang in SHELL and b.skip is None:
            cmds = commands(b)
            assert cmds, f"README.md:{b.line}: empty shell block"
            other = [c.text for c in cmds if not runnable(c)]
            assert not other, (f"README.md:{b.line}: {other} are neither remat nor python commands: "
                               f"mark the block <!-- readme-test: skip (why) --> or change it")


def test_the_remat_command_is_cli_main():
    """``remat`` lines run ``remat.cli.main`` in the worker: the console script's own entry point."""
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="console_scripts") if e.name == "remat"]
    assert ep.value == "remat.cli:main"
    assert (Path(sys.executable).parent / "remat").exists()


def test_the_parser_reads_markers_and_exit_codes():
    text = ("a\n\n```python\nprint(1)\n```\n<!-- readme-test: skip (needs a GPU) -->\n```bash\nmake demo\n```\n"
            "```bash\nREMAT_PROGRESS=1 remat solve g.json --budget 1%   # exit code 1: infeasible\n```\n")
    bs = blocks(text)
    assert [(b.lang, b.skip) for b in bs] == [("python", None), ("bash", "needs a GPU"), ("bash", None)]
    (c,) = commands(bs[2])
    assert (c.env, c.argv, c.expect) == ({"REMAT_PROGRESS": "1"}, ["remat", "solve", "g.json", "--budget", "1%"], 1)
    assert indented_code("text\n\n    make demo\n") == [3]
    assert indented_code("- item\n  more\n\n```bash\n    x\n```\n") == []


# ---- running the blocks ------------------------------------------------------------------------------

class Worker:
    """One process on this interpreter that runs blocks on request (see the module docstring)."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        r, w = os.pipe()
        env = {k: v for k, v in os.environ.items() if k != "REMAT_PROGRESS"}
        env["MPLBACKEND"] = "Agg"
        env.setdefault("OMP_NUM_THREADS", "1")  # see the module docstring
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", str(w)], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     pass_fds=(w,), text=True)
        os.close(w)
        self.replies = os.fdopen(r, "r")

    def run(self, request: dict, timeout: float = BLOCK_TIMEOUT) -> dict:
        assert self.proc.poll() is None, "the README worker has exited"
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.replies], [], [], timeout)
        if not ready:
            self.close()
            raise AssertionError(f"README block did not finish in {timeout} s")
        line = self.replies.readline()
        assert line, "the README worker died"
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("readme")
    (cwd / "bench").mkdir()
    (cwd / "bench" / "graphs").symlink_to(ROOT / "bench" / "graphs")
    w = Worker(cwd)
    yield w
    w.close()


CODE = [b for b in README_BLOCKS if b.lang in ("python", *SHELL)]


@pytest.mark.slow
@pytest.mark.parametrize("block", CODE, ids=[b.id for b in CODE])
def test_block_runs(block: Block, worker: Worker):
    """Each python and shell block, in README order; a marked block is reported skipped with its reason."""
    if block.skip is not None:
        pytest.skip(f"README.md:{block.line} is marked: {block.skip}")
    log = worker.cwd / f"{block.id}.log"
    started = time.perf_counter()
    if block.lang == "python":
        reply = worker.run({"python": block.code, "name": f"README.md:{block.line}", "log": str(log)})
        assert reply["ok"], f"README.md:{block.line}: the python block failed:\n{reply['error']}\n{_tail(log)}"
    else:
        for c in commands(block):
            began = time.perf_counter()
            reply = worker.run({"argv": c.argv, "env": c.env, "log": str(log)})
            assert reply["ok"], f"README.md:{block.line}: {c.text}\n{reply['error']}\n{_tail(log)}"
            assert reply["rc"] == c.expect, (f"README.md:{block.line}: {c.text} exited {reply['rc']}, the README "
                                             f"says {c.expect}\n{_tail(log)}")
            print(f"  {c.text}: {time.perf_counter() - began:.1f} s")
    print(f"README.md:{block.line} ({block.lang}) ran in {time.perf_counter() - started:.1f} s")


def _tail(log: Path, n: int = 60) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


# ---- the worker process ------------------------------------------------------------------------------

@contextlib.contextmanager
def _output_to(path: str):
    """stdout and stderr (file descriptors included: C++ warnings, subprocesses) appended to ``path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


@contextlib.contextmanager
def _environ(env: dict[str, str]):
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _serve(reply_fd: int) -> None:
    import traceback

    replies = os.fdopen(reply_fd, "w")
    for line in sys.stdin:
        req = json.loads(line)
        reply: dict = {"ok": True, "rc": 0, "error": None}
        with _output_to(req["log"]):
            try:
                if "python" in req:
                    code = compile(req["python"], req["name"], "exec")
                    exec(code, {"__name__": "__main__", "__file__": req["name"]})
                else:
                    reply["rc"] = _command(req["argv"], req["env"])
            except BaseException as e:  # noqa: BLE001  (a block's failure is the reply)
                if isinstance(e, SystemExit) and "python" not in req:
                    reply["rc"] = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                else:
                    reply.update(ok=False, error="".join(traceback.format_exception(e)))
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


def _command(argv: list[str], env: dict[str, str]) -> int:
    with _environ(env):
        if argv[0] in ("remat", ".venv/bin/remat"):
            from remat.cli import main

            return main(argv[1:])
        if argv[0] in ("python", ".venv/bin/python"):
            return subprocess.run([sys.executable, *argv[1:]], env=os.environ.copy()).returncode
    raise ValueError(f"not a remat or python command: {shlex.join(argv)}")


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--worker":
    _serve(int(sys.argv[2]))
