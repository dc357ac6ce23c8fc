"""Pictures for the docs, drawn in Mermaid from the code's own facts (docs/reference/diagrams/).

Why generated: a picture drawn by hand shows what was true the day it was drawn; these are
rendered from the stage list and the placements the GKE runtime gives each program, from the
smoke profile's ``gke.train_timeline`` and ``is_billed``, and from the fit estimate, and the
reference test fails when a committed picture differs from what the code draws now.

Each page holds one diagram between snippet markers (``--8<-- [start:diagram]``), so a
hand-written page embeds the picture where a reader needs it (pymdownx.snippets) and the
generated page shows it with its data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flows.backends.gke.infra.cluster_shape import Member, shape_of
from flows.backends.gke.infra.kueue_objects import KUEUE_TEMPLATE, kueue_documents
from flows.backends.gke.infra.team_kueue import TPU
from flows.backends.gke.team_queues import TEAM_QUEUE_PREFIX, team_queue_name
from flows.config import Profile, load_profile
from flows.config.fit import Part, Side, estimate, gib
from flows.config.fit_inputs import judged
from flows.config.spend import SCALE_DOWN_TAIL_S
from flows.config.teams import Teams
from flows.config.timeline import PHASES, TrainTimeline, is_billed
from flows.operations.plan import planned_workloads
from flows.operations.preemption_cost import RESTART_PHASES, preemption_cost
from flows.stages import EVALUATE, STAGES
from reference.markdown import table

SMOKE = "smoke-qwen3-0.6b-v6e-8"
TUTORIAL = "qwen3-30b-a3b-v6e-32"
# What a user fills into a shipped GKE profile before it loads; the values are examples
# (documentation addresses and names), and no diagram shows them.
EXAMPLE_FIELDS = {
    "gke.project": "my-proj-123",
    "gke.region": "us-east5",
    "gke.zone": "us-east5-b",
    "gke.cluster": "tpurl-v6e",
    "gke.bucket": "my-tpurl-bucket",
    "gke.authorized_cidr": "203.0.113.0/24",
}
START = "[start:diagram]"
END = "[end:diagram]"


def example_profile(name: str) -> Profile:
    """A shipped GKE profile with its empty fields filled by example values (and a
    reservation named where its capacity consumes one)."""
    extra = {"gke.reservation": "my-v6e-reservation"} if name == TUTORIAL else {}
    return load_profile(name, {**EXAMPLE_FIELDS, **extra}, environ={})


def _page(title: str, sources: str, intro: str, diagram: list[str], after: list[str]) -> str:
    lines = [f"# {title}", "",
             f"Generated from {sources} by `python -m reference`; do not edit by hand.",
             "", intro, "", f"<!-- --8<-- {START} -->", "``` mermaid", *diagram, "```",
             f"<!-- --8<-- {END} -->", "", *after]
    return "\n".join(lines).rstrip("\n") + "\n"


# ---------------------------------------------------------------------------- stages

# Where the two stages that submit no workload run on GKE (flows/backends/gke/image/builder.py:
# Cloud Build unless a Docker daemon answers; flows/backends/gke/infra/infra_stage.py: the
# Cluster Toolkit's gcluster and Terraform, from the flow's own process).
GKE_PROVIDED = {
    "image": "Cloud Build (or a local Docker daemon): the patched image, pushed by digest",
    "infra": "the flow's process: gcluster and Terraform bring up the cluster, pools, Kueue",
}
# The rehearsal runs every stage on the laptop (flows/backends/local/): the image stage
# builds and patches a venv, infra makes the stand-in model and data, and each program is a
# subprocess of that venv.
LOCAL_PLACES = {
    "image": "a pinned venv, patched as the image is",
    "infra": "subprocesses make a tiny checkpoint and dataset",
}
PLACE_TEXT = {
    "cpu": "one pod on the CPU pool ({pool})",
    "tpu": "every host of the TPU slice",
    "tpu_leader": "every host of the TPU slice ({topology}), only the first working",
    "pathways": "Pathways head on the CPU pool ({pool}), workers on the TPU slice "
                "({topology}, {chips} chips)",
}


# One colour per place: who pays for it differs (Cloud Build minutes, the CPU pool's nodes,
# the TPU slice's chips, nothing).
PLACE_STYLE = {
    "image": "fill:#e8eaf6,stroke:#3f51b5",
    "infra": "fill:#eceff1,stroke:#607d8b",
    "cpu": "fill:#e3f2fd,stroke:#1976d2",
    "tpu": "fill:#ffebee,stroke:#d32f2f",
    "tpu_leader": "fill:#ffebee,stroke:#d32f2f",
    "pathways": "fill:#ffebee,stroke:#d32f2f",
    "local": "fill:#f1f8e9,stroke:#689f38",
}


def _node(key: str, text: str, shape: str = "box") -> str:
    clean = text.replace('"', "'")
    return f'{key}(["{clean}"])' if shape == "round" else f'{key}["{clean}"]'


def stages_diagram(profile: Profile) -> list[str]:
    """The stages in order (flows/stages ``STAGES`` and ``EVALUATE``), one box each, holding
    where it runs on GKE (the planned workload's placement; evaluate runs where training
    runs, flows/core/eval_programs.py) and in the rehearsal; coloured by the place."""
    gke = profile.gke
    assert gke is not None
    workloads = planned_workloads(profile)
    placement = {job: w.placement for job, w in workloads.items()}
    placement.setdefault("evaluate", placement["train"])
    names = [stage.name for stage in (*STAGES, EVALUATE)]
    lines = ["flowchart TB"]
    for name in names:
        if name in GKE_PROVIDED:
            text, kind = GKE_PROVIDED[name], name
        else:
            where = placement[name]
            # render.py: a cpu workload with conversion_placement tpu-hosts runs on every
            # host of the slice, only the first working
            kind = "tpu_leader" if where.kind == "cpu" and \
                gke.conversion_placement != "cpu-pool" else where.kind
            text = PLACE_TEXT[kind].format(pool=gke.cpu_pool, topology=gke.topology,
                                           chips=where.chips)
        local = LOCAL_PLACES.get(name, "a subprocess of the rehearsal venv")
        lines += [f'  subgraph {name} ["{name}"]', "    direction LR",
                  f"    {_node(f'g_{name}', f'GKE: {text}')}:::{kind}",
                  f"    {_node(f'l_{name}', f'rehearsal: {local}')}:::local", "  end"]
    lines.append("  " + " --> ".join(names[:-1]) + f" -. with an eval section .-> {names[-1]}")
    lines += [f"  classDef {kind} {style}" for kind, style in PLACE_STYLE.items()]
    return lines


def stages_page() -> str:
    profile = example_profile(TUTORIAL)
    return _page(
        "Picture: a run's stages and where each runs",
        "`flows/stages/__init__.py` and the placements of `flows/backends/gke/runtime.py` "
        f"(profile `{TUTORIAL}`)",
        "A run goes through its stages in order; evaluate follows export only when the "
        "profile has an `eval` section. On GKE the image and infra stages submit no workload; "
        "convert and export are one pod on the CPU pool; training is a Pathways job whose head "
        "waits on the CPU pool while its workers hold the TPU slice. The rehearsal runs the "
        "same programs as subprocesses on your machine.",
        stages_diagram(profile), [])


# ---------------------------------------------------------------------------- billing


def _task(label: str, minutes: float, billed: bool, key: str, after: str | None) -> str:
    tag = "crit, " if billed else "done, "
    start = f"after {after}" if after else "00:00"
    return f"    {label} :{tag}{key}, {start}, {round(minutes * 60)}s"


def _run_tasks(prefix: str, timeline: TrainTimeline, slice_first: bool,
               tail_min: float) -> list[str]:
    out: list[str] = []
    previous: str | None = None
    for name, _, _ in PHASES:
        minutes = getattr(timeline, name)
        if minutes <= 0:
            continue
        key = f"{prefix}_{name}"
        out.append(_task(name, minutes, is_billed(name, slice_first), key, previous))
        previous = key
    out.append(_task("scale-down tail", tail_min, True, f"{prefix}_tail", previous))
    return out


def _preempted_tasks(profile: Profile, timeline: TrainTimeline, tail_min: float) -> list[str]:
    """A spot run reclaimed at its last step before a checkpoint: the phases up to the
    steps, the steps lost, the restart's phases again, the steps again, then the end."""
    cost = preemption_cost(profile)
    out: list[str] = []
    previous: str | None = None

    def add(label: str, minutes: float, billed: bool, key: str) -> None:
        nonlocal previous
        if minutes > 0:
            out.append(_task(label, minutes, billed, f"p_{key}", previous))
            previous = f"p_{key}"

    for name, _, _ in PHASES:
        if name in ("steps", "last_checkpoint"):
            break
        add(name, getattr(timeline, name), is_billed(name, False), name)
    add("steps lost to the reclaim", cost.lost_min, True, "lost")
    for name in RESTART_PHASES:
        add(f"{name} again", getattr(timeline, name), is_billed(name, False), f"re_{name}")
    add("steps", timeline.steps, True, "steps")
    add("last_checkpoint", timeline.last_checkpoint, True, "last")
    add("scale-down tail", tail_min, True, "tail")
    return out


