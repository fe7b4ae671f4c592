"""py-spy on the broker during a phase: where the broker's time goes, summarised for RESULTS.md.

`py-spy record --format raw` writes collapsed stacks ("frame;frame;... count"); on stop (SIGINT) the
file is complete. The summary lists the functions with the most samples on top of the stack (self)
and, for a few of the broker's own entry points, the share of samples they appear in (inclusive).
Only active samples are recorded (py-spy drops threads waiting in select/epoll/locks), so
`samples / (rate * seconds)` is how busy the broker's Python threads were.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def py_spy() -> str | None:
    """py-spy from the interpreter's own bin dir (the venv), the project's venv, or PATH."""
    for cand in (Path(sys.executable).parent / "py-spy", ROOT / ".venv" / "bin" / "py-spy"):
        if cand.exists():
            return str(cand)
    return shutil.which("py-spy")


class PySpy:
    def __init__(self, pid: int, out: Path, rate: int = 200) -> None:
        self.pid = pid
        self.out = out
        self.rate = rate
        self.proc: subprocess.Popen | None = None

    def start(self) -> PySpy:
        exe = py_spy()
        if exe is None:
            return self
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [exe, "record", "--pid", str(self.pid), "--format", "raw", "--output", str(self.out),
             "--rate", str(self.rate), "--nonblocking", "--nolineno", "--duration", "900"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return self

    def stop(self) -> dict | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if not self.out.exists():
            return {"error": (self.proc.stderr.read().decode(errors="replace")[-500:] if self.proc.stderr else "")}
        return summarize(self.out)


_FRAME = re.compile(r"^(?P<func>[^ ]+) \((?P<file>[^:]+)(?::(?P<line>\d+))?\)$")


def _short(frame: str) -> str:
    """'func (path/to/file.py:12)' -> 'file.py:func'."""
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    file = m.group("file")
    parts = Path(file).parts
    if "site-packages" in parts:
        file = "/".join(parts[parts.index("site-packages") + 1:])
    elif "ferry" in file or "broker" in file:
        for anchor in ("broker", "mirror", "ferry"):
            if anchor in parts:
                file = "/".join(parts[len(parts) - parts[::-1].index(anchor) - 1:])
                break
    else:
        file = Path(file).name
    return f"{file}:{m.group('func')}"


def summarize(path: Path, top: int = 15) -> dict:
    self_counts: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [f for f in stack.split(";") if f and not f.startswith("process ") and not f.startswith("thread ")]
        if not frames:
            continue
        total += n
        self_counts[_short(frames[-1])] += n
        for f in set(_short(x) for x in frames):
            incl[f] += n
    return {
        "samples": total,
        "top_self": [(f, round(100 * c / max(total, 1), 1)) for f, c in self_counts.most_common(top)],
        "top_inclusive_broker": [(f, round(100 * c / max(total, 1), 1)) for f, c in incl.most_common()
                                 if f.startswith(("broker/", "mirror/")) and not f.startswith("broker/cli/")][:top],
    }
