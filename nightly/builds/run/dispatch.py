"""Which build a queue runs next: its own, else (work-conserving) the earliest unstarted
build of any other queue, in plan order."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from nightly.core.matrix import Build


class Dispatcher:
    def __init__(self, queues: Sequence[Sequence[Build]], order: Sequence[Build] | None) -> None:
        self.own = [list(q) for q in queues]
        if order is None:
            order = [q[i] for i in range(max(map(len, queues), default=0)) for q in queues
                     if i < len(q)]
        self.rank = {b.id: i for i, b in enumerate(order)}
        self.lock = threading.Lock()

    def next(self, q: int) -> Build | None:
        with self.lock:
            if self.own[q]:
                return self.own[q].pop(0)
            # Steal the earliest unstarted build (plan order) from any other queue.
            best: tuple[int, int] | None = None
            for qi, items in enumerate(self.own):
                if items:
                    r = self.rank.get(items[0].id, 1 << 30)
                    if best is None or r < best[0]:
                        best = (r, qi)
            if best is None:
                return None
            return self.own[best[1]].pop(0)

