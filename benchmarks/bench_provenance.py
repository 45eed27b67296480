"""What signed provenance costs a night: `nightly run` wall time with `[provenance] key` set
against the same night without it (the baseline, measured in the same run, interleaved).

The night: BUILDS builds (local executor, no smoke test) of a recipe that writes a wheel of
SIZE MB of incompressible data, published into a `file://` mirror with index pages. With a key,
the night also hashes each package, signs a statement per package (Ed25519, securesystemslib),
writes `<file>.provenance.json` and publishes it beside the package. Each run gets a fresh
root and mirror.

    .venv/bin/python benchmarks/bench_provenance.py [--runs 3] [--builds 8] [--size-mb 32]
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import format_table, write_results  # noqa: E402

NIGHTLY = Path(sys.executable).parent / "nightly"

RECIPE = r"""#!/usr/bin/env bash
set -euo pipefail
python3 - "$OUTPUT_DIR" "$DESIRED_PYTHON" "$BUILD_VERSION" @SIZE_MB@ <<'EOF'
import base64, hashlib, os, sys, zipfile
out, py, version, size = sys.argv[1], sys.argv[2].replace(".", ""), sys.argv[3], int(sys.argv[4])
name = f"bench-{version}-cp{py}-cp{py}-linux_x86_64.whl"
di = f"bench-{version}.dist-info"
files = {"bench/data.bin": os.urandom(size << 20), "bench/__init__.py": b"",
         f"{di}/METADATA": f"Metadata-Version: 2.1\nName: bench\nVersion: {version}\n".encode(),
         f"{di}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\n"}
def digest(d):
    return base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode()
record = "".join(f"{n},sha256={digest(d)},{len(d)}\n" for n, d in files.items()) + f"{di}/RECORD,,\n"
with zipfile.ZipFile(os.path.join(out, name), "w", zipfile.ZIP_STORED) as z:
    for n, d in files.items():
        z.writestr(n, d)
    z.writestr(f"bench-{version}.dist-info/RECORD", record)
EOF
"""


def build_user() -> str:
    """Who builds, in both nights alike. As root with a signing key, nightly refuses a
    configuration that does not say (docs/security.md, "Root with credentials must say who
    builds"); `user = "root"` is the documented way to run recipes as root knowingly, and
    naming nightly's own account runs them exactly as an unset user does: the recipe, and so
    the comparison, is the same as before the rule. Not root: nothing to say."""
    if os.geteuid() != 0:
        return ""
    return f'user = "{pwd.getpwuid(os.geteuid()).pw_name}"'


def config_text(pythons: list[str], size_mb: int, key: Path | None) -> str:
    prov = f'\n[provenance]\nkey = "{key}"\n' if key else ""
    return f"""
root = "nightlies"
recipes = "recipes"

[project]
name = "bench"
source = "src"
base_version = "1.0.0"

[matrix.linux.manywheel]
pythons = {pythons!r}
cudas = ["cpu"]

[[machines]]
name = "m"
platform = "linux"
queues = 2
executor = "local"

[executor.local]
{build_user()}
[executor.local.pythons]
{chr(10).join(f'"{p}" = "{sys.executable}"' for p in pythons)}

[smoke]
enabled = false

[cache]
enabled = false

[publish]
url = "mirror"
{prov}"""


def one_night(base: Path, pythons: list[str], size_mb: int, key: Path | None) -> float:
    folder = Path(tempfile.mkdtemp(dir=base))
    (folder / "src").mkdir()
    (folder / "src" / "README").write_text("bench\n")
    recipe = folder / "recipes" / "manywheel" / "build.sh"
    recipe.parent.mkdir(parents=True)
    recipe.write_text(RECIPE.replace("@SIZE_MB@", str(size_mb)))
    recipe.chmod(0o755)
    (folder / "nightly.toml").write_text(config_text(pythons, size_mb, key))
    t0 = time.perf_counter()
    proc = subprocess.run([str(NIGHTLY), "run", "--date", "2024_05_01"], cwd=folder,
                          capture_output=True, text=True, check=False)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"night failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    provs = list((folder / "mirror").rglob("*.provenance.json"))
    assert len(provs) == (len(pythons) if key else 0), provs
    shutil.rmtree(folder)
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--builds", type=int, default=8)
    ap.add_argument("--size-mb", type=int, default=32)
    args = ap.parse_args()
    pythons = [f"3.{10 + i}" if i < 5 else f"3.{i}" for i in range(args.builds)]
    base = Path(tempfile.mkdtemp(prefix="bench-provenance-"))
    try:
        from nightly import provenance

        key, _ = provenance.keygen(base / "keys")
        samples: dict[str, list[float]] = {"without": [], "with": []}
        for _ in range(args.runs):  # interleaved: drift in the machine's load hits both
            samples["without"].append(one_night(base, pythons, args.size_mb, None))
            samples["with"].append(one_night(base, pythons, args.size_mb, key))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in samples.items()}
    ratio = med["with"] / med["without"]
    print(format_table(["night", "median s", "runs"],
                       [[f"{args.builds} builds x {args.size_mb} MB, {k} provenance", round(v, 2),
                         len(samples[k])] for k, v in med.items()]))
    print(f"with / without: {ratio:.3f}")
    write_results("provenance", {
        "builds": args.builds, "size_mb": args.size_mb, "runs": args.runs,
        "median_s": {k: round(v, 3) for k, v in med.items()},
        "samples_s": {k: [round(x, 3) for x in v] for k, v in samples.items()},
        "ratio_with_to_without": round(ratio, 3),
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
