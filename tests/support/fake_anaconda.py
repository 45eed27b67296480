"""A small loopback stand-in for the anaconda.org API, enough for anaconda-client's upload and copy.

Endpoints (as called by binstar_client 1.16, `Binstar` in binstar_client/__init__.py and
binstar_client/mixins/*.py):

- `HEAD /`                                      check_server (must answer 200)
- `GET /user` and `GET /user/<login>`          who the token is / does the owner exist
- `GET|DELETE /dist/<owner>/<pkg>/<ver>/<basename>`    does the file exist / --force removes it
- `GET|POST|DELETE /package/<owner>/<pkg>`     package namespace (created on first upload)
- `GET|POST|PATCH|DELETE /release/<owner>/<pkg>/<ver>`
- `POST /stage/<owner>/<pkg>/<ver>/<basename>` returns `post_url`, `form_data`, `dist_id`
- `POST /s3-upload/<dist_id>`                   the multipart form POST to `post_url` (no token
                                                is sent there; answers 201 like S3)
- `POST /commit/<owner>/<pkg>/<ver>/<basename>` makes the staged file visible
- `GET /channels/<owner>`                       labels of an owner (anaconda copy/move check it)
- `POST|PATCH|PUT /copy/package/<owner>/<pkg>/<ver>/[<basename>]`  server-side copy between
                                                labels and owners (POST: 409 when the target
                                                exists, PATCH (--update): skip existing,
                                                PUT (--replace): overwrite)

Every request is recorded (method, path, Authorization header, JSON body). `fail(method, prefix)`
makes the next matching request answer 500. Tokens are checked: a request with a wrong
`Authorization: token ...` header gets 401.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit


@dataclass
class Request:
    method: str
    path: str
    authorization: str | None
    body: Any


@dataclass
class Dist:
    owner: str
    package: str
    version: str
    basename: str
    labels: list[str]
    data: bytes
    sha256: str
    distribution_type: str
    attrs: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "basename": self.basename,
            "version": self.version,
            "labels": list(self.labels),
            "sha256": self.sha256,
            "md5": hashlib.md5(self.data).hexdigest(),
            "size": len(self.data),
            "attrs": self.attrs,
            "distribution_type": self.distribution_type,
        }


class FakeAnaconda:
    def __init__(self, *, token: str, users: tuple[str, ...] = ("nightly-owner",)) -> None:
        self.token = token
        self.users = set(users)
        self.requests: list[Request] = []
        self.packages: dict[tuple[str, str], dict[str, Any]] = {}
        self.releases: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.dists: dict[tuple[str, str, str, str], Dist] = {}
        self.staged: dict[str, dict[str, Any]] = {}
        self.form_fields: list[dict[str, str]] = []
        self._failures: list[tuple[str, str]] = []
        self._ids = itertools.count(1)
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> FakeAnaconda:
        fake = self

        class Handler(_Handler):
            server_fake = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeAnaconda:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    # -- test helpers ----------------------------------------------------------------------------
    def fail(self, method: str, path_prefix: str) -> None:
        """The next request with this method and path prefix answers 500."""
        with self.lock:
            self._failures.append((method, path_prefix))

    def labels_of(self, owner: str, package: str, version: str, basename: str) -> list[str]:
        return self.dists[(owner, package, version, basename)].labels

    def find(self, basename_suffix: str) -> list[Dist]:
        return [d for d in self.dists.values() if d.basename.endswith(basename_suffix)]

    # -- dispatch --------------------------------------------------------------------------------
    def handle(self, method: str, path: str, headers: Any, raw: bytes) -> tuple[int, Any]:
        auth = headers.get("Authorization")
        body: Any = None
        ctype = headers.get("Content-Type", "")
        if raw and ctype.startswith("application/json"):
            body = json.loads(raw)
        with self.lock:
            self.requests.append(Request(method, path, auth, body))
            for i, (m, prefix) in enumerate(self._failures):
                if m == method and path.startswith(prefix):
                    del self._failures[i]
                    return 500, {"error": "Internal Server Error (injected by the test)"}
        parts = [unquote(p) for p in urlsplit(path).path.split("/")[1:]]
        if parts == [""] and method in ("HEAD", "GET"):
            return 200, {"status": "ok"}
        head = parts[0]
        if head == "s3-upload":  # the storage POST carries no token, like S3 with a signed form
            return self._s3_upload(parts[1], ctype, raw)
        if auth is not None and auth != f"token {self.token}":
            return 401, {"error": "invalid token"}
        with self.lock:
            if head == "user":
                return self._user(parts[1:], auth)
            if auth is None and method != "GET":
                return 401, {"error": "authentication required"}
            if head == "dist":
                return self._dist(method, parts[1:])
            if head == "package":
                return self._package(method, parts[1:], body)
            if head == "release":
                return self._release(method, parts[1:], body)
            if head == "stage":
                return self._stage(parts[1:], body)
            if head == "commit":
                return self._commit(parts[1:], body)
            if head == "channels":
                return self._channels(parts[1:])
            if head == "copy" and parts[1:2] == ["package"]:
                return self._copy(method, parts[2:], body)
        return 404, {"error": f"no route {method} {path}"}

    def _user(self, rest: list[str], auth: str | None) -> tuple[int, Any]:
        if rest:
            if rest[0] in self.users:
                return 200, {"login": rest[0], "user_type": "user"}
            return 404, {"error": "user not found"}
        if auth is None:
            return 401, {"error": "authentication required"}
        return 200, {"login": sorted(self.users)[0], "user_type": "user"}

    def _dist(self, method: str, rest: list[str]) -> tuple[int, Any]:
        owner, pkg, ver, basename = rest[0], rest[1], rest[2], "/".join(rest[3:])
        key = (owner, pkg, ver, basename)
        if key not in self.dists:
            return 404, {"error": "file not found"}
        if method == "DELETE":  # binstar_client's remove_dist expects 200 and the file's JSON
            return 200, self.dists.pop(key).as_json()
        return 200, self.dists[key].as_json()

    def _files_of(self, owner: str, pkg: str, ver: str | None = None) -> list[Dist]:
        return [
            d
            for (o, p, v, _), d in sorted(self.dists.items())
            if o == owner and p == pkg and (ver is None or v == ver)
        ]

    def _package(self, method: str, rest: list[str], body: Any) -> tuple[int, Any]:
        key = (rest[0], rest[1])
        if method == "POST":
            self.packages[key] = {"name": rest[1], "owner": rest[0], "body": body, "package_types": []}
            return 200, self.packages[key]
        if key not in self.packages:
            return 404, {"error": "package not found"}
        if method == "DELETE":
            del self.packages[key]
            return 201, {}
        pkg = dict(self.packages[key])
        pkg["files"] = [d.as_json() for d in self._files_of(*key)]
        return 200, pkg

    def _release(self, method: str, rest: list[str], body: Any) -> tuple[int, Any]:
        key = (rest[0], rest[1], rest[2])
        if method == "POST":
            self.releases[key] = {"version": rest[2], "body": body}
            return 200, self.releases[key]
        if key not in self.releases:
            return 404, {"error": "release not found"}
        if method == "DELETE":
            del self.releases[key]
            return 201, {}
        rel = dict(self.releases[key])
        rel["distributions"] = [d.as_json() for d in self._files_of(*key)]
        return 200, rel

    def _stage(self, rest: list[str], body: Any) -> tuple[int, Any]:
        owner, pkg, ver, basename = rest[0], rest[1], rest[2], "/".join(rest[3:])
        if (owner, pkg) not in self.packages or (owner, pkg, ver) not in self.releases:
            return 404, {"error": "package or release missing"}
        dist_id = f"d{next(self._ids)}"
        self.staged[dist_id] = {
            "key": (owner, pkg, ver, basename),
            "labels": list(body.get("channels") or ["main"]),
            "sha256": body.get("sha256"),
            "distribution_type": body.get("distribution_type"),
            "attrs": body.get("attrs") or {},
            "data": None,
        }
        return 200, {
            "post_url": f"{self.url}/s3-upload/{dist_id}",
            "form_data": {"key": f"{owner}/{pkg}/{ver}/{basename}", "policy": "fake"},
            "dist_id": dist_id,
        }

    def _s3_upload(self, dist_id: str, ctype: str, raw: bytes) -> tuple[int, Any]:
        fields, files = parse_multipart(ctype, raw)
        with self.lock:
            staged = self.staged.get(dist_id)
            if staged is None or "file" not in files:
                return 400, "<Error><Code>BadRequest</Code></Error>"
            data = files["file"]
            if "Content-MD5" in fields:
                md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
                if md5 != fields["Content-MD5"]:
                    return 400, "<Error><Code>InvalidDigest</Code></Error>"
            staged["data"] = data
            self.form_fields.append(fields)
        return 201, ""

    def _commit(self, rest: list[str], body: Any) -> tuple[int, Any]:
        owner, pkg, ver, basename = rest[0], rest[1], rest[2], "/".join(rest[3:])
        staged = self.staged.pop((body or {}).get("dist_id", ""), None)
        if staged is None or staged["data"] is None or staged["key"] != (owner, pkg, ver, basename):
            return 400, {"error": "nothing staged"}
        data: bytes = staged["data"]
        sha = hashlib.sha256(data).hexdigest()
        if staged["sha256"] and staged["sha256"] != sha:
            return 400, {"error": "sha256 mismatch"}
        self.dists[staged["key"]] = Dist(
            owner,
            pkg,
            ver,
            basename,
            staged["labels"],
            data,
            sha,
            staged["distribution_type"],
            staged["attrs"],
        )
        return 200, {"url": f"{self.url}/{owner}/{pkg}"}

    def _channels(self, rest: list[str]) -> tuple[int, Any]:
        owner = rest[0]
        labels: dict[str, dict[str, int]] = {}
        for d in self.dists.values():
            if d.owner == owner:
                for label in d.labels:
                    labels.setdefault(label, {"num_files": 0})["num_files"] += 1
        return 200, labels

    def _copy(self, method: str, rest: list[str], body: Any) -> tuple[int, Any]:
        owner, pkg, ver = rest[0], rest[1], rest[2]
        basename = "/".join(rest[3:])
        to_owner = body.get("to_owner") or owner
        from_label, to_label = body.get("from_channel", "main"), body.get("to_channel", "main")
        sources = [
            d
            for d in self._files_of(owner, pkg, ver)
            if (not basename or d.basename == basename) and from_label in d.labels
        ]
        if not sources:
            return 404, {"error": "nothing to copy"}
        copied = []
        for src in sources:
            dkey = (to_owner, pkg, ver, src.basename)
            existing = self.dists.get(dkey)
            if existing is not None and existing is not src:
                if method == "POST":
                    return 409, {"error": "file conflict"}
                if method == "PATCH":  # --update: existing files are left as they are
                    continue
            if existing is src or (existing is not None and existing.sha256 == src.sha256):
                if to_label not in existing.labels:
                    existing.labels.append(to_label)
            else:
                self.packages.setdefault(
                    (to_owner, pkg), {"name": pkg, "owner": to_owner, "package_types": []}
                )
                self.releases.setdefault((to_owner, pkg, ver), {"version": ver})
                self.dists[dkey] = Dist(
                    to_owner,
                    pkg,
                    ver,
                    src.basename,
                    [to_label],
                    src.data,
                    src.sha256,
                    src.distribution_type,
                    dict(src.attrs),
                )
            copied.append({"basename": src.basename, "owner": to_owner, "labels": self.dists[dkey].labels})
        return 200, copied


def parse_multipart(content_type: str, raw: bytes) -> tuple[dict[str, str], dict[str, bytes]]:
    """(fields, files) of a multipart/form-data body, byte-exact."""
    boundary = None
    for param in content_type.split(";")[1:]:
        k, _, v = param.strip().partition("=")
        if k.lower() == "boundary":
            boundary = v.strip('"')
    if boundary is None:
        return {}, {}
    fields: dict[str, str] = {}
    files: dict[str, bytes] = {}
    delim = b"--" + boundary.encode()
    for chunk in raw.split(delim)[1:]:
        if chunk.startswith(b"--"):
            break
        chunk = chunk[2:] if chunk.startswith(b"\r\n") else chunk
        head, _, content = chunk.partition(b"\r\n\r\n")
        if content.endswith(b"\r\n"):
            content = content[:-2]
        name = filename = None
        for line in head.decode("utf-8", "replace").split("\r\n"):
            if line.lower().startswith("content-disposition:"):
                for item in line.split(";")[1:]:
                    k, _, v = item.strip().partition("=")
                    if k == "name":
                        name = v.strip('"')
                    elif k == "filename":
                        filename = v.strip('"')
        if name is None:
            continue
        if filename is not None:
            files[name] = content
        else:
            fields[name] = content.decode()
    return fields, files


class _Handler(BaseHTTPRequestHandler):
    server_fake: FakeAnaconda
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        status, payload = self.server_fake.handle(self.command, self.path, self.headers, raw)
        if isinstance(payload, str):
            data, ctype = payload.encode(), "application/xml"
        else:
            data, ctype = json.dumps(payload).encode(), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _serve
