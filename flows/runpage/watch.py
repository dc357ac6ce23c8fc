"""The watch run's page: its verdict, the numbers it was reached from, and the champion's
sample outputs next to their prompts and rewards, and the serving canary's the same way
(a markdown artifact, pure to build).

Every value that came from outside (the set's name, a model's prompt and response) is
escaped (flows/runpage/markdown_text.py): a response is text a model wrote, so no link,
image or HTML can be made of it; the samples are already shortened and redacted
(flows/core/watch_samples.py).
"""

from __future__ import annotations

from flows.core.watch_record import WatchRecord, WatchSample
from flows.runpage.markdown_text import md_text


def watch_markdown(profile: str, record: WatchRecord, canary: WatchRecord | None = None) -> str:
    """The checkpoint's verdict and samples, then the serving canary's when there is one."""
    r = record
    lines = [f"# Watch {r.watch_number} of run {md_text(r.champion_run)}: **{r.verdict}**", "",
             f"- profile: {md_text(profile)}", f"- set: {md_text(r.set_name)}",
             f"- {md_text(r.reason)}"]
    if r.reference_source:
        lines.append(f"- reference: {md_text(r.reference_source)}")
    lines += ["", "| metric | this watch |", "| --- | --- |"]
    lines += [f"| {name} | {md_text(value)} |" for name, value in r.scores.row().items()]
    if r.samples:
        lines += ["", "## Sample outputs of the champion", "", *_samples(r.samples)]
    if canary is not None:
        lines += _canary(canary)
    return "\n".join(lines) + "\n"


def _samples(samples: list[WatchSample]) -> list[str]:
    return ["| prompt | response | reward |", "| --- | --- | --- |",
            *[f"| {md_text(s.prompt)} | {md_text(s.response) or '(not kept)'} | "
              f"{'' if s.reward is None else f'{s.reward:g}'} |" for s in samples]]


def _canary(c: WatchRecord) -> list[str]:
    """The serving canary: the endpoint's name and the server's words come from outside."""
    lines = ["", f"## Serving canary: **{c.verdict}**", "", f"- served: {md_text(c.served)}",
             f"- {md_text(c.reason)}"]
    if c.reference_source:
        lines.append(f"- reference: {md_text(c.reference_source)}")
    if c.verdict == "unreachable":
        return lines
    lines += ["", "| metric | served model |", "| --- | --- |"]
    lines += [f"| {name} | {md_text(value)} |" for name, value in c.scores.row().items()]
    if c.samples:
        lines += ["", "### Sample outputs of the served model", "", *_samples(c.samples)]
    return lines
