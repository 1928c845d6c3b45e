"""Precision on set Z (CodeBERT, NAFNet, Restormer, consistency_models,
fast-autoaugment, poolformer, pytorch_GAN_zoo, XCiT; synthetic examples
written here, not their code): deterministic cuDNN in a text program, DDP's
unused-parameter search in an inference script, DataParallel in scripts named
for evaluation, and channel attention.  Each with the near-miss that must still be
reported."""

from __future__ import annotations

from tests.helpers import lint
from torchlint.rules._program import named_for_inference


def found(code: str, select: str, path: str = "run.py"):
    return [(d.code, d.line) for d in lint(code, select=select.split(","), path=path)]


# -- cudnn.deterministic in a text program -----------------------------------------------------

TEXT = """
import random
import numpy as np
import torch
from transformers import RobertaModel, RobertaTokenizer
from model import Model


def set_seed(seed):
    random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = True


def main(args):
    tokenizer = RobertaTokenizer.from_pretrained(args.model_name)
    model = Model(RobertaModel.from_pretrained(args.model_name))
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
"""


def test_a_text_program_has_no_convolution_for_cudnn_to_choose():
    assert found(TEXT, "TL502") == []


def test_a_program_that_names_a_convolution_or_an_image_model_is_reported():
    assert found(TEXT.replace("from model import Model", "from model import TextCNN as Model"), "TL502") == [
        ("TL502", 12)]
    assert found(TEXT.replace("RobertaTokenizer", "CLIPTokenizer"), "TL502") == [("TL502", 12)]
    assert found(TEXT + "pixel_values = batch['pixel_values']\n", "TL502") == [("TL502", 12)]


def test_a_program_without_a_tokenizer_is_reported():
    assert found(TEXT.replace("RobertaTokenizer", "RobertaConfig"), "TL502") == [("TL502", 12)]


# -- find_unused_parameters in a script that never runs a backward pass -----------------------

DDP = """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def evaluate(model, loader):
    model.eval()
    with torch.no_grad():
        for batch in loader:
            model(batch.cuda())


def main(model, loader, local_rank):
    model = DDP(model.cuda(), device_ids=[local_rank], find_unused_parameters=True)
    evaluate(model, loader)
"""


def test_an_inference_script_never_pays_for_the_search():
    assert found(DDP, "TL603", path="run_test_cls.py") == []
    assert found(DDP.replace("    model.eval()\n", ""), "TL603", path="run_infer_msg.py") == []


def test_a_script_that_trains_is_reported():
    code = DDP.replace("            model(batch.cuda())", "            model(batch.cuda()).sum().backward()")
    assert found(code, "TL603", path="run_test_cls.py") == [("TL603", 14)]
    assert found(DDP.replace("    model.eval()\n", ""), "TL603", path="run_finetune_cls.py") == [("TL603", 13)]


def test_a_script_named_for_training_that_evaluates_here_is_reported():
    # the training loop lives in another module (`engine.train_one_epoch`)
    assert found(DDP, "TL603", path="run_class_finetuning.py") == [("TL603", 14)]
    assert found(DDP, "TL603", path="aecore/evaluator.py") == []


def test_names_for_inference():
    for path in ("run_test_cls.py", "tools/test.py", "eval_coco.py", "models/eval/nn_metric.py",
                 "inference/run.py", "predict.py"):
        assert named_for_inference(path), path
    for path in ("train_and_eval.py", "run_finetune_cls.py", "train.py", "models/metrics/nn_score.py",
                 "contest.py", "evaluator.py"):
        assert not named_for_inference(path), path


DATA_PARALLEL = """
import torch
from torch import nn


def main(extractor, loader):
    extractor = nn.DataParallel(extractor).cuda()
    for images in loader:
        extractor(images.cuda())
"""


def test_data_parallel_in_a_module_under_an_eval_directory_is_inference():
    assert found(DATA_PARALLEL, "TL601", path="models/eval/nn_metric.py") == []
    assert found(DATA_PARALLEL, "TL601", path="models/metrics/nn_metric.py") == [("TL601", 7)]


# -- channel ("transposed") attention -----------------------------------------------------------

XCA = """
import torch
from torch import nn
import torch.nn.functional as F


class XCA(nn.Module):
    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q = q.transpose(-2, -1)
        k = k.transpose(-2, -1)
        v = v.transpose(-2, -1)
        q = F.normalize(q, dim=-1)
        k = F.normalize(k, dim=-1)
        attn = (q @ k.transpose(-2, -1)) * self.temperature
        attn = attn.softmax(dim=-1)
        return (attn @ v).permute(0, 3, 1, 2).reshape(B, N, C)
"""


def test_cross_covariance_attention_is_not_sdpa():
    assert found(XCA, "TL402") == []


def test_attention_over_tokens_with_a_head_split_is_reported():
    code = XCA.replace("        q = q.transpose(-2, -1)\n        k = k.transpose(-2, -1)\n        v = v.transpose(-2, -1)\n",
                       "        q = q.transpose(1, 2)\n")
    assert found(code, "TL402") == [("TL402", 16)]


MDTA = """
import torch
from torch import nn
from einops import rearrange


class Attention(nn.Module):
    def forward(self, x):
        b, c, h, w = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=1)
        q = rearrange(q, "b (head c) h w -> b head c (h w)", head=self.num_heads)
        k = rearrange(k, "b (head c) h w -> b head c (h w)", head=self.num_heads)
        v = rearrange(v, "b (head c) h w -> b head c (h w)", head=self.num_heads)
        q = torch.nn.functional.normalize(q, dim=-1)
        attn = (q @ k.transpose(-2, -1)) * self.temperature
        attn = attn.softmax(dim=-1)
        return attn @ v
"""


def test_positions_laid_out_last_by_einops_is_channel_attention():
    assert found(MDTA, "TL402") == []


def test_tokens_laid_out_first_by_einops_is_reported():
    code = MDTA.replace("b head c (h w)", "b head (h w) c")
    assert found(code, "TL402") == [("TL402", 16)]
