"""`tpurl announce` refuses, before posting anything, what the target's dispatcher would
refuse (its posting to a real API is tests/test_deploy_server.py's)."""

from __future__ import annotations

import pytest

from flows.cli import main as tpurl


@pytest.mark.parametrize(("args", "says"), [
    (["--dataset", "gs://BUCKET/data/openmath-v7.parquet"],
     "is a gs:// URI, which the target profile rehearsal (backend local) cannot read"),
    (["--dataset", "/tmp/elsewhere/x.parquet"], "under no prefix the profile rehearsal allows"),
    (["--revision", "refs/pr/1"], "is not a commit"),
])
def test_a_refused_announcement_is_never_posted(args, says, capsys, monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")  # nothing listens
    assert tpurl(["announce", "rehearsal", *args]) == 2
    err = capsys.readouterr().err
    assert says in err and "nothing was announced" in err and "Traceback" not in err


def test_without_an_api_nothing_is_announced(capsys, monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        assert tpurl(["announce", "rehearsal", "--dataset",
                      ".tpurl/announced/openmath-v2.parquet"]) == 2
    assert "PREFECT_API_URL is not set" in capsys.readouterr().err
