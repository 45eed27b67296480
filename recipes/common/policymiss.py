"""policymiss.py WHEEL GLIBC: why a wheel cannot meet a manylinux policy, and the fix.

Printed on one line, for the build's reason (issue 57): which file of the wheel, or which
library it links, needs which glibc symbol version beyond the policy's (GLIBC_2.34 from
libc.so.6, for pthread_create), which Debian package that library comes from, and the fix
for the languages the wheel's code is in: Fortran (it links libgfortran) has no zig or
sysroot toolchain, C/C++ has zig (glibc 2.17), CUDA the sysroot (glibc 2.31). A function
glibc added after the policy's version (gettid: 2.30) is no toolchain's to give: the fix is
then a newer policy, or code without it.

It reads the version references `objdump -p` prints (binutils is where gcc is) of each ELF
file in the wheel and of each library they link that the loader finds (ldconfig's cache),
and asks `dpkg -S` for a library's package. Standard library only: it runs with the target
interpreter. Prints nothing when it finds no cause (auditwheel's own words then stand).
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

MAX_MEMBER = 512 * 1024 * 1024
_NEEDED = re.compile(r"^\s*NEEDED\s+(\S+)", re.M)
_FROM = re.compile(r"^\s*required from (\S+):", re.M)
_VERSION = re.compile(r"\bGLIBC_(\d+)\.(\d+)")


_SYMBOL = re.compile(r"\(?GLIBC_(\d+)\.(\d+)[.\d]*\)?\s+(\S+)$")


def objdump(path, what="-p"):
    try:
        return subprocess.run(["objdump", what, path], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, timeout=60).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.SubprocessError):
        return ""


def symbols(path, undefined):
    """(glibc version, name) of the dynamic symbols of `path` (`objdump -T`): those it takes
    from its libraries when `undefined`, else those it defines (every version of each)."""
    out = []
    for line in objdump(path, "-T").splitlines():
        if ("*UND*" in line) != undefined:
            continue
        m = _SYMBOL.search(line)
        if m:
            out.append(((int(m.group(1)), int(m.group(2))), m.group(3)))
    return out


def new_functions(calls, library, limit):
    """Of `calls` ((version, name) beyond `limit`), those `library` (a path) has in no
    version up to `limit`: functions glibc added later (gettid: 2.30), which no toolchain
    targeting an older glibc links. (name, the oldest version) pairs."""
    if not library:
        return []
    since = {}
    for version, name in symbols(library, False):
        since[name] = min(version, since.get(name, version))
    return sorted({(name, since[name]) for _, name in calls
                   if name in since and since[name] > limit})


def too_new(text, limit):
    """(version, from library) pairs beyond `limit` in an `objdump -p` text."""
    out = []
    lib = ""
    for line in text.splitlines():
        m = _FROM.match(line)
        if m:
            lib = m.group(1)
            continue
        for major, minor in _VERSION.findall(line):
            if (int(major), int(minor)) > limit:
                out.append(((int(major), int(minor)), lib))
    return out


def loader_paths():
    """soname -> path, as the loader finds it: LD_LIBRARY_PATH's folders, then its cache."""
    found = {}
    for folder in filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(":")):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            found.setdefault(name, os.path.join(folder, name))
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"  # a build's PATH may lack /sbin
    try:
        text = subprocess.run([ldconfig, "-p"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              timeout=60).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.SubprocessError):
        return found
    for line in text.splitlines():
        m = re.match(r"^\s*(\S+) \(([^)]*)\) => (\S+)", line)
        if m:  # the first entry of a name is the one the loader takes
            found.setdefault(m.group(1), m.group(3))
    return found


