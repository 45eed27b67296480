"""A stand-in recipe's last step: pack a pure wheel (METADATA, WHEEL, RECORD; fixed timestamps,
so two builds of it are identical: the reproducibility check) into $OUTPUT_DIR.

    RECIPE = "#!/usr/bin/env bash\\n...\\n" + wheel_step(dist="userdemo")

The wheel's package `dist` has an `__init__.py` setting `__version__`, so a smoke test can
install and import it.
"""

from __future__ import annotations

_SCRIPT = r"""import base64, hashlib, sys, zipfile
out, dist, version = sys.argv[1:4]
info = f"{dist}-{version}.dist-info"
files = {f"{dist}/__init__.py": f"__version__ = {version!r}\n".encode(),
         f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
         f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
record = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
          for n, d in files.items()] + [f"{info}/RECORD,,"]
files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
with zipfile.ZipFile(f"{out}/{dist}-{version}-py3-none-any.whl", "w") as z:
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


__all__ = ["wheel_step"]
