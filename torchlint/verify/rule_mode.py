"""Rule mode: ``torchlint verify --rules [CODES]`` runs the rules' benchmarks.

Each fixable rule declares its benchmark beside its examples, as its class's
``BENCHMARK`` (``torchlint.rule.Benchmark``: plain text, no torch import); the
verifier finds them through the registry and knows no rule.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence

from torchlint.verify import UsageError
from torchlint.verify.report import speedup_of
from torchlint.verify.runner import run_job

if TYPE_CHECKING:  # pragma: no cover
    from torchlint.rule import Benchmark

SEED = 0


@lru_cache(maxsize=1)
def benchmarks() -> Dict[str, "Benchmark"]:
    """Every registered rule's benchmark, by code (the same dict on every call)."""
    from torchlint.registry import all_rules

    return {
        code: dataclasses.replace(rule.BENCHMARK, code=code)
        for code, rule in all_rules().items()
        if rule.BENCHMARK is not None
    }


def select_benchmarks(selectors: Optional[Sequence[str]]) -> List["Benchmark"]:
    """The benchmarks for ``selectors`` (codes, prefixes like ``TL2``, ``ALL``; none: all)."""
    found = benchmarks()
    if not selectors:
        return list(found.values())
    from torchlint.registry import all_rules

    rules = all_rules()
    chosen: Dict[str, Benchmark] = {}
    for selector in selectors:
        matched = [b for code, b in found.items() if selector == "ALL" or code.startswith(selector)]
        if not matched:
            if selector in rules:
                raise UsageError(f"{selector} has no fix, so it has no benchmark")
            raise UsageError(
                f"no rule benchmark matches `{selector}` (benchmarks: {', '.join(found)})"
            )
        for benchmark in matched:
            chosen[benchmark.code] = benchmark
    return [chosen[code] for code in sorted(chosen)]


def _case(benchmark: "Benchmark") -> Dict[str, Any]:
    code = benchmark.code
    variants = []
    for key, source in (("before", benchmark.before), ("after", benchmark.after)):
        variants.append({
            "key": key,
            "label": f"{code} {key}",
            "module": f"__torchlint_benchmark__{code}_{key}",
            "file": None,
            "filename": f"<torchlint benchmark {code}, {key} the fix>",
            "source": source,
        })
    return {
        "id": code,
        "function": "run",
        "package": "",
        "seed": SEED,
        "rtol": benchmark.rtol,
        "atol": benchmark.atol,
        "globals": {"DEVICE": "$DEVICE"},
        "variants": variants,
        "original": "before",
        "fixed": "after",
        "time": ["before", "after"],
    }


def verify_rules(
    selectors: Optional[Sequence[str]],
    *,
    min_run_time: float = 0.2,
    timeout: float = 300.0,
    progress: Optional[Callable[[Optional[str], str], None]] = None,
) -> Dict[str, Any]:
    """Run the benchmarks on the best available device; returns the report."""
    from torchlint.registry import all_rules

    benchmarks = select_benchmarks(selectors)
    outcome = run_job([_case(b) for b in benchmarks], min_run_time=min_run_time,
                      timeout=timeout, progress=progress)
    rules = all_rules()
    device = outcome.info.get("device")
    rows = []
    for benchmark in benchmarks:
        results = outcome.results.get(benchmark.code, {})
        before = results.get("before", {})
        after = results.get("after", {})
        error = None
        stopped = outcome.errors.get(benchmark.code)
        if stopped is not None:
            error = stopped[0]
        else:
            for label, result in (("before", before), ("after", after)):
                if result.get("error"):
                    error = f"{label} the fix: {result['error']}"
                    break
        row: Dict[str, Any] = {
            "code": benchmark.code,
            "name": rules[benchmark.code].name if benchmark.code in rules else None,
            "title": benchmark.title,
            "device": device,
            "before": _timing(before.get("time")),
            "after": _timing(after.get("time")),
            "speedup": None,
            "speedup_range": None,
            "match": after.get("match"),
            "mismatch": after.get("mismatch"),
            "error": error,
            "note": benchmark.cpu_note if device == "cpu" and benchmark.cpu_note else None,
        }
        row["speedup"], row["speedup_range"] = speedup_of(before.get("time"), after.get("time"))
        rows.append(row)
    return {
        "device": device,
        "device_name": outcome.info.get("device_name"),
        "torch": outcome.info.get("torch"),
        "min_run_time": min_run_time,
        "rows": rows,
    }


def _timing(time: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    if not time:
        return None
    return {"median": time["median"], "iqr": time["iqr"], "runs": time.get("runs")}
