"""Failure notifications of `nightly run` (issue 5): a configured command gets summary.json
on stdin; an email goes through a real SMTP server (aiosmtpd on loopback) with the failures
in the subject and summary.json attached. A notification that fails never changes the
night's outcome."""

from __future__ import annotations

import email
import email.policy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from tests.support.fixture_types import MakeProject, RunCli
from tests.support.net import free_port
from tests.support.projects import Project

MATRIX = """
[matrix.linux.manywheel]
pythons = ["3.6m", "3.7m"]
cudas = ["cpu", "cu100"]
"""
FAILING = {"manywheel_3.6m_cpu": "fail", "manywheel_3.7m_cu100": "nopkg"}


@dataclass
class Inbox:
    host: str
    port: int
    messages: list[email.message.EmailMessage] = field(default_factory=list)
    envelopes: list[tuple[str, list[str]]] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # aiosmtpd's handler hook
        msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
        self.messages.append(msg)
        self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
        return "250 Message accepted for delivery"


@pytest.fixture
def smtp_server() -> Iterator[Inbox]:
    """A real SMTP server on 127.0.0.1 (aiosmtpd), collecting what it receives."""
    inbox = Inbox("127.0.0.1", free_port())
    controller = Controller(inbox, hostname=inbox.host, port=inbox.port)
    controller.start()
    try:
        yield inbox
    finally:
        controller.stop()


def run_args(project: Project) -> list[str]:
    return ["run", "--config", str(project.config), "--date", "2024_05_01"]


def test_command_receives_summary_on_stdin(night_project: MakeProject, run_cli: RunCli) -> None:
    p = night_project(matrix=MATRIX, behaviours=FAILING)
    got = p.path / "notified.json"
    p.config.write_text(p.config.read_text() + f"""
[notify]
command = "sh -c 'cat > {got}'"
""")
    code, out, err = run_cli(run_args(p))
    assert code == 1, (out, err)
    assert json.loads(got.read_text()) == json.loads((p.day / "summary.json").read_text())
    assert "notified: sh -c" in (p.day / "logs/master/run.log").read_text()


@pytest.mark.parametrize("always", [False, True])
def test_command_on_success_only_when_always(
    night_project: MakeProject, run_cli: RunCli, always: bool
) -> None:
    p = night_project(matrix=MATRIX)
    got = p.path / "notified.json"
    p.config.write_text(p.config.read_text() + f"""
[notify]
command = "sh -c 'cat > {got}'"
always = {str(always).lower()}
""")
    code, out, err = run_cli(run_args(p))
    assert code == 0, (out, err)
    assert got.exists() == always
    if always:
        assert json.loads(got.read_text())["exit_code"] == 0


def test_email_through_a_real_smtp_server(
    night_project: MakeProject, run_cli: RunCli, smtp_server: Inbox, caller_secret: tuple[str, str]
) -> None:
    p = night_project(matrix=MATRIX, behaviours=FAILING)
    p.config.write_text(p.config.read_text() + f"""
[notify]
smtp_host = "{smtp_server.host}"
smtp_port = {smtp_server.port}
smtp_from = "nightly@build.example"
smtp_to = ["release@example.com", "oncall@example.com"]
""")
    code, out, err = run_cli(run_args(p))
    assert code == 1, (out, err)
    assert len(smtp_server.messages) == 1
    msg = smtp_server.messages[0]
    assert smtp_server.envelopes[0] == (
        "nightly@build.example", ["release@example.com", "oncall@example.com"]
    )
    subject = msg["Subject"]
    assert "2024_05_01" in subject
    assert "2 failed" in subject
    for bid in FAILING:
        assert bid in subject
    assert "manywheel_3.6m_cu100" not in subject  # the one that succeeded
    plain = msg.get_body(preferencelist=("plain",))
    assert plain is not None
    body = plain.get_content()
    assert "manywheel_3.6m_cpu: recipe failed with exit status 3" in body
    assert "produced no package" in body
    (attachment,) = list(msg.iter_attachments())
    assert attachment.get_filename() == "summary.json"
    attached = json.loads(attachment.get_content())
    assert attached == json.loads((p.day / "summary.json").read_text())
    assert "emailed release@example.com, oncall@example.com" in (
        p.day / "logs/master/run.log"
    ).read_text()
    assert caller_secret[1] not in msg.as_string()


@pytest.mark.parametrize("fails", [True, False])
def test_failed_notifications_do_not_change_the_outcome(
    night_project: MakeProject, run_cli: RunCli, fails: bool
) -> None:
    p = night_project(matrix=MATRIX, behaviours=FAILING if fails else None)
    dead = free_port()  # nothing listens there
    p.config.write_text(p.config.read_text() + f"""
[notify]
command = "sh -c 'exit 3'"
always = true
smtp_host = "127.0.0.1"
smtp_port = {dead}
smtp_to = ["release@example.com"]
""")
    code, out, err = run_cli(run_args(p))
    assert code == (1 if fails else 0), (out, err)
    run_log = (p.day / "logs/master/run.log").read_text()
    assert "notification command exited 3" in run_log
    assert f"email to release@example.com via 127.0.0.1:{dead} failed" in run_log
    assert json.loads((p.day / "summary.json").read_text())["exit_code"] == code
    assert "Traceback" not in err
