"""Which TensorBoard step a metric belongs to on the run page: one decision for the table
and the chart, so the two never pair a rollout's rewards with different updates.

Pure: the per-step metrics of flows/runpage/metrics.py in, per-update steps out.
"""

from __future__ import annotations

from typing import Any

# The rollout's tags (logged under the global step before the update, see reward_offset).
ROLLOUT_PREFIXES = ("rewards/", "completions/")


def reward_offset(steps: list[dict[str, Any]]) -> int:
    """1 when the rollout's scalars (rewards, completion length) are logged one step before
    the update's (loss, KL, ...): rewards at steps 0..n-1, loss at 1..n. Then the reward at
    step s and the loss at s+1 are one update.

    This is Tunix's own step arithmetic (google-tunix 0.1.7, and the same at the image's
    commit c4ec573d, which the rehearsal installs), not a guess from the files: the
    rollout's metrics (``rewards/*``, ``completions/*``) are
    buffered under ``RLCluster.global_steps`` as it is *before* the update and written with
    it (tunix/rl/rl_cluster.py ``buffer_metrics``/``_log_metrics``; the step grows by one
    in ``sync_weights`` or rl_learner.py's loop after the update), while the update's loss,
    KL, grad_norm and learning rate are written at ``_train_steps + 1`` (tunix/sft/
    peft_trainer.py ``_write_train_metrics``: "increment the step by one for logging
    purpose, because train_step is not incremented until the next model update"; KL comes
    through tunix/rl/trainer.py ``_post_process_train_step`` into that same buffer). Both
    counters start at the restored step, so one optimizer update per global step gives the
    one-step offset. Several updates per global step (mini-batches, ``num_iterations`` > 1)
    move the loss steps ahead of the reward steps; their ends then no longer line up one
    apart and the rows stay per step (0)."""
    reward_steps = [s["step"] for s in steps if s.get("rewards/train/mean") is not None]
    loss_steps = [s["step"] for s in steps if s.get("actor/train/loss") is not None]
    if reward_steps and loss_steps and min(loss_steps) == min(reward_steps) + 1 \
            and max(loss_steps) == max(reward_steps) + 1:
        return 1
    return 0


def per_update(steps: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The steps re-keyed by update, and the offset used: with an offset, each rollout tag
    moves to the update it fed (step + 1) and the first step, whose rollout is then in the
    next one, is dropped; without one, the steps as they are."""
    shift = reward_offset(steps)
    by_step = {s["step"]: s for s in steps}
    out = []
    for step in sorted(by_step):
        if shift and step == min(by_step):
            continue  # its rewards are in the next step, beside the update they fed
        rollout = by_step.get(step - shift, {})
        merged = {tag: value for tag, value in by_step[step].items()
                  if not tag.startswith(ROLLOUT_PREFIXES)}
        merged.update({tag: value for tag, value in rollout.items()
                       if tag.startswith(ROLLOUT_PREFIXES)})
        merged["step"] = step
        out.append(merged)
    return out, shift
