"""Figures the how-to pages take from the code, recomputed: a month of retraining per
capacity mode (the page's benchmarks/capacity_month.py block, run as written) and the support bundle's
limits (flows/operations/support_bundle.py). A change of the code or its assumptions that
is not carried to the page fails here, naming the page."""

from __future__ import annotations

import re
import subprocess

from flows.common.paths import REPO_ROOT
from flows.config.capacity import CAPACITY_MODES
from flows.operations.support_bundle import LOG_TAIL_LINES, STAGE_LOG_TAIL_BYTES
from tests.support.readme import blocks

HOW_TO = REPO_ROOT / "docs" / "how-to"


def _month_lines() -> list[str]:
    """The page's command block, run as a reader's terminal runs it; its month per mode (the
    first block of the output, before the stockout policies)."""
    script = blocks("how-to/month-cost.md")["capacity-month"]
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done.stdout.split("\n\nStockouts", 1)[0].splitlines()


def test_the_month_page_holds_the_benchmarks_figures_for_every_mode() -> None:
    page = (HOW_TO / "month-cost.md").read_text()
    lines = _month_lines()
    assumptions, header = lines[0], lines[1]
    rows = {line.split()[0]: line for line in lines[2:] if line.split()[:1] in
            [[mode] for mode in CAPACITY_MODES]}
    assumed = next(line for line in lines if line.startswith("ASSUMED prices"))
    assert set(rows) == set(CAPACITY_MODES)
    for line in (assumptions, header, *rows.values(), assumed):
        assert line in page, f"month-cost.md drifted from the benchmark: {line!r}"
    table = {m[1]: m[2] for m in re.finditer(r"^\| `([a-z-]+)` \|(.*)$", page, re.M)}
    for mode, line in rows.items():
        runs, held, idle, usd = line.split()[1], line.split()[2], line.split()[3], line.split()[-1]
        cells = [cell.strip() for cell in table[mode].split("|")]
        assert cells[:3] == [runs, held, idle] and cells[3].startswith(f"${usd}"), mode


def test_the_support_bundle_page_states_its_limits() -> None:
    page = " ".join((HOW_TO / "support-bundle.md").read_text().split())
    assert f"the last {LOG_TAIL_LINES} lines of each container" in page
    assert f"the last {STAGE_LOG_TAIL_BYTES:,} bytes of each" in page


def test_the_secrets_page_names_the_secrets_the_code_writes() -> None:
    from flows.backends.gke.jobs.naming import secret_name
    from flows.core.secrets import K8S_SECRET

    page = (HOW_TO / "rotate-secrets.md").read_text()
    for source in ("env:HF_TOKEN", "prefect-secret:hf-token", "env:WANDB_API_KEY"):
        assert f"`{secret_name('team:tutorial', source)}`" in page, source
    assert f"`{K8S_SECRET}`" in page


def test_the_shipped_team_budget_pays_for_the_month_page_s_runs() -> None:
    """The tutorial team's budget is sized for its profile's month as the month page counts
    it (the weekly schedule plus the retrains an announcement starts), at the plan's estimate
    per run: a smaller budget would refuse a run the page says the month holds."""
    from benchmarks.simulation.month import MonthAssumptions, simulate
    from flows.config import load_profile
    from flows.config.spend import estimated_run_usd
    from flows.config.teams import TEAMS_FILE, load_teams
    from tests.support.profiles import TUTORIAL, TUTORIAL_REQUIRED

    profile = load_profile(TUTORIAL, TUTORIAL_REQUIRED, environ={})
    runs = simulate("on-demand", MonthAssumptions()).runs
    team = load_teams(TEAMS_FILE).team_of(profile.name)  # the shipped file, not the tests'
    assert team is not None
    assert team.usd_per_month >= runs * estimated_run_usd(profile)
