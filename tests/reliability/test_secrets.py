"""Credentials for S3, anaconda.org and twine are in the environment of every `nightly` run
here, each a fresh random value. Nights publish (S3 on moto, conda packages to a loopback
anaconda.org stand-in), uploads fail on purpose (a 500 from the anaconda server, a bucket that
does not exist, a PyPI index that is not there) to provoke error messages, a release is
built and promoted; recipes dump their environment (local and container executors).

Then everything is searched for the secret values (whole, or a 16-character piece): every
file under ROOT (day and release folders, logs, state.json, summary.json, report.html,
history.sqlite), the recipes' environment dumps, every object of the bucket, stdout and
stderr of each command, and the command lines of every process while the night ran.
"""

from __future__ import annotations

import os
import secrets
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_anaconda import FakeAnaconda
from tests.support.leaks import leaks_in_text, scan_for
from tests.support.net import free_port
from tests.support.projects import DATE
from tests.support.s3 import StoppableS3, s3_env, s3_objects

OWNER = "nightly-owner"

CONDA_RECIPE = r"""#!/usr/bin/env bash
set -euo pipefail
echo "--- environment of the conda recipe ---"
env
mkdir -p "$OUTPUT_DIR" "$WORK_DIR/files/share/relsecret"
echo hello > "$WORK_DIR/files/share/relsecret/hello.txt"
"$NIGHTLY_PYTHON" - "$OUTPUT_DIR" "$WORK_DIR/files" "$BUILD_VERSION" <<'PY'
import sys
from rattler_build import ArchiveType, assemble_package
out, files, version = sys.argv[1:4]
assemble_package(name="relsecret-demo", version=version, target_platform="noarch", build_string="0",
                 output_dir=out, files_dir=files, noarch="generic", depends=[],
                 summary="secrets test package", license="BSD-3-Clause",
                 archive_type=ArchiveType.Conda)
PY
"""

WHEEL_RECIPE = r"""#!/usr/bin/env bash
set -euo pipefail
ID="${PACKAGE_TYPE}_${DESIRED_PYTHON}_${DESIRED_CUDA}"
echo "--- environment of the wheel recipe ---"
env | tee "@SIGNALS@/$ID.env"
mkdir -p "$OUTPUT_DIR"
"$NIGHTLY_PYTHON" - "$OUTPUT_DIR" "relsecret_${DESIRED_PYTHON//./_}" "$BUILD_VERSION+$DESIRED_CUDA" <<'PY'
import base64, hashlib, sys, zipfile
out, dist, version = sys.argv[1:4]
info = f"{dist}-{version}.dist-info"
files = {f"{dist}/__init__.py": f"VERSION = {version!r}\n".encode(),
         f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
         f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
record = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
          for n, d in files.items()] + [f"{info}/RECORD,,"]
files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
with zipfile.ZipFile(f"{out}/{dist}-{version}-py3-none-any.whl", "w") as z:
    for n, d in files.items():
        z.writestr(n, d)
PY
"""

CONTAINER_RECIPE = r"""#!/usr/bin/env bash
set -euo pipefail
echo "--- environment of the container recipe ---"
env
mkdir -p "$OUTPUT_DIR"
env > "$OUTPUT_DIR/environment.txt"
"""


@pytest.fixture
def creds() -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": "AKIA" + secrets.token_hex(8).upper(),
        "AWS_SECRET_ACCESS_KEY": secrets.token_urlsafe(30),
        "AWS_SESSION_TOKEN": "sess-" + secrets.token_urlsafe(40),
        "ANACONDA_API_TOKEN": "ana-" + secrets.token_hex(20),
        "TWINE_PASSWORD": "pypi-" + secrets.token_urlsafe(32),
    }


