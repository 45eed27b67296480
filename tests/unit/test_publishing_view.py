"""Publishing as each build's last phase (issue 50): publish_day says each package's turn
and outcome (`on_package`), and nightly.night.publishing shows it per build and package, done
of the total: plain lines without a terminal (no control codes), the rich view on one, and
logs/master/live.json saying `publishing` (what `nightly status` reads), then `reporting`."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import re
from pathlib import Path

from nightly import config as cfg
from nightly.night.publishing import PublishView
from nightly.publish.upload import publish_day
from nightly.workspace import FAILED, SUCCEEDED, Day, PackageFile, State, live

A, B = "manywheel_3.7m_cpu", "manywheel_3.8_cpu"
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d publish  ")


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _view(tmp_path: Path, stream: io.StringIO) -> tuple[PublishView, Path]:
    path = tmp_path / "live.json"
    return PublishView(builds_total=3, builds_done=2, builds_failed=1, started=1000.0,
                       live_path=path, stream=stream), path


def test_plain_lines_per_package_and_live_json_says_publishing(tmp_path: Path) -> None:
    out = io.StringIO()
    view, path = _view(tmp_path, out)
    with view:
        for bid, name in ((A, "a-1.whl"), (A, "a-1.tar.gz"), (B, "b-1.whl")):
            view(bid, name, "queued")
        view(A, "a-1.whl", "uploading")
        view._draw(force=True)
        state = live.read(path)
        assert state is not None
        assert state.step == "publishing: 0 of 3 packages"
        assert [(b.build, b.phase, b.last_line) for b in state.builds] == [
            (A, "publishing", "package 1 of 2: a-1.whl")]
        assert (state.total, state.done, state.failed) == (3, 2, 1)  # the night's builds
        view(A, "a-1.whl", "uploaded")
        view(A, "a-1.tar.gz", "uploading")
        view(A, "a-1.tar.gz", "already there")
        view(B, "b-1.whl", "uploading")
        view(B, "b-1.whl", "failed")
        state = live.read(path)
        assert state is not None
        assert state.step == "publishing: 3 of 3 packages, 1 failed"
        assert state.builds == ()  # every build's publishing is over
    lines = out.getvalue().splitlines()
    assert [STAMP.sub("", line) for line in lines] == [
        f"{A}: 1 of 2 packages (1 of 3 in all): a-1.whl uploaded",
        f"{A}: 2 of 2 packages (2 of 3 in all): a-1.tar.gz already there",
        f"{B}: 1 of 1 packages (3 of 3 in all): b-1.whl failed",
    ]
    assert all(STAMP.match(line) for line in lines)
    assert "\x1b" not in out.getvalue()
    state = live.read(path)
    assert state is not None
    assert state.step == "reporting"


def test_on_a_terminal_the_live_view_then_one_line(tmp_path: Path) -> None:
    out = Tty()
    view, _ = _view(tmp_path, out)
    assert view.live_enabled
    with view:
        view(A, "a-1.whl", "queued")
        view(A, "a-1.whl", "uploading")
        view(A, "a-1.whl", "uploaded")
    text = out.getvalue()
    assert "\x1b[" in text  # the rich view
    assert "publish  " not in text  # ... not the plain lines
    assert text.endswith("publishing: 1 of 1 packages\n")


def _night(tmp_path: Path, text: str, url: str) -> tuple[cfg.Config, Day, State]:
    path = tmp_path / "nightly.toml"
    path.write_text(text + f'\n[publish]\nurl = "{url}"\n')
    config = cfg.load(path, root_override=str(tmp_path / "root"))
    day = Day(config.root, dt.date(2024, 5, 1))
    day.create()
    state = State(day.state_path)
    for bid, status, py in ((A, SUCCEEDED, "3.7m"), (B, SUCCEEDED, "3.8"),
                            ("manywheel_3.6m_cpu", FAILED, "3.6m")):
        name = f"demo-1.0.0.dev20240501-cp{py.replace('.', '')}-none-any.whl"
        f = day.package_dir("manywheel", "cpu") / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(name.encode())
        pkg = PackageFile(name=name, path=str(f.relative_to(day.path)), size=f.stat().st_size,
                          sha256=hashlib.sha256(f.read_bytes()).hexdigest())
        state.update(bid, status=status, package="manywheel", python=py, cuda="cpu",
                     packages=[pkg] if status == SUCCEEDED else [])
    return config, day, state


def test_publish_day_says_each_packages_turn_and_outcome(tmp_path: Path,
                                                         minimal_config_text: str) -> None:
    mirror = tmp_path / "mirror"
    config, day, state = _night(tmp_path, minimal_config_text, mirror.as_uri())
    said: list[tuple[str, str]] = []
    publish_day(config, day, state, channel="nightly", log=lambda _: None,
                on_package=lambda bid, _name, what: said.append((bid, what)))
    # All queued first (the totals), then each package's turn and outcome, in order.
    assert said == [(A, "queued"), (B, "queued"), (A, "uploading"), (A, "uploaded"),
                    (B, "uploading"), (B, "uploaded")]
    said.clear()
    publish_day(config, day, State(day.state_path), channel="nightly", log=lambda _: None,
                on_package=lambda bid, _name, what: said.append((bid, what)))
    assert said[-1] == (B, "already there")
    # A failed upload is its outcome (a file where the folder should be).
    other = tmp_path / "blocked"
    (other / "whl/nightly").mkdir(parents=True)
    (other / "whl/nightly/cpu").write_text("not a folder")
    (tmp_path / "2").mkdir()
    config2, day2, state2 = _night(tmp_path / "2", minimal_config_text, other.as_uri())
    said.clear()
    publish_day(config2, day2, state2, channel="nightly", log=lambda _: None,
                on_package=lambda bid, _name, what: said.append((bid, what)))
    assert [w for _, w in said].count("failed") == 2
