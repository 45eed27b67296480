"""nightly's own source, parsed once per test process for the checks that read it (the layer
order and its cycles, the size limits, one home for JSON and timeouts).

Each of those checks walked the syntax trees of every module of nightly/ (30k lines): seven
full parses, the largest share of the fast tier's CPU after the tests that start processes.
A tree is parsed once per text and shared: the checks only read it. Keyed by the text, not
the path, so a planted module or a file a test rewrote is parsed anew.
"""

from __future__ import annotations

import ast
import functools


@functools.cache
def parsed(source: str) -> ast.Module:
    """The syntax tree of `source` (shared: never change it)."""
    return ast.parse(source)


__all__ = ["parsed"]
