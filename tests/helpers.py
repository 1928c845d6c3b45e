"""Helpers for tests: lint or fix a snippet with chosen rules."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import List, Optional, Sequence

from torchlint.config import Settings, load_config, resolve_selection
from torchlint.engine import FixResult, fix_text, lint_text
from torchlint.model import Diagnostic
from torchlint.registry import all_codes, default_codes


def settings_for(select: Sequence[str], config: Optional[Path] = None, **overrides) -> Settings:
    base = load_config(config) if config is not None else Settings(root=Path.cwd())
    return base.with_overrides(select=tuple(select), **overrides)


def codes_for(settings: Settings) -> List[str]:
    return resolve_selection(settings, all_codes(), default_codes())


def lint(code: str, select: Sequence[str] = ("ALL",), path: str = "snippet.py", **overrides) -> List[Diagnostic]:
    settings = settings_for(select, **overrides)
    return lint_text(textwrap.dedent(code), path, settings, codes_for(settings)).diagnostics


def fix(code: str, select: Sequence[str] = ("ALL",), unsafe: bool = False, path: str = "snippet.py", **overrides) -> FixResult:
    settings = settings_for(select, **overrides)
    return fix_text(textwrap.dedent(code), path, settings, codes_for(settings), unsafe)


def codes(diagnostics: Sequence[Diagnostic]) -> List[str]:
    return [d.code or d.kind.value for d in diagnostics]


# A module with a conv's bias before BatchNorm (TL401), the shared example of the
# CLI, output-format, baseline, action and server tests.
CONV_BN_MODULE = """\
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        return self.bn(self.conv(x))
"""

# A step that zeroes gradients instead of setting them to None (TL301, unsafe fix).
ZERO_GRAD_STEP = """\
def step(optimizer, model, batch):
    optimizer.zero_grad(set_to_none=False)
    model(batch).sum().backward()
    optimizer.step()
"""