def package_of(path):
    try:
        p = subprocess.run(["dpkg", "-S", os.path.realpath(path)], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    out = p.stdout.decode("utf-8", "replace").split(":", 1)[0].strip()
    return out if p.returncode == 0 else ""


def fix(needed, cuda, library=""):
    """The fix for the wheel's languages (`needed`: every library the wheel and the libraries
    it links name); `library`: the cause is that library's own symbols."""
    if any(n.startswith("libgfortran") for n in needed):
        return ('Fortran (no zig or sysroot for it): suite = "bullseye" with gfortran and '
                'manylinux = "2_31", as nightly init writes, or a manylinux_2_28 base_image '
                '(docs/building.md, "Fortran and LAPACK")')
    if library:
        return (f"a library the wheel links: no toolchain changes {library}'s own symbols; take "
                "it from a source built for the policy (a base_image with it built there, or its "
                "PyPI wheel, e.g. scipy-openblas32 for BLAS/LAPACK)")
    if cuda:
        return "CUDA: toolchain = \"sysroot\" (glibc 2.31) is what nvcc's host compiler can use"
    return "C/C++: toolchain = \"zig\" reaches manylinux_2_17"


def explain(wheel, glibc):
    major, minor = (int(x) for x in glibc.split(".")[:2])
    limit = (major, minor)
    causes, needed, cuda = [], set(), False
    calls = {}  # a file of the wheel -> the glibc symbols it needs beyond the policy
    paths = None
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.is_dir() or info.file_size > MAX_MEMBER or not re.search(r"\.so(\.|$)", info.filename):
                continue
            path = os.path.join(tmp, "member.so")
            with zf.open(info) as src, open(path, "wb") as dst:
                dst.write(src.read())
            text = objdump(path)
            libs = _NEEDED.findall(text)
            needed.update(libs)
            cuda = cuda or any(n.startswith(("libcudart", "libcublas")) for n in libs)
            for version, lib in too_new(text, limit):
                causes.append((version, info.filename, lib, ""))
            calls[info.filename] = [c for c in symbols(path, True) if c[0] > limit]
            if paths is None:
                paths = loader_paths()
            for soname in libs:
                where = paths.get(soname)
                if not where or soname.startswith(("libc.so", "libm.so", "libpthread", "libdl.so")):
                    continue
                text = objdump(where)
                needed.update(_NEEDED.findall(text))  # liblapack names libgfortran
                for version, lib in too_new(text, limit):
                    causes.append((version, where, lib, soname))
    if not causes:
        return ""
    version, who, lib, soname = max(causes)
    newest = f"GLIBC_{version[0]}.{version[1]}"
    if soname:  # the loader's path only when no package says where it comes from
        pkg = package_of(who)
        said = f"{soname} ({'Debian package ' + pkg if pkg else who}) needs {newest} from {lib}"
    else:
        said = f"{who} needs {newest} from {lib or 'glibc'}"
        names = sorted({name for v, name in calls.get(who, ()) if v == version})
        if names:
            said += f" for {', '.join(names[:3])}"
    more = len({c[1] for c in causes}) - 1
    if more > 0:
        said += f" (and {more} more file{'' if more == 1 else 's'})"
    added = [] if soname else new_functions(calls.get(who, ()), (paths or {}).get(lib), limit)
    if added:  # no toolchain helps: the policy, or the code, must change
        names = ", ".join(name for name, _ in added[:3])
        first = max(v for _, v in added)
        # The fix before the why: a reason is cut at 300 characters (nightly.builds.run.buildlog).
        return (f'{said} (policy: glibc {glibc}). Fix: manylinux = "{first[0]}_{first[1]}" or '
                f"newer, or code without {names} (glibc {first[0]}.{first[1]}'s own: no "
                f"toolchain links it for glibc {glibc})")
    return f"{said} (policy: glibc {glibc}). Fix for {fix(needed, cuda, soname)}"


def main(argv):
    if len(argv) != 3:
        print("usage: policymiss.py WHEEL GLIBC", file=sys.stderr)
        return 2
    try:
        print(explain(argv[1], argv[2]))
    except (OSError, zipfile.BadZipFile, ValueError):
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
