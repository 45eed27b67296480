"""One file name, one set of bytes (issue 48): two builds of a night that deliver the same
file name, a file already published on another day, a package changed after it was built, a
mirror whose bytes are not its index's, and the libtorch variants that would collide.

Each night is a real `nightly run` through the CLI of a tiny project whose recipe writes a
real pure wheel under one fixed name for every Python (as a limited-API project's builds do);
the mirror is a file:// store and pip installs from it.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.day import find_day
from tests.support.projects import DATE, run_args
from tests.support.wheels import make_wheel

NAME = "demo-1.0-py3-none-any.whl"  # every build writes this name, whatever its Python
FOLDER = Path("mirror/whl/nightly/cpu")

# A real wheel named NAME; its module says `body` (a Python expression over `py`, the
# build's Python): per-Python bodies give different bytes, a fixed body identical ones (the
# zip's times are fixed too).
RECIPE = r"""#!/usr/bin/env bash
set -euo pipefail
"$PYTHON" - <<'PY'
import base64, hashlib, os, zipfile
py = os.environ["DESIRED_PYTHON"]
body = @BODY@
info = "demo-1.0.dist-info"
files = {
    "demo/__init__.py": body,
    f"{info}/METADATA": "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
    f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
def digest(text):
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
record = "".join(f"{n},sha256={digest(t)},{len(t.encode())}\n" for n, t in files.items())
files[f"{info}/RECORD"] = record + f"{info}/RECORD,,\n"
with zipfile.ZipFile(os.path.join(os.environ["OUTPUT_DIR"], "demo-1.0-py3-none-any.whl"), "w") as z:
    for n, t in files.items():
        z.writestr(zipfile.ZipInfo(n, date_time=(2024, 5, 1, 0, 0, 0)), t)
PY
"""
PER_PYTHON = RECIPE.replace("@BODY@", 'f"BUILT_WITH = {py!r}\\n"')
SAME = RECIPE.replace("@BODY@", '"BUILT_WITH = \'any\'\\n"')

MATRIX = """
[matrix.linux.manywheel]
pythons = ["3.11", "3.12"]
cudas = ["cpu"]
"""
ONE = MATRIX.replace('["3.11", "3.12"]', '["3.11"]')
EXTRA = '[publish]\nurl = "mirror"\n\n[smoke]\nenabled = false\n'
B11, B12 = "manywheel_3.11_cpu", "manywheel_3.12_cpu"

RunCli = Callable[..., tuple[int, str, str]]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def listed_sha(base: Path) -> str:
    """The sha256 the project page's link to NAME promises."""
    page = (base / FOLDER / "demo" / "index.html").read_text()
    found = re.findall(re.escape(NAME) + r"#sha256=([0-9a-f]{64})", page)
    assert len(set(found)) == 1, page
    return str(found[0])


def pip_installs(base: Path, tmp: Path) -> str:
    """pip installs demo from the mirror's index (checking the page's sha256); the module's
    BUILT_WITH."""
    target = tmp / "site"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-cache-dir", "--target",
         str(target), "--index-url", (base / FOLDER).as_uri() + "/", "demo==1.0"],
        capture_output=True, text=True, timeout=300, check=False,
        env={"PIP_CONFIG_FILE": "/dev/null", "PATH": "/usr/bin:/bin", "HOME": str(tmp)},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    text = (target / "demo" / "__init__.py").read_text()
    return text.split("=")[1].strip().strip("'")


