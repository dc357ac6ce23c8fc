"""The migrated database the test servers start from (tests/support/prefect_database.py): it
is at the head of Prefect's own SQLite migrations, a home that has a database keeps it, and
the session's harness really runs on the copy."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from tests.support.prefect_database import (
    DATABASE_NAME,
    SEEDED,
    migrated_database,
    migration_key,
    seed_home,
)


def _sqlite_head() -> str:
    """Alembic's own answer for the head of Prefect's SQLite revisions."""
    import prefect
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    migrations = Path(prefect.__file__).parent / "server" / "database" / "_migrations"
    config = Config()
    config.set_main_option("path_separator", "os")
    config.set_main_option("script_location", str(migrations))
    config.set_main_option("version_locations", str(migrations / "versions" / "sqlite"))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head
    return head


def _rows(database: Path, sql: str) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(database)) as connection:
        return connection.execute(sql).fetchall()


def test_the_template_is_at_the_head_of_prefects_migrations() -> None:
    """Alembic applies revisions in order and records the last: at the head, all ran."""
    template = migrated_database()
    assert template.name == f"{migration_key()}.db"
    assert _rows(template, "SELECT version_num FROM alembic_version") == [(_sqlite_head(),)]
    assert _rows(template, "PRAGMA integrity_check") == [("ok",)]


def test_a_fresh_home_gets_the_copy_and_a_used_one_keeps_its_database(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    seed_home(fresh)
    assert _rows(fresh / DATABASE_NAME, "SELECT version_num FROM alembic_version") == \
        [(_sqlite_head(),)]
    used = tmp_path / "used"
    used.mkdir()
    with contextlib.closing(sqlite3.connect(used / DATABASE_NAME)) as connection:
        connection.execute("CREATE TABLE kept (what TEXT)")
        connection.execute("INSERT INTO kept VALUES ('a restart keeps its runs')")
        connection.commit()
    seed_home(used)
    assert _rows(used / DATABASE_NAME, "SELECT what FROM kept") == \
        [("a restart keeps its runs",)]


@pytest.mark.usefixtures("prefect_api")
def test_the_sessions_harness_runs_on_the_seeded_copy() -> None:
    """Were Prefect to rename the harness's database file, the copy would go unused (the
    harness would migrate its own, as before the copy): this names that."""
    from prefect.settings import PREFECT_SERVER_DATABASE_CONNECTION_URL

    url = PREFECT_SERVER_DATABASE_CONNECTION_URL.value()
    assert url.startswith("sqlite+aiosqlite:///")
    assert Path(url.removeprefix("sqlite+aiosqlite:///")) in SEEDED
