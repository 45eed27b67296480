"""The build environment's installer and key, for recipes/common/buildenv.sh (Python 3.7+).

  envkey.py installer   (run by the build's interpreter)
      which tool fills environments for this interpreter: prints "uv" or "pip" on the first line, the
      reason on the second, then (uv) the arguments that hand pip's configuration on to uv,
      one a line. uv reads none of pip's configuration, so every setting naming where
      packages come from is translated (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS,
      PIP_NO_INDEX, PIP_CONSTRAINT and the same keys of pip's configuration files); a setting
      that cannot be handed on keeps pip, so uv never fetches from PyPI what the user pointed
      elsewhere.
  envkey.py key PYTHON INSTALLER [REQUIREMENT...]
      the key of a build environment: one "field: value" line each for the interpreter (its
      path, its binary's identity, its version), the requirements, where they come from, the
      isolation mode and the installer
  envkey.py check KEYFILE NEWKEY PYTHON INSTALLER [REQUIREMENT...]
      key (written to NEWKEY) and compare with KEYFILE, in one process
  envkey.py pip-wheel
      the pip wheel ensurepip would install into a venv of this interpreter (exit 1: none)
  envkey.py compare KEYFILE  (the new key on stdin)
      exit 0 when KEYFILE holds the same key (its "backend asks for" line, written after the
      fill, is checked by buildenv.sh once the backend has been asked again); else print why
      not (one line, naming the fields that changed, never an index URL: it may carry a
      credential) and exit 1
"""

from __future__ import annotations

import configparser
import hashlib
import os
import subprocess
import sys

# pip settings (environment PIP_<NAME>, or <name> in a configuration file) and uv's flag
# for each: where packages come from.
SOURCES = (
    ("index-url", "--index-url"),
    ("extra-index-url", "--extra-index-url"),
    ("find-links", "--find-links"),
    ("constraint", "--constraint"),
)
# pip settings that change nothing about what is installed or where from.
HARMLESS = {
    "default-timeout", "timeout", "disable-pip-version-check", "no-cache-dir",
    "cache-dir", "progress-bar", "quiet", "verbose", "retries", "root-user-action",
    "no-warn-script-location", "no-input", "no-color", "no-python-version-warning", "log",
}
# Sections of pip's configuration files that `pip install` (and `pip wheel`) read.
SECTIONS = ("global", "install", "wheel")
# The key file's last line: what the backend asked for (get_requires_for_build_wheel).
BACKEND = "backend asks for: "
# Where environment variables name a source, what the fields of the key are called.
KEY_ENV = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX",
           "PIP_CONSTRAINT", "NIGHTLY_WHEELHOUSE", "NIGHTLY_CROSS_PYTHON", "_PYTHON_HOST_PLATFORM")


# pip's system-wide configuration file, read after XDG_CONFIG_DIRS' (a test sets its own).
SYSTEM_FILES = ["/etc/pip.conf"]


def config_files(env, prefix):
    """pip's configuration files, in the order pip reads them (later ones win);
    PIP_CONFIG_FILE=os.devnull: none at all."""
    named = env.get("PIP_CONFIG_FILE", "")
    if named == os.devnull:
        return []
    files = []
    for folder in reversed(env.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep)):
        if folder:
            files.append(os.path.join(folder, "pip", "pip.conf"))
    files.extend(SYSTEM_FILES)
    home = env.get("HOME", "")
    if home:
        files.append(os.path.join(home, ".pip", "pip.conf"))
        config_home = env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
        files.append(os.path.join(config_home, "pip", "pip.conf"))
    if prefix:
        files.append(os.path.join(prefix, "pip.conf"))
    if named:
        files.append(named)
    return [f for f in files if os.path.isfile(f)]


def pip_settings(env, files):
    """{name: value} of pip's configuration: the files' [global]/[install]/[wheel], then the
    environment's PIP_* (which pip lets win)."""
    settings = {}
    for path in files:
        parser = configparser.RawConfigParser()
        try:
            parser.read(path)
        except (configparser.Error, OSError, UnicodeDecodeError) as e:
            raise ValueError(f"pip's configuration file {path} cannot be read ({e})") from e
        for section in SECTIONS:
            if parser.has_section(section):
                for name, value in parser.items(section):
                    settings[name.replace("_", "-")] = value
    for name, value in env.items():
        if name.startswith("PIP_") and name != "PIP_CONFIG_FILE":
            settings[name[4:].lower().replace("_", "-")] = value
    return settings


def _true(value):
    return value.strip().lower() in ("1", "yes", "true", "on")


def uv_arguments(settings):
    """uv's arguments for pip's `settings`; ValueError naming a setting uv cannot be given."""
    args = []
    for name, flag in SOURCES:
        for value in settings.get(name, "").split():
            args += [flag, value]
    if _true(settings.get("no-index", "0")):
        args.append("--no-index")
    if settings.get("extra-index-url", "").split():
        # pip takes the best version across all its indexes; uv by default the first index
        # that has the name: pip's rule kept.
        args += ["--index-strategy", "unsafe-best-match"]
    for name in sorted(settings):
        if name in HARMLESS or name in ("no-index", "cert") or name in dict(SOURCES):
            continue
        raise ValueError(f"pip's configuration sets {name}, which uv cannot be given")
    return args


