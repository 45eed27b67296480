"""How durations, sizes, clock times and text someone else wrote read, wherever nightly shows
them (terminal, live progress, HTML report, status, run.log, mail). One module at the base
layer, so the build phase's progress view and the report format the same way without the
build phase importing the report.

Text that a build, a log, a project or a remote wrote is data when nightly shows it: a line
of a build, shown raw, could set the terminal's title (OSC 0), switch it to the alternate
screen, reset it (ESC c), plant a hyperlink (OSC 8), or reorder what a person reads (U+202E,
a right-to-left override). `shown` is the one function every such output passes it through:
escape sequences (7-bit and C1 forms) are removed (colours and cursor moves are formatting,
not content), and every other control character or bidirectional control left is made
visible as a `\\xNN` or `\\uNNNN` escape, so a person sees that it was there. HTML escaping
does not do this: U+202E and the C1 controls pass through `html.escape` unchanged.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import sys


def hms(seconds: float) -> str:
    """A plan's or a live view's clock: 2:50, 1:02:03."""
    s = round(seconds)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def took(seconds: float | None) -> str:
    """A duration as people read it: 42s, 16m 40s, 2h 05m."""
    if seconds is None:
        return "-"
    s = round(seconds)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h {m:02d}m"
    return f"{m}m {sec:02d}s" if m else f"{sec}s"


def human_size(n: float | None) -> str:
    """1.5 MB; '-' for nothing."""
    if not n:
        return "-"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def clock(t: float | None) -> str:
    """A time of day (local), '-' for none."""
    return "-" if t is None else dt.datetime.fromtimestamp(t).strftime("%H:%M:%S")


# An escape sequence, 7-bit (ESC ...) or 8-bit (a C1 introducer):
#  - CSI: ESC [ or U+009B, parameters, intermediates, a final byte;
#  - OSC, DCS, SOS, PM, APC: ESC ] P X ^ _ (or U+009D 90 98 9E 9F), up to BEL or the string
#    terminator (ESC \ or U+009C); one never terminated runs to the end of the line;
#  - any other ESC with intermediates and a final byte (ESC c, ESC ( B, ESC 7).
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b[\]PX^_]|[\x9d\x90\x98\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]"
)
# Bidirectional controls: embeddings and overrides, isolates, the marks. Each can reorder or
# hide what a person reads (the "Trojan Source" characters) and none is needed to show a log.
BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
# What is made visible: C0 but tab (and newline, for text of several lines), DEL and C1, the
# bidirectional controls, the line and paragraph separators (a new line to some terminals and
# viewers, none to others) and lone surrogates (undecodable bytes: they cannot be written).
_HIDDEN = "\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c\u2028\u2029\ud800-\udfff"
_HIDDEN_IN_LINES = re.compile(f"[{_HIDDEN}]")
_HIDDEN_IN_A_LINE = re.compile(f"[\n{_HIDDEN}]")


def _visible(m: re.Match[str]) -> str:
    n = ord(m.group())
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def shown(text: str, *, lines: bool = True) -> str:
    """`text` fit to show: escape sequences removed, every other control character (C0 but
    tab and, when `lines`, newline; DEL; C1), bidirectional control and line separator made
    visible (`\\x1b`, `\\u202e`). A CR before a newline or at the end (a Windows line end)
    is dropped. With `lines` false the result is one line (a newline is shown as `\\x0a`).
    Regular expressions only: a 10 MB log takes a fraction of a second."""
    text = _SEQUENCE.sub("", text).replace("\r\n", "\n")
    if text.endswith("\r"):
        text = text[:-1]
    return (_HIDDEN_IN_LINES if lines else _HIDDEN_IN_A_LINE).sub(_visible, text)


def shown_log(text: str) -> str:
    """A log's text fit to show, line by line: each line as a terminal leaves it after a
    progress bar (what follows its last lone CR), then `shown`."""
    return "\n".join(shown(line.rstrip("\r").rsplit("\r", 1)[-1]) for line in text.split("\n"))


def say_err(line: str) -> None:
    """A line nightly prints to stderr (a warning, a note) that may carry what someone else
    wrote (a lock file another host wrote, a state record, an engine's error): `shown`."""
    print(shown(line), file=sys.stderr)


class ShownStderr(logging.Handler):
    """Log records (nightly's loggers and the libraries') on stderr as Python's last-resort
    handler writes them (the message), through `shown`: a warning quotes object keys, URLs
    and servers' words. Writes to sys.stderr as it is when it writes (a caller may swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        if self._handled_elsewhere(record.name):
            return
        try:
            sys.stderr.write(shown(self.format(record)) + "\n")
            sys.stderr.flush()
        except Exception:  # logging's own rule: a handler never raises
            self.handleError(record)

    def _handled_elsewhere(self, name: str) -> bool:
        """Whether a logger on the record's way up to the root has a handler: then Python's
        last resort would not have written it, and neither does this one. (urllib3 gives its
        logger a NullHandler: its retry chatter is for those who ask, not for the terminal.)"""
        logger: logging.Logger | None = logging.getLogger(name)
        while logger is not None and logger is not logging.root:  # the root's: ours
            if logger.handlers:
                return True
            if not logger.propagate:
                return False
            logger = logger.parent
        return False


def log_to_stderr() -> None:
    """Records of WARNING and above on stderr through `shown` (ShownStderr), where Python's
    last resort wrote them raw; once per process (a caller in-process may call it again)."""
    root = logging.getLogger()
    if not any(isinstance(h, ShownStderr) for h in root.handlers):
        root.addHandler(ShownStderr(logging.WARNING))
