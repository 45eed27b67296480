#!/usr/bin/env bash
# Headless Chromium from Debian's packages, for the report's browser test. Idempotent: does
# nothing when /usr/bin/chromium is already there; runs `apt-get update` only when the package
# lists do not know chromium yet (or are stale). Needs root (or sudo without a password).
set -euo pipefail

CHROMIUM=/usr/bin/chromium
if [ -x "$CHROMIUM" ]; then
  echo "chromium: $("$CHROMIUM" --version 2>/dev/null || echo present)"
  exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
  else
    echo "browser.sh: $CHROMIUM is missing and this user cannot install packages (not root, no sudo)" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
# Serialize concurrent callers (two test sessions starting at once) on dpkg's own lock.
APT_OPTS=(-o DPkg::Lock::Timeout=300)
install() {
  "${SUDO[@]}" apt-get "${APT_OPTS[@]}" install -y -q --no-install-recommends chromium fonts-dejavu-core >&2
}
candidate=$(apt-cache policy chromium 2>/dev/null | awk '/Candidate:/ {print $2}')
if [ -z "$candidate" ] || [ "$candidate" = "(none)" ]; then
  "${SUDO[@]}" apt-get "${APT_OPTS[@]}" update -q >&2
  install
elif ! install; then
  # Stale package lists (the version they name is gone from the mirror): refresh once.
  "${SUDO[@]}" apt-get "${APT_OPTS[@]}" update -q >&2
  install
fi
if [ ! -x "$CHROMIUM" ]; then
  echo "browser.sh: installed the chromium package but $CHROMIUM is still missing" >&2
  exit 1
fi
echo "chromium: $("$CHROMIUM" --version 2>/dev/null || echo installed)"
