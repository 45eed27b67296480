"""Wheel makers: real tiny wheels written by hand (pip and twine take them), and a recipe
that delivers wheel-named packages so that a night publishes them.
"""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path

from tests.support.projects import VERSION, recipe_text


def make_wheel(
    out: Path,
    dist: str,
    version: str,
    filename: str | None = None,
    *,
    body: str | None = None,
    summary: str | None = None,
    data: Mapping[str, str] | None = None,
    requires: tuple[str, ...] = (),
) -> Path:
    """A valid pure-Python py3-none-any wheel: one module (`body`, by default a VERSION
    constant), the files of `data` (path in the wheel -> text), METADATA (with `summary`
    and `requires` when given), WHEEL and RECORD with hashes."""
    module = dist.lower().replace("-", "_").replace(".", "_")
    dist_info = f"{re.sub(r'[-.]+', '_', dist)}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
    if summary is not None:
        metadata += f"Summary: {summary}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{module}/__init__.py": (f"VERSION = {version!r}\n" if body is None else body).encode(),
        **{name: text.encode() for name, text in (data or {}).items()},
        f"{dist_info}/METADATA": metadata.encode(),
        f"{dist_info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: nightly-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, content in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(content)}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = out / (filename or f"{re.sub(r'[-.]+', '_', dist)}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in files.items():
            zf.writestr(name, content)
    return path



_TARBALL = 'f="$OUTPUT_DIR/${ID}-${BUILD_VERSION}.tar.gz"'
_WHEEL = 'f="$OUTPUT_DIR/demo-${BUILD_VERSION}+${DESIRED_CUDA}.$(printf %s "$ID" | tr . _)-py3-none-any.whl"'
_CONTENT = """printf 'package %s\\n' "$ID" > "$f"\nhead -c 3000 /dev/urandom | od -An -x >> "$f"\n"""
# The project's (demo's) wheel, its METADATA naming it, with random bytes inside; padded
# with as many more as `<signals>/<id>.big` says.
_ZIP = """"$NIGHTLY_PYTHON" -c 'import os, sys, zipfile
pad = int(open(sys.argv[2]).read()) if os.path.exists(sys.argv[2]) else 0
with zipfile.ZipFile(sys.argv[1] + ".tmp", "w") as z:
    z.writestr("demo-0.dist-info/METADATA", "Metadata-Version: 2.1\\nName: demo\\nVersion: 0\\n")
    z.writestr("demo/payload", os.urandom(3000 + pad))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])' "$f" "$SIG/$ID.big"
"""


def wheel_recipe(signals: Path, behaviours: Mapping[str, str] | None = None, default: str = "ok") -> str:
    """projects.recipe_text's recipe, delivering `demo-VERSION+CUDA.<id with _>-py3-none-any.whl`
    (a zip whose METADATA names demo, not an installable wheel: these nights run without
    smoke tests)."""
    text = recipe_text(signals, behaviours, default)
    assert _TARBALL in text, "recipe_text changed"
    assert _CONTENT in text, "recipe_text changed"
    return text.replace(_TARBALL, _WHEEL).replace(_CONTENT, _ZIP)


def wheel_name(build_id: str, cuda: str) -> str:
    return f"demo-{VERSION}+{cuda}.{build_id.replace('.', '_')}-py3-none-any.whl"


def publish_toml(store: Path, *, smoke: bool = False) -> str:
    return f'[publish]\nurl = "{store.as_uri()}"\n\n[smoke]\nenabled = {str(smoke).lower()}\n'


_HAND_WHEEL = r"""#!/usr/bin/env bash
set -euo pipefail
{before}"$PYTHON" - <<'PY'
import base64, hashlib, os, zipfile
v = {version}
tag = os.environ["DESIRED_PYTHON"].replace(".", "")
body = {body}
info = f"demo-{{v}}.dist-info"
files = {{
    "demo/__init__.py": body,
    f"{{info}}/METADATA": f"Metadata-Version: 2.1\nName: demo\nVersion: {{v}}\n",
    f"{{info}}/WHEEL": (
        f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nBuild: {{tag}}\n"
        "Tag: py3-none-any\n"
    ),
}}
def digest(text):
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
record = "".join(f"{{n}},sha256={{digest(t)}},{{len(t.encode())}}\n" for n, t in files.items())
files[f"{{info}}/RECORD"] = record + f"{{info}}/RECORD,,\n"
path = os.path.join(os.environ["OUTPUT_DIR"], f"demo-{{v}}-{{tag}}-py3-none-any.whl")
with zipfile.ZipFile(path, "w") as z:
    for n, t in files.items():
        z.writestr(n, t)
print("wrote", path)
PY
"""


def hand_wheel_recipe(*, version: str, body: str, before: str = "") -> str:
    """A recipe that writes a real pure wheel `demo` by hand (its RECORD right), one per
    Python (a build tag keeps the names apart). `version` and `body` are Python expressions
    (over os.environ; `v` is the version); `before` is bash run first."""
    return _HAND_WHEEL.format(before=before, version=version, body=body)


# Real (pure) wheels, one per python and CUDA tag, each in its folder; the 3.12 cu130 build
# fails (its compiler "fails").
GATE_RECIPE = hand_wheel_recipe(
    before=('if [ "$DESIRED_PYTHON" = 3.12 ] && [ "$DESIRED_CUDA" = cu130 ]; then\n'
            '  echo "error: nvcc failed on purpose" >&2; exit 3\nfi\n'),
    version='os.environ["BUILD_VERSION"] + "+" + os.environ["DESIRED_CUDA"]',
    body='f"__version__ = {v!r}\\n"',
)