def billing_diagram(profile: Profile) -> list[str]:
    gke = profile.gke
    assert gke is not None and gke.train_timeline is not None
    timeline, tail = gke.train_timeline, SCALE_DOWN_TAIL_S / 60.0
    return ["---", "config:", "  gantt:", "    barHeight: 26", "    fontSize: 15",
            "    sectionFontSize: 15", "    leftPadding: 160", "    useWidth: 760", "---",
            "gantt", "  dateFormat HH:mm", "  axisFormat %H:%M", "  todayMarker off",
            "  section spot or on-demand", *_run_tasks("s", timeline, False, tail),
            "  section spot, reclaimed once", *_preempted_tasks(profile, timeline, tail),
            "  section queued", *_run_tasks("q", timeline, True, tail)]


def _billed_rows(profile: Profile) -> list[list[str]]:
    gke = profile.gke
    assert gke is not None and gke.train_timeline is not None
    timeline, tail = gke.train_timeline, SCALE_DOWN_TAIL_S / 60.0
    cost = preemption_cost(profile)
    rows = []
    for label, slice_first in (("spot or on-demand", False), ("queued", True)):
        billed = timeline.minutes(True, slice_first) + tail
        rows.append([label, f"{timeline.minutes() + tail:g}", f"{billed:g}",
                     f"{timeline.minutes(False, slice_first):g}"])
    billed_once = timeline.minutes(True, False) + tail + cost.lost_min + cost.restart_billed_min
    rows.insert(1, ["spot, reclaimed once", f"{timeline.minutes() + tail + cost.wall_min:g}",
                    f"{billed_once:g}",
                    f"{timeline.minutes(False, False) + cost.restart_unbilled_min:g}"])
    return rows


