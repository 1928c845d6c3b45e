"""Unit tests for TL401 (conv-bias-before-batchnorm)."""

from __future__ import annotations

import textwrap

import pytest

from tests.helpers import codes, fix, lint
from torchlint.registry import all_rules

RULE = all_rules()["TL401"]


def tl401(code: str):
    return lint(code, select=["TL401"])


def fixed(code: str) -> str:
    result = fix(code, select=["TL401"], unsafe=True)
    assert result.errors == []
    return result.text


def test_documentation_sections() -> None:
    doc = RULE.documentation()
    for section in ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix safety", "## References"):
        assert section in doc
    assert "ConvTranspose" in doc and "state_dict" in doc and "running_mean" in doc


@pytest.mark.parametrize(
    "imports, conv, bn",
    [
        ("import torch.nn as nn", "nn.Conv2d", "nn.BatchNorm2d"),
        ("from torch import nn", "nn.Conv2d", "nn.BatchNorm2d"),
        ("from torch.nn import Conv2d, BatchNorm2d", "Conv2d", "BatchNorm2d"),
        ("from torch.nn import Conv2d as C, BatchNorm2d as BN", "C", "BN"),
        ("import torch", "torch.nn.Conv2d", "torch.nn.BatchNorm2d"),
        ("import torch as T", "T.nn.Conv2d", "T.nn.SyncBatchNorm"),
        ("import torch.nn.modules.conv as conv_mod\nimport torch.nn.modules.batchnorm as bn_mod",
         "conv_mod.Conv2d", "bn_mod.BatchNorm2d"),
    ],
)
def test_import_aliases(imports: str, conv: str, bn: str) -> None:
    code = f"{imports}\nimport torch\n\nstem = torch.nn.Sequential({conv}(3, 8, 3), {bn}(8))\n"
    diagnostics = tl401(code)
    assert codes(diagnostics) == ["TL401"]
    assert diagnostics[0].line == code.count("\n")
    assert f"{conv}(3, 8, 3, bias=False)" in fixed(code)


def test_import_inside_function() -> None:
    code = """
    import torch

    def build():
        from torch import nn
        return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))
    """
    assert codes(tl401(code)) == ["TL401"]


def test_user_classes_and_other_libraries_are_not_reported() -> None:
    code = """
    import torch
    from mylib.layers import Conv2d, BatchNorm2d
    from torch import nn

    a = nn.Sequential(Conv2d(3, 8, 3), BatchNorm2d(8))
    b = nn.Sequential(Conv2d(3, 8, 3), nn.BatchNorm2d(8))
    """
    assert tl401(code) == []


def test_message_names_conv_and_batchnorm() -> None:
    code = """
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv3d(4, 4, 3)
            self.norm = nn.BatchNorm3d(4)

        def forward(self, x):
            y = self.conv(x)
            return self.norm(y)
    """
    [diagnostic] = tl401(code)
    assert (diagnostic.line, diagnostic.column) == (7, 21)
    assert "`Conv3d`" in diagnostic.message and "`BatchNorm3d` (`self.norm`)" in diagnostic.message
    assert "bias=False" in diagnostic.message


@pytest.mark.parametrize(
    "conv",
    [
        "nn.Conv2d(3, 8, 3, 1, 0, 1, 1, True)",
        "nn.Conv2d(3, 8, 3, bias=True)",
        "nn.Conv2d(3, 8, 3, bias=True, **extra)",
        "nn.ConvTranspose2d(3, 8, 3, 1, 0, 0, 1, True, 1)",
        "nn.LazyConv2d(8, 3, 1, 0, 1, 1, True)",
    ],
)
def test_literal_true_bias_becomes_false(conv: str) -> None:
    code = f"from torch import nn\nm = nn.Sequential({conv}, nn.BatchNorm2d(8))\n"
    assert codes(tl401(code)) == ["TL401"]
    out = fixed(code)
    assert "True" not in out and "False" in out and "bias=False, bias" not in out


@pytest.mark.parametrize(
    "conv",
    [
        "nn.Conv2d(3, 8, 3, 1, 0, 1, 1, False)",
        "nn.Conv2d(3, 8, 3, bias=False)",
        "nn.Conv2d(3, 8, 3, bias=use_bias)",
        "nn.Conv2d(3, 8, 3, bias=not batch_norm)",
        "nn.Conv2d(3, 8, 3, **conv_kwargs)",
        "nn.Conv2d(*conv_args)",
        "nn.ConvTranspose2d(3, 8, 3, 1, 0, 0, 1, False)",
        "nn.LazyConv2d(8, 3, 1, 0, 1, 1, False)",
    ],
)
def test_bias_off_or_unknown_is_silent(conv: str) -> None:
    code = f"from torch import nn\nm = nn.Sequential({conv}, nn.BatchNorm2d(8))\n"
    assert tl401(code) == []


