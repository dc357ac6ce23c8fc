"""A backend-neutral description of one program run: what the GKE JobSet or the local
subprocess both execute.

Secrets are references (``secret_env``), resolved only by the backend at the last moment, so a
Workload can be printed, planned, hashed and persisted without ever holding a token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from flows.config.profile import Scalar, SecretRef


@dataclass(frozen=True)
class Placement:
    """Where it runs. ``cpu``: one pod on the CPU pool (or the laptop); ``tpu``: every host of
    the slice; ``pathways``: a CPU head plus TPU workers."""

    kind: Literal["cpu", "tpu", "pathways"]
    topology: str | None = None
    machine_type: str | None = None
    num_slices: int = 1
    chips: int = 0


@dataclass(frozen=True)
class ProgramFile:
    """A file of ours a workload runs beside the image's (the evaluation program, a recipe):
    shipped with the workload rather than baked into the image, so changing it changes
    neither the image's digest nor the keys of the stages that ran in that image.
    ``name`` is the file name the program is found under; ``source`` the repository file it
    is read from; ``digest`` its content's sha256, which names what the backend ships."""

    name: str
    source: str  # repository-relative, or absolute (a recipe file kept beside its profile)
    digest: str


@dataclass(frozen=True)
class Workload:
    name: str
    image: str
    argv: tuple[str, ...]
    placement: Placement
    env: tuple[tuple[str, str], ...] = ()
    secret_env: tuple[tuple[str, SecretRef], ...] = ()
    outputs: tuple[str, ...] = ()
    progress_regex: str | None = None  # a group named "step" drives the progress display
    total_steps: int | None = None
    preamble: tuple[str, ...] = field(default=())  # shell lines the image runs before argv
    files: tuple[ProgramFile, ...] = ()  # programs shipped beside the image (GKE: a ConfigMap)

    def command_line(self) -> str:
        """The argv as one shell-quoted line, for plans and logs (never holds a secret)."""
        import shlex

        return shlex.join(self.argv)


def render_args(args: dict[str, Scalar]) -> list[str]:
    """MaxText style: ``key=value``; argparse/absl flags (keys with ``--``) as ``--key=value``,
    a flag set to true as the bare flag, a flag set to false left out."""
    rendered = []
    for key, value in args.items():
        if key.startswith("--"):
            if value is True:
                rendered.append(key)
            elif value is not False:
                rendered.append(f"{key}={_text(value)}")
        else:
            rendered.append(f"{key}={_text(value)}")
    return rendered


def _text(value: Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
