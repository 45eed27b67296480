"""The S3 store's signed reads (stores/s3reads.py) against moto's S3 server over HTTP: what a
HEAD and a small GET give is what boto3's head_object/get_object give, without boto3 sending
anything; an answer the fast path does not take is asked again through boto3."""

from __future__ import annotations

import base64
import hashlib
from typing import TYPE_CHECKING, Any, cast

import boto3
import pytest

from nightly.errors import ObjectTooLarge
from nightly.stores import S3Store, open_store
from tests.support.s3 import Moto

if TYPE_CHECKING:
    from botocore.compat import HTTPHeaders

# '+' and a space must be quoted as botocore quotes them, or the signature does not match.
WHEEL = "whl/nightly/cpu/torch-2.10.0.dev20261121+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
ODD = "whl/nightly/cpu/a b+c~d.whl"


def store_of(moto: Moto, bucket: str, **kw: Any) -> tuple[S3Store, list[str]]:
    """A store and the operations boto3 itself sent (its before-send events)."""
    store = open_store(f"s3://{bucket}/pub", endpoint_url=moto.endpoint, **kw)
    assert isinstance(store, S3Store)
    sent: list[str] = []
    store._client.meta.events.register(
        "before-send.s3", lambda event_name="", **_: sent.append(event_name.rpartition(".")[2])
    )
    return store, sent


def populate(moto: Moto, bucket: str) -> dict[str, bytes]:
    client = boto3.client("s3", endpoint_url=moto.endpoint)
    bodies = {WHEEL: b"wheel bytes", ODD: b"odd", WHEEL + ".metadata": b"Metadata-Version: 2.1\n"}
    digest = hashlib.sha256(bodies[WHEEL]).hexdigest()
    # PyTorch's convention: the sha256 in x-amz-meta-checksum-sha256.
    client.put_object(Bucket=bucket, Key=f"pub/{WHEEL}", Body=bodies[WHEEL],
                      Metadata={"checksum-sha256": digest})
    client.put_object(Bucket=bucket, Key=f"pub/{ODD}", Body=bodies[ODD], Metadata={"sha256": "0" * 64})
    # Only S3's own checksum.
    md = bodies[WHEEL + ".metadata"]
    client.put_object(Bucket=bucket, Key=f"pub/{WHEEL}.metadata", Body=md, ChecksumAlgorithm="SHA256",
                      ChecksumSHA256=base64.b64encode(hashlib.sha256(md).digest()).decode())
    return bodies


def test_signed_reads_answer_as_boto3_does(moto: Moto, bucket: str) -> None:
    bodies = populate(moto, bucket)
    fast, sent = store_of(moto, bucket)
    plain, plain_sent = store_of(moto, bucket, signed_reads=False)
    assert fast._reads is not None
    assert plain._reads is None
    for key in (*bodies, "whl/nightly/cpu/missing.whl"):
        assert fast.head(key) == plain.head(key), key
        assert fast.get_bytes(key) == plain.get_bytes(key), key
    assert fast.requests_by_op == plain.requests_by_op  # counted alike
    wheel, native = fast.head(WHEEL), fast.head(WHEEL + ".metadata")
    assert wheel is not None
    assert wheel.sha256 == hashlib.sha256(bodies[WHEEL]).hexdigest()
    assert native is not None
    assert native.sha256 == hashlib.sha256(bodies[WHEEL + ".metadata"]).hexdigest()
    assert fast.get_bytes(ODD) == (b"odd", plain.head(ODD).etag)  # type: ignore[union-attr]
    with pytest.raises(ObjectTooLarge):
        fast.get_bytes(WHEEL, max_bytes=4)
    assert fast.get_bytes(WHEEL, max_bytes=len(bodies[WHEEL])) == plain.get_bytes(WHEEL)
    # None of it went through boto3; all of the plain store's did.
    assert sent == []
    assert set(plain_sent) == {"HeadObject", "GetObject"}


class Refusing:
    """The client's HTTP session, answering 503 to the first `n` requests it is given."""

    def __init__(self, http: Any, n: int) -> None:
        self.http, self.n = http, n

    def send(self, request: Any) -> Any:
        if self.n > 0:
            self.n -= 1
            from botocore.awsrequest import AWSResponse

            class Raw:
                def read(self, *_: Any) -> bytes:
                    return b""

                def close(self) -> None:
                    pass

            return AWSResponse(request.url, 503, cast("HTTPHeaders", {"Retry-After": "0"}), Raw())
        return self.http.send(request)


def test_what_the_fast_path_does_not_take_goes_through_boto3(moto: Moto, bucket: str) -> None:
    bodies = populate(moto, bucket)
    store, sent = store_of(moto, bucket)
    assert store._reads is not None
    store._reads.http = Refusing(store._reads.http, 2)
    info = store.head(WHEEL)
    got = store.get_bytes(WHEEL + ".metadata")
    assert info is not None
    assert info.sha256 == hashlib.sha256(bodies[WHEEL]).hexdigest()
    assert got is not None
    assert got[0] == bodies[WHEEL + ".metadata"]
    assert sent == ["HeadObject", "GetObject"]  # each asked again through boto3, once
    assert store.head(WHEEL) == info
    assert sent == ["HeadObject", "GetObject"]  # then the fast path again
