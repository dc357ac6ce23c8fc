"""The fit check on a GKE profile: refused when training cannot fit the slice, warned when tight.

The estimate (flows/config/fit.py) reads the model's numbers from the pinned MaxText's data
(flows/config/maxtext_models.json) with the profile's ``model.args`` and ``train.args`` over
them, train_rl's settings from ``train.args`` over rl.yml's defaults, and the slice from
``gke.machine_type``, ``gke.topology`` and ``gke.num_slices``. A refusal names each part, the
total, what the slice holds, and the smallest slice of the same generation that would hold
it with the training mesh and rollout split it needs there (flows/config/slice_move.py), so
the reader applies the named settings instead of paying for a slice that runs out of memory
after the image build, the cluster and the conversion.
"""

from __future__ import annotations

from flows.common.failure_codes import Failure
from flows.common.issues import Issue
from flows.config.fit import Estimate, describe, estimate, gib
from flows.config.fit_inputs import generation_of, judged, rollout_sizes, run_shape
from flows.config.limits import limits
from flows.config.profile import Profile
from flows.config.rollout import RolloutCheck
from flows.config.rollout import check as check_rollout
from flows.config.rollout import describe as describe_rollout
from flows.config.slice_move import as_settings, smallest_move, split_changes
from flows.config.tpu import TPU_MACHINES

__all__ = ["fit_issues", "fit_warning", "profile_estimate", "rollout_check", "rollout_issues",
           "rollout_sizes", "run_shape"]


def profile_estimate(profile: Profile) -> Estimate | None:
    """The estimate for a GKE profile, or None when it cannot be made (``judged``)."""
    found = judged(profile)
    return None if found is None else estimate(*found)


@limits({"gke.topology": "large enough for the model's GRPO training: actor and reference "
                         "weights, AdamW moments, gradients and activations on the trainer's "
                         "chips, the rollout's weights and KV cache in vLLM's HBM share, the "
                         "trainer's weights inside that share where the two share chips "
                         "(flows/config/fit.py)"})
def fit_issues(profile: Profile) -> list[Issue]:
    est = profile_estimate(profile)
    if est is None or est.verdict != "no-fit":
        return []
    gke = profile.gke
    assert gke is not None
    generation = generation_of(TPU_MACHINES[gke.machine_type])
    move = smallest_move(profile)
    where = (f"set {as_settings(move)} (the smallest {generation} slice it fits, with the "
             "training mesh and the rollout split it needs there)"
             if move else f"no listed {generation} slice holds it: set gke.num_slices higher")
    if split := split_changes(profile):
        where += (f"; or set {as_settings(split)} (the split of this slice nearest the "
                  "profile's on which both roles fit, the training mesh and the rollout split "
                  "fitted to it)")
    short = max((est.trainer, est.sampler), key=lambda side: side.floor_share)
    return [Issue("gke.topology",
                  f"{profile.model.maxtext_name} cannot train on {gke.machine_type} "
                  f"{gke.topology} × {gke.num_slices}: the {short.role}'s "
                  f"{', '.join(p.name for p in short.parts if p.certain)} alone need "
                  f"{gib(short.floor)}, its {short.chips} chip(s) hold {gib(short.holds)}; "
                  f"{describe(est)}",
                  f"{where}; or a smaller model.maxtext_name", Failure.CONFIG_DOES_NOT_FIT)]


def rollout_check(profile: Profile) -> RolloutCheck | None:
    """The profile's rollout on its own slice; None when the slice itself does not fit
    (fit_issues says so first) or the sizes do not resolve (maxtext_rules names them)."""
    found = judged(profile)
    sizes = rollout_sizes(profile)
    if found is None or sizes is None or estimate(*found).verdict == "no-fit":
        return None
    return check_rollout(*found, sizes)


