"""Cheap, deterministic, varied reward for the CPU rehearsal's GRPO run.

Load it with ``reward_functions_path=<this file> reward_functions=ascii_fraction_reward``;
MaxText's ``build_reward_fns`` then replaces its built-in math rewards with it.

Why not the real rewards: the rehearsal's model is a tiny randomly initialised
Qwen3-MoE.  It never produces the ``<reasoning>``/``<answer>`` format nor a correct
number, so MaxText's math rewards (format match, approximate format, ``check_numbers``)
give every completion of a prompt the same score.  GRPO's advantage is the reward minus
the group mean (divided by the group std), so all advantages are 0, the policy gradient
is 0, and the rehearsal would "train" without any weight changing, proving nothing.

Why this reward: it scores each completion by the fraction of its characters that are
printable ASCII (letters, digits, punctuation, space).  Random token streams from a
151936-token vocabulary mix ASCII word pieces with CJK, symbols and byte tokens, so
different completions of the same prompt get different scores: advantages are non-zero
and the update really moves the weights.  It is deterministic (a pure function of the
text) and costs microseconds.  A tiny length term breaks ties between completions that
are both empty or both all-ASCII, so the group variance is never exactly zero unless
the completions are identical.

Signature: MaxText calls ``fn(prompts=..., completions=..., tmvp_config=..., **kwargs)``
and expects one float per completion.
"""

from __future__ import annotations

from typing import Any

PRINTABLE_ASCII = frozenset(chr(c) for c in range(32, 127))


def ascii_fraction_reward(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    """Return, per completion, the share of printable-ASCII characters (+ a tiny length term)."""
    del prompts, kwargs  # the score depends on the completion text only
    scores: list[float] = []
    for text in completions:
        if not text:
            scores.append(0.0)
            continue
        ascii_share = sum(ch in PRINTABLE_ASCII for ch in text) / len(text)
        scores.append(round(ascii_share + 1e-3 * min(len(text), 1000) / 1000, 6))
    return scores
