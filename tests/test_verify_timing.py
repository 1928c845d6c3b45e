"""Speedups are reported only when before and after are told apart by their
quartiles; fake timings make these tests independent of the machine's load."""
from torchlint.verify.report import format_entry, format_rules, measurable, speedup_of, speedup_text


def _time(p25, median, p75):
    return {"median": median, "iqr": p75 - p25, "p25": p25, "p75": p75, "runs": 9}


def test_separate_quartile_ranges_give_a_speedup_with_its_range():
    speedup, spread = speedup_of(_time(1.9, 2.0, 2.1), _time(0.95, 1.0, 1.05))
    assert speedup == 2.0
    assert spread[0] == 1.9 / 1.05 and spread[1] == 2.1 / 0.95
    assert measurable(spread)
    assert speedup_text(speedup, spread) == "2.00x (1.81-2.21)"


def test_overlapping_quartile_ranges_are_no_measurable_change():
    # the after median is faster, but its slow quartile is slower than the before's fast one
    speedup, spread = speedup_of(_time(0.9, 1.0, 1.3), _time(0.8, 0.95, 1.1))
    assert speedup > 1
    assert not measurable(spread)
    assert speedup_text(speedup, spread).startswith("no measurable change (")
    assert "x" not in speedup_text(speedup, spread)


def test_a_measurable_slowdown_is_reported_as_such():
    speedup, spread = speedup_of(_time(0.95, 1.0, 1.05), _time(1.9, 2.0, 2.1))
    assert measurable(spread)
    assert speedup_text(speedup, spread) == "0.50x (0.45-0.55)"


def test_ranges_touching_at_one_count_as_overlap():
    assert not measurable([1.0, 1.4])
    assert not measurable([0.7, 1.0])
    assert measurable([1.01, 1.4])


def test_without_quartiles_there_is_no_claim_of_a_change():
    speedup, spread = speedup_of({"median": 2.0, "iqr": 0.1}, {"median": 1.0, "iqr": 0.1})
    assert speedup == 2.0 and spread is None
    assert not measurable(spread)
    assert speedup_text(speedup, spread) == "2.00x (no range)"
    assert speedup_text(None, None) == "-"


def _entry(before, after):
    speedup, spread = speedup_of(before, after)
    fix = {"code": "TL101", "name": "x", "line": 3, "applicability": "safe", "message": "m", "executed": True}
    return {
        "target": "m.py::f", "fixes": [fix], "device": "cpu", "before": before, "after": after,
        "speedup": speedup, "speedup_range": spread, "match": True, "error": None,
        "each": [{**fix, "time": after, "speedup": speedup, "speedup_range": spread, "match": True}],
    }


def test_function_mode_says_no_measurable_change_when_ranges_overlap():
    text = format_entry(_entry(_time(0.9, 1.0, 1.3), _time(0.8, 0.95, 1.1)))
    assert "no measurable change in time" in text
    assert "speedup 1.05x" not in text
    table = [line for line in text.splitlines() if line.strip().startswith(("fixed", "TL101 (line 3) only"))]
    assert len(table) == 2 and all("no measurable change" in line for line in table)
    assert "within the spread of the measurements" in text


def test_function_mode_prints_the_speedup_when_ranges_are_apart():
    text = format_entry(_entry(_time(1.9, 2.0, 2.1), _time(0.95, 1.0, 1.05)))
    assert "OK: the fixed function returns the same values; speedup 2.00x" in text
    assert "no measurable change" not in text
    assert "2.00x (1.81-2.21)" in text


def test_rule_mode_rows_use_the_same_wording():
    quiet = speedup_of(_time(0.9, 1.0, 1.3), _time(0.8, 0.95, 1.1))
    clear = speedup_of(_time(1.9, 2.0, 2.1), _time(0.95, 1.0, 1.05))
    rows = [
        {"code": "TL101", "device": "cpu", "before": _time(0.9, 1.0, 1.3), "after": _time(0.8, 0.95, 1.1),
         "speedup": quiet[0], "speedup_range": quiet[1], "match": True},
        {"code": "TL102", "device": "cpu", "before": _time(1.9, 2.0, 2.1), "after": _time(0.95, 1.0, 1.05),
         "speedup": clear[0], "speedup_range": clear[1], "match": True},
    ]
    lines = format_rules({"device": "cpu", "rows": rows}).splitlines()
    tl101 = next(line for line in lines if line.startswith("TL101"))
    tl102 = next(line for line in lines if line.startswith("TL102"))
    assert "no measurable change" in tl101
    assert "2.00x (1.81-2.21)" in tl102 and "no measurable" not in tl102