@pytest.mark.parametrize(
    "conv, bn, reported",
    [
        ("Conv1d", "BatchNorm1d", True),
        ("Conv3d", "BatchNorm3d", True),
        ("ConvTranspose1d", "BatchNorm1d", True),
        ("Conv1d", "SyncBatchNorm", True),
        ("Conv2d", "LazyBatchNorm2d", True),
        ("Conv1d", "BatchNorm2d", False),
        ("Conv2d", "BatchNorm1d", False),
        ("ConvTranspose3d", "BatchNorm2d", False),
        ("Conv2d", "GroupNorm", False),
        ("Conv2d", "InstanceNorm2d", False),
        ("Linear", "BatchNorm1d", False),
    ],
)
def test_dimensionality(conv: str, bn: str, reported: bool) -> None:
    code = f"from torch import nn\nm = nn.Sequential(nn.{conv}(4, 4, 3), nn.{bn}(4))\n"
    assert codes(tl401(code)) == (["TL401"] if reported else [])


def test_ordered_dict_forms() -> None:
    code = """
    from collections import OrderedDict
    from torch import nn

    a = nn.Sequential(OrderedDict([("conv", nn.Conv2d(3, 8, 3)), ("bn", nn.BatchNorm2d(8))]))
    b = nn.Sequential(OrderedDict(conv=nn.Conv2d(3, 8, 3), bn=nn.BatchNorm2d(8)))
    c = nn.Sequential(OrderedDict([("conv", nn.Conv2d(3, 8, 3)), ("act", nn.ReLU()), ("bn", nn.BatchNorm2d(8))]))
    d = OrderedDict([("conv", nn.Conv2d(3, 8, 3)), ("bn", nn.BatchNorm2d(8))])
    """
    assert [d.line for d in tl401(code)] == [5, 6]


def test_lists_given_to_sequential() -> None:
    code = """
    from torch import nn

    def built_by_extend(c):
        layers = [nn.Conv2d(3, c, 3)]
        layers.extend([nn.BatchNorm2d(c), nn.ReLU()])
        return nn.Sequential(*layers)

    def literal_then_append(c):
        layers: list = [nn.Conv2d(3, c, 3)]
        layers.append(nn.BatchNorm2d(c))
        return nn.Sequential(*layers)

    def named_bn(c):
        bn = nn.BatchNorm2d(c)
        return nn.Sequential(nn.Conv2d(3, c, 3), bn)
    """
    assert [d.line for d in tl401(code)] == [5, 10, 16]


def test_lists_that_do_not_count() -> None:
    code = """
    from torch import nn

    def not_consecutive(c):
        layers = []
        layers.append(nn.Conv2d(3, c, 3))
        c = c * 2
        layers.append(nn.BatchNorm2d(c))
        return nn.Sequential(*layers)

    def module_list(c):
        layers = [nn.Conv2d(3, c, 3), nn.BatchNorm2d(c)]
        return nn.ModuleList(layers)

    def mutated(c):
        layers = [nn.Conv2d(3, c, 3), nn.BatchNorm2d(c)]
        layers.insert(1, nn.ReLU())
        return nn.Sequential(*layers)

    def reassigned_bn(c, norm):
        bn = nn.BatchNorm2d(c)
        if norm == "gn":
            bn = nn.GroupNorm(4, c)
        return nn.Sequential(nn.Conv2d(3, c, 3), bn)

    def appended_list(c):
        layers = []
        layers.append([nn.Conv2d(3, c, 3), nn.BatchNorm2d(c)])
        return nn.Sequential(*layers)

    def reset_between(c):
        layers = [nn.Conv2d(3, c, 3)]
        layers = [nn.BatchNorm2d(c)]
        return nn.Sequential(*layers)

    starred_between = nn.Sequential(*[nn.Conv2d(3, 8, 3), *extra, nn.BatchNorm2d(8)])
    unpacked_module = nn.Sequential(nn.Conv2d(3, 8, 3), *[nn.BatchNorm2d(8)])
    """
    assert tl401(code) == []


