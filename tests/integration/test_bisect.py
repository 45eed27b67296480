"""Failure facts and `nightly bisect` on a real git history of the demo project (issue 29).

tests/integration/bisect_history.py makes the history: 64 commits between the good night and
the first bad one, one breaking the CUDA build (a header include), one on the search's path
failing every build differently (skipped), and a later one breaking only the CPU build. The
recipe is a cheap stand-in (a few C files through the host compiler), the nights real
`nightly run`s, the bisect a real `nightly bisect` (each step through the night's Runner)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tests.integration.bisect_history import (
    BREAK,
    CUDA_SIGNATURE,
    DAY1,
    DAY2,
    DAY3,
    N_DAY2,
    SKIP,
    UNRELATED,
    History,
    make_history,
    write_recipes,
)
from tests.support.fixture_types import MakeProject, RunCli, StartCli, WaitUntil
from tests.support.projects import Project

MATRIX = '[matrix.linux.manywheel]\npythons = ["3.12"]\ncudas = ["cpu", "cu130"]\n'
EXTRA = '[cache]\nenabled = false\n[retries]\nrecipe = 0\ninfra = 0\n'
CUDA, CPU = "manywheel_3.12_cu130", "manywheel_3.12_cpu"
MOST_BUILDS = 7  # ceil(log2(64)) + 1


def project(night_project: MakeProject, name: str = "p") -> tuple[Project, History]:
    p = night_project(name=name, matrix=MATRIX, queues=1, extra=EXTRA, recipes={})
    shutil.rmtree(p.path / "src")
    write_recipes(p.path)
    return p, make_history(p.path)


def night(run_cli: RunCli, p: Project, date: str, *, upload: bool = False) -> tuple[int, dict[str, Any]]:
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", date,
                              *([] if upload else ["--no-upload"])], timeout=300)
    assert code in (0, 1), (out, err)
    day = p.path / "nightlies" / date
    return code, json.loads((day / "summary.json").read_text())


def bisect_args(p: Project, date: str, *extra: str) -> list[str]:
    return ["bisect", CUDA, "--config", str(p.config), "--date", date, *extra]


def test_three_nights_give_the_facts_and_bisect_names_the_commit(
    night_project: MakeProject, run_cli: RunCli
) -> None:
    p, h = project(night_project)
    assert night(run_cli, p, DAY1)[0] == 0
    code, s2 = night(run_cli, p, DAY2)
    assert code == 1
    f2 = s2["failures"]["builds"]
    assert list(f2) == [CUDA]
    assert f2[CUDA]["new"] is True
    assert f2[CUDA]["last_good"] == {"day": DAY1, "commit": h.good}
    assert f2[CUDA]["first_bad"] == {"day": DAY2, "commit": h.bad}
    assert f2[CUDA]["signature"] == CUDA_SIGNATURE
    assert f2[CUDA]["commits_total"] == N_DAY2
    assert len(f2[CUDA]["commits"]) == 20
    assert f2[CUDA]["commits"][0].startswith(h.bad[:7])  # git log: newest first

    code, s3 = night(run_cli, p, DAY3)
    assert code == 1
    f3 = s3["failures"]
    assert (f3["new"], f3["still_failing"]) == (1, 1)
    cuda, cpu = f3["builds"][CUDA], f3["builds"][CPU]
    assert cuda["new"] is False
    assert cuda["headline"] == f"still failing since {DAY2} (2 nights)"
    assert cuda["first_bad"] == {"day": DAY2, "commit": h.bad}
    assert cuda["last_good"] == {"day": DAY1, "commit": h.good}
    assert cpu["new"] is True
    assert cpu["last_good"] == {"day": DAY2, "commit": h.bad}
    assert cpu["first_bad"]["commit"] == h.commits[-1]
    assert cpu["commits_total"] == 3
    assert any(line.endswith("Break the CPU-only code") for line in cpu["commits"])
    assert cpu["signature"] == 'error: #error "cpu_only.c: unsupported platform"'
    assert {g["signature"] for g in f3["groups"]} == {CUDA_SIGNATURE, cpu["signature"]}
    from nightly.night.notify import subject
    from nightly.workspace.summary import Summary

    assert subject(Summary.from_json(s3)).startswith(f"nightly {DAY3}: 1 new failure, 1 still failing")

    # --dry-run: the candidates, nothing built
    code, out, err = run_cli(bisect_args(p, DAY3, "--dry-run"))
    assert code == 0, err
    assert "first build" in out
    assert not (p.path / "nightlies" / DAY3 / "bisect" / CUDA / "steps.jsonl").exists()

    before = (p.path / "nightlies" / DAY3 / "state.json").read_text()
    code, out, err = run_cli(bisect_args(p, DAY3), timeout=600)
    assert code == 0, (out, err)
    folder = p.path / "nightlies" / DAY3 / "bisect" / CUDA
    result = json.loads((folder / "result.json").read_text())
    assert result["first_bad"] == h.commits[BREAK]
    assert result["subject"] == "Use FP8 types in the CUDA host code"
    assert result["author"] == "Dev <dev@example.com>"
    steps = result["steps"]
    assert len(steps) <= MOST_BUILDS
    assert {"commit": h.commits[SKIP], "verdict": "skip"}.items() <= next(
        s for s in steps if s["commit"] == h.commits[SKIP]).items()
    assert UNRELATED > N_DAY2  # the CPU break is outside the range: never judged
    for s in steps:  # each step in its own folder, with its log
        assert (p.path / "nightlies" / DAY3 / s["log"]).is_file()
        assert (folder / s["commit"] / "state.json").is_file()
    assert f"first bad commit {h.commits[BREAK][:12]}" in out
    assert "skip" in out
    # the night is untouched; the result is in the history, the status and the report
    assert (p.path / "nightlies" / DAY3 / "state.json").read_text() == before
    with sqlite3.connect(p.path / "nightlies" / "history.sqlite") as db:
        (row,) = db.execute("SELECT result FROM bisects WHERE day = ? AND build_id = ?",
                            (DAY3, CUDA)).fetchall()
    assert json.loads(row[0])["first_bad"] == h.commits[BREAK]
    code, out, err = run_cli(["status", "--config", str(p.config), "--date", DAY3])
    assert code == 1
    assert f"bisect: first bad commit {h.commits[BREAK][:12]}" in out
    assert f"still failing since {DAY2} (2 nights)" in out


def test_bisect_resumes_after_kill9_without_repeating_a_step(
    night_project: MakeProject, run_cli: RunCli, start_cli: StartCli, wait_until: WaitUntil
) -> None:
    p, h = project(night_project)
    night(run_cli, p, DAY1)
    night(run_cli, p, DAY2)
    folder = p.path / "nightlies" / DAY2 / "bisect" / CUDA

    def lines() -> int:
        f = folder / "steps.jsonl"
        return f.read_text().count("\n") if f.exists() else 0

    started = start_cli(bisect_args(p, DAY2))
    wait_until(lambda: lines() >= 3, timeout=300, what="three bisect steps")
    os.kill(started.pid, signal.SIGKILL)
    started.proc.wait(timeout=30)
    done_before = [json.loads(x)["commit"] for x in (folder / "steps.jsonl").read_text().splitlines()]
    code, out, err = run_cli(bisect_args(p, DAY2), timeout=600)
    assert code == 0, (out, err)
    commits = [json.loads(x)["commit"] for x in (folder / "steps.jsonl").read_text().splitlines()]
    assert len(commits) == len(set(commits))  # no step recorded twice
    assert commits[: len(done_before)] == done_before
    assert out.count("finished earlier") == len(done_before), out
    for c in done_before:  # a finished step's build ran once
        state = json.loads((folder / c / "state.json").read_text())
        assert state["builds"][CUDA]["attempts"] == 1
    result = json.loads((folder / "result.json").read_text())
    assert result["first_bad"] == h.commits[BREAK]
    assert len(result["steps"]) <= MOST_BUILDS
    # The good night's build, bisected anyway (--good, --bad): any failure counts as bad, so
    # the first commit that breaks it in any way is named.
    code, out, err = run_cli(bisect_args(p, DAY1, "--good", h.good, "--bad", h.bad), timeout=600)
    assert code == 0, (out, err)
    assert "bad = fails with: any error" in out
    assert f"first bad commit {h.commits[SKIP][:12]}" in out


def test_bad_input_exits_2_with_one_line(night_project: MakeProject, run_cli: RunCli) -> None:
    p, h = project(night_project)
    night(run_cli, p, DAY1)
    night(run_cli, p, DAY2)
    cases = {
        "unknown build": (["bisect", "conda_3.7_cpu", "--config", str(p.config), "--date", DAY2],
                          "no build 'conda_3.7_cpu'"),
        "not an ancestor": (bisect_args(p, DAY2, "--good", h.commits[50], "--bad", h.commits[40]),
                            "is not an ancestor"),
        "empty range": (bisect_args(p, DAY2, "--good", h.bad, "--bad", h.bad), "no commit between"),
        "not a commit": (bisect_args(p, DAY2, "--good", "nosuchref"), "is not a commit"),
    }
    for what, (args, words) in cases.items():
        code, out, err = run_cli(args)
        assert code == 2, (what, out, err)
        assert words in err, (what, err)
        assert len(err.strip().splitlines()) == 1, (what, err)
        assert "Traceback" not in err
    plain = night_project(name="plain", matrix=MATRIX, queues=1, extra=EXTRA, recipes={})
    write_recipes(plain.path)
    (plain.path / "src" / "cuda").mkdir()
    (plain.path / "src" / "cuda" / "host.c").write_text("int x;\n")
    for f in ("common_extra.c", "cpu_only.c"):
        (plain.path / "src" / "src").mkdir(exist_ok=True)
        (plain.path / "src" / "src" / f).write_text("int x;\n")
    assert night(run_cli, plain, DAY1)[0] == 0
    (plain.path / "src" / "cuda" / "host.c").write_text("#include <cuda_fp8.h>\n")
    code, summary = night(run_cli, plain, DAY2)
    facts = summary["failures"]["builds"][CUDA]
    assert facts["last_good"] == {"day": DAY1, "commit": ""}
    assert facts["commits"] == "unknown"  # a plain folder has no history
    code, out, err = run_cli(["bisect", CUDA, "--config", str(plain.config), "--date", DAY2])
    assert code == 2, (out, err)
    assert "is a plain folder" in err
    assert len(err.strip().splitlines()) == 1



# ---------------------------------------------------------------------------- in Chromium

CHROMIUM = Path("/usr/bin/chromium")
REPO = Path(__file__).resolve().parents[2]
# A page of the static server that fetches every link of the published report and writes
# each one's HTTP status into the DOM (the report itself runs no script: its CSP forbids it).
CHECKER = """<!DOCTYPE html><html><body><pre id="out">running</pre><script>
(async () => {
  const page = new URL(location.hash.slice(1), location.href);
  const doc = new DOMParser().parseFromString(await (await fetch(page)).text(), "text/html");
  const lines = [];
  for (const a of doc.querySelectorAll("a[href]")) {
    if (a.getAttribute("href").startsWith("#")) continue;
    const url = new URL(a.getAttribute("href"), page);
    const r = await fetch(url, {cache: "no-store"});
    const text = await r.text();
    lines.push(r.status + " " + url.pathname + " " + (text.includes("nightly build") ? "log" : "-"));
  }
  document.getElementById("out").textContent = lines.join("\\n") + "\\ndone";
})();
</script></body></html>
"""


@pytest.fixture(scope="module")
def chromium() -> Path:
    """Debian's Chromium, installed now if it is missing (never skipped)."""
    if not os.access(CHROMIUM, os.X_OK):
        proc = subprocess.run(["bash", str(REPO / "scripts" / "browser.sh")], capture_output=True,
                              text=True, timeout=900, check=False)
        assert proc.returncode == 0, proc.stderr
    return CHROMIUM


