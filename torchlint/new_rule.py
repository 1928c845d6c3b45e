"""Scaffold a new rule: its module and its fixture, which pass the test suite at once.

    python -m torchlint.new_rule TL304 adam-not-fused

writes the two files of a rule:

- ``rules/tl304_adam_not_fused.py``: the rule class with its documentation,
  metadata, ``Valid``/``Invalid`` examples with their expected fixes and its
  ``verify --rules`` benchmark.  The catalog finds it by its file name;
- ``tests/fixtures/TL304/input.py``: positives and near-misses (its
  ``expected.txt``, the diagnostics and the fixes as diffs, is rendered from
  it by ``python -m torchlint.fixtures``);

then regenerates ``docs/rules.md`` and the README's rule table
(``python -m torchlint.docs``).  The scaffold is a complete, working rule (it
reports an Adam or AdamW optimizer without ``fused=True`` and fixes it with
``codemods.calls.set_keyword``): replace its detection, documentation,
examples, fixture and benchmark with your rule's, re-running
``python -m torchlint.fixtures`` and ``python -m torchlint.docs``.  New rules
start opt-in (``default = False``); see docs/internals.md, "Writing a rule".
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import List, Optional, Sequence

_CODE = re.compile(r"TL\d{3}")
_NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")

ROOT = Path(__file__).resolve().parent.parent


class ScaffoldError(Exception):
    pass


def rules_dir() -> Path:
    """The directory of ``torchlint.rules`` (``rules/`` in a clone), found
    without importing it."""
    spec = find_spec("torchlint.rules")
    if spec is None or not spec.submodule_search_locations:
        raise ScaffoldError("torchlint.rules not found")
    return Path(list(spec.submodule_search_locations)[0])


def module_name(code: str, name: str) -> str:
    return f"{code.lower()}_{name.replace('-', '_')}"


def class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-"))


def _check(code: str, name: str, rules: Path, fixtures: Path) -> None:
    if not _CODE.fullmatch(code):
        raise ScaffoldError(f"`{code}` is not a rule code: write TL and three digits, such as TL304")
    if not _NAME.fullmatch(name):
        raise ScaffoldError(f"`{name}` is not a rule name: write it in kebab-case, such as adam-not-fused")
    if not (ROOT / "tests").is_dir():
        raise ScaffoldError(f"{ROOT} has no tests/ directory: scaffold a rule in a clone of torchlint")
    for path in rules.glob("tl*.py"):
        if path.name.startswith(code.lower() + "_"):
            raise ScaffoldError(f"{code} is taken by {path.name}")
        if path.stem.split("_", 1)[-1] == name.replace("-", "_"):
            raise ScaffoldError(f"the name {name} is taken by {path.name}")
    if (fixtures / code).exists():
        raise ScaffoldError(f"{fixtures / code} exists already")


def scaffold(code: str, name: str) -> List[Path]:
    """Write the rule module and its fixture; returns their paths."""
    rules = rules_dir()
    fixtures = ROOT / "tests" / "fixtures"
    _check(code, name, rules, fixtures)
    module = rules / f"{module_name(code, name)}.py"
    fixture = fixtures / code / "input.py"
    module.write_text(RULE_TEMPLATE.format(code=code, name=name, cls=class_name(name)), encoding="utf-8")
    fixture.parent.mkdir(parents=True)
    fixture.write_text(FIXTURE_TEMPLATE, encoding="utf-8")
    return [module, fixture]


def _run(*args: str) -> None:
    """Run a generator in a fresh interpreter, which sees the new rule."""
    result = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise ScaffoldError(f"`python -m {' '.join(args)}` failed:\n{result.stdout}{result.stderr}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0].startswith("-"):
        print("usage: python -m torchlint.new_rule CODE NAME   (e.g. TL304 adam-not-fused)", file=sys.stderr)
        return 2
    code, name = args
    try:
        written = scaffold(code, name)
        _run("torchlint.fixtures", str(written[1].parent))
        _run("torchlint.docs")
    except (ScaffoldError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for path in [*written, written[1].parent / "expected.txt"]:
        print(f"wrote {path}")
    print("regenerated docs/rules.md and the README's rule table")
    print(f"next: edit {written[0].name} and the fixture, then run `python -m torchlint.fixtures "
          f"{written[1].parent.relative_to(ROOT)}` and `python -m torchlint.docs`")
    return 0


RULE_TEMPLATE = '''\
from __future__ import annotations

import libcst as cst

from torchlint.codemods import calls
from torchlint.model import Applicability, Fix, FixAvailability
from torchlint.rule import Benchmark, Invalid, Rule, Valid
from torchlint.rules._helpers import argument, literal_bool

_ADAM = frozenset({{
    "torch.optim.Adam",
    "torch.optim.AdamW",
    "torch.optim.adam.Adam",
    "torch.optim.adamw.AdamW",
}})


class {cls}(Rule):
    """
    ## What it does
    Reports a `torch.optim.Adam(...)` or `torch.optim.AdamW(...)` whose
    `fused` is absent or `False`, outside test files.

    ## Why is this bad?
    Without `fused=True` the optimizer updates the parameters with a kernel
    per operation of the update (batched over the tensors by the `foreach`
    implementation); the fused implementation does the whole update of a
    parameter group in one kernel per device and dtype, reading and writing
    each parameter and its state once per step.

    ## Example
    ```python
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ```

    ## Use instead
    ```python
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    ```

    ## Fix safety
    The fix is unsafe: the fused kernels need every parameter to be a
    floating-point tensor on a device they support (they raise otherwise),
    and they round differently from the other implementations, so the
    weights after a step may differ in the last bits. An explicit
    `fused=False` may be on purpose.

    A call given `**kwargs` or `*args` that may set `fused`, a `fused=` whose
    value is not a literal, and a call that passes `foreach=` (`foreach=True`
    with `fused=True` raises) are not reported.

    ## References
    - `torch.optim.AdamW` documentation, the `fused` argument
    """

    code = "{code}"
    name = "{name}"
    summary = "Adam or AdamW optimizer without the fused implementation"
    default = False  # new rules start opt-in (docs/internals.md, "Writing a rule")
    fix = FixAvailability.UNSAFE
    needs = ("Adam",)  # a file without this word is not walked for this rule

    VALID = [
        Valid(
            """
            import torch
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
            """
        ),
        Valid(
            """
            import torch
            optimizer = torch.optim.AdamW(model.parameters(), foreach=True)
            """
        ),
        Valid(
            """
            import torch
            optimizer = torch.optim.Adam(model.parameters(), **config)
            """
        ),
        Valid(
            """
            import torch
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            """,
            expected_fix="""
            import torch
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
            """,
        ),
        Invalid(
            """
            from torch.optim import Adam
            optimizer = Adam(model.parameters(), fused=False)
            """,
            expected_fix="""
            from torch.optim import Adam
            optimizer = Adam(model.parameters(), fused=True)
            """,
        ),
    ]

    BENCHMARK = Benchmark(
        title="AdamW steps without vs with `fused=True`",
        before="""
            import torch

            device = torch.device(DEVICE)

            model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
            inputs = torch.randn(64, 512, device=device)


            def run():
                optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
                for _ in range(4):
                    optimizer.zero_grad()
                    model(inputs).square().mean().backward()
                    optimizer.step()
                return [p.detach() for p in model.parameters()]
            """,
        after="""
            import torch

            device = torch.device(DEVICE)

            model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
            inputs = torch.randn(64, 512, device=device)


            def run():
                optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
                for _ in range(4):
                    optimizer.zero_grad()
                    model(inputs).square().mean().backward()
                    optimizer.step()
                return [p.detach() for p in model.parameters()]
            """,
        rtol=1e-4,
        atol=1e-5,
        comparison="the weights after four steps, within 1e-4: the fused kernel rounds differently",
    )

    _MESSAGE = (
        "`{{name}}(...)` without `fused=True` updates the parameters with a kernel per "
        "operation; pass `fused=True` to do the whole step in one kernel"
    )

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.is_test_file:
            return
        qualified = self.context.qualname(node.func)
        if qualified not in _ADAM:
            return
        known, arg = argument(node, "fused", None)
        if not known or (arg is not None and literal_bool(arg.value) is not False):
            return
        known, foreach = argument(node, "foreach", None)
        if not known or foreach is not None:
            return
        self.report(
            node,
            self._MESSAGE.format(name=qualified.rsplit(".", 1)[-1]),
            fix=Fix(
                Applicability.UNSAFE,
                "Pass `fused=True`",
                lambda: calls.set_keyword(node, "fused", "True", arg),
            ),
        )
'''

FIXTURE_TEMPLATE = '''\
import torch
from torch import optim
from torch.optim import AdamW as Optimizer


def build(model, lr):
    return torch.optim.AdamW(model.parameters(), lr=lr)


def build_adam(model):
    return optim.Adam(
        model.parameters(),
        lr=3e-4,  # from the paper
    )


def build_off(model):
    return Optimizer(model.parameters(), fused=False)


# --- near-misses ---


def already_fused(model):
    return torch.optim.AdamW(model.parameters(), fused=True)


def with_foreach(model):
    return torch.optim.AdamW(model.parameters(), foreach=True)


def configured(model, config):
    return torch.optim.AdamW(model.parameters(), **config)


def chosen(model, use_fused):
    return torch.optim.AdamW(model.parameters(), fused=use_fused)


def plain_sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.1)


class AdamW:
    pass


def not_torch(model):
    return AdamW(model.parameters())
'''


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
