"""`nightly verify --rebuild`: rebuild a package from what its provenance says and compare.

The provenance names the build (package type, Python or libtorch variant, CUDA), the night
(its day: the version derives from it) and the commit; the project, recipes and images come
from this machine's configuration. The build runs as a one-off build of that day into a
temporary root (never published, the site's day folders untouched) at that commit, and the
package it makes must have the very sha256 of the file being verified.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from nightly.config import Config
from nightly.errors import NightlyError
from nightly.files import scratch_folder, sha256_file, walk_tree
from nightly.provenance import Verdict


def _facts(stmt: Mapping[str, Any]) -> tuple[dict[str, object], str, str]:
    bd = stmt["predicate"]["buildDefinition"]
    ext = dict(bd.get("externalParameters", {}))
    src = (bd.get("resolvedDependencies") or [{}])[0]
    invocation = str(bd.get("internalParameters", {}).get("invocation", ""))
    return ext, str(src.get("digest", {}).get("gitCommit", "")), invocation.split("/", 1)[0]


def rebuild(config: Config, name: str, sha256: str, stmt: Mapping[str, object]) -> Verdict:
    """Build the package again on this machine; ok when the bytes are the same."""
    from nightly.night import pipeline as night

    ext, commit, day = _facts(stmt)
    try:
        date = dt.datetime.strptime(day, "%Y_%m_%d").date()
    except ValueError:
        return Verdict(ok=False, reason=f"the provenance names no night to rebuild ({day!r})")
    package = str(ext.get("package", ""))
    middle = str(ext.get("variant") or ext.get("python") or "")
    with scratch_folder("nightly-rebuild-") as tmp:
        cfg = dataclasses.replace(config, root=tmp)
        if commit:
            cfg = dataclasses.replace(cfg, project=dataclasses.replace(cfg.project, ref=commit))
        try:
            builds = night.builds_from_cli(cfg, package, middle, str(ext.get("cuda", "")))
            night.run_local(cfg, date, builds, night.NightOptions(
                no_upload=True, rebuild=tuple(b.id for b in builds), live=False))
        except NightlyError as e:
            return Verdict(ok=False, reason=f"the rebuild failed: {e}")
        found = [tmp / e.rel for e in walk_tree(tmp)
                 if e.is_file and e.name == name and "packages" in e.rel.split("/")]
        if not found:
            return Verdict(ok=False, reason=f"the rebuild made no {name}")
        again = sha256_file(found[0])
    if again != sha256:
        return Verdict(ok=False, reason=(
            f"rebuilt {name} has sha256 {again}, the file {sha256} (not reproducible here: "
            "compare the image and toolchain, or run `nightly build --check-reproducible`)"))
    return Verdict(ok=True, summary=(f"rebuilt: identical (sha256 {again})",))


__all__ = ["rebuild"]