def test_conv_name_used_elsewhere_is_silent() -> None:
    code = """
    from torch import nn

    def shared(c):
        conv = nn.Conv2d(c, c, 3)
        return nn.Sequential(conv, nn.BatchNorm2d(c)), nn.Sequential(conv, nn.ReLU())

    def inspected(c):
        conv = nn.Conv2d(c, c, 3)
        nn.init.zeros_(conv.bias)
        return nn.Sequential(conv, nn.BatchNorm2d(c))

    def returned(c):
        conv = nn.Conv2d(c, c, 3)
        block = nn.Sequential(conv, nn.BatchNorm2d(c))
        return block, conv
    """
    assert tl401(code) == []


def test_weight_access_does_not_block() -> None:
    code = """
    from torch import nn

    def initialised(c):
        conv = nn.Conv2d(c, c, 3)
        nn.init.kaiming_normal_(conv.weight)
        return nn.Sequential(conv, nn.BatchNorm2d(c))
    """
    assert codes(tl401(code)) == ["TL401"]


def test_class_attributes_in_sequential() -> None:
    code = """
    from torch import nn

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.conv = nn.Conv2d(c, c, 3)
            self.bn = nn.BatchNorm2d(c)
            self.body = nn.Sequential(self.conv, self.bn, nn.ReLU())

        def forward(self, x):
            return self.body(x)
    """
    assert codes(tl401(code)) == ["TL401"]


@pytest.mark.parametrize(
    "forward",
    [
        # the output also feeds something else
        "y = self.conv(x)\nreturn self.bn(y) + y",
        "y = self.conv(x)\nz = self.bn(y)\nreturn z, y",
        "return self.bn(self.conv(x)), self.conv(x)",
        # the BatchNorm is conditional
        "x = self.conv(x)\nif self.training:\n    x = self.bn(x)\nreturn x",
        # an activation in between
        "return self.bn(self.act(self.conv(x)))",
        "x = self.conv(x)\nx = self.act(x)\nreturn self.bn(x)",
        # the conv's bias is read
        "return self.bn(self.conv(x)) + self.conv.bias.sum()",
        # a residual before the norm
        "return self.bn(self.conv(x) + x)",
        # conv result assigned in another block
        "if x.dim() == 4:\n    y = self.conv(x)\nreturn self.bn(y)",
    ],
)
def test_class_forward_near_misses(forward: str) -> None:
    body = textwrap.indent(forward, " " * 8)
    code = (
        "from torch import nn\n\n\nclass Block(nn.Module):\n"
        "    def __init__(self, c):\n        super().__init__()\n"
        "        self.conv = nn.Conv2d(c, c, 3)\n        self.bn = nn.BatchNorm2d(c)\n"
        "        self.act = nn.ReLU()\n\n"
        f"    def forward(self, x):\n{body}\n"
    )
    assert tl401(code) == []


@pytest.mark.parametrize(
    "forward",
    [
        "return self.bn(self.conv(x))",
        "out = self.conv(x)\nout = self.bn(out)\nreturn out",
        "y = self.conv(x)\nh = x * 2\nreturn self.act(self.bn(y)) + h",
        "for _ in range(2):\n    x = self.conv(x)\n    x = self.bn(x)\nreturn x",
    ],
)
def test_class_forward_positives(forward: str) -> None:
    body = textwrap.indent(forward, " " * 8)
    code = (
        "from torch import nn\n\n\nclass Block(nn.Module):\n"
        "    def __init__(self, c):\n        super().__init__()\n"
        "        self.conv = nn.Conv2d(c, c, 3)\n        self.bn = nn.BatchNorm2d(c)\n"
        "        self.act = nn.ReLU()\n\n"
        f"    def forward(self, x):\n{body}\n"
    )
    assert codes(tl401(code)) == ["TL401"]


def test_class_norm_that_may_not_be_batchnorm_is_silent() -> None:
    code = """
    from torch import nn

    class Block(nn.Module):
        def __init__(self, c, use_bn):
            super().__init__()
            self.conv = nn.Conv2d(c, c, 3)
            self.bn = nn.BatchNorm2d(c) if use_bn else nn.Identity()
            self.conv2 = nn.Conv2d(c, c, 3)
            if use_bn:
                self.bn2 = nn.BatchNorm2d(c)
            else:
                self.bn2 = nn.GroupNorm(1, c)

        def forward(self, x):
            return self.bn2(self.conv2(self.bn(self.conv(x))))
    """
    assert tl401(code) == []


