"""Unit tests for TL402 (manual-attention)."""

from __future__ import annotations

import textwrap

import pytest

from tests.helpers import codes, lint

HEADER = "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"


def _lint(code: str, path: str = "snippet.py"):
    return lint(code, select=["TL402"], path=path)


def _function(body: str, params: str = "q, k, v") -> str:
    """``body`` as the body of a module-level function, after HEADER."""
    return HEADER + f"\n\ndef attend({params}):\n" + textwrap.indent(textwrap.dedent(body), "    ")


def _reported(body: str, params: str = "q, k, v") -> bool:
    diagnostics = _lint(_function(body, params))
    assert set(codes(diagnostics)) <= {"TL402"}
    return bool(diagnostics)


def test_reported_at_the_softmax_call_with_a_useful_message():
    code = _function(
        """\
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = F.softmax(att, dim=-1)
        return att @ v
        """
    )
    (d,) = _lint(code)
    assert (d.line, d.column) == (9, 11)
    assert "scaled_dot_product_attention" in d.message
    assert d.fix is None


# -- the key must be transposed over its last two dimensions -------------------------
@pytest.mark.parametrize(
    "scores, dim",
    [
        ("q @ k.transpose(-2, -1)", -1),
        ("q @ k.transpose(-1, -2)", -1),
        ("q @ k.transpose(1, 2)", -1),
        ("q @ k.transpose(1, 2)", 2),
        ("q @ k.transpose(2, 3)", 3),
        ("q @ k.mT", -1),
        ("q @ k.T", 1),
        ("q @ k.t()", -1),
        ("q @ k.permute(0, 2, 1)", 2),
        ("q @ k.permute(0, 1, 3, 2)", 3),
        ("q @ k.permute((0, 1, 3, 2))", -1),
        ("q @ torch.transpose(k, -2, -1)", -1),
        ("torch.matmul(q, k.transpose(-2, -1))", -1),
        ("torch.bmm(q, k.transpose(1, 2))", 2),
        ("q.matmul(k.transpose(-2, -1))", -1),
        ("q.bmm(k.transpose(1, 2))", -1),
        ("torch.einsum('bhid,bhjd->bhij', q, k)", 3),
        ("torch.einsum('b h i d, b h j d -> b h i j', q, k)", -1),
        ("torch.einsum('...id,...jd->...ij', q, k)", -1),
        ("torch.einsum('bid,bjd->bij', q, k)", 2),
    ],
)
def test_accepted_query_key_products(scores, dim):
    assert _reported(f"attn = torch.softmax({scores}, dim={dim})\nreturn attn @ v\n")


@pytest.mark.parametrize(
    "scores, dim",
    [
        ("q @ k", -1),  # no transpose
        ("q @ k.transpose(0, 1)", -1),
        ("q @ k.transpose(1, 3)", -1),
        ("q @ k.permute(0, 2, 3, 1)", -1),
        ("q @ k.permute(2, 0, 1)", -1),
        ("q @ self.proj.weight.T", -1),  # a projection, not a key
        ("q @ emb.weight.t()", -1),
        ("q @ k.transpose(-2, -1)", 2),  # rank unknown: 2 may not be the last dim
        ("q @ k.transpose(2, 3)", 2),  # 4-D: the query axis, not the keys
        ("q @ k.transpose(1, 2)", 1),
        ("q @ k.T", 0),
        ("torch.einsum('bnhk,bmk->bnhm', q, k)", -1),  # multi-query layout
        ("torch.einsum('bhid,bhjd->bhji', q, k)", -1),
        ("torch.einsum('bhid,bhjd->bhij', q, k)", 2),
        ("torch.einsum('bhid,hjd->bhij', q, k)", -1),
        ("torch.tanh((q @ k.transpose(-2, -1)) / cap) * cap", -1),  # soft-capping
        ("(q @ k.transpose(-2, -1)).view(b, h, n, n)", -1),
        ("torch.baddbmm(bias, q, k.transpose(1, 2))", -1),
        ("q @ k.transpose(-2, -1)", "axis"),
    ],
)
def test_rejected_products_and_dims(scores, dim):
    assert not _reported(f"attn = torch.softmax({scores}, dim={dim})\nreturn attn @ v\n")


