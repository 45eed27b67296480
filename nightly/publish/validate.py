"""`nightly validate`: what users get, checked from the published side only.

For each package of the day that was published, it is fetched the way a user fetches it:
a wheel is resolved through the published index with pip (`pip download --index-url
<folder>/ --pre --no-deps <project>==<version>`, with the build's own Python, so pip picks
the wheel by its tags, reads the PEP 658 metadata the page offers and checks the file against
the page's `#sha256`), a libtorch zip is downloaded by its URL, and a conda package is looked
up in its channel's repodata.json. Each file is compared with the sha256 the build recorded,
and a wheel is installed into a fresh virtual environment and imported. A package missing,
unreachable, different or failing is one failed check, named with its reason.

The published side is read over `[publish] public_url` (what users read: an https:// base, or
the mirror served by any static web server); a file:// destination is read directly when no
public URL is set.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nightly import procs
from nightly.channels.conda import REPODATA_MAX_BYTES
from nightly.config import Config
from nightly.errors import ConfigError, NightlyError
from nightly.jsonvalues import read_json_file, read_json_object
from nightly.procs import run
from nightly.publish import linkcheck
from nightly.stores.layout import kind_of
from nightly.workspace import SUCCEEDED, BuildEntry, Day, State, write_json

Log = Callable[[str], None]
MAX_DOWNLOAD = 16 << 30  # a published package is never bigger than this
RESULT_NAME = "validate.json"


@dataclass(frozen=True, kw_only=True)
class Check:
    """One published package, checked."""

    build: str
    package: str
    ok: bool
    reason: str = ""
    url: str = ""

    def to_json(self) -> dict[str, object]:
        return {"build": self.build, "package": self.package, "ok": self.ok,
                "reason": self.reason, "url": self.url}


def public_base(config: Config) -> str:
    """Where users read the store; ConfigError when it cannot be known."""
    base = config.publish.public_url or (config.publish.url if config.publish.url.startswith(
        "file://") else "")
    if not base:
        raise ConfigError(
            "validate reads what users read, and no public URL is set for "
            f"{config.publish.url or 'the store'}",
            key="publish.public_url", hint="set [publish] public_url = \"https://...\"",
        )
    return base.rstrip("/")


def validate_day(config: Config, day: Day, state: State, *, log: Log = print) -> list[Check]:
    """Check every published package of the day; the checks are also written to
    `<day>/logs/master/validate.json` for the report."""
    base = public_base(config)
    checks: list[Check] = []
    with tempfile.TemporaryDirectory(prefix="nightly-validate-") as tmp:
        for bid, entry in sorted(state.builds.items()):
            if entry.status != SUCCEEDED:
                continue
            for pkg in entry.packages:
                check = _check_package(config, base, bid, entry, pkg.name, pkg.sha256, Path(tmp))
                if check is None:
                    continue
                checks.append(check)
                log(f"validate {'ok  ' if check.ok else 'FAIL'} {bid}: {pkg.name}"
                    + ("" if check.ok else f": {check.reason}"))
    write_json(day.master / RESULT_NAME, {"base": base, "checks": [c.to_json() for c in checks]})
    return checks


def _check_package(
    config: Config, base: str, bid: str, entry: BuildEntry, name: str, sha256: str, tmp: Path
) -> Check | None:
    store_url = config.publish.url.rstrip("/")
    key = next((dest[len(store_url) + 1:] for dest in entry.published
                if store_url and dest.startswith(store_url + "/")
                and dest.rsplit("/", 1)[-1] == name), None)
    kind = kind_of(entry.package or "", name)
    if kind == "conda":
        return _check_conda(config, bid, entry, name, sha256)
    if key is None:
        return None  # not published to the store (e.g. --no-upload): nothing a user can get
    url = f"{base}/{key}"
    waits = config.external_timeouts
    work = tmp / bid
    work.mkdir(parents=True, exist_ok=True)
    try:
        # Every link's #sha256 against the bytes served (a wheel pip cannot get: pip says why).
        got: str | None = _download(url, work / name, waits.package_download)
    except NightlyError as e:
        if kind != "whl":
            return Check(build=bid, package=name, ok=False, reason=str(e), url=url)
        got = None
    flat = {config.publish.find_links_name(c) for c in ("nightly", "test", "release")}
    wrong = got and linkcheck.mismatch(base, key, name, got, sorted(flat),
                                       timeout_s=waits.page_fetch)
    if wrong:
        return Check(build=bid, package=name, ok=False, url=url,
                     reason=f"not what the index says it is: {wrong}")
    try:
        if kind == "whl":
            return _check_wheel(config, bid, entry, name, sha256, url, work)
    except NightlyError as e:
        return Check(build=bid, package=name, ok=False, reason=str(e), url=url)
    return _same(bid, name, url, got or "", sha256)


def _same(bid: str, name: str, url: str, got: str, sha256: str) -> Check:
    if got != sha256:
        return Check(build=bid, package=name, ok=False, url=url,
                     reason=f"the published file is not the one built (sha256 {got}, built "
                            f"{sha256})")
    return Check(build=bid, package=name, ok=True, url=url)


def _download(url: str, dest: Path, timeout_s: float) -> str:
    """Fetch a URL into dest (bounded); its sha256."""
    h = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r, dest.open("wb") as out:
            total = 0
            while chunk := r.read(1 << 20):
                total += len(chunk)
                if total > MAX_DOWNLOAD:
                    raise NightlyError(f"{url} is larger than {MAX_DOWNLOAD} bytes")
                h.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, OSError) as e:
        raise NightlyError(f"cannot download {url}: {e}") from e
    return h.hexdigest()


_WHEEL_RE = re.compile(r"^(?P<project>[^-]+)-(?P<version>[^-]+)-")


def _check_wheel(
    config: Config, bid: str, entry: BuildEntry, name: str, sha256: str, url: str, work: Path
) -> Check:
    from nightly.executors.local import NotFound, find_python

    m = _WHEEL_RE.match(name)
    if m is None:
        return Check(build=bid, package=name, ok=False, url=url, reason="not a wheel's name")
    project, version = m.group("project"), m.group("version")
    index = url.rsplit("/", 1)[0] + "/"
    try:
        python = find_python(entry.python or "3", config.local.pythons)
    except NotFound as e:
        return Check(build=bid, package=name, ok=True, url=url,
                     reason=f"not installed: no Python {entry.python} here ({e})")
    venv, waits = work / "venv", config.external_timeouts
    run([python, "-m", "venv", "--without-pip", str(venv)], "making a venv", timeout=waits.venv)
    vpy = str(venv / "bin" / "python")
    got = work / "got"
    out = _pip(vpy, procs.pip_download(got, "--no-deps", "--pre", "--index-url", index,
                                       f"{project}=={version}", target=vpy), waits.pip_install)
    if out is not None:
        return Check(build=bid, package=name, ok=False, url=index,
                     reason=f"{_why(out)}: pip cannot get {project}=={version} from {index}: {out}")
    files = sorted(got.glob("*.whl"))
    if [f.name for f in files] != [name]:
        return Check(build=bid, package=name, ok=False, url=index,
                     reason=f"pip chose {', '.join(f.name for f in files) or 'nothing'}, "
                            f"not {name}")
    digest = hashlib.sha256(files[0].read_bytes()).hexdigest()
    if digest != sha256:
        return _same(bid, name, url, digest, sha256)
    out = _install(config, vpy, files[0])
    if out is not None:
        return Check(build=bid, package=name, ok=False, url=url, reason=f"pip install: {out}")
    module = config.smoke.import_name or project.replace("-", "_")
    p = procs.call([vpy, "-c", f"import {module}"], timeout=waits.import_check)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["?"])[-1]
        return Check(build=bid, package=name, ok=False, url=url,
                     reason=f"import {module} failed: {last}")
    return Check(build=bid, package=name, ok=True, url=url)


_PIP_WORDS = (
    ("Could not find a version", "not in the index (no link to it on the project page)"),
    ("DO NOT MATCH THE HASHES", "not what the index says it is (the file or its .metadata "
                                "changed after publishing)"),
    ("HTTP error 404", "the index links a file the store does not have (deleted?)"),
)


def _why(pip_error: str) -> str:
    """pip's error line in the release engineer's words."""
    return next((words for needle, words in _PIP_WORDS if needle in pip_error), "unreachable")


def _install(config: Config, python: str, wheel: Path) -> str | None:
    """The published wheel installed as the smoke test installs it: alone, or with its runtime
    dependencies from [smoke]'s indexes, else [build]'s, else this machine's pip configuration
    ([smoke] dependencies = "index")."""
    wait = config.external_timeouts.pip_install
    if config.smoke.dependencies != "index":
        return _pip(python, procs.pip_command("install", "--no-deps", "--no-index", str(wheel),
                                              target=python), wait)
    sm, b = config.smoke, config.build
    index, extra = ((sm.index_url, sm.extra_index_urls) if sm.index_url or sm.extra_index_urls
                    else (b.index_url, b.extra_index_urls))
    args = [*(["--index-url", index] if index else []),
            *(a for url in extra for a in ("--extra-index-url", url))]
    # Only the indexes name where dependencies come from; none set: pip's own configuration.
    return _pip(python, procs.pip_command("install", *args, str(wheel), target=python), wait,
                own_config=not (index or extra))


def _pip(python: str, argv: Sequence[str], timeout_s: float, *,
         own_config: bool = False) -> str | None:
    """Run `argv`, this machine's pip for `python` (pip --python); None on success, else its
    first error line. `own_config`: with this machine's pip configuration (its index), else
    none."""
    env = {"PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PATH": "/usr/bin:/bin", "HOME": str(Path(python).parents[2])}
    if not own_config:
        env["PIP_CONFIG_FILE"] = "/dev/null"
    else:  # the user's pip.conf and PIP_* settings, as the smoke test's pip reads them
        import os

        env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_") or k == "HOME"})
    p = procs.call(argv, timeout=timeout_s, env=env)
    if p.returncode == 0:
        return None
    lines = [line.strip() for line in (p.stderr + p.stdout).splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or [f"exit status {p.returncode}"])[0][:500]


def _check_conda(config: Config, bid: str, entry: BuildEntry, name: str, sha256: str) -> Check | None:
    """A conda package: listed in its channel's repodata.json with its sha256, file there."""
    channel = config.publish.conda_channel
    dests = [d for d in entry.published if d.rsplit("/", 1)[-1] == name
             and not d.startswith("anaconda:")]
    if not channel or not dests:
        return None
    folder = Path(dests[0].removeprefix("file://")).parent
    try:
        repodata = read_json_file(folder / "repodata.json", REPODATA_MAX_BYTES)
    except (OSError, ValueError) as e:
        return Check(build=bid, package=name, ok=False, url=str(folder),
                     reason=f"its channel's repodata.json is unreadable: {e}")
    section = "packages.conda" if name.endswith(".conda") else "packages"
    packages = repodata.get(section) if isinstance(repodata, dict) else None
    listed = packages.get(name) if isinstance(packages, dict) else None
    if not isinstance(listed, dict):
        return Check(build=bid, package=name, ok=False, url=str(folder),
                     reason="not listed in its channel's repodata.json")
    if listed.get("sha256") != sha256:
        return Check(build=bid, package=name, ok=False, url=str(folder),
                     reason=f"repodata.json lists sha256 {listed.get('sha256')}, built {sha256}")
    try:
        got = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    except OSError as e:
        return Check(build=bid, package=name, ok=False, url=str(folder), reason=f"missing: {e}")
    return _same(bid, name, str(folder / name), got, sha256)


def read_checks(day: Day) -> list[Check]:
    """The day's last validation (for the report), [] when there was none."""
    data = read_json_object(day.master / RESULT_NAME, 256 << 20)
    out = []
    checks = data.get("checks")
    for c in checks if isinstance(checks, list) else []:
        if isinstance(c, dict):
            out.append(Check(build=str(c.get("build")), package=str(c.get("package")),
                             ok=bool(c.get("ok")), reason=str(c.get("reason") or ""),
                             url=str(c.get("url") or "")))
    return out


__all__ = ["Check", "public_base", "read_checks", "validate_day"]