def billing_page() -> str:
    profile = example_profile(SMOKE)
    return _page(
        "Picture: which minutes of training are billed",
        "`gke.train_timeline` of the profile "
        f"`{SMOKE}`, `flows/config/timeline.py` `is_billed`, `flows/config/spend.py` "
        "`SCALE_DOWN_TAIL_S` and `flows/operations/preemption_cost.py`",
        "Red bars are billed (the TPU slice's nodes exist), grey bars are wall time without "
        "a TPU node. On spot or on-demand capacity the slice scales up only once the Pathways "
        "head has pulled its image; a queued slice exists before the head starts, so the "
        "image pull is billed too (the wait for the ProvisioningRequest before it is not, "
        "and is not drawn). A reclaimed spot run trains the steps since its last checkpoint "
        "again and goes through the restart's phases once more. The axis counts hours and "
        "minutes from the training JobSet's submission.",
        billing_diagram(profile),
        ["Minutes of the smoke profile's training:", "",
         *table(["run", "wall", "billed", "not billed"], _billed_rows(profile))])


# ---------------------------------------------------------------------------- fit


def _gib(size: int) -> str:
    return f"{size / 2**30:.1f}"


def _pie(side: Side) -> list[str]:
    free = max(side.holds - side.needs, 0)
    parts: list[Part | tuple[str, int]] = [*side.parts, ("free", free)]
    lines = [f"pie showData title {side.role} on {side.chips} chips: GiB of "
             f"{_gib(side.holds)} GiB"]
    for part in parts:
        name, size = (part.name, part.size) if isinstance(part, Part) else part
        lines.append(f'  "{name}" : {_gib(size)}')
    return lines


