"""The watch run's page: its verdict, the numbers it was reached from, and the champion's
sample outputs next to their prompts and rewards (a markdown artifact, pure to build).

Every value that came from outside (the set's name, a model's prompt and response) is
escaped (flows/runpage/markdown_text.py): a response is text a model wrote, so no link,
image or HTML can be made of it; the samples are already shortened and redacted
(flows/core/watch_samples.py).
"""

from __future__ import annotations

from flows.core.watch_record import WatchRecord
from flows.runpage.markdown_text import md_text


def watch_markdown(profile: str, record: WatchRecord) -> str:
    r = record
    lines = [f"# Watch {r.watch_number} of run {md_text(r.champion_run)}: **{r.verdict}**", "",
             f"- profile: {md_text(profile)}", f"- set: {md_text(r.set_name)}",
             f"- {md_text(r.reason)}"]
    if r.reference_source:
        lines.append(f"- reference: {md_text(r.reference_source)}")
    lines += ["", "| metric | this watch |", "| --- | --- |"]
    lines += [f"| {name} | {md_text(value)} |" for name, value in r.scores.row().items()]
    if r.samples:
        lines += ["", "## Sample outputs of the champion", "",
                  "| prompt | response | reward |", "| --- | --- | --- |"]
        lines += [f"| {md_text(s.prompt)} | {md_text(s.response) or '(not kept)'} | "
                  f"{'' if s.reward is None else f'{s.reward:g}'} |" for s in r.samples]
    return "\n".join(lines) + "\n"
