"""The container executor's check before a night: every job's image is on the engine (pulled
when `pull` is set), the toolkit each image was built with is read from its nvcc label, and
every host CUDA folder to be mounted exists. All problems are reported at once, as one
ExecutorError naming the images, folders and builds and how to fix them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from nightly.errors import ExecutorError
from nightly.executors.base import Job
from nightly.executors.container_engine import CUDA_MOUNT, NVCC_LABEL, engine_errors, first_line

if TYPE_CHECKING:
    from docker import DockerClient


def check_images(
    client: DockerClient,
    jobs: Sequence[Job],
    *,
    address: str,
    pull: bool,
    cuda_dir_for: Callable[[Job], Path | None],
    toolkits: dict[str, str],
) -> None:
    """Raise ExecutorError listing every missing image and CUDA folder; record in `toolkits`
    each found image's nvcc label."""
    from docker.errors import ImageNotFound

    problems: list[str] = []
    no_image = [job.build_id for job in jobs if not job.image]
    if no_image:
        problems.append(f"no container image configured for: {', '.join(no_image)}")
    needed: dict[str, list[str]] = {}
    for job in jobs:
        if job.image:
            needed.setdefault(job.image, []).append(job.build_id)
    for image, build_ids in needed.items():
        try:
            found = client.images.get(image)
            labels = getattr(found, "labels", None) or {}
            if labels.get(NVCC_LABEL):
                toolkits[image] = str(labels[NVCC_LABEL])
            continue
        except ImageNotFound:
            pass
        except engine_errors() as e:
            raise ExecutorError(
                f"could not look up image {image} on {address}: "
                f"{first_line(e)}; check that the engine is healthy"
            ) from e
        detail = ""
        if pull:
            try:
                client.images.pull(image)
                continue
            except engine_errors() as e:
                detail = f" (pull failed: {first_line(e)})"
        problems.append(f"missing image {image}{detail}, needed by: {', '.join(build_ids)}")
    bad_cuda: dict[str, list[str]] = {}
    for job in jobs:
        cuda = cuda_dir_for(job)
        if cuda is not None and not cuda.is_dir():
            bad_cuda.setdefault(str(cuda), []).append(job.build_id)
    for path, build_ids in bad_cuda.items():
        problems.append(
            f"CUDA toolkit folder {path} (mounted at {CUDA_MOUNT}) does not exist, "
            f"needed by: {', '.join(build_ids)}"
        )
    if problems:
        hint = (
            "Build or pull the missing images on this engine "
            "(scripts/container-engine.sh builds nightly-builder:bookworm; "
            "with pull enabled, preflight pulls from the registry), "
            "or point those builds at images that exist."
            if needed
            else ""
        )
        lines = "\n".join(f"  - {p}" for p in problems)
        raise ExecutorError(
            f"container preflight on {address} found "
            f"{len(problems)} problem(s):\n{lines}" + (f"\n{hint}" if hint else "")
        )
