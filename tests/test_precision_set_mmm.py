"""Precision on projects never seen before (set MMM: mmpretrain, nanotron,
I-JEPA, CogVLM, Grounded-Segment-Anything, EfficientSAM, FastSAM, fairseq2;
docs/precision.md).  Synthetic examples written for these tests, each with
the near-miss that must still be reported."""

from __future__ import annotations

import pytest

from tests.helpers import codes, lint

# -- channel attention: the positions last, the score matrix channels by channels -----------

XCA = """\
import torch
import torch.nn.functional as F
from torch import nn


class XCA(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.temperature = nn.Parameter(torch.ones(heads, 1, 1))

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 4, 1)
        q, k, v = qkv.unbind(0)
        q = F.normalize(q, dim=-1)
        k = F.normalize(k, dim=-1)
        attn = (q @ k.transpose(-2, -1)) * self.temperature
        attn = attn.softmax(dim=-1)
        return (attn @ v).permute(0, 3, 1, 2).reshape(B, N, C)
"""

SDTA = """\
import torch
import torch.nn.functional as F
from torch import nn


class ChannelAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.scale = nn.Parameter(torch.ones(heads, 1, 1))

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = [item.transpose(-2, -1) for item in [qkv[0], qkv[1], qkv[2]]]
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        return (attn @ v).permute(0, 3, 1, 2).reshape(B, N, C)
"""


@pytest.mark.parametrize("text", [XCA, SDTA])
def test_channel_attention_is_no_manual_attention(text):
    # XCiT's XCA (positions put last by the qkv permute) and EdgeNeXt's SDTA
    # (each of q, k, v transposed in a list): SDPA buys nothing there
    assert "TL402" not in codes(lint(text))


@pytest.mark.parametrize("text", [
    XCA.replace("permute(2, 0, 3, 4, 1)", "permute(2, 0, 3, 1, 4)").replace(
        ".permute(0, 3, 1, 2).reshape(B, N, C)", ".transpose(1, 2).reshape(B, N, C)"),
    SDTA.replace("[item.transpose(-2, -1) for item in [qkv[0], qkv[1], qkv[2]]]", "[item for item in qkv]"),
])
def test_attention_over_positions_is_reported(text):
    assert "TL402" in codes(lint(text))


# -- an evaluation pass that re-ranks with the model for every image ------------------------

RERANK = """\
import torch
from mmengine.utils import track_iter_progress


class Retriever(torch.nn.Module):
    def forward(self, images, texts, mode="loss"):
        if mode == "predict":
            return self.predict(images, texts)
        return self.loss(images, texts)

    def predict(self, images, texts):
        return self.compute_score_matrix_i2t(*self.extract(images, texts))

    def compute_score_matrix_i2t(self, img_feats, img_embeds, text_ids, text_atts):
        sim = img_feats @ img_feats.t()
        scores = torch.full((img_feats.size(0), text_ids.size(0)), -100.0).to(self.device)
        for i in track_iter_progress(range(img_feats.size(0))):
            topk_sim, topk_idx = sim[i].topk(k=self.topk, dim=0)
            encoder_output = img_embeds[i].repeat(self.topk, 1, 1)
            encoder_att = torch.ones(encoder_output.size()[:-1], dtype=torch.long).to(self.device)
            output = self.multimodal_backbone.bert(text_ids[topk_idx], encoder_hidden_states=encoder_output,
                                                   encoder_attention_mask=encoder_att)
            scores[i, topk_idx] = self.multimodal_head(output).mean(1) + topk_sim
        return scores
"""


def test_the_score_matrix_of_an_evaluation_pass_is_made_once():
    # the matrix outside the loop, once per evaluation; the mask inside, once per image
    found = [(d.code, d.line) for d in lint(RERANK)]
    assert ("TL201", 16) not in found
    assert ("TL201", 20) in found


def test_a_loop_that_runs_no_model_is_no_evaluation_pass():
    text = RERANK.replace("self.multimodal_backbone.bert(", "self.lookup(").replace(
        "self.multimodal_head(output)", "output")
    assert ("TL201", 16) in [(d.code, d.line) for d in lint(text)]


# -- a pydantic model's method is no network --------------------------------------------------

STREAM = """\
import torch


@torch.inference_mode()
def generate_stream(model, tokenizer, params):
    for _ in range(params["max_new_tokens"]):
        yield {"text": tokenizer.decode(model.generate(**params))}


async def predict(model_id, params):
    chunk = Response(model=model_id, choices=[])
    yield chunk.model_dump_json(exclude_unset=True)
    for response in generate_stream(model, tokenizer, params):
        yield Response(model=model_id, text=response["text"]).model_dump_json()
"""


def test_a_pydantic_dump_runs_no_model():
    # CogVLM's OpenAI-style server: the model runs in the `inference_mode` generator
    assert "TL302" not in codes(lint(STREAM))


def test_a_model_run_next_to_the_dump_is_reported():
    text = STREAM.replace('yield chunk.model_dump_json(exclude_unset=True)',
                         'yield chunk.model_dump_json(exclude_unset=True), model(params["x"])')
    assert "TL302" in codes(lint(text))
