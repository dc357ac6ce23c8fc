"""The recipe as the run page names it: which reward functions made the rewards and scores,
and the digest that says, by content, which recipe that was.

Why on the page and not only in the profile: the profile names a file, and a team edits that
file in place; the digest (flows/core/recipe_files.py ``recipe_digest``) is what tells two
runs' rewards apart. The evaluation table and the promotion decision carry the same label,
so a reader sees under which recipe each score was made. Names and paths come from the
profile owner's files: escaped (flows/runpage/markdown_text.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flows.core.recipe_files import BUILTIN
from flows.runpage.markdown_text import md_code, md_text

BUILTIN_LABEL = "MaxText's built-in recipe"
UNRECORDED = "recipe not recorded"


def recipe_label(recipe: Mapping[str, Any] | None) -> str:
    """One line: the reward functions and the digest, MaxText's built-in recipe, or that
    the recipe was not recorded (a record or pointer made before recipes were). Pure."""
    if not recipe or not recipe.get("digest"):
        return UNRECORDED
    digest = str(recipe["digest"])
    if digest == BUILTIN:
        return BUILTIN_LABEL
    functions = [str(f) for f in recipe.get("reward_functions") or []]
    named = (f"reward functions {', '.join(functions)}" if functions
             else "MaxText's built-in reward functions")
    return f"{named} (recipe {digest})"


def recipe_markdown(recipe: Mapping[str, Any]) -> str:
    """The run page's Recipe section: the label, then each file with its digest. Pure."""
    lines = ["### Recipe", ""]
    digest = str(recipe.get("digest") or "")
    if not digest or digest == BUILTIN:
        lines.append(md_text(recipe_label(recipe)))
    else:
        functions = [str(f) for f in recipe.get("reward_functions") or []]
        lines += [f"- reward functions: {', '.join(md_code(f) for f in functions)}" if functions
                  else "- reward functions: MaxText's built-in ones",
                  f"- digest: {md_code(digest)} (the files' content and the functions' "
                  "names; the training and the scores are keyed by it)"]
    files: Mapping[str, Mapping[str, Any]] = recipe.get("files") or {}
    if files:
        lines += ["", "| file | path | digest |", "| --- | --- | --- |"]
        lines += [f"| {md_text(role)} | {md_text(str(f.get('path', '')))} | "
                  f"{md_text(str(f.get('digest', '')))} |" for role, f in files.items()]
    return "\n".join(lines) + "\n"