def test_two_builds_of_one_name_with_other_bytes_fail_the_later_one(
    night_project: Callable[..., Any], run_cli: RunCli, tmp_path: Path
) -> None:
    p = night_project(matrix=MATRIX, recipes={"manywheel": PER_PYTHON}, extra=EXTRA, queues=2)
    code, out, err = run_cli(run_args(p.config), cwd=p.path)
    assert code == 1, out + err
    assert "Traceback" not in err
    builds = p.state()["builds"]
    statuses = {b: builds[b]["status"] for b in (B11, B12)}
    assert sorted(statuses.values()) == ["failed", "succeeded"], statuses
    won = next(b for b, s in statuses.items() if s == "succeeded")
    lost = B12 if won == B11 else B11
    reason = builds[lost]["reason"]
    assert won in reason, reason
    assert NAME in reason, reason
    assert "other bytes" in reason, reason
    assert builds[lost].get("packages", []) == []
    assert not builds[lost].get("published")
    day = find_day(p.path / "nightlies", DATE)
    log = (day.path / "logs" / "failed" / f"{lost}.log").read_text()
    assert won in log
    assert NAME in log
    # Nothing overwritten: the day's file is the winner's, the mirror holds those bytes and
    # the index promises them; pip installs the winner's build.
    filed = day.path / "packages" / "manywheel" / "cpu" / NAME
    won_sha = builds[won]["packages"][0]["sha256"]
    assert sha(filed) == won_sha
    assert sha(p.path / FOLDER / NAME) == won_sha == listed_sha(p.path)
    assert pip_installs(p.path, tmp_path) == builds[won]["python"]
    # Pages written again from the store alone list the bytes the store holds.
    code, out, err = run_cli(["index", "--full", "--config", str(p.config), "--date", DATE],
                             cwd=p.path)
    assert code == 0, out + err
    assert sha(p.path / FOLDER / NAME) == won_sha == listed_sha(p.path)
    summary = p.summary()
    assert summary["counts"]["failed"] == 1, summary["counts"]


def test_two_builds_of_one_name_with_identical_bytes_are_one_package(
    night_project: Callable[..., Any], start_cli: Callable[..., Any],
    wait_until: Callable[..., None], tmp_path: Path,
) -> None:
    p = night_project(matrix=MATRIX, recipes={"manywheel": "x"}, extra=EXTRA, queues=2)
    # 3.12 delivers only once the test says go, after 3.11's file is in packages/.
    wait = (f'if [ "$DESIRED_PYTHON" = 3.12 ]; then n=0; while [ ! -e {p.signals}/go ] '
            '&& [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done; fi\n')
    recipe = p.path / "recipes" / "manywheel" / "build.sh"
    recipe.write_text(SAME.replace("set -euo pipefail\n", "set -euo pipefail\n" + wait, 1))
    run = start_cli(run_args(p.config), cwd=p.path)
    filed = p.day / "packages" / "manywheel" / "cpu" / NAME
    wait_until(lambda: p.state()["builds"].get(B11, {}).get("status") == "succeeded",
               timeout=60, what="3.11 filed")
    first = filed.stat()
    (p.signals / "go").touch()
    code, out, err = run.wait(timeout=120)
    assert code == 0, out + err
    builds = p.state()["builds"]
    assert builds[B11]["status"] == builds[B12]["status"] == "succeeded"
    assert builds[B11]["packages"] == builds[B12]["packages"]
    # One file, never overwritten: the very file 3.11 filed.
    now = filed.stat()
    assert (now.st_ino, now.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    day = find_day(p.path / "nightlies", DATE)
    assert [f.name for f in (day.path / "packages" / "manywheel" / "cpu").iterdir()] == [NAME]
    assert sha(p.path / FOLDER / NAME) == builds[B11]["packages"][0]["sha256"] == listed_sha(p.path)
    assert pip_installs(p.path, tmp_path) == "any"


def _second_day_refused(night_project: Callable[..., Any],
                        run_cli: RunCli) -> tuple[Any, str, str]:
    """A night publishes NAME (3.11's bytes); the next day's 3.12 build delivers NAME with
    other bytes, and its night exits 1. (project, the first day's sha256, the run's output)"""
    p = night_project(matrix=ONE, recipes={"manywheel": PER_PYTHON}, extra=EXTRA, queues=1)
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", "2024_04_30"],
                             cwd=p.path)
    assert code == 0, out + err
    first = sha(p.path / FOLDER / NAME)
    p.config.write_text(p.config.read_text().replace('pythons = ["3.11"]', 'pythons = ["3.12"]'))
    code, out, err = run_cli(run_args(p.config), cwd=p.path)
    assert code == 1, out + err
    assert "Traceback" not in err
    return p, first, out


