"""A stand-in recipe's last step: pack a pure wheel (METADATA, WHEEL, RECORD; fixed timestamps,
so two builds of it are identical: the reproducibility check) into $OUTPUT_DIR.

    RECIPE = "#!/usr/bin/env bash\\n...\\n" + wheel_step(dist="userdemo")

The wheel's package `dist` has an `__init__.py` setting `__version__`, so a smoke test can
install and import it.

`value_wheel_step(dist=...)`: the same for a recipe that compiled value.o (`int value(void)`)
in the current folder: the wheel carries it linked as libvalue.so and `dist.value()` returns
what it returns; `value_smoke(dist, expect)` is the [smoke] table that checks it.
"""

from __future__ import annotations

# The wheel's RECORD, from its `files` (both scripts below end with it, then zip them).
_RECORD = r"""
record = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
          for n, d in files.items()] + [f"{info}/RECORD,,"]
files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
""".lstrip("\n")

_SCRIPT = r"""import base64, hashlib, sys, zipfile
out, dist, version = sys.argv[1:4]
info = f"{dist}-{version}.dist-info"
files = {f"{dist}/__init__.py": f"__version__ = {version!r}\n".encode(),
         f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
         f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
""" + _RECORD + r"""with zipfile.ZipFile(f"{out}/{dist}-{version}-py3-none-any.whl", "w") as z:
    for n, d in files.items():
        z.writestr(zipfile.ZipInfo(n, date_time=(2020, 1, 1, 0, 0, 0)), d)
"""


def wheel_step(*, dist: str, python: str = '"$PYTHON"',
               version: str = '"$PACKAGE_VERSION"') -> str:
    """Bash lines that write `dist`-VERSION-py3-none-any.whl into $OUTPUT_DIR with the
    interpreter `python` (a shell word: "$PYTHON", "$NIGHTLY_PYTHON"); `version`: a shell word."""
    return f"""mkdir -p "$OUTPUT_DIR"
{python} - "$OUTPUT_DIR" {dist} {version} <<'PY'
{_SCRIPT}PY
"""


_VALUE_SCRIPT = r"""import base64, hashlib, sys, zipfile
out, version, dist = sys.argv[1:4]
info = f"{dist}-{version}.dist-info"
init = ("import ctypes, os\n"
        "_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), 'libvalue.so'))\n"
        "def value():\n    return _lib.value()\n")
files = {f"{dist}/__init__.py": init.encode(),
         f"{dist}/libvalue.so": open("libvalue.so", "rb").read(),
         f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
         f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
""" + _RECORD + r"""with zipfile.ZipFile(f"{out}/{dist}-{version}-py3-none-any.whl", "w") as z:
    for n, d in files.items():
        z.writestr(n, d)
"""


def value_wheel_step(*, dist: str) -> str:
    """Bash lines that link value.o (in the current folder) as libvalue.so and write
    `dist`-$PACKAGE_VERSION-py3-none-any.whl into $OUTPUT_DIR, whose `dist.value()` calls it."""
    return f"""cc -shared value.o -o libvalue.so
"$PYTHON" - "$OUTPUT_DIR" "$PACKAGE_VERSION" {dist} <<'PY'
{_VALUE_SCRIPT}PY
"""


def value_smoke(dist: str, expect: int) -> str:
    """The [smoke] table that imports `dist`, prints its value and fails unless it is `expect`."""
    return (f"""[smoke]\ncommand = '"$PYTHON" -c "import {dist}; v = {dist}.value(); """
            f"""print(\\"value\\", v); assert v == {expect}, v"'\n""")


__all__ = ["value_smoke", "value_wheel_step", "wheel_step"]
