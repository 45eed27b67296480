"""Every `[table] key` the README and docs name is a key of nightly.toml: each is looked up
in nightly/defaults.toml, which holds every key of every closed table (config/reader.py
rejects the others). Tables that are not the config's (a recipe's log prefix such as
`[manywheel]`) and open tables (matrices, builders, machines) are not checked here."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
DEFAULTS = tomllib.loads((REPO / "nightly" / "defaults.toml").read_text())
# `[table] key` in code spans, or a line of a config example (`[table] key = value`).
NAMED = re.compile(r"`\[([a-z][a-z_.]*)\] ([a-z_]+)[` =]")
OPEN = ("images", "builders", "estimates", "timeouts", "executor.local.pythons")


def _named() -> list[tuple[str, str, str]]:
    found = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for m in NAMED.finditer(doc.read_text()):
            found.append((doc.name, m.group(1), m.group(2)))
    return found


def _table(name: str) -> object:
    node: object = DEFAULTS
    for part in name.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def test_the_docs_name_config_keys_at_all() -> None:
    assert len(_named()) > 40  # the pattern still finds what the docs write


def test_every_config_key_a_doc_names_exists() -> None:
    wrong = []
    for doc, table, key in _named():
        if table.startswith(OPEN) or table.split(".")[0] not in DEFAULTS:
            continue  # an open table, or no table of the config (a log prefix)
        node = _table(table)
        if not isinstance(node, dict) or key not in node:
            wrong.append(f"{doc}: [{table}] {key}")
    assert not wrong, "keys the config does not have: " + ", ".join(sorted(set(wrong)))