@pytest.fixture
def s3(creds: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[StoppableS3]:
    env = s3_env(creds["AWS_ACCESS_KEY_ID"], creds["AWS_SECRET_ACCESS_KEY"])
    env["AWS_SESSION_TOKEN"] = creds["AWS_SESSION_TOKEN"]
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    srv = StoppableS3().start()
    yield srv
    srv.stop()


class CmdlineWatch:
    """Looks at every process's command line every 20 ms while a night runs."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = {k: v.encode() for k, v in values.items()}
        self.hits: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.02):
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                except OSError:
                    continue
                for name, value in self.values.items():
                    if value in cmdline:
                        self.hits.add(f"{name} on the command line: {cmdline[:200]!r}")

    def __enter__(self) -> CmdlineWatch:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join()


def write_config(p: Any, bucket: str, endpoint: str, anaconda_url: str, pypi_url: str) -> None:
    p.config.write_text(p.config.read_text() + f"""
[publish]
url = "s3://{bucket}/pub"
endpoint_url = "{endpoint}"

[publish.conda]
anaconda_user = "{OWNER}"
anaconda_site = "{anaconda_url}"

[publish.pypi]
repository_url = "{pypi_url}"

[smoke]
enabled = false
""")


MATRIX = """
[matrix.linux.manywheel]
pythons = ["3.7m", "3.8"]
cudas = ["cpu"]

[matrix.linux.conda]
pythons = ["3.8"]
cudas = ["cpu"]
"""


def test_no_credential_in_anything_a_night_writes(
    creds: dict[str, str], s3: StoppableS3, night_project: Any, run_cli: Any, tmp_path: Path
) -> None:
    bucket = f"rel-{uuid.uuid4().hex[:10]}"
    s3.client().create_bucket(Bucket=bucket)
    signals = tmp_path / "p" / "signals"
    signals.mkdir(parents=True)
    recipe = WHEEL_RECIPE.replace("@SIGNALS@", str(signals))
    p = night_project(matrix=MATRIX, recipes={"manywheel": recipe, "conda": CONDA_RECIPE})
    dead_pypi = f"http://127.0.0.1:{free_port()}/legacy/"  # nothing listens there
    outputs: list[str] = []

    with FakeAnaconda(token=creds["ANACONDA_API_TOKEN"], users=(OWNER,)) as anaconda, \
            CmdlineWatch(creds) as watch:
        write_config(p, bucket, s3.endpoint, anaconda.url, dead_pypi)

        def nightly(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
            code, out, err = run_cli([*args, "--config", str(p.config)], env={**creds, **(env or {})},
                                     timeout=300)
            outputs.extend([out, err])
            assert "Traceback" not in err, err
            return code, out, err

        # 1. A night whose conda upload fails (the anaconda server answers 500).
        anaconda.fail("POST", "/stage/")
        code, out, err = nightly("run", "--date", DATE)
        assert code == 1, (out, err)
        state = (p.day / "state.json").read_text()
        assert "upload_error" in state
        # 2. The upload finished later.
        code, out, err = nightly("upload", "--date", DATE)
        assert code == 0, (out, err)
        assert anaconda.find(".conda")
        # 3. An upload to a bucket that does not exist (an S3 error message).
        good = p.config.read_text()
        p.config.write_text(good.replace(f"s3://{bucket}/pub", "s3://no-such-bucket-rel/pub"))
        code, out, err = nightly("run", "--date", DATE, "--rebuild", "manywheel_3.8_cpu")
        assert code == 1, (out, err)
        p.config.write_text(good)
        # 4. A release, promoted; twine fails against an index that is not there.
        code, out, err = nightly("release", "2.1.0", "--date", DATE)
        assert code == 0, (out, err)
        code, out, err = nightly("promote", "2.1.0", "--date", DATE)
        assert code == 1, (out, err)
        assert "twine" in err
        # 5. A wrong anaconda token (a 401 and its message).
        code, out, err = nightly("release", "2.1.1", "--date", DATE,
                                 env={"ANACONDA_API_TOKEN": creds["ANACONDA_API_TOKEN"][::-1]})
        assert code == 1, (out, err)
        for cmd in (("status", "--date", DATE), ("report", "--date", DATE)):
            nightly(*cmd)

    problems = scan_for(p.path, creds)  # ROOT (nightlies/), recipes' env dumps, config
    for obj in s3_objects(s3.client(), bucket):
        body = s3.client().get_object(Bucket=bucket, Key=obj)["Body"].read()
        problems += [f"s3://{bucket}/{obj}: {n}" for n in leaks_in_text(body.decode("latin-1"), creds)]
    for text in outputs:
        problems += [f"command output: {n}" for n in leaks_in_text(text, creds)]
    problems += sorted(watch.hits)
    assert not problems, "\n".join(problems)
    # The dumps were really made, and the scan really reads them.
    envs = sorted(signals.glob("*.env"))
    assert envs
    assert all("NIGHTLY_DATE=" in f.read_text() for f in envs)
    log = (p.day / "logs/succeeded/conda_3.8_cpu.log").read_text()
    assert "--- environment of the conda recipe ---" in log
    assert "AWS_" not in log.split("--- environment of the conda recipe ---")[1]


@pytest.mark.engine
def test_no_credential_in_a_build_containers_environment(
    creds: dict[str, str], engine: Any, night_project: Any, run_cli: Any
) -> None:
    p = night_project(
        matrix="[matrix.linux.manywheel]\npythons = [\"3.11\"]\ncudas = [\"cpu\"]\n",
        recipes={"manywheel": CONTAINER_RECIPE},
        extra=f'[executor.container]\nbase_url = "{engine.base_url}"\n\n[smoke]\nenabled = false\n',
    )
    code, out, err = run_cli(
        ["build", "manywheel", "3.11", "cpu", "--executor", "container", "--config", str(p.config),
         "--date", DATE], env={**creds, "DOCKER_HOST": engine.base_url}, timeout=180,
    )
    assert code == 0, (out, err)
    dump = (p.day / "packages/manywheel/cpu/environment.txt").read_text()
    assert "BUILD_VERSION=" in dump
    assert "OUTPUT_DIR=/nightly/output" in dump
    names = {line.split("=", 1)[0] for line in dump.splitlines() if "=" in line}
    assert not names & {*creds, "DOCKER_HOST"}, names & {*creds, "DOCKER_HOST"}
    problems = scan_for(p.path, creds)
    problems += [f"command output: {n}" for n in leaks_in_text(out + err, creds)]
    assert not problems, "\n".join(problems)