def fit_page() -> str:
    profile = example_profile(TUTORIAL)
    facts = judged(profile)
    assert facts is not None
    est = estimate(*facts)
    trainer, sampler = _pie(est.trainer), _pie(est.sampler)
    second = ["", "The rollout side:", "", f"<!-- --8<-- {START.replace('diagram', 'rollout')}"
              " -->", "``` mermaid", *sampler, "```",
              f"<!-- --8<-- {END.replace('diagram', 'rollout')} -->", ""]
    rows = [[side.role, part.name, gib(part.size), "yes" if part.certain else "at most"]
            for side in (est.trainer, est.sampler) for part in side.parts]
    return _page(
        "Picture: what the fit estimate counts",
        f"`flows/config/fit.py` for the profile `{TUTORIAL}`",
        f"The fit estimate ({est.params.total / 1e9:.1f}B parameters) splits the slice between "
        "the trainer and the rollout engine and counts what each side's HBM holds: weights, "
        "optimizer state and gradients are certain; activations and the KV cache are upper "
        f"bounds. Verdict for this profile: **{est.verdict}**. The trainer side:",
        trainer, [*second, *table(["side", "part", "size", "certain"], rows)])


# ---------------------------------------------------------------------------- queues

# The two teams of docs/how-to/team-budgets.md's example, on the tutorial's cluster with a
# reservation and spot behind it (so the picture shows a chain of two TPU flavors).
EXAMPLE_TEAMS = {
    "research": {"usd_per_month": 2500, "profiles": [TUTORIAL], "tpu_chips": 24,
                 "borrowing_limit_chips": 8, "fair_weight": 2},
    "product": {"usd_per_month": 800, "profiles": [SMOKE]},
}
EXAMPLE_CHAIN = {"gke.capacity": "reservation,spot",
                 "gke.prices.spot.usd_per_chip_hour": "1.0",
                 "gke.prices.spot.source": "an example quote",
                 "gke.prices.spot.as_of": "2026-12-01"}


ORDINALS = ("1st", "2nd", "3rd", "4th", "5th", "6th")