def test_a_name_published_on_an_earlier_day_with_other_bytes_is_refused(
    night_project: Callable[..., Any], run_cli: RunCli
) -> None:
    p, first, _ = _second_day_refused(night_project, run_cli)
    day = find_day(p.path / "nightlies", DATE)
    upload_log = (day.path / "logs" / "master" / "run.log").read_text()
    line = next(x for x in upload_log.splitlines() if "upload failed" in x)
    assert NAME in line, line
    assert first[:12] in line, line
    assert "not by this day's state" in line, line
    assert "another day" in line, line
    assert sha(p.path / FOLDER / NAME) == first == listed_sha(p.path)


def test_counts_say_a_succeeded_build_was_not_published_and_agree_with_the_exit_code(
    night_project: Callable[..., Any], run_cli: RunCli
) -> None:
    p, _, run_out = _second_day_refused(night_project, run_cli)
    # The run's own table and counts.
    assert "1 succeeded (1 untested, 1 not published), 0 failed of 1" in run_out, run_out
    row = next(line for line in run_out.splitlines() if B12 in line and "│" in line)
    assert "succeeded (untested), not published" in row, run_out
    summary = p.summary()
    assert summary["builds"][B12]["outcome"] == "succeeded"
    assert summary["builds"][B12]["publication"] == "not published"
    c = summary["counts"]
    assert (c["succeeded"], c["failed"], c["published"], c["not_published"]) == (1, 0, 0, 1), c
    assert summary["exit_code"] == 1
    # `nightly status` says the same, and exits as the night did.
    code, out, err = run_cli(run_args(p.config, command="status"), cwd=p.path)
    assert code == 1, out + err
    assert "1 succeeded (1 not published)" in out, out
    row = next(line for line in out.splitlines() if B12 in line and "succeeded" in line)
    assert "not published" in row, out
    # The report's counts and row too.
    report = (p.day / "report.html").read_text()
    assert re.search(r'data-count="not_published"><b>1</b>', report), report[:3000]
    assert 'data-publication="not published"' in report
    # The first day's night: published, and counted so.
    first = json.loads((p.path / "nightlies" / "2024_04_30" / "summary.json").read_text())
    assert first["counts"]["published"] == 1
    assert first["counts"]["not_published"] == 0
    assert first["builds"][B11]["publication"] == "published"
    assert first["exit_code"] == 0


def test_a_package_changed_after_it_was_built_is_not_uploaded(
    night_project: Callable[..., Any], run_cli: RunCli
) -> None:
    p = night_project(matrix=ONE, recipes={"manywheel": PER_PYTHON}, extra=EXTRA, queues=1)
    code, out, err = run_cli(run_args(p.config, "--no-upload"), cwd=p.path)
    assert code == 0, out + err
    day = find_day(p.path / "nightlies", DATE)
    filed = day.path / "packages" / "manywheel" / "cpu" / NAME
    filed.write_bytes(filed.read_bytes() + b"tampered")
    code, out, err = run_cli(run_args(p.config, command="upload"), cwd=p.path)
    assert code == 1, out + err
    assert "Traceback" not in err
    text = out + err
    assert NAME in text, text
    # The upload's own read (the copy it sends, hashed as it is made) is the check.
    assert "changed since it was built" in text, text
    assert not (p.path / FOLDER / NAME).exists()
    assert not (p.path / FOLDER / "demo" / "index.html").exists()
    entry = p.state()["builds"][B11]
    assert NAME in entry["upload_error"]
    assert not entry.get("published")