def test_subclass_using_conv_differently_is_silent() -> None:
    code = """
    from torch import nn

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.conv = nn.Conv2d(c, c, 3)
            self.bn = nn.BatchNorm2d(c)

        def forward(self, x):
            return self.bn(self.conv(x))

    class NoNormBlock(Block):
        def forward(self, x):
            return self.conv(x)
    """
    assert tl401(code) == []


def test_function_local_modules() -> None:
    code = """
    from torch import nn

    def positive(x, c):
        conv = nn.Conv1d(c, c, 3)
        bn = nn.BatchNorm1d(c)
        h = conv(x)
        return bn(h)

    def used_twice(x, c):
        conv = nn.Conv1d(c, c, 3)
        bn = nn.BatchNorm1d(c)
        return bn(conv(x)) + conv(x)

    def bn_is_parameter(x, c, bn):
        conv = nn.Conv1d(c, c, 3)
        return bn(conv(x))
    """
    assert [d.line for d in tl401(code)] == [5]


def test_multiline_trailing_comma_layout_is_kept() -> None:
    code = """
    from torch import nn

    stem = nn.Sequential(
        nn.Conv2d(
            3,
            32,
            kernel_size=3,
        ),
        nn.BatchNorm2d(32),
    )
    head = nn.Sequential(
        nn.Conv2d(
            32,
            32,
            kernel_size=1,  # pointwise
            # end of arguments
        ),
        nn.BatchNorm2d(32),
    )
    """
    out = fixed(code)
    assert "        kernel_size=3,\n        bias=False,\n    ),\n" in out
    assert "        kernel_size=1,  # pointwise\n        bias=False,\n        # end of arguments\n    ),\n" in out


def test_fix_is_idempotent() -> None:
    code = """
    import torch.nn as nn

    class Stem(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 16, 3, bias=True)
            self.bn = nn.BatchNorm2d(16)
            self.layers = nn.Sequential(nn.Conv2d(16, 16, 3), nn.BatchNorm2d(16))

        def forward(self, x):
            return self.layers(self.bn(self.conv(x)))
    """
    once = fixed(code)
    assert once.count("bias=False") == 2 and "bias=True" not in once
    assert tl401(once) == []
    assert fixed(once) == once


def test_safe_fix_mode_changes_nothing() -> None:
    code = "from torch import nn\nm = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))\n"
    result = fix(code, select=["TL401"], unsafe=False)
    assert result.text == code
    [diagnostic] = tl401(code)
    assert diagnostic.fix is not None and diagnostic.fix.applicability.value == "unsafe"


def test_noqa_suppresses() -> None:
    code = "from torch import nn\nm = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))  # noqa: TL401\n"
    assert tl401(code) == []


def test_batchnorm_bindings_come_from_the_semantic_model() -> None:
    # Which BatchNorm a name or `self.attr` holds is the semantic model's answer:
    # an annotated assignment, a chained one, or a same-named variable of a nested
    # scope (another variable) leave the BatchNorm known.
    code = """
    from torch import nn

    class Annotated(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3)
            self.bn: nn.BatchNorm2d = nn.BatchNorm2d(8)

        def forward(self, x):
            return self.bn(self.conv(x))

    def annotated_name(x):
        conv = nn.Conv2d(3, 8, 3)
        bn: nn.BatchNorm2d = nn.BatchNorm2d(8)
        return bn(conv(x))

    def chained(x):
        conv = nn.Conv2d(3, 8, 3)
        bn = norm = nn.BatchNorm2d(8)
        return bn(conv(x))

    def nested_scope_variable(x):
        conv = nn.Conv2d(3, 8, 3)
        bn = nn.BatchNorm2d(8)
        names = [bn for bn in range(3)]
        return bn(conv(x))
    """
    assert [d.line for d in tl401(code)] == [7, 14, 19, 24]


def test_batchnorm_bindings_the_model_may_miss_are_unknown() -> None:
    code = """
    from torch import nn

    def rebound_by_a_closure(x):
        conv = nn.Conv2d(3, 8, 3)
        bn = nn.BatchNorm2d(8)
        def reset():
            nonlocal bn
            bn = nn.Identity()
        reset()
        return bn(conv(x))

    class RebuiltInAHelper(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3)
            self.bn = nn.BatchNorm2d(8)
            def swap():
                self.bn = nn.Identity()
            swap()

        def forward(self, x):
            return self.bn(self.conv(x))
    """
    assert tl401(code) == []
