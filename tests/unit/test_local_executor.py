"""The local executor's interpreter lookup and its build user (nightly/hardening.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from nightly.errors import ConfigError
from nightly.executors.local import NotFound, find_python
from nightly.hardening import credential_settings, recipe_user
from tests.support.staged import staged_nightly


def test_a_configured_interpreter_that_is_missing_is_an_error_naming_the_setting(
    tmp_path: Path,
) -> None:
    missing = str(tmp_path / "no-python3.11")
    # python3.11 may well be on PATH: it must not be taken instead of the configured one.
    with pytest.raises(NotFound, match=r"configured interpreter .*no-python3\.11") as e:
        find_python("3.11", {"3.11": missing})
    assert "[executor.local.pythons]" in str(e.value)
    assert find_python("3.11", {"3.11": sys.executable}) == sys.executable


def test_a_build_users_interpreter_is_the_first_on_path_it_can_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root's PATH may start in its own venv or pyenv (in its 0700 home): for a build user the
    search goes on to an interpreter that user can reach."""
    private, shared = tmp_path / "private", tmp_path / "shared"
    for d in (private, shared):
        d.mkdir()
        (d / "python3.99").write_text("#!/bin/sh\n")
        (d / "python3.99").chmod(0o755)
    monkeypatch.setenv("PATH", f"{private}:{shared}")
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "no-pyenv"))
    assert find_python("3.99", {}) == str(private / "python3.99")
    reachable = lambda p: not p.startswith(str(private))  # noqa: E731
    assert find_python("3.99", {}, reachable) == str(shared / "python3.99")
    with pytest.raises(NotFound):
        find_python("3.99", {}, lambda p: False)


def _config(**publish: str) -> SimpleNamespace:
    pub = SimpleNamespace(url=publish.get("url", ""), anaconda_user="", pypi_url="")
    return SimpleNamespace(
        path="/x/nightly.toml", local=SimpleNamespace(user=publish.get("user", "")),
        publish=pub, cache=SimpleNamespace(enabled=True, url=publish.get("cache", "")),
        notify=SimpleNamespace(smtp_user=""), provenance=SimpleNamespace(key=None),
    )


def test_credentials_settings_are_named() -> None:
    assert credential_settings(_config()) == []
    assert credential_settings(_config(url="s3://b/p", cache="s3://b/c")) == [
        "publish.url", "cache.url"]
    assert credential_settings(_config(url="file:///srv/mirror")) == []


def test_root_with_credentials_must_name_who_builds() -> None:
    if os.geteuid() != 0:  # not root: another account is out of reach, and says so
        with pytest.raises(ConfigError, match="needs nightly to run as root"):
            recipe_user(_config(url="s3://b/p", user="nobody"))
        assert recipe_user(_config(url="s3://b/p")) is None
        return
    with pytest.raises(ConfigError, match=r"\[executor\.local\.user\].*publish\.url"):
        recipe_user(_config(url="s3://b/p"))
    assert recipe_user(_config()) is None  # the demo: no credentials, unaffected
    assert recipe_user(_config(url="s3://b/p", user="root")) is None  # said knowingly
    with pytest.raises(ConfigError, match="no user 'no-such-user-x'"):
        recipe_user(_config(user="no-such-user-x"))
    nobody = recipe_user(_config(url="s3://b/p", user="nobody"))
    assert nobody is not None
    assert nobody.uid != 0
    assert nobody.setpriv()[:3] == ["setpriv", f"--reuid={nobody.uid}", f"--regid={nobody.gid}"]


@pytest.mark.parametrize("undumpable", [True, False])
def test_nightly_undumpable_hides_its_environment_from_its_own_user(undumpable: bool) -> None:
    """Another process of the same user (a recipe) cannot read the environment of a process
    that made itself non-dumpable; without it, it can (the control)."""
    import subprocess

    code = ("import sys; from nightly.hardening import make_undumpable; "
            f"ok = make_undumpable() if {undumpable} else True; print(ok, flush=True); "
            "sys.stdin.read()")
    # As an unprivileged user (root reads everything), with the system's Python that user
    # can run.
    # nightly staged where that user can read it: this checkout may be under a 0700 home.
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"] \
        if os.geteuid() == 0 else []
    with staged_nightly(dists=()) as staged:
        env = {"PYTHONPATH": str(staged.site), "PATH": "/usr/bin:/bin", "HIDDEN": "value-9f2c"}
        holder = subprocess.Popen([*prefix, staged.python, "-c", code], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=env, cwd="/")
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "True"
            reader = subprocess.run([*prefix, "cat", f"/proc/{holder.pid}/environ"],
                                    capture_output=True, cwd="/")
        finally:
            holder.communicate("")
    if undumpable:
        assert reader.returncode != 0
        assert b"value-9f2c" not in reader.stdout
    else:
        assert b"HIDDEN=value-9f2c" in reader.stdout


def test_the_build_folder_is_taken_back_from_the_build_user_after_its_recipe(
    tmp_path: Path,
) -> None:
    """Once the recipe ended, nothing nightly reads next (output, cache tools) can be changed or
    swapped for a symlink by the build user's other processes; its scratch stays its own."""
    from nightly.executors.handover import take_back

    if os.geteuid() != 0:
        pytest.fail("run as root: this hands folders to another account and back")
    build = tmp_path / "b"
    (build / "out").mkdir(parents=True)
    (build / "scratch").mkdir()
    (build / "out" / "pkg.whl").write_text("wheel")
    (build / "out" / "link").symlink_to(tmp_path / "secret")
    (tmp_path / "secret").write_text("root's")
    (tmp_path / "secret").chmod(0o666)
    for p in (build, build / "out", build / "scratch", build / "out" / "pkg.whl"):
        os.chown(p, 65534, 65534)
        p.chmod(0o777 if p.is_dir() else 0o666)
    os.chown(build / "out" / "link", 65534, 65534, follow_symlinks=False)
    take_back(build, keep=build / "scratch")
    for p in (build, build / "out", build / "out" / "pkg.whl"):
        st = p.stat()
        assert (st.st_uid, st.st_mode & 0o022) == (0, 0), p
    assert os.lstat(build / "out" / "link").st_uid == 0
    assert (tmp_path / "secret").stat().st_mode & 0o777 == 0o666  # never followed
    assert (build / "scratch").stat().st_uid == 65534