# -- between the product and the softmax ----------------------------------------------
@pytest.mark.parametrize(
    "steps",
    [
        "s = q @ k.transpose(-2, -1)\ns = s * scale",
        "s = q @ k.transpose(-2, -1)\ns = scale * s",
        "s = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))",
        "s = q @ k.transpose(-2, -1)\ns = s + mask",
        "s = q @ k.transpose(-2, -1)\ns = rel_bias + s",
        "s = q @ k.transpose(-2, -1)\ns = s - s.amax(dim=-1, keepdim=True).detach()",
        "s = q @ k.transpose(-2, -1)\ns += mask",
        "s = q @ k.transpose(-2, -1)\ns /= 8.0",
        "s = q @ k.transpose(-2, -1)\ns = s.masked_fill(mask == 0, float('-inf'))",
        "s = q @ k.transpose(-2, -1)\ns.masked_fill_(mask, -torch.inf)",
        "s = q @ k.transpose(-2, -1)\nif mask is not None:\n    s = s + mask",
        "s = (q @ k.transpose(-2, -1)).float()",
        "s = (q @ k.transpose(-2, -1)).to(torch.float32)",
        "kt = k.transpose(-2, -1)\ns = q @ kt",
        "s = q @ k.transpose(-2, -1)\nt = s * scale\ns = t",
    ],
)
def test_accepted_steps_before_the_softmax(steps):
    assert _reported(f"{steps}\nw = F.softmax(s, dim=-1)\nreturn w @ v\n")


@pytest.mark.parametrize(
    "steps",
    [
        "s = q @ k.transpose(-2, -1)\ns = self.talking_heads(s)",
        "s = q @ k.transpose(-2, -1)\ns = s.view(b, h, n, n)",
        "s = q @ k.transpose(-2, -1)\ns = add_rel_pos(s, q, self.rel_h)",
        "s = q @ k.transpose(-2, -1)\ns = torch.tanh(s / 30.0) * 30.0",
        "s = q @ k.transpose(-2, -1)\ns **= 2",
        "s, extra = q @ k.transpose(-2, -1), None",
        "s = self.scores",
        "for s in candidates:\n    pass",
    ],
)
def test_other_steps_before_the_softmax_are_silent(steps):
    assert not _reported(f"{steps}\nw = F.softmax(s, dim=-1)\nreturn w @ v\n")


def test_the_scores_are_a_parameter():
    assert not _reported("w = F.softmax(scores, dim=-1)\nreturn w @ v\n", params="scores, v")


# -- between the softmax and the values -------------------------------------------------
@pytest.mark.parametrize(
    "steps",
    [
        "out = w @ v",
        "out = (w @ v).transpose(1, 2)",
        "out = torch.matmul(w, v)",
        "out = torch.bmm(w, v)",
        "out = w.matmul(v)",
        "out = torch.einsum('bhij,bhjd->bhid', w, v)",
        "w = self.attn_drop(w)\nout = w @ v",
        "w = F.dropout(w, p=0.1, training=self.training)\nout = w @ v",
        "w = nn.functional.dropout(w, 0.1, self.training, True)\nout = w @ v",
        "if self.training:\n    w = self.dropout(w)\nout = w @ v",
        "w = w.type_as(q)\nout = w @ v",
        "w = w.to(v.dtype)\nout = w @ v",
        "dropped = self.attn_drop(w)\nout = dropped @ v",
        "out = self.attn_drop(w) @ v",
        "out = w @ v\nother = w @ v2\nout = out + other",
        "out = w @ v\nw = None",
    ],
)
def test_weights_that_only_meet_the_values(steps):
    assert _reported(f"w = (q @ k.transpose(-2, -1)).softmax(dim=-1)\n{steps}\nreturn out\n", params="self, q, k, v, v2")


@pytest.mark.parametrize(
    "steps, ret",
    [
        ("out = w @ v", "out, w"),
        ("out = w @ v\nself.attention_map = w", "out"),
        ("out = w @ v\nself.maps.append(w.detach())", "out"),
        ("out = w @ v\nif return_attn:\n    return out, w", "out"),
        ("w = w.masked_fill(pad_mask, 0.0)\nout = w @ v", "out"),
        ("w = w / w.sum(dim=-1, keepdim=True)\nout = w @ v", "out"),
        ("w = w * head_gate\nout = w @ v", "out"),
        ("w += 1e-8\nout = w @ v", "out"),
        ("w[:, :, 0] = 0\nout = w @ v", "out"),
        ("out = v @ w", "out"),
        ("out = torch.einsum('bhij,bhid->bhjd', w, v)", "out"),
        ("out = w.sum(dim=1)", "out"),
        ("out = w @ v\nlog_attention(w)", "out"),
        ("w.register_hook(save_grad)\nout = w @ v", "out"),
        ("alias = w\nout = alias @ v", "out, alias"),
        ("out = w", "out"),
        ("pass", "w"),
        ("out = (w if self.training else w.detach()) @ v", "out"),
        ("def hook():\n    return w\nout = w @ v", "out"),
        ("with record(w):\n    out = w @ v", "out"),
    ],
)
def test_weights_used_otherwise_are_silent(steps, ret):
    body = f"w = (q @ k.transpose(-2, -1)).softmax(dim=-1)\n{steps}\nreturn {ret}\n"
    assert not _reported(body, params="self, q, k, v, return_attn")


