"""A Prefect database that Prefect itself migrated, made once per machine and Prefect version
and copied into the fresh home of each test server.

Every Prefect server a test starts on an empty home first runs all of Prefect's migrations
(prefect 3.9.1 server/api/server.py ``run_migrations`` → database/interface.py ``create_db``:
alembic ``upgrade head``, 115 SQLite revisions): about 12 s of CPU of a 32 s start on a
2-core CI machine, paid again by every test server and every `tpurl` the tests give a home of
its own. The same start on a database already at the head finds nothing to upgrade and does
everything else as before (its services, the UI), exactly as a user's second
`prefect server start` does. So the tests start from a copy of one migrated database:
made by `prefect server database upgrade` (Prefect's own migrations, not ours), keyed by the
Prefect version and its migration files, built once under a file lock by whichever pytest
run needs it first (CI runs several at once), and copied with SQLite's backup API.

Only a test's fresh home is seeded: a home that already has a database keeps it (a restart
of the same API), and nothing here reaches a user's home."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

from flows.common.paths import REPO_ROOT

PREFECT = str(Path(sys.executable).with_name("prefect"))
CACHE = REPO_ROOT / ".tpurl" / "test-cache" / "prefect-database"
DATABASE_NAME = "prefect.db"  # the default connection URL's file in PREFECT_HOME
HARNESS_DATABASE_NAME = "prefect-test.db"  # prefect/testing/utilities.py prefect_test_harness
SEEDED: list[Path] = []  # the harness databases seeded in this process


def migration_key() -> str:
    """Prefect's version and the names of its SQLite migrations: a new Prefect, or one with
    another migration, gets a database of its own."""
    import prefect
    versions = Path(prefect.__file__).parent / "server" / "database" / "_migrations" / \
        "versions" / "sqlite"
    names = sorted(p.name for p in versions.glob("*.py"))
    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]
    return f"prefect-{prefect.__version__}-{digest}"


def migrated_database(cache: Path = CACHE) -> Path:
    """The migrated template, built on first use (one builder at a time; the others wait
    for it and take it)."""
    template = cache / f"{migration_key()}.db"
    if template.exists():
        return template
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not template.exists():
            _build(template)
    return template


def _build(template: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="prefect-migrate-") as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env.update({"PREFECT_HOME": home, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
        done = subprocess.run([PREFECT, "server", "database", "upgrade", "-y"], env=env,
                              capture_output=True, text=True, timeout=900, check=False)
        source = Path(home) / DATABASE_NAME
        if done.returncode != 0 or not source.exists():
            raise RuntimeError(f"prefect server database upgrade failed:\n{done.stdout}\n"
                               f"{done.stderr}"[-3000:])
        partial = template.with_suffix(f".{os.getpid()}.part")
        copy_database(source, partial)
        os.replace(partial, template)


def copy_database(source: Path, target: Path) -> None:
    """A consistent copy, the write-ahead log folded in (SQLite's online backup)."""
    with contextlib.closing(sqlite3.connect(source)) as src, \
            contextlib.closing(sqlite3.connect(target)) as dst:
        src.backup(dst)


def seed_home(home: Path) -> None:
    """A fresh Prefect home starts with the migrated database; one with a database keeps it."""
    home.mkdir(parents=True, exist_ok=True)
    if not (home / DATABASE_NAME).exists():
        copy_database(migrated_database(), home / DATABASE_NAME)


@contextlib.contextmanager
def seeded_test_harness() -> Iterator[None]:
    """``prefect_test_harness`` makes its database in a directory from ``mkdtemp``: the
    directory it gets already holds the migrated copy under the file name the harness uses.
    Were Prefect to rename that file, the copy would go unused and the harness would
    migrate as before (tests/test_prefect_database.py fails then)."""
    import prefect.testing.utilities as harness

    template = migrated_database()

    def seeded_mkdtemp(*args: object, **kwargs: object) -> str:
        path = tempfile.mkdtemp(*args, **kwargs)  # type: ignore[call-overload]
        copy_database(template, Path(path) / HARNESS_DATABASE_NAME)
        SEEDED.append(Path(path) / HARNESS_DATABASE_NAME)
        return path

    with mock.patch.object(harness, "mkdtemp", seeded_mkdtemp):
        yield
