"""Import-alias resolution: which local names refer to which torch objects.

One table per file, filled while the file is walked (no LibCST metadata
provider).  Module-level bindings are collected up front from the top-level
statements, so a function defined above the imports still resolves; imports
inside functions are scoped to that function.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import libcst as cst


def dotted_name(node: cst.BaseExpression) -> Optional[str]:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts: List[str] = []
    while type(node) is cst.Attribute:
        parts.append(node.attr.value)
        node = node.value
    if type(node) is cst.Name:
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


class ImportTable:
    """Maps local names to fully qualified names, scope by scope."""

    __slots__ = ("scopes", "star_modules", "defined")

    def __init__(self) -> None:
        # scopes[0] is the module scope; a `None` value means "bound locally to
        # something that is not an import" and hides outer bindings.
        self.scopes: List[Dict[str, Optional[str]]] = [{}]
        self.star_modules: List[str] = []
        self.defined: set = set()

    # -- building -------------------------------------------------------------
    def push(self) -> None:
        self.scopes.append({})

    def pop(self) -> None:
        self.scopes.pop()

    def bind_import(self, node: cst.CSTNode) -> None:
        scope = self.scopes[-1]
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = dotted_name(alias.name)
                if full is None:
                    continue
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    scope[alias.asname.name.value] = full
                else:
                    # `import torch.nn` binds `torch`.
                    head = full.split(".", 1)[0]
                    scope[head] = head
        elif isinstance(node, cst.ImportFrom):
            if node.relative or node.module is None:
                return
            module = dotted_name(node.module)
            if module is None:
                return
            if isinstance(node.names, cst.ImportStar):
                if len(self.scopes) == 1:
                    self.star_modules.append(module)
                return
            for alias in node.names:
                if not isinstance(alias.name, cst.Name):
                    continue
                local = alias.name.value
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    local = alias.asname.name.value
                scope[local] = f"{module}.{alias.name.value}"

    def bind_other(self, name: str, qualified: Optional[str] = None) -> None:
        """A non-import binding (def, class, assignment) in the current scope."""
        self.scopes[-1][name] = qualified
        if len(self.scopes) == 1 and qualified is None:
            self.defined.add(name)

    def scan_module(self, module: cst.Module) -> None:
        """Collect module-level bindings from top-level statements, in order."""
        self._scan_block(module.body)

    def _scan_block(self, body: Sequence[cst.CSTNode]) -> None:
        for stmt in body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, (cst.Import, cst.ImportFrom)):
                        self.bind_import(small)
                    elif isinstance(small, cst.Assign):
                        value_q = self.qualname(small.value)
                        for target in small.targets:
                            if isinstance(target.target, cst.Name):
                                self.bind_other(target.target.value, value_q)
                    elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                        value_q = self.qualname(small.value) if small.value is not None else None
                        self.bind_other(small.target.value, value_q)
            elif isinstance(stmt, (cst.ClassDef, cst.FunctionDef)):
                self.bind_other(stmt.name.value)
            elif isinstance(stmt, cst.If):
                self._scan_block(stmt.body.body)
                orelse = stmt.orelse
                while orelse is not None:
                    self._scan_block(orelse.body.body)
                    orelse = orelse.orelse if isinstance(orelse, cst.If) else None
            elif isinstance(stmt, cst.Try):
                self._scan_block(stmt.body.body)
                for handler in stmt.handlers:
                    self._scan_block(handler.body.body)
                if stmt.orelse is not None:
                    self._scan_block(stmt.orelse.body.body)
                if stmt.finalbody is not None:
                    self._scan_block(stmt.finalbody.body.body)
            elif isinstance(stmt, cst.With):
                self._scan_block(stmt.body.body)

    # -- lookup ---------------------------------------------------------------
    def resolve(self, name: str) -> Optional[str]:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        if name not in self.defined:
            for module in self.star_modules:
                if module == "torch" or module.startswith("torch."):
                    return f"{module}.{name}"
        return None

    def outer_alias(self, module: str, members: Sequence[str]) -> Optional[Tuple[str, bool]]:
        """How code evaluated in the scopes enclosing the current one (a
        decorator of the function being visited) can spell ``module`` or one of
        its ``members`` (fully qualified): ``(name, True)`` for a local bound to
        the module (spell ``name.member``), ``(name, False)`` for one bound to a
        member (call it directly).  The module's own name wins, then an alias
        of the module, then a member; None when none is visible."""
        outer = self.scopes[:-1]
        best: Optional[Tuple[str, bool]] = None
        for scope in reversed(outer):
            for local, value in scope.items():
                if value != module and value not in members:
                    continue
                if _resolve_in(outer, local) != value:
                    continue  # hidden by an inner binding
                candidate = (local, value == module)
                if local == module and value == module:
                    return candidate
                if best is None or (candidate[1] and not best[1]):
                    best = candidate
        return best

    def qualname(self, node: Optional[cst.BaseExpression]) -> Optional[str]:
        """The fully qualified name an expression refers to, if it is an import.

        ``nn.Conv2d`` with ``from torch import nn`` gives ``torch.nn.Conv2d``;
        ``self.conv`` or a call gives None.
        """
        # `type(...) is` rather than isinstance: LibCST nodes are ABCs, whose
        # isinstance is slow, and this runs for every call in every rule.
        parts: List[str] = []
        while type(node) is cst.Attribute:
            parts.append(node.attr.value)
            node = node.value
        if type(node) is not cst.Name:
            return None
        base = self.resolve(node.value)
        if base is None:
            return None
        if parts:
            return base + "." + ".".join(reversed(parts))
        return base


def _resolve_in(scopes: Sequence[Dict[str, Optional[str]]], name: str) -> Optional[str]:
    for scope in reversed(scopes):
        if name in scope:
            return scope[name]
    return None
