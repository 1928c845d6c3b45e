"""Precision on projects never seen before (set LLL: CleanRL, litgpt,
open_clip, OpenRLHF, tianshou, coqui TTS, Fooocus, X-Decoder;
docs/precision.md).  Synthetic examples written for these tests, each with
the near-miss that must still be reported."""

from __future__ import annotations

import pytest

from tests.helpers import codes, lint

# -- a PPO minibatch indexes device buffers with a NumPy array: each read waits ------------

PPO = """\
import numpy as np
import torch


def update(agent, optimizer, logprobs, batch_size, minibatch_size, device):
    obs = torch.zeros((128, 4, 8)).to(device)
    b_obs = obs.reshape((-1, 8))
    b_logprobs = logprobs.reshape(-1)
    b_inds = np.arange(batch_size)
    clipfracs = []
    for epoch in range(4):
        np.random.shuffle(b_inds)
        for start in range(0, batch_size, minibatch_size):
            end = start + minibatch_size
            mb_inds = b_inds[start:end]
            newlogprob = agent(b_obs[mb_inds])
            ratio = (newlogprob - newlogprob.detach()).exp()
            clipfracs += [((ratio - 1.0).abs() > 0.2).float().mean().item()]
            loss = -ratio.mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return clipfracs
"""


def test_a_minibatch_indexed_with_a_numpy_array_waits_every_iteration():
    # `b_obs[mb_inds]` copies the index to the device with a blocking copy: one
    # more `.item()` in that iteration adds no wait (CleanRL's ppo*.py)
    assert "TL101" not in codes(lint(PPO))
    lstm = PPO.replace("b_inds = np.arange(batch_size)", "b_inds = np.arange(batch_size).reshape(4, -1)").replace(
        "mb_inds = b_inds[start:end]", "mb_inds = b_inds[:, start:end].ravel()")
    assert "TL101" not in codes(lint(lstm))


@pytest.mark.parametrize("change", [
    # an index made on the device: no copy, no wait
    ("b_inds = np.arange(batch_size)", "b_inds = torch.randperm(batch_size, device=device)"),
    # a NumPy buffer indexed with NumPy: no device involved
    ("obs = torch.zeros((128, 4, 8)).to(device)", "obs = np.zeros((128, 4, 8))"),
    # a Python integer index: no copy of an index
    ("b_obs[mb_inds]", "b_obs[start]"),
    # the indexed read only under a condition: not every iteration
    ("newlogprob = agent(b_obs[mb_inds])", "newlogprob = agent(b_obs[mb_inds] if epoch else b_obs)"),
])
def test_a_minibatch_without_a_waiting_index_is_reported(change):
    assert "TL101" in codes(lint(PPO.replace(*change)))


# -- generation that stops on a stop sequence matched in an inner loop ---------------------

GENERATE = """\
import torch


def generate(model, prompt, max_new_tokens, stop_tokens=()):
    progress = [0] * len(stop_tokens)
    token = prompt
    for _ in range(max_new_tokens):
        token = model(token).argmax(-1)
        int_token = token.item()
        for i, seq in enumerate(stop_tokens):
            if int_token == seq[progress[i]]:
                progress[i] += 1
                if progress[i] == len(seq):
                    return
            else:
                progress[i] = 0
        yield token
"""


def test_a_token_that_may_end_the_generation_is_read_every_step():
    # litgpt's `generate`: each token is matched against the stop sequences on the host
    assert "TL101" not in codes(lint(GENERATE))


def test_a_token_read_but_not_deciding_the_end_is_reported():
    # the inner loop returns on something else: the read waits for nothing it needs
    text = GENERATE.replace("if int_token == seq[progress[i]]:", "if seq[progress[i]] < 0:")
    assert "TL101" in codes(lint(text))


def test_a_cast_is_no_move_to_the_device():
    # `.to(torch.float32)` keeps the buffer where it is (here on the host)
    text = PPO.replace("obs = torch.zeros((128, 4, 8)).to(device)", "obs = torch.zeros((128, 4, 8)).to(torch.float32)")
    assert "TL101" in codes(lint(text))