def test_weights_rebound_before_use_are_not_the_softmax():
    body = "w = (q @ k.transpose(-2, -1)).softmax(dim=-1)\nw = other\nreturn w @ v\n"
    assert not _reported(body, params="q, k, v, other")


# -- softmax spellings -------------------------------------------------------------------
@pytest.mark.parametrize(
    "imports, call",
    [
        ("import torch", "torch.softmax(s, dim=-1)"),
        ("import torch", "torch.softmax(s, -1)"),
        ("import torch", "torch.nn.functional.softmax(s, dim=-1)"),
        ("import torch", "torch.special.softmax(s, -1)"),
        ("import torch", "torch.softmax(input=s, dim=-1)"),
        ("import torch", "torch.softmax(s, dim=-1, dtype=torch.float32)"),
        ("import torch.nn.functional as F", "F.softmax(s, dim=-1)"),
        ("from torch import nn", "nn.functional.softmax(s, dim=-1)"),
        ("from torch.nn.functional import softmax as sm", "sm(s, dim=-1)"),
        ("import torch", "s.softmax(-1)"),
        ("import torch", "s.softmax(dim=-1, dtype=torch.float32)"),
    ],
)
def test_softmax_spellings(imports, call):
    code = f"{imports}\n\ndef attend(q, k, v):\n    s = q @ k.transpose(-2, -1)\n    return {call} @ v\n"
    assert codes(_lint(code)) == ["TL402"]


@pytest.mark.parametrize(
    "imports, call",
    [
        ("import torch\nfrom scipy.special import softmax", "softmax(s, axis=-1)"),
        ("import torch\nimport jax", "jax.nn.softmax(s, axis=-1)"),
        ("import torch", "torch.softmax(s)"),
        ("import torch", "torch.softmax(s, dim=None)"),
        ("import torch", "torch.softmax(s, dim=d)"),
        ("import torch", "torch.softmax(*xs)"),
        ("import torch", "s.softmax()"),
        ("import torch", "torch.log_softmax(s, dim=-1)"),
        ("import torch\ndef softmax(x, dim):\n    return x.exp() / x.exp().sum(dim, keepdim=True)", "softmax(s, dim=-1)"),
    ],
)
def test_other_softmaxes_are_silent(imports, call):
    code = f"{imports}\n\ndef attend(q, k, v, d, xs):\n    s = q @ k.transpose(-2, -1)\n    return {call} @ v\n"
    assert _lint(code) == []


SOFTMAX_MODULE = """
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attend = {module}

    def forward(self, q, k, v):
        dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        attn = self.attend(dots)
        return torch.matmul(attn, v)
"""


@pytest.mark.parametrize(
    "module, reported",
    [
        ("nn.Softmax(dim=-1)", True),
        ("nn.Softmax(-1)", True),
        ("torch.nn.modules.activation.Softmax(dim=-1)", True),
        ("nn.Softmax(dim=1)", False),
        ("nn.Softmax()", False),
        ("nn.Softmax(dim=cfg.dim)", False),
        ("nn.Sequential(nn.Softmax(dim=-1), nn.Dropout(0.1))", False),
        ("nn.Identity()", False),
    ],
)
def test_softmax_modules(module, reported):
    assert bool(_lint(SOFTMAX_MODULE.format(module=module))) is reported


def test_softmax_module_named_softmax():
    code = SOFTMAX_MODULE.format(module="nn.Softmax(dim=-1)").replace("attend", "softmax")
    assert codes(_lint(code)) == ["TL402"]


def test_softmax_module_assigned_twice_differently_is_unknown():
    code = SOFTMAX_MODULE.format(module="nn.Softmax(dim=-1)").replace(
        "        super().__init__()\n", "        super().__init__()\n        self.attend = nn.Identity()\n"
    )
    assert _lint(code) == []
    code = SOFTMAX_MODULE.format(module="nn.Softmax(dim=-1)").replace(
        "    def forward", "    def reset(self):\n        self.attend = nn.Identity()\n\n    def forward"
    )
    assert _lint(code) == []


# -- a fused path next to the manual one ----------------------------------------------------
MANUAL_METHOD = """
    def {name}(self, q, k, v):
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        return attn @ v
"""


