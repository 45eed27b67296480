"""What a build printed is data wherever nightly shows it (issue 56, point 2).

A recipe that fails with a line of terminal codes, and a smoke test that fails with the same
line: an OSC 0 title, the alternate screen, `ESC c` (reset), an OSC 8 hyperlink, a C1 CSI
(U+009B) and U+202E (right-to-left override). Through the CLI: none of them reaches the night's
output (in a pty and through a pipe), `nightly status` in a pty or through a pipe, run.log,
report.html (its text, and the DOM headless Chromium renders from it) or the notify mail
(through a real SMTP server); the words around them do, so the reason is still read. In the
pty, the only escape sequences `nightly status` writes are rich's own colours (SGR). The same
line in what others wrote into a day folder (a state.json reason, a stale lock's holder, a
manylinux record) and in a commit's subject: `nightly status`, `nightly report`, the warnings
a run prints on stderr and `nightly bisect` show it as data too.
"""

from __future__ import annotations

import email
import email.policy
import json
import os
import pty
import re
import select
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from tests.support.cli import child_env, nightly_cmd
from tests.support.day import find_day
from tests.support.net import free_port
from tests.support.projects import DATE, run_args
from tests.support.wheels import hand_wheel_recipe

CHROMIUM = Path("/usr/bin/chromium")
# The line, in bash's $'...' quoting: raw bytes, as a build would print them.
EVIL_BASH = (r"$'ERROR: boom \e]0;pwned\a title \e[?1049h alt \ec reset "
             r"\e]8;;https://evil.example/\e\\link\e]8;;\e\\ c1 \xc2\x9b31m red "
             r"\xe2\x80\xaeright-to-left end'")
# What must not survive, as characters: ESC and BEL in any form, the C1 CSI, the override.
RAW = ("\x1b", "\x07", "\x9b", "\u202e")
# The build's own sequences, as a terminal would act on them.
EVIL_SEQUENCES = ("\x1b]0;", "\x1b[?1049h", "\x1bc", "\x1b]8;", "\x9b31m", "\u202e")
# The same line as Python text, written raw into a day folder's files.
RAW_LINE = ("ERROR: boom \x1b]0;pwned\x07 \x1b[?1049h \x1bc \x1b]8;;https://evil.example/\x1b\\"
            "link\x1b]8;;\x1b\\ \x9b31m \u202eright-to-left end")
# rich's colours: the only escape sequences a terminal may get from `nightly status`.
SGR = re.compile(r"\x1b\[[0-9;]*m")

MATRIX = '[matrix.linux.manywheel]\npythons = ["3.11", "3.12"]\ncudas = ["cpu"]\n'
RECIPE = hand_wheel_recipe(
    before=('. "@EVIL@"\n'
            'if [ "$DESIRED_PYTHON" = 3.12 ]; then printf "%s\\n" "$EVIL" >&2; exit 3; fi\n'),
    version='os.environ["BUILD_VERSION"]',
    body='f"__version__ = {v!r}\\n"',
)


# A wheel that passes the night's checks: its build records a manylinux policy.
POLICY_RECIPE = hand_wheel_recipe(version='os.environ["BUILD_VERSION"]',
                                  body='f"__version__ = {v!r}\\n"')


@dataclass
class Inbox:
    messages: list[email.message.EmailMessage] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # aiosmtpd's hook
        self.messages.append(email.message_from_bytes(envelope.content, policy=email.policy.default))
        return "250 accepted"


@pytest.fixture
def inbox() -> Iterator[tuple[Inbox, int]]:
    """A real SMTP server on loopback (aiosmtpd): the night's notify mail lands here."""
    box, port = Inbox(), free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield box, port
    finally:
        controller.stop()


def _project(night_project: Callable[..., Any], smtp_port: int) -> Any:
    p = night_project(matrix=MATRIX, recipes={"manywheel": ""}, queues=1,
                      extra=('[smoke]\nimport_name = "demo"\ncommand = "bash @SMOKE@"\n'
                             f'[notify]\nsmtp_host = "127.0.0.1"\nsmtp_port = {smtp_port}\n'
                             'smtp_from = "nightly@build.example"\nsmtp_to = ["r@example.com"]\n'))
    evil = p.path / "evil.sh"
    evil.write_text(f"EVIL={EVIL_BASH}\n")
    smoke = p.path / "smoke.sh"
    smoke.write_text(f'. {evil}\nprintf "%s\\n" "$EVIL"\nexit 1\n')
    (p.path / "recipes" / "manywheel" / "build.sh").write_text(
        RECIPE.replace("@EVIL@", str(evil)))
    p.config.write_text(p.config.read_text().replace("@SMOKE@", str(smoke)))
    return p


def _problems(where: str, text: str) -> list[str]:
    """What of the line survived raw in `text` (or what of its words did not)."""
    found = [f"{where}: {c!r} at ...{text[max(0, text.find(c) - 60):text.find(c) + 60]!r}"
             for c in RAW if c in text]
    if "pwned" in text:  # the title's text goes with its sequence
        found.append(f"{where}: the OSC title's text")
    flat = " ".join(text.split())
    found += [f"{where}: {word!r} missing" for word in ("boom", "right-to-left end")
              if word not in flat]
    return found


