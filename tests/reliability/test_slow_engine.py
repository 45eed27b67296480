"""A container engine that answers slowly (issue 56, point 5): on a busy machine `nightly
images build` ended in a `requests.exceptions.ReadTimeout` traceback when Podman's API did
not answer a read within the docker SDK's 60 s.

The real Podman, behind a small proxy on a unix socket of the test's that leaves chosen
requests unanswered, and a configuration whose engine_read is 1 s and whose [backoff.engine]
tries 3 times: a request left unanswered once is sent again and the command succeeds; an
engine that never answers is named in one line (exit 1, no traceback) after 3 tries.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.cli import child_env, nightly_cmd
from tests.support.engine import Engine

pytestmark = [pytest.mark.engine]

REPO = Path(__file__).resolve().parents[2]
DEMO_CUDA = REPO / "configs" / "demo-cuda.toml"
METHODS = (b"GET ", b"POST ", b"HEAD ", b"PUT ", b"DELETE ")
TUNING = """
[external_timeouts]
engine_read = "1s"

[backoff.engine]
attempts = 3
first = 0.05
cap = 0.1
"""


class SlowProxy:
    """A unix socket relaying to the engine's; a request for which `stall(index, line)` is
    true (index: its number among all requests, from 0) is never sent on nor answered."""

    def __init__(self, upstream: str, path: Path, stall: Callable[[int, str], bool]) -> None:
        self.upstream = upstream
        self.path = path
        self.stall = stall
        self.requests: list[str] = []  # "GET /v1.41/_ping", in the order they came
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        self._server.listen(64)
        self._open: list[socket.socket] = [self._server]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            up.connect(self.upstream)
            with self._lock:
                self._open += [client, up]
            threading.Thread(target=self._requests, args=(client, up), daemon=True).start()
            threading.Thread(target=self._answers, args=(up, client), daemon=True).start()

    def _requests(self, client: socket.socket, up: socket.socket) -> None:
        stalled = False
        with contextlib.suppress(OSError):
            while chunk := client.recv(65536):
                if chunk.startswith(METHODS):
                    line = chunk.split(b"\r\n", 1)[0].decode(errors="replace").rsplit(" ", 1)[0]
                    with self._lock:
                        index = len(self.requests)
                        self.requests.append(line)
                    stalled = self.stall(index, line)
                if not stalled:  # a stalled request's body is held back with it
                    up.sendall(chunk)
        for s in (client, up):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def _answers(self, up: socket.socket, client: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := up.recv(65536):
                client.sendall(chunk)
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        with self._lock:
            for s in self._open:
                with contextlib.suppress(OSError):
                    s.close()


@pytest.fixture
def proxy(engine: Engine, tmp_path: Path) -> Iterator[Callable[[Callable[[int, str], bool]], SlowProxy]]:
    made: list[SlowProxy] = []
    upstream = engine.base_url.removeprefix("unix://")

    def make(stall: Callable[[int, str], bool]) -> SlowProxy:
        p = SlowProxy(upstream, tmp_path / f"engine-{len(made)}.sock", stall)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def _config(tmp: Path) -> Path:
    text = DEMO_CUDA.read_text()
    text = text.replace('root = "../nightlies-demo-cuda"', f'root = "{tmp}/nightlies"')
    text = text.replace('source = "../examples/demo"', f'source = "{REPO}/examples/demo"')
    path = tmp / "demo-cuda.toml"
    path.write_text(text + TUNING)
    return path


def _images(config: Path, engine_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*nightly_cmd(), "images", *args, "--config", str(config)],
                          env=child_env({"DOCKER_HOST": engine_url}), capture_output=True,
                          text=True, timeout=120, check=False)


def test_a_request_left_unanswered_is_sent_again(proxy: Callable[..., SlowProxy],
                                                 tmp_path: Path) -> None:
    # The first request (the SDK asks the API version as the client is made) and the first
    # request after it (through the client's own retry) are each left unanswered once.
    p = proxy(lambda index, line: index in (0, 2))
    done = _images(_config(tmp_path), p.url, "list", "--json")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert '"tag":' in done.stdout
    assert p.requests[0] == p.requests[1], p.requests  # the same request, sent again
    assert p.requests[2] == p.requests[3], p.requests


STALLS: dict[str, Callable[[int, str], bool]] = {
    # From the first request on (the SDK's API version, as the client is made).
    "every request": lambda index, line: True,
    # Once the engine answered the ping: the command's own requests (an image's inspect).
    "image requests": lambda index, line: "/images/" in line,
}


@pytest.mark.parametrize("stall", sorted(STALLS))
@pytest.mark.parametrize("command", [("build", "--cuda", "cpu"), ("list",), ("check",)])
def test_an_engine_that_never_answers_is_named_in_one_line(
    command: tuple[str, ...], stall: str, proxy: Callable[..., SlowProxy], tmp_path: Path
) -> None:
    p = proxy(STALLS[stall])
    done = _images(_config(tmp_path), p.url, *command)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = [x for x in done.stderr.strip().splitlines() if not x.startswith("[images ")]
    assert len(lines) == 1, done.stderr
    for part in (f"the container engine at {p.url}", "did not answer within 1 s", "3 tries",
                 "engine_read"):
        assert part in lines[0], lines[0]
    stalled = [r for i, r in enumerate(p.requests) if STALLS[stall](i, r)]
    assert len(stalled) == 3, p.requests  # tried 3 times, then named
    assert len(set(stalled)) == 1, p.requests
