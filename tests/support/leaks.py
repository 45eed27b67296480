"""Secret values searched for in files and in text: a whole value, or a 16-character piece
of one (a truncated secret is still a leak)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def scan_for(root: Path, needles: Mapping[str, str]) -> list[str]:
    """'path: name' for every file under `root` holding one of the secret values (or a
    16-character piece of one: a truncated secret is still a leak)."""
    pieces = {name: [value, _piece(value)] for name, value in needles.items()}
    hits = []
    for p in sorted(root.rglob("*")):
        if p.is_symlink() or not p.is_file():
            continue
        data = p.read_bytes()
        for name, values in pieces.items():
            if any(v.encode() in data for v in values):
                hits.append(f"{p}: {name}")
    return hits


def leaks_in_text(text: str, needles: Mapping[str, str]) -> list[str]:
    return [name for name, value in needles.items() if value in text or _piece(value) in text]


def _piece(value: str) -> str:
    """16 characters from the middle of a secret."""
    return value[len(value) // 2 - 8 : len(value) // 2 + 8]
