"""Masking secrets by value (nightly/redact.py): whole, URL-quoted, base64, across chunks."""

from __future__ import annotations

import base64
from types import SimpleNamespace
from urllib.parse import quote

from hypothesis import given, settings
from hypothesis import strategies as st

from nightly.redact import Masker, mask, secret_values

SECRET = "s3cr3t/+?&-value-42"


def test_mask_covers_quoted_and_base64_forms() -> None:
    text = (f"a {SECRET} b {quote(SECRET, safe='')} c {base64.b64encode(SECRET.encode()).decode()}"
            f" d {base64.urlsafe_b64encode(SECRET.encode()).decode().rstrip('=')}")
    masked = mask(text, SECRET)
    assert masked == "a *** b *** c *** d ***"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40),
       st.lists(st.integers(0, 200), min_size=1, max_size=8))
def test_a_stream_never_shows_a_secret_whatever_the_chunks(before: str, after: str,
                                                           cuts: list[int]) -> None:
    data = f"{before}{SECRET}{after}{SECRET[:5]}".encode()
    points = sorted({min(c, len(data)) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    m = Masker([SECRET])
    out = b"".join(m.feed(c) for c in chunks) + m.flush()
    assert SECRET.encode() not in out
    assert out == mask(data.decode(), SECRET).encode()


def test_a_stream_without_secrets_passes_unchanged() -> None:
    m = Masker([])
    assert m.feed(b"abc") == b"abc"
    assert Masker(["short"]).feed(b"short") == b"short"  # too short to be masked


def test_secret_values_reads_where_nightly_reads(tmp_path: object) -> None:
    from pathlib import Path

    token_file = Path(str(tmp_path)) / "token"
    token_file.write_text("file-token-123456\n")
    config = SimpleNamespace(
        publish=SimpleNamespace(token_env="ANA", pypi_password_env="PYPI",
                                token_file=str(token_file), url="", profile=""),
        notify=SimpleNamespace(smtp_password_env="SMTP"),
        cluster=SimpleNamespace(staging="", profile=""),
        cache=SimpleNamespace(url="", profile=""),
    )
    env = {"ANA": "ana-token-123456", "PYPI": "pypi-pass-123456", "SMTP": "smtp-pass-123456",
           "AWS_SECRET_ACCESS_KEY": "aws-secret-123456", "OTHER": "not-a-secret-123"}
    values = set(secret_values(config, env))
    assert values == {"file-token-123456", "ana-token-123456", "pypi-pass-123456",
                      "smtp-pass-123456", "aws-secret-123456"}
