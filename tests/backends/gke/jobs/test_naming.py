"""JobSet names: ≤ 28 characters, DNS-1035 labels, deterministic, distinct for distinct input."""

from __future__ import annotations

import random
import string

import pytest

from flows.backends.gke.jobs.naming import (
    JOBSET_NAME_MAX,
    is_dns1035_label,
    is_label_value,
    jobset_name,
    label_value,
    secret_name,
)

CASES = [
    ("rl-7dfde8a50d2e", "train", "train-rl-7dfde8a50d2e"),  # verbatim: readable
    ("e52f1fa1a14b", "convert", "convert-e52f1fa1a14b"),
    ("a-very-long-run-name-from-a-user-2026", "train", None),
    ("RL_Run.With Caps", "export", None),
    ("", "", None),
    ("0123", "9", None),
    ("x--y", "train", None),  # would be verbatim but for "--": digest form instead
    ("ünïcödé-🚀", "stage", None),
]


@pytest.mark.parametrize(("run", "stage", "expected"), CASES)
def test_names(run: str, stage: str, expected: str | None):
    name = jobset_name(run, stage)
    assert len(name) <= JOBSET_NAME_MAX and is_dns1035_label(name)
    assert name == jobset_name(run, stage)
    if expected is not None:
        assert name == expected
    else:
        assert "--" in name


def test_distinct_inputs_give_distinct_names():
    alphabet = string.ascii_letters + string.digits + "-_. /"
    rng = random.Random(5)
    seen: dict[str, tuple[str, str]] = {}
    for _ in range(20000):
        run = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        stage = rng.choice(["convert", "train", "export", "", "x" * 40])
        name = jobset_name(run, stage)
        assert len(name) <= JOBSET_NAME_MAX and is_dns1035_label(name), (run, stage)
        assert seen.setdefault(name, (run, stage)) == (run, stage)


def test_secret_and_label_values():
    names = set()
    for owner in ("team:tutorial", "profile:tutorial", "team:" + "t" * 300):
        for source in ("env:HF_TOKEN", "prefect-secret:hf-token", "env:" + "A" * 300):
            name = secret_name(owner, source)
            assert is_dns1035_label(name) and len(name) <= 63
            names.add(name)
    assert len(names) == 9  # one per (owner, source): a team and a profile of one name differ
    for text in ("rl-abc", "x" * 100, "a b/c", "-", ""):
        assert is_label_value(label_value(text))


hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies


@hypothesis.given(run=st.text(max_size=80), stage=st.text(max_size=40))
@hypothesis.settings(max_examples=500, deadline=None)
def test_any_input_gives_a_valid_name(run: str, stage: str):
    name = jobset_name(run, stage)
    assert len(name) <= JOBSET_NAME_MAX and is_dns1035_label(name)
    assert is_label_value(label_value(run))
