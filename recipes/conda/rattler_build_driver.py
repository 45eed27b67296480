"""Build one conda package with rattler-build through its Python API (py-rattler-build).

Run by recipes/conda/build.sh with an interpreter that has py-rattler-build; the recipe
template reads everything else from the environment. Usage:

    rattler_build_driver.py RECIPE_YAML OUTPUT_DIR LIST_FILE

Builds offline: no channel at all (the template has no build or host requirements, so
nothing needs solving or downloading). Writes the path of every package produced into
LIST_FILE, one a line, after checking each against what build.sh asked for.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import rattler_build as rb


class PlainLog:
    """rattler-build's progress events as plain lines in the build log (no terminal UI:
    the output goes to a file)."""

    def on_download_start(self, event: object) -> None:
        print(f"[conda] rattler-build download: {getattr(event, 'url', event)}", flush=True)

    def on_download_progress(self, event: object) -> None:
        pass

    def on_download_complete(self, event: object) -> None:
        pass

    def on_build_step(self, event: object) -> None:
        print(f"[conda] rattler-build [{event.step_name}] {event.message}", flush=True)

    def on_log(self, event: object) -> None:
        level = "" if event.level == "info" else f"{event.level.upper()}: "
        for line in str(event.message).splitlines() or [""]:
            if level and not line.strip():
                continue  # rattler-build frames warning blocks with empty warnings
            print(f"  {level}{line}", flush=True)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    recipe_path, output_dir, list_file = (Path(a) for a in argv)
    print(
        f"[conda] rattler-build {rb.get_rattler_build_version_py()} (py-rattler-build) "
        f"building {recipe_path}",
        flush=True,
    )
    recipe = rb.Stage0Recipe.from_file(recipe_path)
    results = recipe.run_build(
        output_dir=output_dir,
        channels=[],
        tool_config=rb.ToolConfiguration(test_strategy="skip"),
        progress_callback=PlainLog(),
        no_build_id=True,
        package_format="conda",
        # The rendered recipe names this build's work folders: no two builds would match.
        # The provenance records the recipe and its sha256 instead.
        no_include_recipe=True,
    )
    expected = {
        "name": os.environ["NIGHTLY_CONDA_NAME"],
        "version": os.environ["NIGHTLY_CONDA_VERSION"],
        "build_string": os.environ["NIGHTLY_CONDA_BUILD_STRING"],
    }
    packages = []
    for result in results:
        for package_path in result.packages:
            package = rb.Package.from_file(package_path)
            got = {key: str(getattr(package, key)) for key in expected}
            if got != expected:
                print(f"[conda] ERROR: {package_path} is {got}, expected {expected}", file=sys.stderr)
                return 1
            print(
                f"[conda] built {package_path}: {len(package.files)} files, "
                f"depends {list(package.depends)}, constrains {list(package.constrains)}",
                flush=True,
            )
            packages.append(str(package_path))
    if not packages:
        print("[conda] ERROR: rattler-build reported success but produced no package", file=sys.stderr)
        return 1
    list_file.write_text("".join(p + "\n" for p in packages))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except rb.RattlerBuildError as error:
        # The library's own message says what failed (recipe, build script, packaging);
        # a Python traceback on top would only bury it.
        print(f"[conda] ERROR: rattler-build failed: {error}", file=sys.stderr)
        sys.exit(1)
