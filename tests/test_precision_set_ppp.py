"""Precision on projects never seen before (set PPP; docs/precision.md).
Synthetic examples written for these tests, each with the near-miss that
must still be reported."""

from __future__ import annotations

import pytest

from tests.helpers import codes, lint

# -- TL302: an evaluation that runs the model through a helper that disables gradients -------

EVALUATE = """\
import torch


def model_predict(model, positions, sentences):
    \"\"\"Predict the class of each target token.\"\"\"
    with torch.no_grad():
        logits = model(positions, sentences)
        return torch.argmax(logits, dim=1)


def evaluate_model(model, dataset):
    model.eval()
    predictions = []
    for sentences, positions, labels in dataset:
        predictions += model_predict(model, positions, sentences).tolist()
    return predictions
"""


def test_tl302_a_helper_that_disables_gradients_itself_covers_the_call():
    # stanza's lemma classifier: evaluate_model runs the model only through model_predict
    assert "TL302" not in codes(lint(EVALUATE))


@pytest.mark.parametrize("change", [
    ("    with torch.no_grad():\n        logits = model(positions, sentences)\n        return",
     "    logits = model(positions, sentences)\n    if True:\n        return"),
    ("    with torch.no_grad():\n        logits", "    with torch.enable_grad():\n        logits"),
])
def test_tl302_a_helper_that_keeps_gradients_leaves_the_finding(change):
    assert "TL302" in codes(lint(EVALUATE.replace(*change)))
