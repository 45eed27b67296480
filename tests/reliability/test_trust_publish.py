"""The trust boundary on the publishing side, each attack tried through the command line as a
hostile project (its build's own code) or a writer of the test channel would (issue 39, rows
3 to 7): a build cannot get a package that is not the project's, or anything else in its
OUTPUT_DIR, signed or published; the signing key is a credential; promote publishes only
what it verified from the test channel's bytes; secrets a profile resolves and PEM private-key
blocks never reach a log nightly keeps or publishes.

The projects are tests/support/projects.py's, with recipes that write real (tiny) wheels by
hand, a file:// mirror or moto's S3 over HTTP, and a real signing key.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from pathlib import Path
from typing import Any

import pytest

from tests.support.day import find_day
from tests.support.projects import DATE
from tests.support.wheels import hand_wheel_recipe

MATRIX = '[matrix.linux.manywheel]\npythons = ["3.10", "3.11", "3.12"]\ncudas = ["cpu"]\n'
ONE = '[matrix.linux.manywheel]\npythons = ["3.11"]\ncudas = ["cpu"]\n'

# The project's own wheel (demo), written by hand; then what the test appends.
DEMO = hand_wheel_recipe(version='os.environ["BUILD_VERSION"]', body='f"V = {v!r}\\n"')


def wheel_snippet(filename: str, dist: str) -> str:
    """Bash: a real wheel named `filename` in OUTPUT_DIR whose METADATA says `Name: dist`."""
    return f"""
"$PYTHON" - <<'PY'
import os, zipfile
with zipfile.ZipFile(os.path.join(os.environ["OUTPUT_DIR"], "{filename}"), "w") as z:
    z.writestr("{dist}-99.0.0.dist-info/METADATA",
               "Metadata-Version: 2.1\\nName: {dist}\\nVersion: 99.0.0\\n")
    z.writestr("{dist}/__init__.py", "EVIL = True\\n")
PY
"""


# What a hostile build leaves beside the project's wheel: an index page, a manifest, a nested
# file and a provenance file of its own making.
JUNK = """
for w in "$OUTPUT_DIR"/demo-*.whl; do
  printf '{"payloadType":"application/vnd.in-toto+json","payload":"","signatures":[]}\\n' \\
    > "$w.provenance.json"
done
printf '<html>EVIL-INDEX</html>\\n' > "$OUTPUT_DIR/index.html"
printf '{"EVIL-MANIFEST": 1}\\n' > "$OUTPUT_DIR/.index.json"
mkdir -p "$OUTPUT_DIR/sub" && echo EVIL-NESTED > "$OUTPUT_DIR/sub/nested.txt"
"""

HOSTILE = DEMO + JUNK + f"""
case "$DESIRED_PYTHON" in
  3.12)
{wheel_snippet("numpy-99.0.0-py3-none-any.whl", "numpy")}
    ;;
  3.10)
{wheel_snippet("demo-0.0.1-py3-none-any.whl", "numpy")}
    ;;
esac
"""


def keys(tmp_path: Path) -> tuple[Path, Path]:
    from nightly import provenance

    return provenance.keygen(tmp_path / "keys")


def signed_project(night_project: Any, tmp_path: Path, matrix: str, recipe: str) -> tuple[Any, Path]:
    """A project whose night publishes into ./mirror, signed with a fresh key, untested."""
    key, pub = keys(tmp_path)
    p = night_project(matrix=matrix, recipes={"manywheel": recipe}, extra=f"""
[publish]
url = "mirror"

[smoke]
enabled = false

