"""The semantic model (torchlint/semantic.py): scopes, bindings, and which
bindings reach a use; and the shared host/device answer built on it."""

from __future__ import annotations

import textwrap
from typing import List

import libcst as cst

from tests.helpers import codes, lint
from torchlint.config import Settings
from torchlint.rule import Context, Rule
from torchlint.walker import Walker


class _Probe(Rule):
    """Records, at each call of `probe(name)`, the kinds and value texts of the
    bindings that reach the name."""

    code = "TL000"
    name = "probe"

    def __init__(self, context) -> None:
        super().__init__(context)
        self.seen: List[List[str]] = []

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value == "probe":
            arg = node.args[0].value
            assert isinstance(arg, cst.Name)
            found = self.context.semantic.reaching(arg.value, self.context.location())
            self.seen.append([
                b.kind if b.value is None else f"{b.kind}:{cst.Module([]).code_for_node(b.value)}" for b in found
            ])


def _reaching(code: str) -> List[List[str]]:
    source = textwrap.dedent(code)
    ctx = Context("m.py", source, Settings())
    probe = _Probe(ctx)
    Walker(ctx, [probe]).run(cst.parse_module(source))
    return probe.seen


def test_the_latest_dominating_assignment_wins():
    assert _reaching("""
        def f(masks):
            m = masks.argmax(-1)
            m = torch.from_numpy(a)
            probe(m)
    """) == [["value:torch.from_numpy(a)"]]


def test_assignments_in_a_branch_between_also_reach():
    assert _reaching("""
        def f(x, c):
            m = x.cpu()
            if c:
                m = x
            probe(m)
    """) == [["value:x.cpu()", "value:x"]]


def test_a_loop_brings_later_assignments_back_around():
    assert _reaching("""
        def f(xs):
            m = 0
            for x in xs:
                probe(m)
                m = x
    """) == [["value:0", "value:x"]]


def test_an_assignment_inside_the_loop_before_the_use_kills_the_others():
    assert _reaching("""
        def f(xs):
            m = xs[0]
            for x in xs:
                m = x.cpu()
                probe(m)
    """) == [["value:x.cpu()"]]


def test_nothing_dominates_when_every_assignment_is_in_a_branch():
    assert _reaching("""
        def f(x, c):
            if c:
                m = x.cpu()
            else:
                m = x
            probe(m)
    """) == [["value:x.cpu()", "value:x"]]


def test_parameters_closures_and_globals():
    assert _reaching("""
        G = torch.zeros(3)
        def f(p: int, q):
            probe(p)
            def inner():
                probe(q)
            global G
            G = q
            probe(G)
    """) == [["param:int"], ["param"], ["value:torch.zeros(3)", "value:q"]]


def test_class_bodies_are_not_visible_from_methods_and_comprehensions_have_their_own_scope():
    assert _reaching("""
        x = 1
        class C:
            x = 2
            def m(self):
                probe(x)
        ys = [probe(t) for t in items]
    """) == [["value:1"], ["iter:items"]]


def test_one_statement_line_with_two_statements():
    assert _reaching("""
        def f(a):
            m = a; m = m.cpu(); probe(m)
    """) == [["value:m.cpu()"]]


def test_a_function_declaring_a_global_rebinds_the_modules_name_everywhere():
    """Its assignment may run before any use of the module's name: a question
    asked at the module level (or in another function) counts it."""
    assert _reaching("""
        loader = make(pinned=True)
        def reset():
            global loader
            loader = other()
        def train():
            probe(loader)
        probe(loader)
    """) == [["value:make(pinned=True)", "value:other()"], ["value:make(pinned=True)", "value:other()"]]


def test_definitions_are_bindings_whose_value_is_the_statement():
    assert _reaching("""
        def f(): pass
        class C: pass
        probe(f)
        probe(C)
    """) == [["def:def f(): pass\n"], ["class:class C: pass\n"]]


def _model(code: str):
    from torchlint.semantic import Location, SemanticModel

    module = cst.parse_module(textwrap.dedent(code))
    return module, SemanticModel(module), Location((module,), ())


def test_parts_of_a_flat_unpacking_know_their_position():
    _, model, top = _model("""
        a, b = make()
        (c, d), e = make()
        f, *g = make()
        for i, x in enumerate(xs): pass
    """)
    index = {name: [b.index for b in model.bindings(name, top)] for name in "abcdefgix"}
    assert index == {"a": [0], "b": [1], "c": [None], "d": [None], "e": [1], "f": [None], "g": [None], "i": [0], "x": [1]}


def test_attributes_assigned_by_unpacking_are_parts():
    module, model, top = _model("""
        class T:
            def __init__(self):
                self.train, self.val = loaders()
                self.a, *self.rest = items()
    """)
    found = model.attribute_bindings(module.body[0], top)
    assert [(b.kind, b.index) for b in found["train"]] == [("part", 0)]
    assert [(b.kind, b.index) for b in found["val"]] == [("part", 1)]
    assert [(b.kind, b.index) for b in found["a"]] == [("unknown", None)]