def dump_dom(chromium: Path, profile: Path, url: str, *extra: str) -> str:
    proc = subprocess.run(
        [str(chromium), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", f"--user-data-dir={profile}", *extra, "--dump-dom", url],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "HOME": str(profile)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@contextlib.contextmanager
def static_server(folder: Path) -> Iterator[str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_report_shows_groups_and_bisect_and_published_log_links_answer(
        night_project: MakeProject, run_cli: RunCli, chromium: Path, tmp_path: Path) -> None:
    p, h = project(night_project)
    with (p.config).open("a") as f:
        f.write('\n[publish]\nurl = "mirror"\n')
    night(run_cli, p, DAY1)
    night(run_cli, p, DAY2, upload=True)
    code, _, err = run_cli(bisect_args(p, DAY2), timeout=600)
    assert code == 0, err
    code, _, err = run_cli(["report", "--config", str(p.config), "--date", DAY2])
    assert code == 0, err
    page = p.path / "nightlies" / DAY2 / "report.html"
    dom = dump_dom(chromium, tmp_path / "profile1", page.as_uri())
    groups = Dom(dom)
    (group,) = groups.having("data-signature")
    assert group["data-signature"] == CUDA_SIGNATURE
    (item,) = [a for a in groups.having("data-build") if a.get("class") == "failed-build"]
    assert (item["data-build"], item["data-new"]) == (CUDA, "true")
    assert "1 build: <code>" in dom
    assert f"bisect: first bad commit {h.commits[BREAK][:12]}" in dom
    # the copy published into the mirror by night 2, served over HTTP
    mirror = p.path / "mirror"
    (mirror / "check.html").write_text(CHECKER)
    with static_server(mirror) as base:
        report = f"/whl/nightly/reports/{DAY2}_m.html"
        dom = dump_dom(chromium, tmp_path / "profile2", f"{base}/check.html#{report}",
                       "--virtual-time-budget=10000")
    text = dom[dom.index('<pre id="out">') + 14: dom.index("</pre>")]
    assert text.rstrip().endswith("done"), text
    links = text.split("\n")[:-1]
    assert len(links) >= 3, text  # the failure's full log, and one per build in the table
    assert all(line.startswith("200 ") and line.endswith(" log") for line in links), text
    assert any(f"/logs/failed/{CUDA}.log" in line for line in links), text
    failed_log = mirror / "whl/nightly/reports" / f"{DAY2}_m" / "logs/failed" / f"{CUDA}.log"
    assert CUDA_SIGNATURE in failed_log.read_text()


class Dom(HTMLParser):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[dict[str, str | None]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append(dict(attrs))

    def having(self, attr: str) -> list[dict[str, str | None]]:
        return [a for a in self.elements if attr in a]


def test_notify_bisect_bisects_new_failures_before_notifying(
    night_project: MakeProject, run_cli: RunCli
) -> None:
    p, h = project(night_project)
    sent = p.path / "notification.json"
    with (p.config).open("a") as f:
        f.write(f'\n[notify]\ncommand = "tee {sent}"\nbisect = true\nbisect_budget = "30m"\n')
    night(run_cli, p, DAY1)
    code, summary = night(run_cli, p, DAY2)
    assert code == 1
    bisected = summary["failures"]["builds"][CUDA]["bisect"]
    assert bisected["first_bad"] == h.commits[BREAK]
    assert len(bisected["steps"]) <= MOST_BUILDS
    notified = json.loads(sent.read_text())
    assert notified["failures"]["builds"][CUDA]["bisect"]["first_bad"] == h.commits[BREAK]
    # a failure still failing the next night is not bisected again
    code, summary = night(run_cli, p, DAY3)
    assert summary["failures"]["builds"][CUDA]["bisect"] is None
    assert summary["failures"]["builds"][CPU]["bisect"]["first_bad"] == h.commits[UNRELATED]


def test_bisect_with_the_compiler_cache_is_not_fooled_by_the_nights_entries(
        night_project: MakeProject, run_cli: RunCli) -> None:
    """Night 1 fills the compiler cache from its source folder; the bisect's steps must not
    be served those objects for commits whose header changed (see nightly.bisect.run.step_config)."""
    p, h = project(night_project)
    text = p.config.read_text()
    cached = text.replace("[cache]\nenabled = false\n",
                          f'[cache]\nenabled = true\ndir = "{p.path / "sccache"}"\n')
    assert cached != text
    p.config.write_text(cached)
    night(run_cli, p, DAY1)
    p.config.write_text(text)  # night 2 without the cache, so that it fails as it must
    assert night(run_cli, p, DAY2)[0] == 1
    p.config.write_text(cached)
    code, out, err = run_cli(bisect_args(p, DAY2), timeout=600)
    assert code == 0, (out, err)
    result = json.loads((p.path / "nightlies" / DAY2 / "bisect" / CUDA / "result.json").read_text())
    assert result["first_bad"] == h.commits[BREAK]
    state = json.loads((p.path / "nightlies" / DAY2 / "bisect" / CUDA / h.commits[BREAK]
                        / "state.json").read_text())
    assert state["builds"][CUDA]["cache"]  # the steps did build through the cache