[provenance]
key = "{key}"
""")
    return p, pub


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_a_build_gets_no_foreign_package_nor_any_other_file_signed_or_published(
    night_project: Any, run_cli: Any, tmp_path: Path
) -> None:
    p, pub = signed_project(night_project, tmp_path, MATRIX, HOSTILE)
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", DATE], timeout=300)
    assert code == 1, (out, err)
    day = find_day(p.path / "nightlies", DATE)
    builds = json.loads(day.state_path.read_text())["builds"]
    numpy = builds["manywheel_3.12_cpu"]
    assert numpy["status"] == "failed", numpy
    assert "numpy-99.0.0-py3-none-any.whl is not the project's package" in numpy["reason"]
    assert "distribution 'numpy', not demo" in numpy["reason"]
    inside = builds["manywheel_3.10_cpu"]  # named for the project, numpy inside
    assert inside["status"] == "failed", inside
    assert "demo-0.0.1-py3-none-any.whl is not the project's package: its METADATA" in inside["reason"]
    good = builds["manywheel_3.11_cpu"]
    assert good["status"] == "succeeded", good
    (pkg,) = good["packages"]
    assert pkg["name"].startswith("demo-")
    assert pkg["name"].endswith(".whl")

    # Nothing but the project's wheel and nightly's own provenance of it in packages/ ...
    filed = files_under(day.path / "packages")
    assert [f.name for f in filed] == sorted([pkg["name"], pkg["name"] + ".provenance.json"])
    # ... and in the mirror only that wheel, its provenance and nightly's own files.
    mirror = p.path / "mirror"
    published = [f for f in files_under(mirror) if ".nightly-store" not in f.parts]
    assert not [f for f in published if "numpy" in f.name or f.name == "nested.txt"]
    for f in [*published, *filed]:
        data = f.read_bytes()
        assert b"EVIL" not in data, f
    wheels = [f for f in published if f.name.endswith(".whl")]
    assert [w.name for w in wheels] == [pkg["name"]]
    # The published provenance is nightly's, not the one the build wrote: it verifies.
    code, out, err = run_cli(["verify", "--key", str(pub), str(wheels[0])])
    assert code == 0, (out, err)
    assert out.startswith("OK")
    log = (day.path / good["log"]).read_text()
    assert "left out of OUTPUT_DIR (not a manywheel package): .index.json, " in log
    assert "index.html" in log
    assert "sub/" in log


def test_an_extra_name_in_the_config_lets_the_project_ship_another_distribution(
    night_project: Any, run_cli: Any
) -> None:
    recipe = DEMO + wheel_snippet("demo_extras-1.0-py3-none-any.whl", "demo-extras")
    p = night_project(matrix=ONE, recipes={"manywheel": recipe},
                      extra='[smoke]\nenabled = false\n')
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", DATE], timeout=120)
    assert code == 1, (out, err)  # demo-extras is not the project's
    text = p.config.read_text().replace('name = "demo"\n',
                                        'name = "demo"\nextra_names = ["Demo.Extras"]\n', 1)
    p.config.write_text(text)
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", "2024_05_02"],
                             timeout=120)
    assert code == 0, (out, err)
    day = find_day(p.path / "nightlies", "2024_05_02")
    names = sorted(f.name for f in files_under(day.path / "packages"))
    assert len(names) == 2
    assert names[1] == "demo_extras-1.0-py3-none-any.whl"


def test_the_signing_key_is_a_credential_root_must_say_who_builds(
    night_project: Any, run_cli: Any, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.fail("run as root: this checks what nightly refuses to do as root")
    key, _ = keys(tmp_path)
    # The recipe would read the key: it must never run.
    thief = f'#!/bin/bash\ncat "{key}" > "{tmp_path}/stolen"\n' + DEMO.split("\n", 1)[1]
    p = night_project(matrix=ONE, recipes={"manywheel": thief},
                      extra=f'[smoke]\nenabled = false\n\n[provenance]\nkey = "{key}"\n')
    p.config.write_text(p.config.read_text().replace('user = "root"', 'user = ""', 1))
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", DATE])
    assert code == 2, (out, err)
    (line,) = err.strip().splitlines()
    assert "provenance.key" in line, line
    assert "[executor.local.user]" in line, line
    assert not (tmp_path / "stolen").exists()

    # Running recipes as root knowingly: the key file itself must still be nobody else's.
    p.config.write_text(p.config.read_text().replace('user = ""', 'user = "root"', 1))
    key.chmod(0o644)
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", DATE])
    assert code == 2, (out, err)
    (line,) = err.strip().splitlines()
    assert "has mode 0644" in line, line
    assert f"chmod 600 {key}" in line, line
    assert not (tmp_path / "stolen").exists()

    # A key inside a folder builds are given (the root, with its day folders) is refused.
    key.chmod(0o600)
    inside = p.path / "nightlies" / "provenance.key"
    inside.parent.mkdir(parents=True, exist_ok=True)
    inside.write_bytes(key.read_bytes())
    inside.chmod(0o600)
    p.config.write_text(p.config.read_text().replace(str(key), str(inside)))
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", DATE])
    assert code == 2, (out, err)
    (line,) = err.strip().splitlines()
    assert "is inside root" in line, line
    assert not (tmp_path / "stolen").exists()


def test_an_unsigned_provenance_placed_in_packages_is_never_published(
    night_project: Any, run_cli: Any, tmp_path: Path
) -> None:
    p, pub = signed_project(night_project, tmp_path, ONE, DEMO)
    args = ["--config", str(p.config), "--date", DATE]
    code, out, err = run_cli(["run", *args], timeout=120)
    assert code == 0, (out, err)
    (wheel,) = (p.day / "packages").rglob("*.whl")
    (published,) = (f for f in (p.path / "mirror").rglob(wheel.name) if ".nightly-store" not in f.parts)
    good = published.with_name(published.name + ".provenance.json").read_bytes()
    from nightly import provenance

    # Someone with write access to the day folder puts a statement of their own there,
    # unsigned (the same subject, so it names the file's sha256).
    stmt = provenance.payload_of(good)
    stmt["predicate"]["buildDefinition"]["resolvedDependencies"][0]["uri"] = "https://evil.example/"
    forged = json.dumps({"payloadType": provenance.PAYLOAD_TYPE, "signatures": [],
                         "payload": base64.b64encode(json.dumps(stmt).encode()).decode()})
    local = wheel.with_name(wheel.name + ".provenance.json")
    local.write_text(forged + "\n")
    code, out, err = run_cli(["upload", *args], timeout=120)
    assert code == 0, (out, err)
    assert published.with_name(published.name + ".provenance.json").read_bytes() == good
    said = (p.day / "logs" / "master" / "run.log").read_text() + out + err
    assert "does not verify with the site's key" in said
    # The night's signing step replaces it with nightly's own, which is then published.
    code, out, err = run_cli(["run", *args], timeout=120)
    assert code == 0, (out, err)
    assert b"evil.example" not in local.read_bytes()
    code, out, err = run_cli(["verify", "--key", str(pub), str(published)])
    assert code == 0, (out, err)


# ----------------------------------------------------------------------------- promote


def _released(night_project: Any, run_cli: Any, tmp_path: Path) -> tuple[Any, list[str], Path]:
    key, _ = keys(tmp_path)
    p = night_project(matrix=ONE, recipes={"manywheel": DEMO}, extra=f"""
