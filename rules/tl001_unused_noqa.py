from __future__ import annotations

from torchlint.model import FixAvailability
from torchlint.rule import Invalid, Rule, Valid


class UnusedNoqa(Rule):
    """
    ## What it does
    Reports `# noqa: CODES` comments that list torchlint codes which suppress
    nothing on their line (like Ruff's RUF100): a code whose rule reported
    nothing there (*unused*), a code whose rule is not enabled for the file
    by the selection or `per-file-ignores` (*non-enabled*), and a `TL` code
    that is no torchlint rule (*unknown*).

    Only torchlint's own codes are judged: another tool's codes (`E501`,
    `F401`, `RUF100`) and a blanket `# noqa` (no colon) belong to that tool
    too and are left alone, and so is the file-level `# torchlint: noqa`.
    A comment for a finding inside a multi-line string may stand on the
    string's last line (where `--add-noqa` puts it); it counts as used there.

    The rule is off by default: select it with `--extend-select TL001` (or
    `TL0`, or `ALL`). Run it with the rules whose comments it should judge
    enabled, since a comment for a rule that is off is reported as
    non-enabled.

    ## Why is this bad?
    A suppression comment that no longer suppresses anything (the code was
    fixed, the rule became more precise, the code was mistyped) is noise that
    hides a real finding later: a `# noqa: TL101` left on a line keeps
    silencing a new `.item()` written there next year.

    ## Example
    ```python
    import torch
    x = torch.zeros(3)  # noqa: TL201
    ```

    ## Use instead
    ```python
    import torch
    x = torch.zeros(3)
    ```

    ## Fix safety
    The fix is safe: it removes the unused codes from the comment, and the
    whole `# noqa: ...` directive when no code remains (a comment before it,
    or another tool's codes in it, are kept). The codes it removes suppress
    nothing, so what torchlint reports does not change.

    ## References
    - Ruff's rule RUF100 (unused-noqa), whose behaviour this follows
    - [Suppressing a finding](../README.md#suppressing-a-finding) in torchlint's README
    """

    code = "TL001"
    name = "unused-noqa"
    summary = "A `# noqa` comment lists torchlint codes that suppress nothing"
    default = False
    fix = FixAvailability.SAFE

    # The engine reports this rule itself, once the other rules have run
    # (torchlint/engine.py, `_unused_noqa`): it needs to know what they reported.
    VALID = [
        Valid(
            """
            # torchlint: noqa: TL201
            import torch
            x = torch.zeros(3)
            """
        ),
        Valid(
            """
            x = 1  # noqa: E501
            """
        ),
        Valid(
            """
            x = 1  # noqa
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            x = torch.zeros(3)  # noqa: TL201
            """,
            expected_fix="""
            import torch
            x = torch.zeros(3)
            """,
        ),
        Invalid(
            """
            x = 1  # noqa: TL999
            """,
            expected_fix="""
            x = 1
            """,
        ),
    ]