@pytest.mark.parametrize(
    "other",
    [
        "    def fast(self, q, k, v):\n        return F.scaled_dot_product_attention(q, k, v)\n",
        "    def fast(self, q, k, v):\n        return torch.nn.functional.scaled_dot_product_attention(q, k, v)\n",
        "    def __init__(self):\n        self.fused_attn = use_fused_attn()\n",
        "    def __init__(self):\n        self.flash = hasattr(F, 'scaled_dot_product_attention')\n",
        "    def fast(self, q, k, v):\n        return flash_attn_func(q, k, v)\n",
        "    def fast(self, q, k, v):\n        return xops.memory_efficient_attention(q, k, v)\n",
        "    def fast(self, q, k, v):\n        return attend_fast(q, k, v)\n",
    ],
)
def test_fused_path_in_the_same_class_silences(other):
    code = (
        "import torch\nimport torch.nn.functional as F\n"
        "from torch.nn.functional import scaled_dot_product_attention as attend_fast\n\n\n"
        "class Attention:\n" + other + MANUAL_METHOD.format(name="forward")
    )
    assert _lint(code) == []


def test_fused_path_in_another_class_does_not_silence():
    code = (
        "import torch\nimport torch.nn.functional as F\n\n\n"
        "class Fast:\n    def forward(self, q, k, v):\n        return F.scaled_dot_product_attention(q, k, v)\n\n\n"
        "class Slow:\n" + MANUAL_METHOD.format(name="forward")
    )
    assert [d.line for d in _lint(code)] == [14]


def test_fused_path_anywhere_in_the_file_silences_functions_outside_classes():
    code = _function(
        """\
        attn = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
        return attn @ v
        """
    )
    assert codes(_lint(code)) == ["TL402"]
    assert _lint(code + "\n\ndef fast(q, k, v):\n    return F.scaled_dot_product_attention(q, k, v)\n") == []


def test_docstrings_and_comments_do_not_count_as_a_fused_path():
    code = _function(
        '''\
        """Unlike F.scaled_dot_product_attention, this is written out."""
        # flash attention would be faster
        attn = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
        return attn @ v
        '''
    )
    assert codes(_lint(code)) == ["TL402"]


# -- scopes ----------------------------------------------------------------------------
def test_module_level_code_is_analysed_like_a_function():
    code = "import torch\nq = k = v = torch.rand(2, 4, 8)\nattn = torch.softmax(q @ k.mT, dim=-1)\nout = attn @ v\n"
    assert [d.line for d in _lint(code)] == [3]
    assert _lint(code + "print(attn)\n") == []


def test_code_in_a_lambda_or_a_class_body_is_not_analysed():
    code = "import torch\nf = lambda q, k, v: torch.softmax(q @ k.mT, dim=-1) @ v\n"
    assert _lint(code) == []
    code = "import torch\nclass C:\n    out = torch.softmax(q @ k.mT, dim=-1) @ v\n"
    assert _lint(code) == []


def test_nested_function_has_its_own_scope():
    code = _function(
        """\
        s = q @ k.transpose(-2, -1)

        def inner(v):
            return torch.softmax(s, dim=-1) @ v

        return inner(v)
        """
    )
    assert _lint(code) == []


def test_comprehension_of_heads():
    code = _function("return [torch.softmax(qi @ ki.T, dim=-1) @ vi for qi, ki, vi in zip(q, k, v)]\n")
    assert codes(_lint(code)) == ["TL402"]


def test_unusual_statements_do_not_crash():
    code = _function(
        """\
        global cache
        import os
        try:
            s = q @ k.transpose(-2, -1)
        except (RuntimeError, ValueError) as err:
            raise ValueError("bad shapes") from err
        else:
            s = s / 8
        finally:
            pass
        match v.dim():
            case 3 if s is not None:
                pass
            case _:
                pass
        with torch.no_grad() as ctx, open(os.devnull) as (f):
            del ctx
        while False:
            break
        for i, (a, b) in enumerate([]):
            continue
        if (n := 3) > 2:
            s: "Tensor" = s
        elif n:
            pass
        else:
            pass
        w = F.softmax(s, dim=-1)
        return w @ v
        """
    )
    assert codes(_lint(code)) == ["TL402"]


@pytest.mark.parametrize("path", ["tests/models/scripts/compare_attention.py", "test_attention.py", "conftest.py"])
def test_reference_attention_in_tests_is_not_reported(path):
    # A naive attention kept under tests/ to check a fused one against.
    code = (
        "import math\nimport torch\n"
        "def reference_attention(q, k, v):\n"
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))\n"
        "    return torch.softmax(scores, dim=-1) @ v\n"
    )
    assert lint(code, select=["TL402"], path=path) == []
    assert codes(lint(code, select=["TL402"], path="models/attention.py")) == ["TL402"]