[publish]
url = "mirror"

[smoke]
enabled = false

[provenance]
key = "{key}"
""")
    cfg = ["--config", str(p.config)]
    code, out, err = run_cli(["release", "3.0.0", "--rc", "1", *cfg], timeout=120)
    assert code == 0, (out, err)
    (test_wheel,) = (p.path / "mirror" / "whl" / "test" / "cpu").glob("*.whl")
    return p, cfg, test_wheel


def _nothing_promoted(p: Any) -> None:
    release = p.path / "mirror" / "whl" / "cpu"
    assert not release.exists() or not list(release.glob("*.whl*")), list(release.iterdir())


def test_promote_refuses_a_test_channel_provenance_that_does_not_verify(
    night_project: Any, run_cli: Any, tmp_path: Path
) -> None:
    p, cfg, wheel = _released(night_project, run_cli, tmp_path)
    prov = wheel.with_name(wheel.name + ".provenance.json")
    good = prov.read_bytes()
    envelope = json.loads(good)
    payload = bytearray(base64.b64decode(envelope["payload"]))
    payload[payload.index(b"manywheel_3.11_cpu")] ^= 0x01  # one byte of the statement
    envelope["payload"] = base64.b64encode(bytes(payload)).decode()
    prov.write_text(json.dumps(envelope) + "\n")
    code, out, err = run_cli(["promote", "3.0.0", "--rc", "1", *cfg], timeout=120)
    assert code == 1, (out, err)
    assert "nothing promoted" in err, err
    assert f"{wheel.name}: its provenance in the test channel does not verify" in err, err
    assert "Traceback" not in err
    _nothing_promoted(p)

    prov.write_bytes(good)
    code, out, err = run_cli(["promote", "3.0.0", "--rc", "1", *cfg], timeout=120)
    assert code == 0, (out, err)
    release = p.path / "mirror" / "whl" / "cpu"
    assert (release / wheel.name).read_bytes() == wheel.read_bytes()
    assert (release / (wheel.name + ".provenance.json")).read_bytes() == good


def test_promote_reads_the_bytes_not_a_stores_size_and_mtime_record(
    night_project: Any, run_cli: Any, tmp_path: Path
) -> None:
    import hashlib

    p, cfg, wheel = _released(night_project, run_cli, tmp_path)
    built = wheel.read_bytes()
    st = wheel.stat()
    altered = bytearray(built)
    altered[len(altered) // 2] ^= 0x01
    with wheel.open("r+b") as f:  # in place: same inode, same size ...
        f.write(bytes(altered))
    os.utime(wheel, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... same mtime
    assert wheel.stat().st_size == st.st_size
    real = hashlib.sha256(bytes(altered)).hexdigest()
    code, out, err = run_cli(["promote", "3.0.0", "--rc", "1", *cfg], timeout=120)
    assert code == 1, (out, err)
    assert f"{wheel.name}: its bytes in the test channel have sha256 {real}" in err, err
    assert "None" not in err
    _nothing_promoted(p)


# ----------------------------------------------------------------------------- masking

PEM = ("-----BEGIN OPENSSH PRIVATE KEY-----\n"
       "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
       "QyNTUxOQAAACDCAFEBODYPRIVATEKEYMATERIALTHATMUSTNEVERBELOGGEDxyz0123456\n"
       "-----END OPENSSH PRIVATE KEY-----\n")
PEM_BODY = "QyNTUxOQAAACDCAFEBODYPRIVATEKEYMATERIAL"


def test_profile_credentials_and_pem_blocks_are_masked_in_day_and_published_logs(
    night_project: Any, run_cli: Any, tmp_path: Path, moto: Any, bucket: str
) -> None:
    secret, token = "sk-" + secrets.token_hex(16), "tok-" + secrets.token_hex(24)
    creds = tmp_path / "aws-credentials"
    creds.write_text(f"[nightly-test]\naws_access_key_id = AKIA{secrets.token_hex(8).upper()}\n"
                     f"aws_secret_access_key = {secret}\naws_session_token = {token}\n")
    creds.chmod(0o600)
    pem_file = tmp_path / "leak.pem"
    pem_file.write_text(PEM)
    # The build prints the shared credentials file and a private key, once failing, once not.
    leak = (f'cat "{creds}"\ncat "{pem_file}"\n'  # and once split across two writes:
            f'head -c 30 "{pem_file}"; sleep 0.3; tail -c +31 "{pem_file}"; echo "printed"\n')
    recipe = DEMO.replace("set -euo pipefail\n", "set -euo pipefail\n" + leak, 1) + \
        '[ "$DESIRED_PYTHON" = 3.12 ] && { echo "ERROR: ' + secret + '" >&2; exit 3; }\ntrue\n'
    p = night_project(matrix='[matrix.linux.manywheel]\npythons = ["3.11", "3.12"]\ncudas = ["cpu"]\n',
                      recipes={"manywheel": recipe}, extra=f"""
