"""`nightly status` on a night that is running: the live view its progress display draws
(builds done of the total, each queue's running build, phase, elapsed against its estimate,
last log line), read from logs/master/live.json (nightly.workspace.live)."""

from __future__ import annotations

import time
from collections.abc import Callable

from nightly.builds.view.liveview import plain, render
from nightly.errors import StateError
from nightly.format import say_err
from nightly.workspace import Day, is_locked, live


def running_state(day: Day, warn: Callable[[str], None] | None = None) -> live.LiveState | None:
    """The live state of the night running on `day`; None when none runs (the lock is free,
    or the process that wrote the file is gone). What is in the way (a lock file or a
    live.json that is no file: a FIFO, a folder) is told to `warn` in one line, and no night
    is taken to run: the status of the day is still shown."""
    try:
        locked = is_locked(day.path)
    except StateError as e:
        if warn is not None:
            warn(f"warning: {e}")
        return None
    except OSError as e:  # unreadable (permissions): whether a night runs cannot be told
        if warn is not None:
            warn(f"warning: cannot read the day's lock file {e.filename}: {e.strerror or e}")
        return None
    state = live.read(live.path_of(day.master), warn)
    if state is None or not locked or not live.alive(state.pid):
        return None
    return state


def show_live(day: Day) -> bool:
    """Print the running night's live view (a table on a terminal, plain lines otherwise);
    False (and nothing printed) when no night runs on the day."""
    from nightly.report.terminal import wide_console

    state = running_state(day, say_err)
    if state is None:
        return False
    con = wide_console()
    now = time.time()
    con.print(f"[bold]running now[/bold] (pid {state.pid}, updated "
              f"{max(0, int(now - state.updated))} s ago):", highlight=False)
    if con.is_terminal:
        con.print(render(state, now, con.width))
    else:
        for line in plain(state, now):
            con.print(line, markup=False, highlight=False, soft_wrap=True)
    return True