def _in_a_terminal(args: list[str], timeout: float = 90) -> tuple[int, str]:
    """`nightly ARGS` with a pty as its terminal (stdin, stdout, stderr): its exit code and
    everything it wrote to the terminal."""
    main, tty = pty.openpty()
    env = child_env({"TERM": "xterm-256color", "COLUMNS": "200", "LINES": "50"})
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([*nightly_cmd(), *args], stdin=tty, stdout=tty, stderr=tty,
                            env=env, close_fds=True)
    os.close(tty)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # EIO: the terminal's other end closed
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(main)
    return code, out.decode("utf-8", errors="replace")


def test_a_builds_terminal_codes_reach_no_output(
    night_project: Callable[..., Any], run_cli: Callable[..., tuple[int, str, str]],
    tmp_path: Path, inbox: tuple[Inbox, int],
) -> None:
    p = _project(night_project, inbox[1])
    # The night in a terminal (its live view draws with cursor moves of rich's own: only the
    # build's sequences are looked for), then again through a pipe (cron's mail).
    code, terminal = _in_a_terminal(run_args(p.config), timeout=600)
    assert code == 1, terminal
    problems = [f"night on a terminal: {seq!r}" for seq in EVIL_SEQUENCES if seq in terminal]
    problems += _problems("night on a terminal", re.sub(r"\x1b\[[0-?]*[ -/]*[@-~]", "", terminal))
    code, out, err = run_cli(run_args(p.config), cwd=p.path, timeout=600)
    assert code == 1, (out, err)
    builds = p.state()["builds"]
    assert builds["manywheel_3.12_cpu"]["status"] == "failed"
    assert builds["manywheel_3.11_cpu"]["status"] == "failed"
    assert builds["manywheel_3.11_cpu"]["reason"].startswith("smoke test"), builds
    for bid in ("manywheel_3.11_cpu", "manywheel_3.12_cpu"):
        problems += _problems(f"state.json {bid}", builds[bid]["reason"])
    # The night's own output (its final table), run.log and report.html.
    problems += _problems("night | pipe", out + err)
    day = find_day(p.path / "nightlies", DATE)
    problems += _problems("run.log", (day.master / "run.log").read_text())
    page = day.path / "report.html"
    problems += _problems("report.html", page.read_text())
    assert len(inbox[0].messages) == 2, inbox[0].messages  # one mail a night
    for msg in inbox[0].messages:
        plain = msg.get_body(preferencelist=("plain",))
        assert plain is not None
        problems += _problems("the notify mail", str(msg["Subject"]) + "\n" + plain.get_content())

    # `nightly status` through a pipe, and in a real terminal.
    code, out, err = run_cli(run_args(p.config, command="status"), cwd=p.path)
    assert code == 1, (out, err)
    problems += _problems("status | pipe", out + err)
    code, terminal = _in_a_terminal(run_args(p.config, command="status"))
    assert code == 1, terminal
    assert SGR.search(terminal), "no colour: the pty was not taken for a terminal"
    problems += _problems("status on a terminal", SGR.sub("", terminal))

    problems += _problems("report.html in Chromium", _dom(page, tmp_path / "chromium-profile"))
    assert not problems, "\n".join(problems)


def _dom(page: Path, profile: Path) -> str:
    """The page's DOM as headless Chromium renders it."""
    dom = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--host-resolver-rules=MAP * ~NOTFOUND",
         f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "HOME": str(profile)},
    )  # fmt: skip
    assert dom.returncode == 0, dom.stderr[-3000:]
    return dom.stdout


def test_a_raw_reason_in_the_day_folder_is_shown_as_data(
    night_project: Callable[..., Any], run_cli: Callable[..., tuple[int, str, str]],
) -> None:
    """A state.json whose reason holds the codes raw (written by an older nightly, or by
    hand): `nightly status` and `nightly report` show it as data all the same."""
    p = night_project(matrix='[matrix.linux.manywheel]\npythons = ["3.8"]\ncudas = ["cpu"]\n',
                      behaviours={"manywheel_3.8_cpu": "fail"}, extra="[smoke]\nenabled = false\n")
    code, out, err = run_cli(run_args(p.config), cwd=p.path)
    assert code == 1, (out, err)
    day = find_day(p.path / "nightlies", DATE)
    state = json.loads(day.state_path.read_text())
    raw = RAW_LINE
    state["builds"]["manywheel_3.8_cpu"]["reason"] = raw
    state["builds"]["manywheel_3.8_cpu"]["upload_error"] = raw
    day.state_path.write_text(json.dumps(state, ensure_ascii=False))
    problems = []
    code, out, err = run_cli(run_args(p.config, command="status"), cwd=p.path)
    assert code == 1, (out, err)
    problems += _problems("status | pipe", out + err)
    code, terminal = _in_a_terminal(run_args(p.config, command="status"))
    assert code == 1, terminal
    problems += _problems("status on a terminal", SGR.sub("", terminal))
    code, out, err = run_cli(run_args(p.config, command="report"), cwd=p.path)
    assert code == 0, (out, err)
    problems += _problems("report.html", (day.path / "report.html").read_text())
    assert not problems, "\n".join(problems)