def choose(env, python_version, prefix=""):
    """(tool, reason, uv arguments) for a build with these environment variables and an
    interpreter of `python_version` (a tuple). pip's `cert` (a CA bundle) becomes uv's
    SSL_CERT_FILE: the first argument is then SSL_CERT_FILE=<path>."""
    uv = env.get("NIGHTLY_UV", "")
    if env.get("NIGHTLY_INSTALLER", "auto") == "pip":
        return "pip", "[build] installer = \"pip\"", []
    if not uv or not os.access(uv, os.X_OK):
        return "pip", "no uv here (NIGHTLY_UV unset or not runnable)", []
    if python_version < (3, 8):
        return "pip", "uv does not make environments of Python {}.{}".format(*python_version[:2]), []
    try:
        settings = pip_settings(env, config_files(env, prefix))
        args = uv_arguments(settings)
    except ValueError as e:
        return "pip", str(e), []
    if settings.get("cert"):
        args.insert(0, "SSL_CERT_FILE={}".format(settings["cert"]))
    return "uv", f"uv {uv}", args


def interpreter_identity(python):
    """The interpreter's real path, its binary's identity (size, change time, inode) and
    version: a rebuilt or upgraded interpreter at the same path is another one."""
    real = os.path.realpath(python)
    st = os.stat(real)
    if real == os.path.realpath(sys.executable):  # the usual case (buildenv.sh): no process
        version, prefix = sys.version.replace("\n", " "), sys.prefix
    else:
        out = subprocess.check_output(
            [python, "-c", "import sys; print(sys.version.replace('\\n', ' ')); print(sys.prefix)"])
        version, prefix = out.decode("utf-8", "replace").splitlines()[:2]
    return [
        f"interpreter: {real}",
        f"interpreter binary: size {st.st_size}, mtime_ns {st.st_mtime_ns}, inode {st.st_ino}",
        f"python version: {version}",
        f"python prefix: {prefix}",
    ]


def key_lines(env, python, installer, requirements, files):
    lines = interpreter_identity(python)
    lines.append("build requirements: {}".format(" ".join(requirements)))
    for name in KEY_ENV:
        lines.append("source {}: {}".format(name, env.get(name, "")))
    h = hashlib.sha256()
    for path in files:
        with open(path, "rb") as f:
            h.update(path.encode() + b"\0" + f.read(1 << 20) + b"\0")
    lines.append(f"source pip configuration files: {h.hexdigest()}")
    lines.append("isolation: {}".format(env.get("NIGHTLY_BUILD_ISOLATION", "1")))
    lines.append(f"installer: {installer}")
    return lines


def why_different(old, new):
    """One line naming what differs between two keys (None: the same)."""
    def fields(lines):
        out = {}
        for line in lines:
            name, _, value = line.partition(": ")
            out[name] = value
        return out
    a, b = fields(old), fields(new)
    changed = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
    if not changed:
        return None
    if changed == ["build requirements"]:
        return "its build requirements changed ({} -> {})".format(
            a.get(changed[0]) or "none", b.get(changed[0]) or "none")
    return "its key changed: {}".format(", ".join(changed))


def main(argv):
    if argv == ["installer"]:
        tool, reason, args = choose(os.environ, tuple(sys.version_info[:2]), sys.prefix)
        sys.stdout.write("\n".join([tool, reason, *args]) + "\n")
        return 0
    if len(argv) >= 3 and argv[0] == "key":
        files = config_files(os.environ, "")
        lines = key_lines(os.environ, argv[1], argv[2], argv[3:], files)
        sys.stdout.write("\n".join(lines) + "\n")
        return 0
    if len(argv) >= 5 and argv[0] == "check":
        # check OLD NEW PYTHON INSTALLER [REQ...]: key then compare, in one process.
        new = key_lines(os.environ, argv[3], argv[4], argv[5:], config_files(os.environ, ""))
        with open(argv[2], "w") as f:
            f.write("\n".join(new) + "\n")
        return compare(argv[1], new)
    if argv == ["pip-wheel"]:
        found = ensurepip_wheels(["pip"])
        if not found:
            return 1
        print(found[0])
        return 0
    if len(argv) == 2 and argv[0] == "compare":
        return compare(argv[1], sys.stdin.read().splitlines())
    sys.stderr.write(__doc__)
    return 2


def ensurepip_wheels(names):
    """The wheels of `names` that ensurepip installs, where this interpreter keeps them
    (ensurepip's _bundled folder, or the distribution's: Debian's /usr/share/python-wheels);
    [] when not all are there."""
    import glob
    import sysconfig
    try:
        import ensurepip
    except ImportError:
        return []
    for folder in (os.path.join(os.path.dirname(ensurepip.__file__), "_bundled"),
                   sysconfig.get_config_var("WHEEL_PKG_DIR") or "", "/usr/share/python-wheels"):
        found = [sorted(glob.glob(os.path.join(folder, n + "-*.whl")))[-1:] for n in names]
        if folder and all(found):
            return [f[0] for f in found]
    return []


def compare(old_path, new):
    """0 when the key file at `old_path` holds the key `new` (its backend line aside); else
    1, printing why not."""
    try:
        with open(old_path) as f:
            old = f.read(1 << 20).splitlines()
    except FileNotFoundError:
        print("it has no key file (its fill did not finish, or the key was removed)")
        return 1
    except (OSError, UnicodeDecodeError) as e:
        print("its key file cannot be read ({})".format(getattr(e, "strerror", None) or e))
        return 1
    why = why_different([line for line in old if not line.startswith(BACKEND)], new)
    if why:
        print(why)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
