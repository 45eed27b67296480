"""Small reads from S3 (a HEAD, a GET of a few kilobytes) without boto3's per-call machinery.

Why
    A first full index run on a bucket nightly did not write HEADs every wheel and GETs every
    distinct `.metadata` file: 26,700 requests for 21,000 wheels. Through boto3 each costs
    about 1.3 ms of the client's CPU (its event hooks, request object, response parser), as
    much as a busy server spends answering it; signed here with botocore's own SigV4 signer
    and sent through the client's own HTTP session, about 0.6 ms (benchmarks/bench_index_peer.py).

What is the same as boto3's
    The URL (taken once from the client: `generate_presigned_url` resolves the endpoint, the
    addressing style and the region exactly as a call would), the signature (botocore's
    `S3SigV4Auth`, with the session's credentials, refreshed when they expire) and the HTTP
    session (the client's: its proxies, CA bundle, timeouts and connection pool).

What is not handled here
    Only a 200 and a 404 are taken; anything else (a 403, a region redirect, a 5xx, a slow
    down, a connection error) returns None and the caller makes the same request through
    boto3, whose retries, redirects and error messages then apply. A client whose pieces
    are not where this expects them (another botocore) or that has no credentials gets
    `SignedReads.of(...) is None`: every read goes through boto3.
"""

from __future__ import annotations

import logging
import urllib.parse
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

PROBE = "nightly-probe-key"  # a key whose presigned URL shows where keys go
MAX_MISSES = 3


@dataclass(frozen=True)
class Reply:
    status: int  # 200 or 404
    headers: dict[str, str]  # lowercase names
    body: bytes = b""


class SignedReads:
    """HEAD and GET of one bucket's objects; see the module docstring."""

    def __init__(self, *, base_url: str, region: str, credentials: Any, http: Any) -> None:
        self.base_url, self.region, self.credentials, self.http = base_url, region, credentials, http
        # Answers in a row that were not taken. A bucket in another region than the client's
        # (a redirect every time) or a store that refuses these requests would double every
        # read: after MAX_MISSES the fast path stops and boto3 does the rest.
        self.misses = 0

    @classmethod
    def of(cls, client: Any, session: Any, bucket: str) -> SignedReads | None:
        """The fast path for `client`'s bucket, or None when it cannot be set up."""
        try:
            http = client._endpoint.http_session  # the client's own: proxies, CA bundle, pool
            credentials = session.get_credentials()
            if credentials is None or not hasattr(http, "send"):
                return None
            url = client.generate_presigned_url("head_object", Params={"Bucket": bucket, "Key": PROBE})
        except Exception as e:  # any surprise: boto3 does every read, as before
            log.debug("signed reads unavailable: %s", e)
            return None
        base = url.partition("?")[0]
        if not base.endswith("/" + PROBE):
            return None
        # The region boto3 signs its calls for (botocore's default when none is configured).
        region = client.meta.region_name or "us-east-1"
        return cls(base_url=base[: -len(PROBE)], region=region, credentials=credentials, http=http)

    def head(self, key: str) -> Reply | None:
        # The checksum mode makes S3 return the object's own SHA256 checksum, as boto3's
        # head_object(ChecksumMode="ENABLED") does.
        return self._send("HEAD", key, {"x-amz-checksum-mode": "ENABLED"}, None)

    def get(self, key: str, max_bytes: int | None) -> Reply | None:
        """The object's bytes; at most max_bytes + 1 of them are read (the caller refuses more)."""
        return self._send("GET", key, {}, max_bytes)

    def _send(self, method: str, key: str, headers: dict[str, str], max_bytes: int | None) -> Reply | None:
        if self.misses >= MAX_MISSES:
            return None
        reply = self._exchange(method, key, headers, max_bytes)
        # Unlocked: the reading pool's threads may lose an update, which only moves the moment
        # the fast path gives up by a request or two.
        self.misses = 0 if reply is not None else self.misses + 1
        if self.misses == MAX_MISSES:
            log.info("S3 reads go through boto3 from now on (%s %s was not answered 200 or 404)",
                     method, key)
        return reply

    def _exchange(self, method: str, key: str, headers: dict[str, str], max_bytes: int | None
                  ) -> Reply | None:
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest

        url = self.base_url + urllib.parse.quote(key, safe="/~")
        try:
            # stream_output: the session leaves the body to us, so that a bounded read stays bounded
            request = AWSRequest(method=method, url=url, headers=headers, stream_output=True)
            S3SigV4Auth(self.credentials.get_frozen_credentials(), "s3", self.region).add_auth(request)
            response = self.http.send(request.prepare())
        except Exception as e:  # connection errors and the like: boto3 retries them
            log.debug("%s %s: %s; through boto3", method, key, e)
            return None
        done = False  # the whole answer read: its connection can serve the next request
        try:
            if response.status_code not in (200, 404):
                return None
            got = {k.lower(): v for k, v in response.headers.items()}
            body = b""
            if method == "GET" and response.status_code == 200:
                body = response.raw.read() if max_bytes is None else response.raw.read(max_bytes + 1)
            whole = response.status_code == 200 and (max_bytes is None or len(body) <= max_bytes)
            done = method == "HEAD" or whole
            return Reply(response.status_code, got, body)
        except Exception as e:
            log.debug("%s %s: %s; through boto3", method, key, e)
            return None
        finally:
            if done:
                response.raw.release_conn()
            else:
                response.raw.close()  # never back to the pool with unread bytes