def test_returns_generators_and_returned_locations():
    module, model, top = _model("""
        def f(x):
            if x:
                return make(x)
            return
        def g():
            yield 1
            return 2
    """)
    f, g = module.body
    assert [cst.Module([]).code_for_node(v) for v in model.returns(f)] == ["make(x)"]
    assert not model.is_generator(f) and model.is_generator(g)
    ((value, at),) = model.returned(f, (module,))
    assert at.scopes == (module, f) and [b.kind for b in model.bindings("x", at)] == ["param"]


def test_definitions_and_occurrences_are_lexical():
    module, model, _ = _model("""
        def train(loader): pass
        class A:
            def train(self): pass
        train(make())
        obj.train()
    """)
    assert [type(d.node).__name__ for d in model.definitions("train")] == ["FunctionDef", "FunctionDef"]
    # the def's name and the call; not the attribute `obj.train`
    found = model.occurrences("train")
    assert len(found) == 3 and sum(isinstance(o.parent, cst.Call) for o in found) == 1
    call = next(o for o in found if isinstance(o.parent, cst.Call))
    assert call.location.scopes == (module,)


def test_definitions_are_every_def_and_class_with_its_location():
    # `definitions` walks the statements only; its answers and their locations
    # are those of a walk of every node (with `location_of` over the ancestors)
    source = """
        import torch
        if torch.cuda.is_available():
            def helper(x): return x
        else:
            class helper: pass
        try:
            def load(): pass
        except ImportError:
            def load(): return None
        finally:
            pass
        class Model:
            def forward(self, x):
                def helper(y): return y
                for i in range(3):
                    with torch.no_grad():
                        def inner(): pass
                return [lambda: 1 for _ in x]
        match command:
            case "go":
                def inner(): pass
    """
    from torchlint.nodes import iter_children
    from torchlint.semantic import location_of

    module, model, _ = _model(source)
    expected: dict = {}
    todo = [[module]]
    while todo:  # every node, in source order, with its ancestors
        stack = todo.pop(0)
        node = stack[-1]
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            at = location_of(stack)
            expected.setdefault(node.name.value, []).append((node, at.scopes, at.path))
        todo[:0] = [[*stack, child] for child in iter_children(node)]
    for name in ("helper", "load", "forward", "inner", "Model", "missing"):
        found = [(o.node, o.location.scopes, o.location.path) for o in model.definitions(name)]
        assert found == expected.get(name, []), name
    assert [type(o.node).__name__ for o in model.definitions("helper")] == ["FunctionDef", "ClassDef", "FunctionDef"]
    assert len(model.definitions("inner")) == 2
    model.occurrences("x")  # the names' index does not change the definitions' answers
    assert [o.node for o in model.definitions("load")] == [n for n, _, _ in expected["load"]]


def test_a_path_step_names_its_block():
    module, model, top = _model("""
        kw = dict(a=1)
        kw.update(b=2)
    """)
    (binding,) = model.bindings("kw", top)
    block_id, index = binding.location.path[0][:2]
    assert model.block(block_id) is module and index == 0


# -- the shared host/device answer ---------------------------------------------------


def test_item_on_a_value_rebound_to_a_host_tensor_is_not_reported():
    code = """
        import torch
        def area(masks, scores, n):
            m_id = masks.transpose(0, 1).softmax(-1)
            m_id = m_id.argmax(-1)
            m_id = torch.from_numpy(decode(m_id.cpu().numpy()))
            out = []
            for i in range(n):
                out.append(m_id.eq(i).sum().item())
            return out

        def train_step(model, batches):
            for x in batches:
                y = torch.from_numpy(x)
                y = model(y.cuda())
                print(y.sum().item())
    """
    # The first loop reads a host tensor; the second a model's output (the host
    # tensor was rebound to the device before the use).
    found = lint(code, select=["TL101"])
    assert [(d.code, d.line) for d in found] == [("TL101", 16)]


def test_tl201_asks_the_same_question_for_like_inputs():
    code = """
        import torch
        def forward(self, x):
            host = torch.zeros(4)
            a = torch.zeros_like(host).to(x.device)
            host = x
            b = torch.ones_like(host).to(x.device)
    """
    assert codes(lint(code, select=["TL201"])) == ["TL201"]


def test_a_container_of_device_tensors_is_not_a_host_value():
    code = """
        import torch
        def evaluate(model, loader, device):
            for samples, targets in loader:
                targets = [{k: v.to(device) for k, v in t.items()} for t in targets]
                outputs = model(samples)
                for target in targets:
                    print(target["image_id"].item())
                sizes = [{"h": 1, "w": 2} for _ in targets]
                for size in sizes:
                    print(size["h"].item())
    """
    found = lint(code, select=["TL101"])
    assert [d.line for d in found] == [8]
