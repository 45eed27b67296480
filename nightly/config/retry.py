"""How nightly waits before trying again: one policy, `Backoff`, used by every retry loop.

Each use has its numbers in `[backoff.<use>]` of nightly/defaults.toml (tries in all, the
first pause, the longest pause), read as data like every other default; a project's
nightly.toml may set them too. Every pause is `first * 2**(retry - 1)`, capped at `cap`,
times a random factor in [0.5, 1.5) so that writers that lost the same round do not retry
in step.

The uses:
  store   a compare-and-swap round of a writer that lost to another (stores.base.cas_rounds)
  s3      a request to S3 that failed at the connection (stores.s3, beside botocore's own)
  index   an index reader's request (index.coldread)
  engine  a request to the container engine that got no answer in time or no connection,
          and removing a build's container (executors.container_engine, executors.container)

A Config carries its policies (`config.backoff`, a `Backoffs`); no policy is held by the
process, so two configurations loaded in one process keep their own. Code that no
configuration reaches (a store built deep down) takes them as an argument whose default is
`default_backoffs()`, defaults.toml's.
"""

from __future__ import annotations

import dataclasses
import functools
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

from nightly.config.reader import Table, defaults_table

USES = ("store", "s3", "index", "engine")


@dataclass(frozen=True)
class Backoff:
    """Tries in all (the first and its retries) and the pauses between them."""

    attempts: int
    first_s: float
    cap_s: float

    def delay(self, retry: int) -> float:
        """The pause before retry number `retry` (1: the first retry), jittered."""
        base: float = min(self.first_s * 2.0 ** (retry - 1), self.cap_s)
        return base * random.uniform(0.5, 1.5)

    def pause(self, retry: int) -> None:
        time.sleep(self.delay(retry))

    def tries(self) -> Iterator[int]:
        """Tries 1..attempts, pausing before each one after the first."""
        for n in range(1, self.attempts + 1):
            if n > 1:
                self.pause(n - 1)
            yield n

    def replace(self, *, attempts: int | None = None, first_s: float | None = None) -> Backoff:
        return dataclasses.replace(
            self, attempts=self.attempts if attempts is None else max(1, attempts),
            first_s=self.first_s if first_s is None else first_s)


@dataclass(frozen=True, kw_only=True)
class Backoffs:
    """The policy of each use (USES)."""

    store: Backoff
    s3: Backoff
    index: Backoff
    engine: Backoff


def parse_backoff(top: Table) -> Backoffs:
    """[backoff.<use>] of a configuration (laid over the defaults), checked."""
    section = top.table("backoff")
    out: dict[str, Backoff] = {}
    for use in USES:
        t = section.table(use)
        out[use] = Backoff(attempts=t.int("attempts", minimum=1), first_s=t.number(
            "first", minimum=0.0), cap_s=t.number("cap", minimum=0.0))
        t.finish()
    section.finish()
    return Backoffs(**out)


@functools.cache
def default_backoffs() -> Backoffs:
    """defaults.toml's [backoff.<use>]: for code that no configuration reaches."""
    return parse_backoff(defaults_table())
