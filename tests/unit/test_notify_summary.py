"""notify gets the night's Summary itself: its subject and body read the typed record, and the
configured command gets summary.json's JSON (Summary.to_json) on stdin, written only there."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from nightly.config import Notify
from nightly.night import notify
from nightly.workspace.state import PackageFile
from nightly.workspace.summary import BuildSummary, Summary


def _summary() -> Summary:
    wheel = PackageFile(name="demo-1.0-cp312-cp312-linux_x86_64.whl", path="packages/x.whl",
                        size=10, sha256="ab" * 32)
    return Summary(
        date="2026_11_22", machine="lin-a", source="abc1234", exit_code=1,
        counts={"total": 2, "succeeded": 1, "failed": 1},
        failed_uploads=["manywheel_3.12_cpu"],
        builds={"manywheel_3.12_cpu": BuildSummary(outcome="succeeded", packages=(wheel,)),
                "conda_3.12_cpu": BuildSummary(outcome="failed", reason="exit status 2",
                                               log="logs/failed/conda_3.12_cpu.log")},
        extra={"failures": {"new": 1, "still_failing": 0, "groups": [], "builds": {}}},
    )


def test_subject_and_body_read_the_summary() -> None:
    s = _summary()
    assert notify.subject(s) == (
        "nightly 2026_11_22: 1 new failure, 0 still failing (1 failed: conda_3.12_cpu; "
        "1 upload(s) failed; 1/2 succeeded on machine lin-a)")
    text = notify.body(s)
    assert "  conda_3.12_cpu: exit status 2  (log: logs/failed/conda_3.12_cpu.log)" in text
    assert "Failed uploads (retry with `nightly upload`): manywheel_3.12_cpu" in text


def test_the_command_gets_summary_json(tmp_path: Path) -> None:
    got = tmp_path / "got.json"
    copy = f"import sys; open({str(got)!r}, 'w').write(sys.stdin.read())"
    cfg = Notify(command=shlex.join([sys.executable, "-c", copy]), always=False, smtp_host="",
                 smtp_port=25, smtp_from="", smtp_to=(), smtp_user="", smtp_password_env="")
    s = _summary()
    assert notify.send(cfg, s) == [f"notified: {cfg.command}"]
    sent = json.loads(got.read_text())
    assert sent == json.loads(json.dumps(s.to_json()))
    assert sent["builds"]["manywheel_3.12_cpu"]["packages"][0]["sha256"] == "ab" * 32
    assert Summary.from_json(sent).builds["manywheel_3.12_cpu"].packages == s.builds[
        "manywheel_3.12_cpu"].packages
    # A night that went well sends nothing unless [notify] always.
    got.unlink()
    ok = Summary(date="2026_11_22", exit_code=0)
    assert notify.send(cfg, ok) == []
    assert not got.exists()
