"""A baseline of accepted findings, for adopting torchlint on existing code.

``torchlint check --baseline FILE`` reports only the findings that are not in
the baseline; ``--update-baseline`` writes it.  A finding is identified by a
*fingerprint* that survives unrelated edits: the rule's code, the file (relative
to the baseline file's directory), and the finding's source line with its
whitespace collapsed, never its line number, so code added or removed above a
finding does not disturb it.  A file can hold the same line more than once (two
``loss.item()`` calls); the baseline then holds as many entries as it accepted,
and a further copy is new.  Each entry also records a *context* (the collapsed
text of the nearest non-blank lines above and below) that decides which copies
are the accepted ones when their number changes.

The baseline is a ratchet: updating an existing baseline keeps only the entries
still found (a finding that disappears is removed and never re-admitted); new
findings are not added.  Writing a baseline where there is none accepts every
current finding.  To accept new findings, delete the file and write it again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from torchlint.model import Diagnostic, Kind

FORMAT_VERSION = 1


class BaselineError(Exception):
    """A baseline file that cannot be read or is not a torchlint baseline."""


@dataclass(frozen=True)
class Entry:
    code: str
    path: str
    fingerprint: str
    context: str

    def to_json(self) -> dict:
        return {"code": self.code, "path": self.path, "fingerprint": self.fingerprint, "context": self.context}


def _collapse(line: str) -> str:
    return " ".join(line.split())


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:20]


def _relative(path: str, root: Path) -> str:
    """``path`` (as displayed, relative to the current directory) relative to
    ``root``, with forward slashes."""
    absolute = Path(os.path.abspath(path))
    try:
        return absolute.relative_to(root).as_posix()
    except ValueError:
        return Path(os.path.relpath(absolute, root)).as_posix()


def _neighbour(lines: Sequence[str], index: int, step: int) -> str:
    i = index + step
    while 0 <= i < len(lines):
        text = _collapse(lines[i])
        if text:
            return text
        i += step
    return ""


def entry_for(d: Diagnostic, sources: Mapping[str, str], root: Path) -> Entry:
    """The baseline entry of a rule's finding ``d``; ``sources`` holds the texts
    the reporters show excerpts from (``Diagnostic.source_key``)."""
    text = sources.get(d.source_key, "")
    lines = text.splitlines()
    index = d.line - 1
    line = _collapse(lines[index]) if 0 <= index < len(lines) else ""
    path = _relative(d.path, root)
    context = _digest(_neighbour(lines, index, -1), _neighbour(lines, index, 1))
    return Entry(d.code or "", path, _digest(d.code or "", path, line), context)


def reportable(d: Diagnostic) -> bool:
    """Only rules' findings go into a baseline: a syntax or I/O error is never accepted."""
    return d.kind is Kind.RULE and bool(d.code)


class Baseline:
    def __init__(self, path: Path, entries: Sequence[Entry], exists: bool) -> None:
        self.path = path
        self.root = path.parent.resolve()
        self.entries = list(entries)
        self.exists = exists

    @classmethod
    def load(cls, path: str) -> "Baseline":
        p = Path(path)
        if not p.exists():
            return cls(p, [], exists=False)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise BaselineError(f"cannot read baseline {path}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise BaselineError(f"baseline {path} is not valid JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION or not isinstance(
            data.get("findings"), list
        ):
            raise BaselineError(
                f"{path} is not a torchlint baseline (version {FORMAT_VERSION}); "
                "write one with `torchlint check --update-baseline`"
            )
        entries = []
        for row in data["findings"]:
            try:
                entries.append(Entry(str(row["code"]), str(row["path"]), str(row["fingerprint"]), str(row["context"])))
            except (TypeError, KeyError) as exc:
                raise BaselineError(f"baseline {path}: malformed entry {row!r}") from exc
        return cls(p, entries, exists=True)

    def match(
        self, diagnostics: Sequence[Diagnostic], sources: Mapping[str, str]
    ) -> Tuple[List[Diagnostic], List[Tuple[Diagnostic, Entry]]]:
        """Split ``diagnostics`` into the new ones and the baselined ones (each
        with its entry).  Within one fingerprint, copies whose context matches
        an entry's are matched first, then the rest in file order."""
        available: Dict[str, List[Entry]] = defaultdict(list)
        for e in self.entries:
            available[e.fingerprint].append(e)
        keyed = [(d, entry_for(d, sources, self.root)) if reportable(d) else (d, None) for d in diagnostics]
        taken: Dict[int, Entry] = {}
        for i, (d, e) in enumerate(keyed):  # same context first
            if e is None:
                continue
            pool = available.get(e.fingerprint)
            for j, candidate in enumerate(pool or ()):
                if candidate.context == e.context:
                    taken[i] = pool.pop(j)
                    break
        for i, (d, e) in enumerate(keyed):  # then any copy left
            if e is None or i in taken:
                continue
            pool = available.get(e.fingerprint)
            if pool:
                taken[i] = pool.pop(0)
        new = [d for i, (d, _) in enumerate(keyed) if i not in taken]
        old = [(keyed[i][0], keyed[i][1]) for i in sorted(taken)]
        return new, old  # type: ignore[return-value]

    def updated(
        self, diagnostics: Sequence[Diagnostic], sources: Mapping[str, str], checked: Iterable[str]
    ) -> "Baseline":
        """The baseline to write after a run that checked the files ``checked``
        (as displayed): every finding when there was no baseline; otherwise
        only the entries still found (the ratchet), refreshed to their current
        context.  Entries of files this run did not check are kept as they are."""
        if not self.exists:
            entries = [entry_for(d, sources, self.root) for d in diagnostics if reportable(d)]
        else:
            _, old = self.match(diagnostics, sources)
            seen = {_relative(path, self.root) for path in checked}
            entries = [e for e in self.entries if e.path not in seen]
            entries += [entry_for(d, sources, self.root) for d, _ in old]
        return Baseline(self.path, entries, exists=True)

    def save(self) -> None:
        rows = sorted((e.to_json() for e in self.entries), key=lambda r: (r["path"], r["code"], r["fingerprint"]))
        data = {"version": FORMAT_VERSION, "tool": "torchlint", "findings": rows}
        try:
            self.path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise BaselineError(f"cannot write baseline {self.path}: {exc}") from None
