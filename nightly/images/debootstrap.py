"""debootstrap with progress (issue 50): the packages it fetched of the total, as
nightly.images.transfer's Meter shows a download (a bar on a terminal; otherwise plain
timestamped lines at the start, each tenth or every ~10 s, and the end, no control codes).

The total comes from debootstrap itself (`--print-debs`: the packages it resolves, printed
before anything is fetched), run into the same target folder and kept there
(`--keep-debootstrap-dir`), so the real run validates the Packages index it fetched rather
than fetching it again. Each package counts once it is retrieved, or validated in the .deb
cache (`I: Retrieving NAME VERSION`, `I: Validating NAME VERSION`; the indexes' lines have no
version). Its whole output goes to the log file, as before."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from nightly import procs
from nightly.config.timeouts import ExternalTimeouts, default_timeouts
from nightly.images.transfer import Log, Meter

_PACKAGE = re.compile(r"^I: (?:Retrieving|Validating) (\S+) (\S+)\s*$")


def package_total(argv: Sequence[str], logfile: Path, *,
                  timeouts: ExternalTimeouts | None = None) -> int:
    """How many packages `debootstrap ARGV` will fetch (its --print-debs, for at most
    [external_timeouts] debootstrap_listing), 0 when it cannot say (its output then goes to
    the log file: the real run says why it fails)."""
    try:
        proc = procs.call([argv[0], "--print-debs", "--keep-debootstrap-dir", *argv[1:]],
                          timeout=(timeouts or default_timeouts()).debootstrap_listing)
    except (OSError, subprocess.SubprocessError):
        return 0
    if proc.returncode != 0:
        with logfile.open("a", encoding="utf-8") as f:
            f.write(f"[nightly] debootstrap --print-debs failed (exit {proc.returncode}):\n"
                    f"{proc.stdout}{proc.stderr}")
        return 0
    # The required packages one a line, then the base ones on one line (debootstrap 1.0.128).
    return len({name for line in proc.stdout.splitlines()
                if not line.startswith(("I:", "W:", "E:")) for name in line.split()})


def run(argv: Sequence[str], logfile: Path, label: str, log: Log) -> int:
    """`debootstrap ARGV` (its output appended to `logfile`) with a meter of its packages;
    its exit status."""
    total = package_total(argv, logfile)
    seen: set[str] = set()
    with Meter(label, total or None, log, unit="packages") as meter, logfile.open("ab") as f:
        # Direct: its output is read line by line as it runs (the meter), which procs.call
        # (output to the end) cannot give.
        proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        for raw in proc.stdout:
            f.write(raw)
            m = _PACKAGE.match(raw.decode("utf-8", "replace"))
            if m is not None and m.group(1) not in seen:
                seen.add(m.group(1))
                meter.update(len(seen), max(total, len(seen)) if total else None)
        code = proc.wait()
        if code != 0:
            meter.finish(ok=False)
    return code


__all__ = ["package_total", "run"]
