"""Finished builds' folders removed beside the queues, not in a build's time.

A finished build's folder (its scratch, output, compiler cache tools) is removed before its
queue takes the next build. Most of that is waiting for the disk: on a filesystem mounted
with `discard` each rmdir waits for the device (1-3 ms, a dozen folders a build). So while
queues run, the folder is renamed out of the way at once (one rename in its own folder:
the build's path is free again, as before) and removed by one thread of the run while the
queue goes on; the run waits for the last removal before it returns.

A run killed meanwhile leaves the renamed folder (`.gone-<build>-<token>`, beside the build
folders); the next run of the day removes what it finds so named before its first build.
"""

from __future__ import annotations

import os
import queue
import secrets
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from nightly.workspace import remove_tree

GONE = ".gone-"  # the prefix of a build folder renamed for removal

# (the folder, as it was named before it was renamed for removal; why it could not be removed)
OnError = Callable[[Path, OSError], None]
# (the folder, its name before it was renamed, what to run before removal is retried: stop
# what still writes in it, on error)
_Item = tuple[Path, Path, "Callable[[], object] | None", OnError] | None


class Sweeper:
    """Removes folders on a thread of its own, in the order given; `drain` waits for all."""

    def __init__(self, *, now: bool = False) -> None:
        self.now = now  # every folder removed before `remove` returns (a build run alone)
        self._items: queue.Queue[_Item] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def remove(self, folder: Path, on_error: OnError,
               before_retry: Callable[[], object] | None = None) -> None:
        """`folder` renamed out of the way now and removed later; where it cannot be
        renamed, removed now (`on_error` is told when removal failed)."""
        if self.now:
            _remove(folder, folder, before_retry, on_error)
            return
        gone = folder.with_name(f"{GONE}{folder.name}-{secrets.token_hex(4)}")
        try:
            os.rename(folder, gone)
        except FileNotFoundError:
            return
        except OSError:
            _remove(folder, folder, before_retry, on_error)
            return
        self._put((gone, folder, before_retry, on_error))

    def leftovers(self, parents: Iterable[Path], on_error: OnError) -> None:
        """What a run that died left renamed for removal in `parents`, removed too."""
        for parent in dict.fromkeys(parents):
            try:
                with os.scandir(parent) as entries:
                    names = [e.name for e in entries
                             if e.name.startswith(GONE) and e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            for name in sorted(names):
                self._put((parent / name, parent / name, None, on_error))

    def drain(self) -> None:
        """Every folder given so far removed (or reported); the thread ended."""
        with self._lock:
            thread, self._thread = self._thread, None
            if thread is None:
                return
            self._items.put(None)
        thread.join()

    def _put(self, item: _Item) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="sweeper", daemon=True)
                self._thread.start()
            self._items.put(item)

    def _run(self) -> None:
        while (item := self._items.get()) is not None:
            _remove(*item)


def _remove(folder: Path, was: Path, before_retry: Callable[[], object] | None,
            on_error: OnError) -> None:
    try:
        remove_tree(folder, before_retry=before_retry)
    except OSError as e:  # the build's outcome stands; the next run removes it
        on_error(was, e)


__all__ = ["GONE", "Sweeper"]