def test_the_warnings_a_night_prints_on_stderr_show_what_others_wrote_as_data(
    night_project: Callable[..., Any], run_cli: Callable[..., tuple[int, str, str]],
) -> None:
    """The day's lock left by a run that died (its host, pid and start time as that run, maybe
    on another host sharing the folder, wrote them) and a state.json manylinux record, both
    holding the codes raw: the warnings the next run prints on stderr ("took over a stale
    lock", "rebuilding ...") show them as data, through a pipe and in a terminal."""
    p = night_project(matrix='[matrix.linux.manywheel]\npythons = ["3.11"]\ncudas = ["cpu"]\n',
                      recipes={"manywheel": POLICY_RECIPE}, extra="[smoke]\nenabled = false\n")
    code, out, err = run_cli(run_args(p.config), cwd=p.path, timeout=300)
    assert code == 0, (out, err)
    day = find_day(p.path / "nightlies", DATE)

    def plant() -> None:
        state = json.loads(day.state_path.read_text())
        state["builds"]["manywheel_3.11_cpu"]["manylinux"]["policy"] = RAW_LINE
        day.state_path.write_text(json.dumps(state, ensure_ascii=False))
        day.lock_path.write_text(json.dumps({"host": RAW_LINE, "pid": 1, "started": "then",
                                             "purpose": "run"}, ensure_ascii=False))

    plant()
    code, out, err = run_cli(run_args(p.config), cwd=p.path, timeout=300)
    assert code == 0, (out, err)
    assert "took over a stale lock of host" in err, err  # both warnings were printed
    assert "rebuilding manywheel_3.11_cpu: built under manylinux policy" in err, err
    problems = _problems("stderr | pipe", err)
    plant()
    code, terminal = _in_a_terminal(run_args(p.config), timeout=300)
    assert code == 0, terminal
    assert "took over a stale lock of host" in terminal, terminal
    problems += [f"night on a terminal: {seq!r}" for seq in EVIL_SEQUENCES if seq in terminal]
    problems += _problems("night on a terminal", re.sub(r"\x1b\[[0-?]*[ -/]*[@-~]", "", terminal))
    assert not problems, "\n".join(problems)


# A build that fails once `broken` is in its source, delivering a small package otherwise.
BISECT_RECIPE = """#!/usr/bin/env bash
set -euo pipefail
if [ -e "$SOURCE_DIR/broken" ]; then echo "error: the source is broken" >&2; exit 3; fi
mkdir -p "$OUTPUT_DIR"
echo ok > "$OUTPUT_DIR/demo-${DESIRED_PYTHON}-${BUILD_VERSION}.tar.gz"
"""


def test_a_commit_subject_in_bisects_lines_is_shown_as_data(
    night_project: Callable[..., Any], run_cli: Callable[..., tuple[int, str, str]],
) -> None:
    """`nightly bisect` prints the commits it would try (git log's subjects: what the
    project's authors wrote) and the commit it found: a subject holding the codes raw
    reaches the terminal as data."""
    p = night_project(matrix='[matrix.linux.manywheel]\npythons = ["3.11"]\ncudas = ["cpu"]\n',
                      recipes={"manywheel": BISECT_RECIPE}, extra="[smoke]\nenabled = false\n")
    src = p.path / "src"

    def git(*args: str, when: str = "") -> None:
        env = {"HOME": str(p.path), "PATH": "/usr/bin:/bin", "GIT_AUTHOR_NAME": "Dev",
               "GIT_AUTHOR_EMAIL": "dev@example.com", "GIT_COMMITTER_NAME": "Dev",
               "GIT_COMMITTER_EMAIL": "dev@example.com", "GIT_AUTHOR_DATE": when,
               "GIT_COMMITTER_DATE": when}
        subprocess.run(["git", *args], cwd=src, env=env, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-q", "-m", "good", when="2024-05-01T10:00:00")
    (src / "broken").write_text("yes\n")
    git("add", "-A")
    git("commit", "-q", "-m", RAW_LINE, when="2024-05-02T10:00:00")
    code, out, err = run_cli(run_args(p.config), cwd=p.path)
    assert code == 0, (out, err)
    args = [a if a != DATE else "2024_05_02" for a in run_args(p.config)]
    code, out, err = run_cli(args, cwd=p.path)
    assert code == 1, (out, err)
    bisect = ["bisect", "manywheel_3.11_cpu", "--config", str(p.config), "--date", "2024_05_02"]
    code, out, err = run_cli([*bisect, "--dry-run"], cwd=p.path)
    assert code == 0, (out, err)
    problems = _problems("bisect --dry-run", out + err)
    code, out, err = run_cli(bisect, cwd=p.path, timeout=300)
    assert code == 0, (out, err)
    assert "first bad commit" in out, out
    # Its step and result lines quote the subject with repr: escaped, so the title's text
    # stays readable beside its sequence made visible; nothing raw either way.
    problems += [f"bisect: {c!r}" for c in RAW if c in out + err]
    assert not problems, "\n".join(problems)