def _tpu_quota(cluster_queue: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """The flavors a ClusterQueue lists, in order, and its TPU quota in the first one."""
    flavors = cluster_queue["spec"]["resourceGroups"][0]["flavors"]
    names = [f["name"] for f in flavors]
    tpu = next(r for r in flavors[0]["resources"] if r["name"] == TPU)
    return names, tpu


def _flavor_text(flavor: dict[str, Any]) -> str:
    labels = flavor["spec"]["nodeLabels"]
    if "tpurl/capacity" in labels:
        return f"ResourceFlavor {flavor['metadata']['name']}<br/>TPU nodes, capacity " \
               f"{labels['tpurl/capacity']}"
    pool = labels.get("cloud.google.com/gke-nodepool", "")
    return f"ResourceFlavor {flavor['metadata']['name']}<br/>node pool {pool}"


def queues_diagram(documents: list[dict[str, Any]], teams: Teams) -> list[str]:
    """The teams' LocalQueues, their ClusterQueues in the cohort and the flavors they
    list, from the Kueue documents the blueprint stages (kueue_objects ``kueue_documents``);
    the profile's own queue, outside the cohort, for profiles in no team."""
    def key(name: str) -> str:
        return name.replace("-", "_")

    flavors = [d for d in documents if d["kind"] == "ResourceFlavor"]
    queues = [d for d in documents if d["kind"] == "ClusterQueue"]
    locals_ = [d for d in documents if d["kind"] == "LocalQueue"]
    lines = ["flowchart LR"]
    for team in teams.teams.values():
        shown = ", ".join(team.profiles)
        lines.append(f'  p_{key(team.name)}["runs of {shown}<br/>(team {team.name})"]')
    lines.append('  p_none["runs of a profile in no team"]')
    cohorts = sorted({q["spec"]["cohortName"] for q in queues if "cohortName" in q["spec"]})
    for cohort in cohorts:
        lines.append(f'  subgraph cohort_{key(cohort)} ["cohort {cohort}: idle chips lent"]')
        for cq in (q for q in queues if q["spec"].get("cohortName") == cohort):
            _, tpu = _tpu_quota(cq)
            weight = cq["spec"].get("fairSharing", {}).get("weight", "1")
            lines.append(f'    cq_{key(cq["metadata"]["name"])}["ClusterQueue '
                         f'{cq["metadata"]["name"]}<br/>guaranteed {tpu["nominalQuota"]} '
                         f'chips per TPU flavor, may borrow {tpu.get("borrowingLimit", "any")}<br/>'
                         f'fair weight {weight}"]')
        lines.append("  end")
    for cq in (q for q in queues if "cohortName" not in q["spec"]):
        lines.append(f'  cq_{key(cq["metadata"]["name"])}["ClusterQueue '
                     f'{cq["metadata"]["name"]}<br/>no cohort: borrows nothing"]')
    for lq in locals_:
        lines.append(f'  lq_{key(lq["metadata"]["name"])}(["LocalQueue '
                     f'{lq["metadata"]["name"]}"])')
        lines.append(f'  lq_{key(lq["metadata"]["name"])} --> '
                     f'cq_{key(lq["spec"]["clusterQueue"])}')
    for flavor in flavors:
        lines.append(f'  f_{key(flavor["metadata"]["name"])}[/"{_flavor_text(flavor)}"/]')
    for team in teams.teams.values():
        lines.append(f"  p_{key(team.name)} --> lq_{key(team_queue_name(team.name))}")
    plain = next(lq for lq in locals_ if not lq["metadata"]["name"].startswith(TEAM_QUEUE_PREFIX))
    lines.append(f"  p_none --> lq_{key(plain['metadata']['name'])}")
    for cq in queues:
        names, _ = _tpu_quota(cq)
        for order, name in enumerate(names):
            lines.append(f'  cq_{key(cq["metadata"]["name"])} -. "{ORDINALS[order]}" .-> '
                         f'f_{key(name)}')
    return lines


def queues_page() -> str:
    profile = load_profile(TUTORIAL, {**EXAMPLE_FIELDS, "gke.reservation": "my-v6e-reservation",
                                      **EXAMPLE_CHAIN}, environ={})
    smoke = load_profile(SMOKE, EXAMPLE_FIELDS, environ={})
    gke = profile.gke
    assert gke is not None and smoke.gke is not None
    teams = Teams.model_validate({"teams": {name: {"name": name, **team}
                                            for name, team in EXAMPLE_TEAMS.items()}})
    shape = shape_of(gke.cluster, [Member(TUTORIAL, "research", gke),
                                   Member(SMOKE, "product", smoke.gke)])
    quotas = shape.quotas(teams)
    documents = kueue_documents(KUEUE_TEMPLATE.read_text(), gke, quotas, shape)
    rows = [[f"`{q.team}`", str(q.nominal), str(q.borrowing_limit), str(q.most), f"{q.weight:g}"]
            for q in quotas.values()]
    return _page(
        "Picture: two teams' queues on one cluster",
        "the Kueue objects `flows/backends/gke/infra/kueue_objects.py` `kueue_documents` "
        "renders (`team_kueue.py`, `team_quota.py`, `cluster_shape.py`) for two example teams "
        f"on one cluster: `{TUTORIAL}` ({gke.total_chips} chips, `gke.capacity: "
        f"{','.join(gke.capacity_chain)}`) and `{SMOKE}` ({smoke.gke.total_chips} chips, "
        f"`gke.capacity: {','.join(smoke.gke.capacity_chain)}`), {shape.chips} chips in all",
        "A team's runs go to its LocalQueue, which feeds its ClusterQueue; the teams' "
        "ClusterQueues form one cohort, named after the cluster, so a team's idle chips are "
        "lent to the other and taken back when it needs them. Each ClusterQueue lists the "
        "TPU flavors of every capacity mode of the cluster's profiles in order (a run is "
        "admitted on the first with room) and the CPU pool's flavor. The teams, as in "
        "[Budgets for a team](../../how-to/team-budgets.md#fair-queues-on-one-cluster):",
        queues_diagram(documents, teams),
        [*table(["team", "guaranteed chips", "may borrow", "at most", "fair weight"], rows)])


PAGES: dict[str, Callable[[], str]] = {
    "diagrams/stages.md": stages_page,
    "diagrams/billing.md": billing_page,
    "diagrams/fit.md": fit_page,
    "diagrams/queues.md": queues_page,
}
