"""One home each, checked rather than remembered: JSON is parsed in nightly/jsonvalues.py only
(bounded sizes, depths and numbers; booleans kept booleans), and how long nightly waits for
outside work (a tool, git, a server) is [external_timeouts] in nightly/defaults.toml, never a
number written at the call. Each check reads the source, so a new json.loads or
`timeout=600` fails here before review."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.projects import REPO
from tests.support.sources import parsed

PACKAGE = REPO / "nightly"
JSON_HOME = PACKAGE / "jsonvalues.py"

# Waits that are nightly's own, not outside work: a thread's join or a queue's get, whose
# number is a poll interval or a grace for nightly's own thread.
INTERNAL_WAIT_CALLS = frozenset({"join", "get"})
# Module constants named like a timeout that bound something of nightly's own, with why.
INTERNAL_TIMEOUT_CONSTANTS = {
    # SQLite's wait for another nightly process's lock on the history: a local file.
    ("nightly/history/db.py", "BUSY_TIMEOUT_MS"),
}
_TIMEOUT_NAME = re.compile(r"^(timeout|\w+_timeout)$")
_TIMEOUT_CONSTANT = re.compile(r"TIMEOUT")


def modules() -> list[Path]:
    found = sorted(PACKAGE.rglob("*.py"))
    assert len(found) > 50, "nightly's modules were not found"
    return found


def json_parses(path: Path, root: Path = REPO) -> list[str]:
    """Each json.load/json.loads call (or import of them) in `path`, as FILE:LINE."""
    tree = parsed(path.read_text(encoding="utf-8"))
    where = path.relative_to(root)
    out: list[str] = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in ("load", "loads")
                and isinstance(node.value, ast.Name) and node.value.id == "json"):
            out.append(f"{where}:{node.lineno} json.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "json":
            out.extend(f"{where}:{node.lineno} from json import {a.name}"
                       for a in node.names if a.name in ("load", "loads", "JSONDecoder"))
    return out


def _literal_number(node: ast.expr | None) -> bool:
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return (isinstance(node, ast.Constant) and isinstance(node.value, int | float)
            and not isinstance(node.value, bool))


def hard_coded_timeouts(path: Path, root: Path = REPO) -> list[str]:
    """Each number written as a wait for outside work in `path`: a `timeout=`/`*_timeout=`
    argument, a parameter of such a name defaulting to a number, or a module constant named
    like a timeout, the allowed ones (above) left out."""
    tree = parsed(path.read_text(encoding="utf-8"))
    where = path.relative_to(root).as_posix()
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in INTERNAL_WAIT_CALLS:
                continue
            out.extend(f"{where}:{k.lineno} {name}({k.arg}={ast.unparse(k.value)})"
                       for k in node.keywords
                       if k.arg and _TIMEOUT_NAME.match(k.arg) and _literal_number(k.value))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            pairs = [*zip(a.args[len(a.args) - len(a.defaults):], a.defaults, strict=True),
                     *zip(a.kwonlyargs, a.kw_defaults, strict=True)]
            out.extend(f"{where}:{node.lineno} {node.name}({arg.arg}={ast.unparse(d)})"
                       for arg, d in pairs
                       if d is not None and _TIMEOUT_NAME.match(arg.arg) and _literal_number(d))
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign | ast.AnnAssign) and _literal_number(stmt.value):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            out.extend(f"{where}:{stmt.lineno} {t.id}" for t in targets
                       if isinstance(t, ast.Name) and _TIMEOUT_CONSTANT.search(t.id)
                       and (where, t.id) not in INTERNAL_TIMEOUT_CONSTANTS)
    return out


def test_json_is_parsed_in_jsonvalues_only() -> None:
    found = [hit for p in modules() if p != JSON_HOME for hit in json_parses(p)]
    assert not found, ("JSON parsed outside nightly/jsonvalues.py (use loads_bounded, "
                       "json_object, read_json_file or read_json_object): " + ", ".join(found))


def test_waits_for_outside_work_come_from_the_configuration() -> None:
    found = [hit for p in modules() for hit in hard_coded_timeouts(p)]
    assert not found, ("a timeout written as a number (put it in [external_timeouts] of "
                       "nightly/defaults.toml and take it from config.external_timeouts): "
                       + ", ".join(found))


def test_the_checks_see_what_they_refuse(tmp_path: Path) -> None:
    """Each check finds the forms it is for, so an empty finding above means something."""
    src = tmp_path / "probe.py"
    src_text = (
        "import json\nfrom json import loads\nimport subprocess, smtplib, threading, queue\n"
        "PRINT_TIMEOUT_S = 600.0\n"
        "def f(x: str, timeout: float = 1800, *, read_timeout: float = 120.0) -> object:\n"
        "    subprocess.run(['git'], timeout=900)\n"
        "    smtplib.SMTP('h', 25, timeout=60)\n"
        "    threading.Thread().join(timeout=5)\n"
        "    queue.SimpleQueue().get(timeout=1.0)\n"
        "    subprocess.run(['git'], timeout=x)\n"
        "    return json.loads(x) or json.load(open(x))\n"
    )
    src.write_text(src_text, encoding="utf-8")
    assert len(json_parses(src, tmp_path)) == 3
    hits = hard_coded_timeouts(src, tmp_path)
    assert sorted(h.split(" ", 1)[1] for h in hits) == sorted([
        "PRINT_TIMEOUT_S", "f(timeout=1800)", "f(read_timeout=120.0)",
        "run(timeout=900)", "SMTP(timeout=60)"])
