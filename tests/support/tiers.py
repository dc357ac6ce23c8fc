"""Which tier a test runs in, so the quick tests run (and fail) first.

- fast: no service at all (seconds for the whole tier);
- services: uses fake-gcs-server, a Prefect API or dockerd (through a fixture below), or
  starts such a service itself (a `prefect server start`, a `tpurl run` with its own API)
  and says so with `pytestmark = pytest.mark.services`;
- e2e: the end-to-end modules of tests/e2e, the rehearsal's last (it builds a 4 GB venv on
  first use and runs the real MaxText programs for many minutes), then the recipe tutorial's,
  whose reader ran the rehearsal before: it runs in the rehearsal's output root after it.
The tier is decided per module (a module's slowest test decides) so a module's
module-scoped fixtures are set up once. scripts/test.sh runs the tiers as separate pytest
invocations selected by the markers these tiers add; a plain `pytest` runs them in order.
A services module that mostly waits on real time (leases expiring, servers and CLIs starting)
is also marked `realtime`: scripts/test.sh runs those in pytest runs of their own (three lanes,
split by measured durations; the first also takes the image builds) beside the CPU-bound
tiers, where their waiting costs no wall time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SERVICE_FIXTURES = frozenset({"gcs_url", "gcs_east5", "store", "gcs", "prefect_api",
                              "prefect_server", "docker_client", "standin_base",
                              "rehearsal_image", "gke_world", "mlflow_server"})
E2E_DIR = Path(__file__).resolve().parents[1] / "e2e"
# in this order, after every other e2e module: the rehearsal module, then the recipe tutorial
# in the root it leaves; then the interrupted CLI (the Qwen3 dense profile, whose programs
# no other module compiles)
LAST_MODULES = ("test_rehearsal_e2e.py", "test_rehearsal_recipe_tutorial.py",
                "test_cli_interrupts.py")
FAST, SERVICES, E2E, REHEARSAL = range(4)


def item_tier(item: pytest.Item) -> int:
    path = Path(str(item.path)).resolve()
    if path.is_relative_to(E2E_DIR):
        if path.name in LAST_MODULES:
            return REHEARSAL + LAST_MODULES.index(path.name)
        return E2E
    if item.get_closest_marker("services") is not None:  # starts its own service
        return SERVICES
    return SERVICES if SERVICE_FIXTURES & set(getattr(item, "fixturenames", ())) else FAST


def order_and_mark(items: list[pytest.Item]) -> None:
    """Marks every item `services` or `e2e` (fast ones stay unmarked) and sorts the items by
    tier, keeping the collection order inside a tier."""
    module_tier: dict[Path, int] = {}
    for item in items:
        module_tier[item.path] = max(module_tier.get(item.path, FAST), item_tier(item))
    for item in items:
        tier = module_tier[item.path]
        if tier == SERVICES:
            item.add_marker(pytest.mark.services)
        elif tier >= E2E:
            item.add_marker(pytest.mark.e2e)
    items.sort(key=lambda item: module_tier[item.path])

