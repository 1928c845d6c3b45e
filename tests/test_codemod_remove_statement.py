"""The statement-removal and `with`-unwrapping codemod shared by TL701 and TL702,
tested end to end through the fixer (the rules hand it the nodes)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from tests.helpers import fix


def fixed(code: str, select=("TL701", "TL702")) -> str:
    code = textwrap.dedent(code)
    result = fix(code, select=list(select), unsafe=True)
    assert result.errors == []
    ast.parse(result.text)
    again = fix(result.text, select=list(select), unsafe=True)
    assert again.text == result.text and not again.applied, "fixing must be idempotent"
    return result.text


def test_removes_the_line() -> None:
    assert fixed(
        """
        import torch
        for x in loader:
            step(x)
            torch.cuda.empty_cache()  # free memory
            log(x)
        """
    ) == textwrap.dedent(
        """
        import torch
        for x in loader:
            step(x)
            log(x)
        """
    )


def test_comment_lines_above_move_to_the_next_statement() -> None:
    assert fixed(
        """
        import torch
        for x in loader:
            step(x)

            # keep memory low
            torch.cuda.empty_cache()
            log(x)
        """
    ) == textwrap.dedent(
        """
        import torch
        for x in loader:
            step(x)

            # keep memory low
            log(x)
        """
    )


def test_blank_lines_above_are_kept_when_the_next_statement_has_none() -> None:
    assert fixed(
        """
        import torch
        for x in loader:
            step(x)

            torch.cuda.empty_cache()
            log(x)
        """
    ) == textwrap.dedent(
        """
        import torch
        for x in loader:
            step(x)

            log(x)
        """
    )


def test_comment_above_the_last_statement_of_a_block_stays_in_the_block() -> None:
    assert fixed(
        """
        import torch
        def train():
            for x in loader:
                step(x)
                # release
                torch.cuda.empty_cache()
            return 1
        """
    ) == textwrap.dedent(
        """
        import torch
        def train():
            for x in loader:
                step(x)
                # release
            return 1
        """
    )


def test_only_statement_of_a_block_becomes_pass() -> None:
    assert fixed(
        """
        import torch
        for x in loader:
            step(x)
            if x.numel() > limit:
                # fragmentation
                torch.cuda.empty_cache()  # see issue 12
        """
    ) == textwrap.dedent(
        """
        import torch
        for x in loader:
            step(x)
            if x.numel() > limit:
                # fragmentation
                pass  # see issue 12
        """
    )


@pytest.mark.parametrize(
    "before, after",
    [
        ("step(x); torch.cuda.empty_cache()", "step(x)"),
        ("torch.cuda.empty_cache(); step(x)", "step(x)"),
        ("a(); torch.cuda.empty_cache(); step(x)", "a(); step(x)"),
        ("step(x) ; torch.cuda.empty_cache() ;", "step(x) ;"),
    ],
)
def test_semicolon_separated_statements(before: str, after: str) -> None:
    code = f"import torch\nfor x in loader:\n    {before}\n"
    assert fixed(code) == f"import torch\nfor x in loader:\n    {after}\n"


def test_one_line_suites() -> None:
    # (TL702 reports training code: here, a function named like a training step)
    assert fixed("import torch\ndef train_step(loader):\n    for x in loader: torch.cuda.empty_cache()\n") == (
        "import torch\ndef train_step(loader):\n    for x in loader: pass\n"
    )
    assert fixed("import torch\nfor x in loader: step(x); torch.cuda.empty_cache()\n") == (
        "import torch\nfor x in loader: step(x)\n"
    )


def test_module_level_statement_with_comment() -> None:
    assert fixed(
        """\
        import torch

        # debugging NaNs
        torch.autograd.set_detect_anomaly(True)
        main()
        """
    ) == textwrap.dedent(
        """\
        import torch

        # debugging NaNs
        main()
        """
    )


def test_unwrap_with_dedents_body_and_keeps_comments() -> None:
    assert fixed(
        """
        import torch
        def step(model, x):
            # find the bad op
            with torch.autograd.detect_anomaly():  # temporary
                loss = model(x)
                # backward
                loss.backward()
                if loss > 1:
                    print("large")
            return loss
        """
    ) == textwrap.dedent(
        """
        import torch
        def step(model, x):
            # find the bad op
            # temporary
            loss = model(x)
            # backward
            loss.backward()
            if loss > 1:
                print("large")
            return loss
        """
    )


def test_unwrap_only_statement_of_a_block_and_one_line_with() -> None:
    assert fixed(
        """
        import torch
        for x in loader:
            with torch.autograd.detect_anomaly():
                step(x)
        with torch.autograd.set_detect_anomaly(True): step(x); log(x)
        """
    ) == textwrap.dedent(
        """
        import torch
        for x in loader:
            step(x)
        step(x); log(x)
        """
    )


@pytest.mark.parametrize(
    "before, after",
    [
        (
            "with torch.autograd.detect_anomaly(), torch.no_grad():",
            "with torch.no_grad():",
        ),
        (
            "with torch.no_grad(), torch.autograd.detect_anomaly():",
            "with torch.no_grad():",
        ),
        (
            "with torch.no_grad(), torch.autograd.detect_anomaly(), open(p) as f:",
            "with torch.no_grad(), open(p) as f:",
        ),
        (
            "with (\n    torch.no_grad(),\n    torch.autograd.set_detect_anomaly(True),\n):",
            "with (\n    torch.no_grad(),\n):",
        ),
    ],
)
def test_with_several_items_drops_only_the_anomaly_item(before: str, after: str) -> None:
    code = f"import torch\n{before}\n    step()\n"
    assert fixed(code) == f"import torch\n{after}\n    step()\n"


def test_nested_fixes_in_one_file() -> None:
    code = """
    import torch
    torch.autograd.set_detect_anomaly(True)
    for x in loader:
        with torch.autograd.detect_anomaly():
            step(x)
            torch.cuda.empty_cache()
    """
    assert fixed(code) == textwrap.dedent(
        """
        import torch
        for x in loader:
            step(x)
        """
    )
