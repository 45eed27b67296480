"""logs/master/live.json: what a running night is doing now, for `nightly status` in another
shell. The night's progress display (nightly.builds.view.progress) writes it on each event and at
most once a second; status reads it back (bounded, no symlink followed, lenient: a file of
another shape is no live state, never an error). Written without fsync: it is a view, and a
crash leaves the previous one (os.replace), which the dead night's pid tells apart."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nightly.files import pid_exists
from nightly.format import shown
from nightly.jsonvalues import JSONInputError, json_object, read_bounded

NAME = "live.json"
MAX_BYTES = 256 * 1024  # a night of hundreds of queues fits; more is not a live state
PHASES = ("preparing", "building", "repairing", "testing", "GPU test", "publishing")


@dataclass(frozen=True)
class LiveBuild:
    queue: int
    build: str
    phase: str  # one of PHASES
    started: float  # epoch seconds of this attempt's start
    estimate_s: float | None  # the plan's estimate of the build, None when it has none
    last_line: str = ""  # the last line its log printed (control characters removed)
    attempt: int = 1


@dataclass(frozen=True)
class LiveState:
    pid: int  # the night's process (a dead one: the night is no longer running)
    started: float
    updated: float
    total: int
    done: int
    failed: int
    estimate_s: float  # the night's estimated makespan (0: none)
    estimate_source: str  # "history", "config" (the first nights: a guess) or "fixed"
    builds: tuple[LiveBuild, ...] = field(default=())
    step: str = "building"  # the night's step: building, then publishing ...

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def path_of(master: Path) -> Path:
    return master / NAME


def write(path: Path, state: LiveState) -> None:
    """Replace the file whole (readers see the old or the new one); errors are the caller's."""
    data = json.dumps(state.to_json(), separators=(",", ":")).encode()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_bytes(path: Path, limit: int, warn: Callable[[str], None] | None = None) -> bytes | None:
    """At most `limit` bytes of a regular file, never through a symlink, never waiting (a
    FIFO); None when absent, not a plain file or larger than `limit`, and then `warn` is
    told why in one line (a folder or a FIFO in its place is named, never a traceback)."""
    try:
        return read_bounded(path, limit)
    except FileNotFoundError:
        return None
    except (OSError, JSONInputError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        if warn is not None:
            warn(f"warning: {path} is no live state of a night ({why}): ignored")
        return None


def _num(v: object, default: float = 0.0) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def _build(raw: object) -> LiveBuild | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("build"), str):
        return None
    est = raw.get("estimate_s")
    phase = raw.get("phase")
    return LiveBuild(
        queue=int(_num(raw.get("queue"))), build=str(raw["build"])[:200],
        phase=phase if isinstance(phase, str) and phase in PHASES else "building",
        started=_num(raw.get("started")),
        estimate_s=_num(est) if isinstance(est, (int, float)) else None,
        last_line=clean_line(str(raw.get("last_line") or "")), attempt=int(_num(raw.get("attempt"), 1)),
    )


def read(path: Path, warn: Callable[[str], None] | None = None) -> LiveState | None:
    """The live state at `path`, or None (absent, a symlink, a folder, a FIFO, too large, not
    this shape); `warn` hears why when it is there but no file (read_bytes)."""
    data = read_bytes(path, MAX_BYTES, warn)
    if data is None:
        return None
    raw = json_object(data)
    listed = None if raw is None else raw.get("builds")
    if raw is None or not isinstance(listed, list):
        return None
    builds = tuple(b for b in (_build(x) for x in listed) if b is not None)
    step = raw.get("step")
    return LiveState(
        pid=int(_num(raw.get("pid"))), started=_num(raw.get("started")),
        updated=_num(raw.get("updated")), total=int(_num(raw.get("total"))),
        done=int(_num(raw.get("done"))), failed=int(_num(raw.get("failed"))),
        estimate_s=_num(raw.get("estimate_s")),
        estimate_source=(str(raw["estimate_source"])
                         if raw.get("estimate_source") in ("history", "fixed") else "config"),
        builds=builds, step=step if isinstance(step, str) and step.isprintable() else "building",
    )


def clean_line(text: str, width: int = 160) -> str:
    """A log line fit to show: no control characters (a build's ESC sequences, \\r progress
    bars: the part after the last \\r), cut to `width`."""
    text = shown(text.rstrip("\r\n").rsplit("\r", 1)[-1], lines=False).strip()
    return text if len(text) <= width else text[: width - 3] + "..."


def no_escapes(text: str) -> str:
    """`text` with no terminal control codes (escape sequences removed, other controls and
    bidirectional overrides made visible: nightly.format); lines kept."""
    return shown(text)


def alive(pid: int) -> bool:
    """Whether process `pid` exists (the night that wrote the file is still running)."""
    return pid > 0 and pid_exists(pid)
