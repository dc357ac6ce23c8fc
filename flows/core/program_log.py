"""Which of a program's output lines reach the run's log, and the one line that says what
was left out.

Why: the run page's Logs tab is read by a person, and the programs print mostly what nobody
reads there. Measured on one rehearsal run (MaxText 0.2.4 on CPU): train_rl prints every
configuration value at start-up (``pyconfig.py:584] Config param <key>: <value>``, 837 lines
per program start), the image stage's installer lists each of the ~270 packages it fetched
and installed, and orbax, absl and TensorFlow log a few hundred informational lines
(checkpoint handler registration, throughput, device lists). The full output is always kept
in the program's log file (``log_uri``); the Prefect log gets:

- warnings and errors: absl/glog lines whose level letter is W, E or F
  (``W1203 16:06:28.868 … file.py:230] …``), Python logging's ``WARNING:``/``ERROR:``/
  ``CRITICAL:`` prefixes (also after a ``[name]`` tag), the ``warnings`` module's
  ``…Warning:`` lines and a traceback, each with the indented lines that continue it;
- progress: the workload's own step line (its ``progress_regex``) and a progress bar's
  last frame (``100%|``), not its every frame;
- everything else is counted, by kind, and summarised in one line naming the log file
  (``ProgramLines.ending``), the configuration dump under its own name; a program that
  printed only a few such lines (the rehearsal's make-dataset prints one JSON line) has
  them shown at its end instead of a summary.

The decision is per line and pure (``classify``), so it is tested on captured output.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["shown", "config", "installer", "progress-bar", "info"]

CONFIG_DUMP = re.compile(r"\bConfig param \S+:")  # maxtext/configs/pyconfig.py's dump
# uv's install listing: "Downloading x (1.0MiB)", " Downloaded x", " Built x==1", " + x==1"
INSTALLER = re.compile(r"^\s*(?:Downloading \S+ \(|Downloaded \S+$|Built \S+==|[+-] \S+==)")
# absl's glog format: level letter W/E/F, or an I line whose message says WARNING itself
GLOG_SERIOUS = re.compile(r"^(?:[WEF]\d{4} \d\d:\d\d:\d\d|I\d{4} [^\]]*\] WARNING\b)")
PY_SERIOUS = re.compile(r"^(?:\[[^\]]+\] )?(?:WARNING|ERROR|CRITICAL|FATAL)\b[:\s]")
WARNING_LINE = re.compile(r"\b\w*Warning: ")  # warnings.showwarning's "file:line: XWarning: …"
TRACEBACK = re.compile(r"^(?:Traceback \(most recent call last\):|During handling of the "
                       r"above exception|The above exception was the direct cause)")
EXCEPTION_LINE = re.compile(r"^[\w.]*(?:Error|Exception|Interrupt|Exit)\b(?::|$)")
BAR_FRAME = re.compile(r"\d{1,3}%\|")
BAR_DONE = re.compile(r"\b100%\|")
CONTINUATION_LIMIT = 40  # lines of one warning or traceback shown after its first line
FEW = 3  # at most this many hidden lines are shown at the end rather than summarised

KIND_NAMES = {"config": "configuration dump (`Config param …`)",
              "installer": "package installer listing",
              "progress-bar": "progress bar frames",
              "info": "informational"}


@dataclass
class ProgramLines:
    """One program's output as it streams: ``keep(line)`` says whether the run's log shows
    it; ``summary(log_uri)`` is the line that accounts for the rest."""

    name: str
    progress_regex: str | None = None
    counts: Counter[str] = field(default_factory=Counter)
    total: int = 0
    _continuing: int = 0  # lines left of the warning or traceback being shown
    _in_traceback: bool = False
    _first_hidden: list[str] = field(default_factory=list)

    def keep(self, line: str) -> bool:
        kind = self.classify(line)
        self.total += 1
        if kind != "shown":
            self.counts[kind] += 1
            if len(self._first_hidden) <= FEW:
                self._first_hidden.append(line)
        return kind == "shown"

    def ending(self, log_uri: str) -> list[str]:
        """What the run's log gets once the program ended: its few hidden lines as they were
        (``[name] line``), or the one summary line."""
        if sum(self.counts.values()) <= FEW:
            return [f"[{self.name}] {line}" for line in self._first_hidden]
        summary = self.summary(log_uri)
        return [summary] if summary else []

    def classify(self, line: str) -> Kind:
        """The kind of one line, given the lines before it (a traceback's body is shown)."""
        if self._in_traceback:
            if line.startswith((" ", "\t")) or TRACEBACK.match(line) or not line.strip():
                return "shown"
            self._in_traceback = False  # its last line: the exception itself
            return "shown"
        if TRACEBACK.match(line):
            self._in_traceback = True
            return "shown"
        if self._continuing and line.startswith((" ", "\t")):
            self._continuing -= 1
            return "shown"
        self._continuing = 0
        if CONFIG_DUMP.search(line):
            return "config"
        if INSTALLER.match(line):
            return "installer"
        if self.progress_regex and re.search(self.progress_regex, line):
            return "shown"
        if BAR_FRAME.search(line):
            return "shown" if BAR_DONE.search(line) else "progress-bar"
        if (GLOG_SERIOUS.match(line) or PY_SERIOUS.match(line) or WARNING_LINE.search(line)
                or EXCEPTION_LINE.match(line)):
            self._continuing = CONTINUATION_LIMIT
            return "shown"
        return "info"

    def summary(self, log_uri: str) -> str | None:
        """One line for everything not shown, or None when every line was."""
        hidden = sum(self.counts.values())
        if not hidden:
            return None
        parts = ", ".join(f"{self.counts[k]:,} {KIND_NAMES[k]}" for k in KIND_NAMES
                          if self.counts[k])
        return (f"{self.name}: {hidden:,} of {self.total:,} output lines not shown here "
                f"({parts}); the full output is in {log_uri}")