[publish]
url = "s3://{bucket}/site"
endpoint_url = "{moto.endpoint}"
profile = "nightly-test"

[smoke]
enabled = false
""")
    env = {"AWS_SHARED_CREDENTIALS_FILE": str(creds), "AWS_ACCESS_KEY_ID": "",
           "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": ""}
    code, out, err = run_cli(["run", "--config", str(p.config), "--date", DATE], env=env,
                             timeout=300)
    assert code == 1, (out, err)  # the 3.12 build failed, the 3.11 one published
    day = find_day(p.path / "nightlies", DATE)
    texts = {str(f): f.read_text(errors="replace") for f in files_under(day.path / "logs")}
    assert any("printed" in t for t in texts.values()), texts.keys()  # the recipe did print

    import boto3

    s3 = boto3.client("s3", endpoint_url=moto.endpoint)
    keys_ = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    reports = [k for k in keys_ if "/reports/" in k and k.endswith(".log")]
    assert len(reports) == 2, keys_
    for k in reports:
        texts[k] = s3.get_object(Bucket=bucket, Key=k)["Body"].read().decode()
    for where, text in texts.items():
        assert secret not in text, where
        assert token not in text, where
        assert PEM_BODY not in text, where
        assert "b3BlbnNzaC1rZXkt" not in text, where
    marker = "a PEM block (BEGIN OPENSSH PRIVATE KEY) was here"
    assert any(t.count(marker) == 2 for t in texts.values()), texts.keys()
