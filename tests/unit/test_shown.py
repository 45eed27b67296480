"""nightly.format: what a build wrote, fit to show. Escape sequences go (7-bit and C1 forms,
terminated or not), every other control and bidirectional control is made visible, words
stay; and whatever the input, what comes out holds nothing a terminal acts on."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nightly.format import BIDI, ShownStderr, log_to_stderr, say_err, shown, shown_log
from nightly.night.notify import body, subject
from nightly.workspace.summary import BuildSummary, Summary

# Nothing of these may be left: C0 but tab and newline, DEL, C1, bidirectional controls.
FORBIDDEN = ({chr(n) for n in range(0x20)} - {"\t", "\n"}) | {chr(n) for n in range(0x7F, 0xA0)} | BIDI


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("plain words, tabs\tand\nlines", "plain words, tabs\tand\nlines"),
        ("\x1b[1;31mred\x1b[0m", "red"),
        ("a\x1b]0;pwned\x07b", "ab"),  # OSC 0 (the title), BEL-terminated
        ("a\x1b]0;pwned\x1b\\b", "ab"),  # ... ST-terminated
        ("a\x1b]0;pwned", "a"),  # ... never terminated: to the end of the line
        ("x\x1b]0;pwned\ny", "x\ny"),
        ("\x1b[?1049halt", "alt"),  # the alternate screen
        ("\x1bcreset", "reset"),  # RIS
        ("\x1b(Bcharset", "charset"),
        ("\x1b]8;;https://evil.example/\x1b\\link\x1b]8;;\x1b\\", "link"),  # OSC 8
        ("\x9b31mred", "red"),  # C1 CSI
        ("\x9d0;pwned\x9cafter", "after"),  # C1 OSC ... C1 ST
        ("\x1bPdcs\x1b\\after", "after"),  # DCS
        ("left \u202eright", "left \\u202eright"),  # RLO made visible
        ("\u2066iso\u2069 \u200e\u200f\u061c", "\\u2066iso\\u2069 \\u200e\\u200f\\u061c"),
        ("bell\x07 del\x7f nul\x00", "bell\\x07 del\\x7f nul\\x00"),
        ("lone esc \x1b", "lone esc \\x1b"),
        ("crlf\r\nline\r", "crlf\nline"),
        ("bar 10%\rbar 20%", "bar 10%\\x0dbar 20%"),
        ("\x85nel \u2028sep", "\\x85nel \\u2028sep"),
        ("bad \udcff byte", "bad \\udcff byte"),  # surrogateescape'd: could not be written
        ("ünïcödé ✓ 中文", "ünïcödé ✓ 中文"),
    ],
)
def test_shown(raw: str, expected: str) -> None:
    assert shown(raw) == expected
    assert shown(expected) == expected


def test_one_line_shows_its_newlines() -> None:
    assert shown("a\nb\tc", lines=False) == "a\\x0ab\tc"


def test_a_log_keeps_what_a_terminal_leaves_after_a_progress_bar() -> None:
    assert shown_log("get 10%\rget 100%\r\nnext\x1b[K\n\u202e") == "get 100%\nnext\n\\u202e"


@given(st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(sorted(FORBIDDEN))))
def test_nothing_a_terminal_acts_on_is_left(text: str) -> None:
    out = shown(text)
    assert not set(out) & FORBIDDEN, repr(out)
    assert shown(out) == out  # once is enough
    assert "\n" not in shown(text, lines=False)


def test_the_mail_shows_a_reason_as_data() -> None:
    evil = "ERROR: x \x1b]0;pwned\x07 \x9b31m \u202eevil"
    s = Summary(date="2024_05_01", machine="m\x1bc",
                builds={"b\u202e1": BuildSummary(outcome="failed", reason=evil)})
    for text in (body(s), subject(s)):
        assert not set(text) & FORBIDDEN, repr(text)
        assert "pwned" not in text
    assert "\\u202eevil" in body(s)
    assert "\n" not in subject(s)


@pytest.fixture
def stderr_logging() -> Iterator[None]:
    """log_to_stderr's handler, taken off the root logger again afterwards."""
    yield
    root = logging.getLogger()
    for h in [h for h in root.handlers if isinstance(h, ShownStderr)]:
        root.removeHandler(h)


def test_warnings_and_log_records_on_stderr_are_shown_as_data(
    capsys: pytest.CaptureFixture[str], stderr_logging: None,
) -> None:
    """What nightly prints on stderr besides its outputs: a warning line (say_err) and a
    log record of nightly's or a library's (a bucket's key in an index warning), which
    Python's last-resort handler wrote raw."""
    evil = "key \x1b]0;pwned\x07\x1b[?1049h\x9b31m\u202ebackwards"
    say_err(f"warning: {evil}")
    log_to_stderr()
    log_to_stderr()  # a caller in-process may call main() again: still one handler
    logging.getLogger("nightly.index.coldread").warning("%s/%s is unreadable", "s3://b", evil)
    logging.getLogger("nightly.index.coldread").info("not shown: below WARNING, as before")
    err = capsys.readouterr().err
    assert not set(err) & FORBIDDEN - {"\n"}, repr(err)
    assert "pwned" not in err
    assert err.splitlines() == ["warning: key \\u202ebackwards",
                                "s3://b/key \\u202ebackwards is unreadable"]


def test_a_library_that_gives_its_logger_a_handler_is_not_written_on_stderr(
    capsys: pytest.CaptureFixture[str], stderr_logging: None,
) -> None:
    """urllib3 gives its logger a NullHandler, so Python's last resort never wrote its retry
    warnings ("Retrying (...) after connection broken by ReadTimeoutError"): nightly's
    handler leaves them out too, and still writes a library's record that has none."""
    chatty = logging.getLogger("nightly_test_lib_with_handler")
    null = logging.NullHandler()
    chatty.addHandler(null)
    try:
        log_to_stderr()
        logging.getLogger("nightly_test_lib_with_handler.connectionpool").warning("Retrying")
        logging.getLogger("nightly_test_lib_without").warning("said once")
    finally:
        chatty.removeHandler(null)
    assert capsys.readouterr().err.splitlines() == ["said once"]
