"""Tell people how the night went: a configured command gets summary.json on stdin, and/or
an email goes out through a configured SMTP server. A notification failure is reported in the
master log; it never changes the night's outcome.

The command runs with a minimal environment (`ENV_KEPT`: PATH, HOME, LANG and the NOTIFY_*
variables of the caller, for the command's own settings), never nightly's credentials; what
it prints is masked like build output before it reaches the master log."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Mapping
from typing import Any

from nightly import procs
from nightly.config import Notify
from nightly.config.timeouts import ExternalTimeouts, default_timeouts
from nightly.format import shown
from nightly.redact import SECRET_RE, mask, safe_url
from nightly.workspace.summary import Summary

# What the notification command inherits: enough to find programs and speak the language, plus
# NOTIFY_* (a webhook's URL or token for the command, named so on purpose).
ENV_KEPT = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")
ENV_PREFIX = "NOTIFY_"


def command_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if k in ENV_KEPT or k.startswith(ENV_PREFIX)}


def subject(summary: Summary) -> str:
    """Names the failures (the first few), so a mail client's list says what broke."""
    from nightly.history.triage import subject_counts

    c = summary.counts
    failed = sorted(k for k, v in summary.builds.items() if v.outcome != "succeeded")
    if failed:
        names = ", ".join(failed[:3]) + (f" and {len(failed) - 3} more" if len(failed) > 3 else "")
        state = f"{len(failed)} failed: {names}"
    else:
        state = "all succeeded"
    if summary.failed_uploads:
        state += f"; {len(summary.failed_uploads)} upload(s) failed"
    counts = subject_counts(summary.extra)
    done = f"{c.get('succeeded', 0)}/{c.get('total', 0)}"
    if counts:  # first, so the list of a mail client shows it: "3 new failures, 2 still failing"
        return shown(f"nightly {summary.date}: {counts} ({state}; {done} "
                     f"succeeded on machine {summary.machine})", lines=False)
    return shown(f"nightly {summary.date} on machine {summary.machine}: {state} ({done} "
                 "succeeded)", lines=False)


def _failures(summary: Summary) -> dict[str, Any]:
    """summary.json's "failures" (nightly.history.triage), {} when it has none."""
    f = summary.extra.get("failures")
    return f if isinstance(f, dict) else {}


def body(summary: Summary) -> str:
    lines = [subject(summary), "", f"source: {summary.source or '-'}", ""]
    failed = {k: v for k, v in summary.builds.items() if v.outcome != "succeeded"}
    if failed:
        lines.append("Failed builds:")
        for bid, b in sorted(failed.items()):
            lines.append(f"  {bid}: {b.reason or b.outcome}  (log: {b.log or '-'})")
        facts = _failures(summary).get("builds") or {}
        for g in _failures(summary).get("groups") or []:
            lines.append(f"  {len(g['builds'])} build(s): {g['signature']}")
            for bid in g["builds"]:
                f = facts.get(bid) or {}
                lines.append(f"    {bid}: {f.get('headline', '')}")
                if f.get("bisect"):
                    from nightly.report.triage import bisect_line

                    lines.append(f"      bisect: {bisect_line(f['bisect'])}")
    if summary.failed_uploads:
        lines += ["", "Failed uploads (retry with `nightly upload`): "
                  + ", ".join(summary.failed_uploads)]
    # Reasons and signatures quote what builds printed: data in a mail as anywhere.
    return shown("\n".join(lines)) + "\n"


def send(cfg: Notify, summary: Summary, secrets: tuple[str, ...] = (), *,
         timeouts: ExternalTimeouts | None = None) -> list[str]:
    """Send what is configured: summary.json's JSON to the command and as the mail's
    attachment. Returns messages for the master log (errors included)."""
    waits = timeouts or default_timeouts()
    if summary.exit_code == 0 and not cfg.always:
        return []
    out: list[str] = []
    # The caller's values of secret-looking variables (TWINE_PASSWORD, AWS_*, tokens) at least.
    secrets = (*secrets, *(v for k, v in os.environ.items() if SECRET_RE.search(k) and len(v) > 5))
    payload = json.dumps(summary.to_json(), indent=2, sort_keys=True)
    if cfg.command:
        try:
            proc = procs.call(shlex.split(cfg.command), input=payload, timeout=waits.notify_command,
                              env=command_env())
            if proc.returncode == 0:
                out.append(f"notified: {cfg.command}")
            else:
                said = safe_url(mask(proc.stderr, *secrets)).strip()[-500:]
                out.append(f"notification command exited {proc.returncode}: {said}")
        except (OSError, subprocess.TimeoutExpired) as e:
            out.append(f"notification command failed: {e}")
    if cfg.smtp_host and cfg.smtp_to:
        out.append(_mail(cfg, summary, payload, waits.smtp))
    return out


def _mail(cfg: Notify, summary: Summary, payload: str, timeout_s: float) -> str:
    import smtplib
    from email.message import EmailMessage

    msg = EmailMessage()
    msg["Subject"] = subject(summary)
    msg["From"] = cfg.smtp_from or "nightly@localhost"
    msg["To"] = ", ".join(cfg.smtp_to)
    msg.set_content(body(summary))
    msg.add_attachment(payload.encode(), maintype="application", subtype="json",
                       filename="summary.json")
    try:
        with smtplib.SMTP(cfg.smtp_host, cfg.smtp_port, timeout=timeout_s) as smtp:
            if cfg.smtp_user:
                password = os.environ.get(cfg.smtp_password_env, "") if cfg.smtp_password_env else ""
                smtp.starttls()
                smtp.login(cfg.smtp_user, password)
            smtp.send_message(msg)
    except (OSError, smtplib.SMTPException) as e:
        # The exception text of smtplib never holds the password; the user name is fine.
        return f"email to {', '.join(cfg.smtp_to)} via {cfg.smtp_host}:{cfg.smtp_port} failed: {e}"
    return f"emailed {', '.join(cfg.smtp_to)}"
