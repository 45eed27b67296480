"""A missing optional library is one line naming the extra that brings it (errors.py), also
when it is imported where no command checked first (cli.main maps ModuleNotFoundError)."""

from __future__ import annotations

import pytest

from nightly import errors
from nightly.cli import main as cli_main
from nightly.errors import MissingExtra, missing_extra, require


def test_the_line_names_every_missing_extra_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(errors.EXTRA_OF_MODULE, "no_such_module_here", "container")
    monkeypatch.setitem(errors.EXTRA_OF_MODULE, "json", "s3")  # installed: not named
    with pytest.raises(MissingExtra) as info:
        require("json", "no_such_module_here", what="this night")
    assert info.value.exit_code == 2
    assert str(info.value).endswith("pip install 'nightly-builds[container]'")
    one = MissingExtra("docker", "container", "the container executor")
    assert str(one) == ("the container executor needs the 'container' extra (docker is not "
                        "installed): pip install 'nightly-builds[container]'")
    two = MissingExtra("docker,boto3", "container,s3", "this night")
    assert str(two).endswith("needs the 'container' and 's3' extras (docker, boto3 are not "
                             "installed): pip install 'nightly-builds[container,s3]'")


def test_an_unchecked_import_of_an_optional_library_is_mapped() -> None:
    assert missing_extra(ModuleNotFoundError("x", name="boto3.s3.transfer")) is not None
    assert missing_extra(ModuleNotFoundError("x", name="not_optional")) is None


def test_cli_main_turns_it_into_one_line_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise ModuleNotFoundError("No module named 'distributed'", name="distributed")

    monkeypatch.setattr(cli_main.cli, "main", boom)
    with pytest.raises(SystemExit) as info:
        cli_main.main(["plan"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err == ("nightly: error: this needs the 'cluster' extra (distributed is not "
                   "installed): pip install 'nightly-builds[cluster]'\n")
