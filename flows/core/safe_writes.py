"""Our own writes: atomic, and a full disk turned into one error that says what and where.

Our own writes (lineage records, results, logs, plans, pid tags, the files infra and the
image stage write) go through :func:`write_text` / :func:`writing` here, so a full disk is
one :class:`DiskFull` naming the path, what it was and the free space, which
``flows.core.root_space.storage_failure`` turns into the storage error; no write site wraps
its own. A leaf: it imports nothing of ``flows``, so storage, patching and every writer can
use it without knowing the layout.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO


def existing_ancestor(path: Path) -> Path:
    """The nearest directory at or above ``path`` that exists (where free space is read)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def gib(size: float) -> str:
    """Pure: a byte count as GiB, the unit every disk message of ours uses."""
    return f"{size / 2**30:.2f} GiB"


def free_bytes(path: Path) -> int:
    stat = os.statvfs(existing_ancestor(path))
    return stat.f_bavail * stat.f_frsize



FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class DiskFull(OSError):
    """A write of ours that the file system refused for lack of space (ENOSPC, EDQUOT): the
    path, what was being written and the free space at that moment, so the failure can say
    what to free instead of showing a traceback."""

    def __init__(self, cause: OSError, path: Path, what: str, size: int | None) -> None:
        code = cause.errno or errno.ENOSPC
        super().__init__(code, cause.strerror or os.strerror(code), str(path))
        self.what, self.size, self.free = what, size, free_bytes(path)


def describe(path: Path) -> str:
    """Pure: what a file of ours is, by its name (for a write site that did not say)."""
    if path.name == "tpurl-lineage.json":
        return "the stage's lineage record"
    if "tpurl-results" in path.parts:
        return "the run's result"
    if "tpurl-logs" in path.parts:
        return "a program's log" if path.suffix == ".log" else "a program's pid tag"
    return "a file of the pipeline's"


@contextlib.contextmanager
def writing(path: Path, what: str | None = None, size: int | None = None) -> Iterator[None]:
    """Around a write of ours: a full disk becomes :class:`DiskFull` for ``path``."""
    try:
        yield
    except DiskFull:
        raise
    except OSError as exc:
        if exc.errno not in FULL_ERRNOS:
            raise
        raise DiskFull(exc, path, what or describe(path), size) from exc


def write_text(path: Path, text: str, what: str | None = None) -> None:
    """Atomically (a reader never sees half a record); on failure the temporary goes, so a
    full disk keeps no partial file of ours."""
    tmp = path.with_name(path.name + ".tmp")
    with writing(path, what, len(text.encode())):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            tmp.write_text(text)
            tmp.replace(path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


class LineLog:
    """A log written line by line that, when the disk fills, stops writing instead of
    raising: the program it records keeps running to its own end (its own failure says more
    than ours would), and ``full`` says the log is incomplete and why."""

    def __init__(self, path: Path, what: str | None = None) -> None:
        self.path, self.what = path, what
        self.full: DiskFull | None = None
        with writing(path, what):
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file: TextIO = open(path, "w")  # noqa: SIM115 (closed in close())

    def write(self, line: str) -> None:
        if self.full is not None:
            return
        try:
            with writing(self.path, self.what):
                self._file.write(line + "\n")
        except DiskFull as exc:
            self.full = exc
            with contextlib.suppress(OSError):
                self._file.close()

    def close(self) -> None:
        if self.full is None:
            try:
                with writing(self.path, self.what):
                    self._file.close()
            except DiskFull as exc:
                self.full = exc
