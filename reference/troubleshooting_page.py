"""The troubleshooting page: "I see X → do Y" for every failure code, grouped by when it
happens: what is seen from the docs' prose (reference/symptoms.py), what to do from the
code itself (its ``fix``). Each code is an anchor the failures reference links to, so a code
read in a message or an event leads here in one click."""

from __future__ import annotations

from flows.common.failure_codes import Failure
from reference.symptoms import SEEN, When, anchor

# Pages that say more about a code than its entry; paths relative to docs/reference/.
_SECRETS = ("Rotate the HF token and other secrets", "../how-to/rotate-secrets.md")
_SPEND = ("Prices and the spend cap", "../how-to/capacity.md#prices-and-the-spend-cap")
_CAPACITY = ("Choose capacity", "../how-to/capacity.md")
_IAM = ("Identities and IAM", "../how-to/identities.md")
SEE_ALSO: dict[Failure, tuple[str, str]] = {
    Failure.CONFIG_SECRET_LITERAL: _SECRETS, Failure.CONFIG_SECRET_UNAVAILABLE: _SECRETS,
    Failure.CONFIG_SECRET_TOO_SHORT: _SECRETS, Failure.CONFIG_SECRET_INVALID: _SECRETS,
    Failure.GKE_SUBMISSION_BUDGET: ("What a preemption costs", "../how-to/preemption-cost.md"),
    Failure.GKE_SPEND_CAP: _SPEND, Failure.CONFIG_SPEND_CAP: _SPEND,
    Failure.GKE_NO_CAPACITY: _CAPACITY, Failure.GKE_NO_FLEX_START_CAPACITY: _CAPACITY,
    Failure.GKE_NO_QUEUED_CAPACITY: _CAPACITY,
    Failure.ENVIRONMENT_FLOW_IDENTITY: _IAM, Failure.IMAGE_NO_GOOGLE_CREDENTIALS: _IAM,
    Failure.IMAGE_ERROR: ("Send a support bundle", "../how-to/support-bundle.md"),
    Failure.RUN_TIMED_OUT: ("Stop, rerun and resume", "../how-to/stop-and-resume.md"),
}


def _entry(code: Failure) -> list[str]:
    _, lead, seen = SEEN[code]
    lines = [f"### `{code}` {{#{anchor(code)}}}", "",
             f"**You see:** {lead}{seen}", "", f"**Do:** {code.fix}", ""]
    if code in SEE_ALSO:
        title, path = SEE_ALSO[code]
        lines += [f"More: [{title}]({path}).", ""]
    return lines


def render() -> str:
    lines = ["# Troubleshooting: what you see and what to do", "",
             "Generated from `flows/common/failure_codes.py` and `reference/symptoms.py` "
             "by `python -m reference`; do not edit by hand. Every failure code, grouped "
             "by when it happens: find the code (or the message) you see, then do what its "
             "entry says.", "",
             "A failure shows in one of two shapes:", "",
             "- a profile refused before anything runs: `FIELD: problem` then `fix: ...`, "
             "every problem at once, from `tpurl validate`, `tpurl plan` and `tpurl run` (exit "
             "2); `tpurl check PROFILE` shows the same problems with their code in brackets;",
             "- a stage that failed: `[CATEGORY CODE] stage NAME: summary`, the detail, then "
             "`fix: ...`, from `tpurl run` (exit 1), on the run page and in the "
             "`tpurl.stage.failed` event (the category says what the flow does next: "
             "[categories](failures.md#categories)).", "",
             "No code at all (`[internal-error]` with a traceback) is a bug of the pipeline's "
             "own: run `tpurl support-bundle PROFILE` and send the archive ([Send a support "
             "bundle](../how-to/support-bundle.md)). The pre-flight lines of `tpurl plan "
             "--check` carry their own fix on the line below each.", ""]
    missing = [code for code in Failure if code not in SEEN]
    if missing:  # a new code needs its prose before the page can be written
        raise LookupError(f"no entry in reference/symptoms.py for {missing}")
    group = {code: SEEN[code][0] for code in Failure}
    sections = [when for when in When if when in group.values()]
    lines += [f"{len(group)} codes in {len(sections)} groups: "
              + ", ".join(f"{when.value[0].lower()}{when.value[1:]} "
                          f"({sum(w is when for w in group.values())})"
                          for when in sections) + ".", ""]
    for when in sections:
        lines += [f"## {when.value}", ""]
        for code in sorted(code for code in Failure if group[code] is when):
            lines += _entry(code)
    return "\n".join(lines).rstrip("\n") + "\n"
