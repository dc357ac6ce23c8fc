"""The troubleshooting page: "I see X → do Y" for every failure code, grouped by when it
happens, from the catalogue (flows/core/failure_codes.py). Each code is an anchor the
failures reference links to, so a code read in a message or an event leads here in one
click, and the page can only say what the catalogue says."""

from __future__ import annotations

from flows.core.failure_codes import CATALOGUE, Symptom, When

# Pages that say more about a code than its entry; paths relative to docs/reference/.
SEE_ALSO: dict[str, tuple[str, str]] = {
    "config/secret-literal": ("Rotate the HF token and other secrets",
                              "../how-to/rotate-secrets.md"),
    "config/secret-unavailable": ("Rotate the HF token and other secrets",
                                  "../how-to/rotate-secrets.md"),
    "config/secret-too-short": ("Rotate the HF token and other secrets",
                                "../how-to/rotate-secrets.md"),
    "config/secret-invalid": ("Rotate the HF token and other secrets",
                              "../how-to/rotate-secrets.md"),
    "gke/submission-budget": ("What a preemption costs", "../how-to/preemption-cost.md"),
    "gke/spend-cap": ("Prices and the spend cap", "../how-to/capacity.md#prices-and-the-spend-cap"),
    "config/spend-cap": ("Prices and the spend cap",
                         "../how-to/capacity.md#prices-and-the-spend-cap"),
    "gke/no-capacity": ("Choose capacity", "../how-to/capacity.md"),
    "gke/no-flex-start-capacity": ("Choose capacity", "../how-to/capacity.md"),
    "gke/no-queued-capacity": ("Choose capacity", "../how-to/capacity.md"),
    "environment/flow-identity": ("Identities and IAM", "../how-to/identities.md"),
    "image/no-google-credentials": ("Identities and IAM", "../how-to/identities.md"),
    "image/error": ("Send a support bundle", "../how-to/support-bundle.md"),
    "run/timed-out": ("Stop, rerun and resume", "../how-to/stop-and-resume.md"),
}


def _entry(symptom: Symptom) -> list[str]:
    lines = [f"### `{symptom.code}` {{#{symptom.anchor}}}", "",
             f"**You see:** {symptom.see}", "", f"**Do:** {symptom.do}", ""]
    if symptom.code in SEE_ALSO:
        title, path = SEE_ALSO[symptom.code]
        lines += [f"More: [{title}]({path}).", ""]
    return lines


def render() -> str:
    lines = ["# Troubleshooting: what you see and what to do", "",
             "Generated from `flows/core/failure_codes.py` by `python -m flows.reference`; do "
             "not edit by hand. Every failure code, grouped by when it happens: find the code "
             "(or the message) you see, then do what its entry says.", "",
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
    sections = [when for when in When if any(s.when is when for s in CATALOGUE)]
    lines += [f"{len(CATALOGUE)} codes in {len(sections)} groups: "
              + ", ".join(f"{when.value[0].lower()}{when.value[1:]} "
                          f"({sum(s.when is when for s in CATALOGUE)})"
                          for when in sections) + ".", ""]
    for when in sections:
        lines += [f"## {when.value}", ""]
        for symptom in sorted((s for s in CATALOGUE if s.when is when), key=lambda s: s.code):
            lines += _entry(symptom)
    return "\n".join(lines).rstrip("\n") + "\n"
