"""The smoke test never installs the project's own names from the dependency index (issue 48):
with [smoke] dependencies = "index", a package on that index named after the project
(`[project] name`) or one of its `extra_names` is never installed and its code never runs,
whether the night's wheel asks for it directly or a dependency from the index does; the
project's own wheel is the night's.

The index (a real PEP 503 index over HTTP, read by pip) holds, besides an honest dependency,
`demo-helper` 99 and `demo` 99 whose install would run code at every interpreter start (a
.pth file) that writes a marker. After the night no marker exists.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

from tests.support.day import find_day
from tests.support.projects import DATE, VERSION, run_args
from tests.support.wheels import hand_wheel_recipe

# Per Python, what the night's `demo` wheel needs at run time: an extra name of the project
# (3.10), an honest package that needs that extra name (3.11), an honest package that needs
# the project itself, which the build made (3.12).
NEEDS = {"3.10": "demo-helper", "3.11": "needs-helper", "3.12": "needs-demo"}
RECIPE = hand_wheel_recipe(
    before="export DEP=" + "".join(
        f'$([ "$DESIRED_PYTHON" = {py} ] && echo {dep})' for py, dep in NEEDS.items()) + "\n",
    version='os.environ["BUILD_VERSION"]',
    body='f"__version__ = {v!r}\\n"',
).replace('Version: {v}\\n",', "Version: {v}\\nRequires-Dist: {os.environ['DEP']}\\n\",")
assert "Requires-Dist" in RECIPE

MATRIX = '[matrix.linux.manywheel]\npythons = ["3.10", "3.11", "3.12"]\ncudas = ["cpu"]\n'


def _wheel(simple: Path, name: str, version: str, *, requires: str = "",
           marker: Path | None = None) -> None:
    """A pure wheel of `name` on the index; with `marker`, a .pth file that writes it at
    every start of the interpreter it is installed into (code run by installing it)."""
    folder = simple / name
    folder.mkdir(parents=True)
    dist = name.replace("-", "_")
    wheel = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(f"{dist}/__init__.py", f"__version__ = {version!r}\n")
        if marker is not None:
            z.writestr(f"{dist}_hook.pth",
                       f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')\n")
        z.writestr(f"{dist}-{version}.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                   + (f"Requires-Dist: {requires}\n" if requires else ""))
        z.writestr(f"{dist}-{version}.dist-info/WHEEL",
                   "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}-{version}.dist-info/RECORD", "")
    (folder / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')


def test_the_smoke_test_never_installs_the_projects_own_names_from_the_index(
    night_project: Any, run_cli: Any, tmp_path: Path
) -> None:
    from tests.support.servers import http_servers

    markers = tmp_path / "markers"
    markers.mkdir()
    simple = tmp_path / "deps" / "simple"
    _wheel(simple, "demo-helper", "99.0", marker=markers / "demo-helper")
    _wheel(simple, "demo", "99.0", marker=markers / "demo")
    _wheel(simple, "needs-helper", "1.0", requires="demo-helper")
    _wheel(simple, "needs-demo", "1.0", requires="demo")
    with http_servers() as serve:
        index = serve(tmp_path / "deps") + "simple/"
        p = night_project(matrix=MATRIX, recipes={"manywheel": RECIPE}, extra=(
            f'[smoke]\nimport_name = "demo"\ndependencies = "index"\nindex_url = "{index}"\n'))
        text = p.config.read_text()
        p.config.write_text(text.replace('name = "demo"\n',
                                         'name = "demo"\nextra_names = ["demo-helper"]\n', 1))
        code, out, err = run_cli(run_args(p.config), cwd=p.path, timeout=300)

    assert sorted(m.name for m in markers.iterdir()) == [], "code from the index ran"
    assert code == 1, (out, err)  # the two builds that need demo-helper fail their test
    day = find_day(p.path / "nightlies", DATE)
    builds = json.loads(day.state_path.read_text())["builds"]
    for py in ("3.10", "3.11"):
        entry = builds[f"manywheel_{py}_cpu"]
        assert entry["status"] == "failed", entry
        assert entry["reason"].startswith("smoke test"), entry["reason"]
        assert "never taken from an index" in entry["reason"], entry["reason"]
        assert "demo-helper" in entry["reason"], entry["reason"]
    # The project's own name needed by an index package: the night's wheel, never demo 99.
    good = builds["manywheel_3.12_cpu"]
    assert good["status"] == "succeeded", good
    assert good["tested"]["result"] == "passed"
    log = (day.path / "logs" / "succeeded" / "manywheel_3.12_cpu.log").read_text()
    assert f"installed version {VERSION};" in log, log
    assert "never from an index: demo-helper" in log