def test_libtorch_all_beside_a_variant_is_a_config_error(
    tmp_path: Path, run_cli: RunCli
) -> None:
    config = tmp_path / "nightly.toml"
    config.write_text(
        'root = "n"\n[project]\nname = "demo"\nsource = "."\nbase_version = "1.0.0"\n'
        '[matrix.linux.libtorch]\ncudas = ["cpu"]\nvariants = ["all", "shared-with-deps"]\n'
        '[[machines]]\nname = "m"\nplatform = "linux"\nqueues = 1\n')
    code, out, err = run_cli(["plan", "--config", str(config)], cwd=tmp_path)
    assert code == 2, out + err
    assert "variants" in err
    assert "shared-with-deps" in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    config.write_text(config.read_text().replace('["all", "shared-with-deps"]', '["all"]'))
    code, out, err = run_cli(["plan", "--config", str(config)], cwd=tmp_path)
    assert code == 0, out + err


def test_validate_names_a_link_whose_sha256_is_not_the_bytes(
    night_project: Callable[..., Any], run_cli: RunCli
) -> None:
    p = night_project(matrix=ONE, recipes={"manywheel": PER_PYTHON}, extra=EXTRA, queues=1)
    code, out, err = run_cli(run_args(p.config), cwd=p.path)
    assert code == 0, out + err
    code, out, err = run_cli(run_args(p.config, command="validate"), cwd=p.path)
    assert code == 0, out + err
    # The mirror's file replaced by other bytes under the same name: its pages still
    # promise the built sha256.
    served = p.path / FOLDER / NAME
    promised = listed_sha(p.path)
    make_wheel(served.parent, "demo", "1.0", NAME, body="BUILT_WITH = 'someone else'\n")
    assert sha(served) != promised
    code, out, err = run_cli(run_args(p.config, command="validate"), cwd=p.path)
    assert code == 1, out + err
    assert "Traceback" not in err
    fail = next(line for line in out.splitlines() if line.startswith("validate FAIL"))
    assert NAME in fail, fail
    assert "sha256 mismatch" in fail, fail
    assert promised[:16] in fail, fail
    assert sha(served)[:16] in fail, fail


def test_on_s3_the_index_promises_the_bytes_the_store_holds(
    night_project: Callable[..., Any], run_cli: RunCli, moto: Any, bucket: str
) -> None:
    extra = (f'[publish]\nurl = "s3://{bucket}/site"\nendpoint_url = "{moto.endpoint}"\n\n'
             "[smoke]\nenabled = false\n")
    p = night_project(matrix=MATRIX, recipes={"manywheel": PER_PYTHON}, extra=extra, queues=2)
    code, out, err = run_cli(run_args(p.config), cwd=p.path, timeout=300)
    assert code == 1, out + err
    builds = p.state()["builds"]
    won = next(b for b in (B11, B12) if builds[b]["status"] == "succeeded")
    s3 = moto.client()
    key = f"site/whl/nightly/cpu/{NAME}"
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    got = hashlib.sha256(body).hexdigest()
    assert got == builds[won]["packages"][0]["sha256"]
    assert s3.head_object(Bucket=bucket, Key=key)["Metadata"]["sha256"] == got
    page = s3.get_object(Bucket=bucket, Key="site/whl/nightly/cpu/demo/index.html")
    listed = re.findall(re.escape(NAME) + r"#sha256=([0-9a-f]{64})", page["Body"].read().decode())
    assert listed == [got]

    # A package changed after its build recorded it is not sent to S3.
    q = night_project("q", matrix=ONE, recipes={"manywheel": PER_PYTHON},
                      extra=extra.replace("/site", "/other"), queues=1)
    code, out, err = run_cli(run_args(q.config, "--no-upload"), cwd=q.path)
    assert code == 0, out + err
    filed = q.day / "packages" / "manywheel" / "cpu" / NAME
    filed.write_bytes(filed.read_bytes() + b"tampered")
    code, out, err = run_cli(run_args(q.config, command="upload"), cwd=q.path, timeout=300)
    assert code == 1, out + err
    assert "changed after it was tested" in out + err or "changed since it was built" in out + err
    listing = s3.list_objects_v2(Bucket=bucket, Prefix="other/").get("Contents", [])
    assert not [o["Key"] for o in listing if NAME in o["Key"]], listing
