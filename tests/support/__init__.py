"""What the unit, integration and reliability tests and the benchmarks share.

Imported as `tests.support.<module>` (pytest puts the repository on sys.path, see
pyproject's `pythonpath`; the benchmarks put it there themselves). No test module imports
another test module or a conftest: what two of them need lives here.

- `day`: the day folder of a night, found the way nightly finds it.
- `net`: `free_port`.
- `s3`: moto's S3 server on loopback (`moto_server`, `StoppableS3`), the AWS environment.
- `cli`: the `nightly` command as a subprocess or in the background, process checks.
- `projects`: small projects with configurable bash recipes (`write_project`, `recipe_text`).
- `wheels`: wheel makers (real tiny wheels, and wheel-named packages from a recipe).
- `servers`: pypiserver, `python -m http.server`, fresh virtual environments and pip.
- `published`: checks of a published tree (objects, manifests, index pages link by link).
- `traced`: `nightly` under strace, stopped or killed at an exact system call.
- `leaks`: secret values searched for in files and text.
- `engine`: the Podman engine (scripts/container-engine.sh) and its session fixture.
- `fake_anaconda`: an anaconda.org stand-in on loopback.
- `fixtures`: the pytest fixtures over these, registered by tests/conftest.py.
"""