def _rollout_fix(profile: Profile, check: RolloutCheck) -> str:
    """The settings that make the rollout hold the model, each computed and checked: the
    derived replica on this slice's sampler devices; failing that, a larger share of this
    slice for the sampler, or the smallest slice that holds it."""
    if check.derived is not None:
        return (f"set {check.derived.as_args()} (the smallest vLLM replica whose tensor "
                "parallelism divides the heads and that holds this model and a rollout "
                "batch on this slice's sampler devices)")
    options = []
    if split := split_changes(profile):
        options.append(f"set {as_settings(split)} (the split of this slice nearest the "
                       "profile's whose sampler holds the model, the training mesh and the "
                       "rollout split fitted to it)")
    if move := smallest_move(profile):
        options.append(f"set {as_settings(move)} (the smallest slice of this generation "
                       "whose sampler devices hold the model, with the training mesh and the "
                       "rollout split it needs there)")
    if not options:
        return ("no listed slice of this generation holds the rollout: set gke.num_slices "
                "higher, or a smaller model.maxtext_name")
    return "give the rollout more devices: " + "; or ".join(options)


ROLLOUT_FIELD = "train.args.rollout_tensor_parallelism"


@limits({"train.args": "rollout_tensor_parallelism divides the model's query and KV heads; "
                      "with rollout_data/expert_parallelism and hbm_utilization_vllm it leaves "
                      "each sampler device room for its part of the weights and one "
                      "sequence's KV cache (flows/config/rollout.py)"})
def rollout_issues(profile: Profile) -> list[Issue]:
    check = rollout_check(profile)
    if check is None:
        return []
    name, issues = profile.model.maxtext_name, []
    if check.heads is not None:
        issues.append(Issue(ROLLOUT_FIELD, f"{check.heads}: vLLM shards both over its "
                            "tensor-parallel devices", _rollout_fix(profile, check),
                            Failure.CONFIG_ROLLOUT_DOES_NOT_FIT))
    if check.given.verdict == "no-fit":
        issues.append(Issue(ROLLOUT_FIELD, f"{name}'s vLLM rollout cannot start: "
                            f"{describe_rollout(check.given, check.sampler)}",
                            _rollout_fix(profile, check), Failure.CONFIG_ROLLOUT_DOES_NOT_FIT))
    return issues


def rollout_warning(profile: Profile) -> str | None:
    """A warning when a replica's share of a rollout batch passes TIGHT of vLLM's share: it
    runs, decoding the batch in waves, each a full pass of the sampler's time."""
    check = rollout_check(profile)
    if check is None or check.heads is not None or check.given.verdict != "waves":
        return None
    return (f"WARNING: {profile.model.maxtext_name}'s rollout batch may not fit vLLM's share "
            f"at once ({check.given.share:.0%}; it then decodes in waves): "
            f"{describe_rollout(check.given, check.sampler)}. Lower "
            f"train.args.rollout_micro_batch_size, or {_rollout_fix(profile, check)}")


def fit_warning(profile: Profile) -> str | None:
    """The slice's warning and the rollout's, one a line (``_slice_warning``,
    ``rollout_warning``)."""
    found = [w for w in (_slice_warning(profile), rollout_warning(profile)) if w]
    return "\n".join(found) or None


def _slice_warning(profile: Profile) -> str | None:
    """A warning when the conservative total passes TIGHT of what a role's chips hold while
    the certain parts fit: it may still run (activations are an upper bound), or run out of
    memory at the first step, after the slice is paid for."""
    est = profile_estimate(profile)
    if est is None or est.verdict != "tight":
        return None
    over = ("may not fit: the conservative total passes" if est.share > 1
            else "is tight on this slice: the conservative total is")
    return (f"WARNING: {profile.model.maxtext_name} {over} {est.share:.0%} of what a role's "
            f"chips hold (the weights fit; activations and KV cache are upper bounds): "
            f"{describe(est)}. Lower train.args.train_micro_batch_size (or batch_size) or "
            f"train.args.max_target_length, or {_roomier_slice(profile)}")


def _roomier_slice(profile: Profile) -> str:
    """The smallest slice of the profile's generation on which the estimate is not tight,
    with the mesh and rollout split it needs there (flows/config/slice_move.py)."""
    move = smallest_move(profile, roomy=True)
    if move is None:
        return "set gke.num_slices higher (no listed slice of this generation is roomier)"
    return (f"set {as_settings(move)} (the smallest slice of this generation on which the "
            "estimate is not tight, with the training mesh and the rollout split it needs "
            "there)")
