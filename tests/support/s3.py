"""moto's S3 server on loopback, reached over HTTP by boto3 and by `nightly` subprocesses.

- `s3_env`: the environment that points boto3 at test credentials and at nothing
  of the machine's (no config file, no credentials file, no instance metadata).
- `moto_server`: the server started on a free port with those credentials in this process's
  environment (the nightly subprocesses inherit them), stopped at the end; `Moto.restart`
  brings it back on the same port.
- `StoppableS3`: a server that can die in the middle of a night (after the N-th package
  upload: listening socket closed, open connections cut) and come back with the same data.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.net import free_port
from tests.support.published import is_package


def s3_env(access_key: str, secret_key: str) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret_key,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


@dataclass
class Moto:
    endpoint: str
    port: int
    server: Any  # moto.server.ThreadedMotoServer

    def restart(self) -> None:
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint)

    def new_bucket(self, prefix: str = "nightly-") -> str:
        """A bucket with a fresh name."""
        name = f"{prefix}{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name


@contextlib.contextmanager
def moto_server(access_key: str, secret_key: str) -> Iterator[Moto]:
    """moto's S3 server on a free loopback port, with these credentials in this process's
    environment (restored at the end, when the server stops)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with pytest.MonkeyPatch.context() as mp:
        for name, value in s3_env(access_key, secret_key).items():
            mp.setenv(name, value)
        port = free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        m = Moto(f"http://127.0.0.1:{port}", port, server)
        try:
            yield m
        finally:
            m.server.stop()



class StoppableS3:
    """moto's S3 server (its in-process backend: data survives a restart) on a fixed port.

    `start(die_after=N)`: after the response to the N-th PUT of a package object has been
    sent, the server dies: the listening socket is closed (new connections are refused) and
    any request on a connection kept alive is cut. `stop()` does the same at once.
    """

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.dead = threading.Event()
        self.puts: list[str] = []
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, die_after: int | None = None) -> StoppableS3:
        import logging

        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
        self.dead.clear()
        moto_app = DomainDispatcherApplication(create_backend_app)
        this = self

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if this.dead.is_set():
                _cut(environ)
                return []
            path = environ.get("PATH_INFO", "")
            is_upload = environ["REQUEST_METHOD"] == "PUT" and is_package(path.rpartition("/")[2])
            body: Iterable[bytes] = moto_app(environ, start_response)
            if not is_upload:
                return body
            with this._lock:
                this.puts.append(path)
                last = die_after is not None and len(this.puts) >= die_after
            return _Closing(body, this._die if last else None)

        self._server = make_server("127.0.0.1", self.port, app, threaded=True,
                                   request_handler=MotoRequestHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def _die(self) -> None:
        self.dead.set()
        threading.Thread(target=self._close, daemon=True).start()

    def _close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def stop(self) -> None:
        self.dead.set()
        self._close()
        if self._thread is not None:
            self._thread.join(10)

    def wait_dead(self, timeout: float = 30) -> None:
        assert self.dead.wait(timeout), "the S3 server never reached its kill point"
        if self._thread is not None:
            self._thread.join(timeout)

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")


def _cut(environ: Mapping[str, Any]) -> None:
    sock = environ.get("werkzeug.socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class _Closing:
    """A WSGI body whose close() (called once the response was sent) runs a hook."""

    def __init__(self, body: Iterable[bytes], hook: Callable[[], None] | None) -> None:
        self.body, self.hook = body, hook

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.body)

    def close(self) -> None:
        close = getattr(self.body, "close", None)
        if close is not None:
            close()
        if self.hook is not None:
            self.hook()


def s3_objects(client: Any, bucket: str, prefix: str = "") -> dict[str, Any]:
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = obj
    return out
