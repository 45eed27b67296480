"""Cache-Control of what nightly publishes for browsers and pip (index pages, reports, their
logs), so that a CDN in front of the bucket does not serve yesterday's pages.

Nightly and test folders change every night: a short lifetime. Release folders change only
at a release: a longer one. Packages themselves are immutable (their names carry the
version) and keep the store's default.
"""

from __future__ import annotations

from nightly.stores.layout import channel_of

NIGHTLY_MAX_AGE_S = 300  # 5 minutes: a night's pages are rewritten as its machines finish
RELEASE_MAX_AGE_S = 3600  # an hour: a promotion's pages appear within the hour
SHORT_CHANNELS = ("nightly", "test")


def for_channel(channel: str) -> str:
    age = NIGHTLY_MAX_AGE_S if channel in SHORT_CHANNELS else RELEASE_MAX_AGE_S
    return f"public, max-age={age}"


def for_key(key: str) -> str:
    """The Cache-Control of a published page by where it is: whl/nightly/..., whl/test/...
    are short-lived; the release channel's folders (whl/<accelerator>/...) live longer."""
    return for_channel(channel_of(key))
