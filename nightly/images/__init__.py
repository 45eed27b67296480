"""Builder images declared in the configuration ([builders]) and built by nightly itself.

Modules, bottom-up (the declaration, its validation and content hashes, is
`nightly.core.spec`: config imports it): `rootfs` (debootstrap), `cuda` (a CUDA toolkit from PyPI + Debian),
`context` (build contexts: interpreters, wheels, Dockerfiles), `engine` (the engine's API:
import, build, inspect), `runtime` (the runtime image a builder's wheels are tested in, and
which image each test runs in), `commands` (build / list / check for a configuration, the
night's preflight) and `cli` (`nightly images ...`). See docs/images.md.
"""
