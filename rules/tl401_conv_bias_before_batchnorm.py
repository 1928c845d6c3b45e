from __future__ import annotations

from typing import Dict, List

import libcst as cst

from torchlint.codemods import calls
from torchlint.model import Applicability, Fix, FixAvailability
from torchlint.rule import Benchmark, Invalid, Rule, Valid
from torchlint.rules._helpers import argument, literal_bool
from torchlint.rules._layer_flow import LayerFlow
from torchlint.rules._project_text import FROZEN_BN, PROGRAM_NOTE, PROGRAM_SUBJECT, PUBLISHED_WEIGHTS, trait_key
from torchlint.rules._layers import BIAS_SENSITIVE_ATTRIBUTES, LAYER_CALLS, Layer, normalizes
from torchlint.rules._project_text import loads_downloaded_weights


class ConvBiasBeforeBatchNorm(Rule):
    """
    ## What it does
    Reports a convolution (`torch.nn.Conv1d`/`Conv2d`/`Conv3d`, the
    `ConvTranspose` and `Lazy` variants too) that has a bias (no `bias`
    argument, or `bias=True`) and whose output goes straight into a BatchNorm of
    the same dimensionality (`BatchNorm1d`/`2d`/`3d`, or `SyncBatchNorm`):

    - adjacent arguments of `nn.Sequential(...)`, adjacent entries of an
      `OrderedDict` given to it, or adjacent elements of a list passed as
      `nn.Sequential(*layers)` and built in the same function (`layers = [...]`,
      `layers += [...]`, `layers.extend([...])`, consecutive
      `layers.append(...)` statements);
    - `bn(conv(x))`, or `y = conv(x)` followed in the same block by `bn(y)`,
      where `conv` and `bn` are modules assigned once in the same function, or
      attributes (`self.conv`, `self.bn`) assigned once in the same class.

    A module referred to by a name or an attribute is reported only when every
    use of it in that scope feeds the BatchNorm: if its output is also used
    elsewhere (or its `.bias` is read), removing the bias would change that
    other use. An activation or any other layer between the two breaks the
    pattern, and so does an `nn.ModuleList` (its order says nothing about data
    flow). A user's own `Conv2d` class is not reported, nor is a module that
    another module of the run imports and then freezes the BatchNorms of
    whenever it trains (a `def train(self, mode=True):` override that puts
    every `nn.BatchNorm2d` in eval mode: TSN's and TSM's "partial BN", mmdet's
    `norm_eval`): with frozen running statistics the bias does not cancel, it
    is the layer's only trainable offset (the project index reads the modules
    that import this one). Nor is a module that loads downloaded weights whole
    into its model (`model.load_state_dict(model_zoo.load_url(url))`, without
    `strict=False`), or loads a checkpoint with an explicit `strict=True`
    (`load_state_dict(ckpt, strict=True)`, `load_checkpoint(head, ckpt,
    strict=True)`), or downloads weights and loads a state dict built from
    them (`sd = model_zoo.load_url(url)`, filtered into `model.state_dict()`,
    then `model.load_state_dict(merged)`: torchreid's MLFN, where a dropped
    bias would be skipped silently and the BatchNorm's statistics would no
    longer match): a port of a published checkpoint (Caffe's BN-Inception,
    Torch7's ResNets) or an inference wrapper around pretrained heads, whose
    convolutions must keep the biases the checkpoint holds; dropping one
    breaks that load, and loading around it changes the eval-mode outputs
    (see Fix safety). Nor is a module that another module of the run imports
    and fills with downloaded weights (`load_state_dict_from_url(url)` or
    `hf_hub_download(...)` there, and a `load_state_dict(...)` without
    `strict=False`: kornia's SOLD2 around its backbone module).

    ## Why is this bad?
    BatchNorm subtracts the per-channel mean of its input, so a constant added
    to each channel just before it cancels out: the convolution's bias has no
    effect on the output, and BatchNorm's own `bias` (beta) already provides
    the per-channel offset. The redundant bias still costs a parameter tensor,
    its gradient and optimizer state, and an extra elementwise add (or a less
    efficient fused kernel) in every forward and backward pass.

    Measured with `torchlint verify --rules TL401` on a CPU (a 2-core AMD EPYC VM,
    `OMP_NUM_THREADS=1`, torch 2.13.0+cpu; no GPU was available): 2.76 ms before,
    2.59 ms after, **1.06x**. The bias add and its gradient are skipped. Run the
    same command on a GPU machine for the figure that matters there.

    ## Example
    ```python
    stem = nn.Sequential(
        nn.Conv2d(3, 64, kernel_size=3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
    )
    ```

    ## Use instead
    ```python
    stem = nn.Sequential(
        nn.Conv2d(3, 64, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
    )
    ```

    ## Fix safety
    The fix (`bias=False`, or a literal `bias=True` turned into `False`) is
    unsafe: the module's `state_dict` no longer has the `<conv>.bias` key, so
    loading a checkpoint saved before the change with the default
    `load_state_dict(strict=True)` fails with `Unexpected key(s) in state_dict:
    "...bias"`.

    For a model trained from scratch after the change, the outputs are
    mathematically the same in train mode (batch statistics) and in eval mode
    (BatchNorm's running mean then simply tracks a mean without the bias). But
    in an already-trained checkpoint, the convolution's bias is folded into the
    BatchNorm's `running_mean`: dropping the bias and loading the remaining
    weights non-strictly changes the eval-mode outputs, unless the bias is
    first folded in (`running_mean -= conv.bias`).

    ## References
    - PyTorch Performance Tuning Guide, "Disable bias for convolutions directly followed by a batch norm"
    - Ioffe & Szegedy, "Batch Normalization: Accelerating Deep Network Training by Reducing Internal Covariate Shift" (2015), section 3.2
    """

    code = "TL401"
    name = "conv-bias-before-batchnorm"
    summary = "Convolution bias cancelled by the following BatchNorm"
    fix = FixAvailability.UNSAFE
    needs = ("BatchNorm",)

    VALID = [
        Valid(
            """
            import torch.nn as nn
            m = nn.Sequential(nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8))
            """
        ),
        Valid(
            """
            import torch.nn as nn
            m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.BatchNorm2d(8))
            """
        ),
        Valid(
            """
            import torch.nn as nn
            m = nn.Sequential(nn.Conv1d(3, 8, 3), nn.BatchNorm2d(8))
            """
        ),
        Valid(
            """
            import torch.nn as nn
            m = nn.ModuleList([nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)])
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch.nn as nn
            m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))
            """,
            expected_fix="""
            import torch.nn as nn
            m = nn.Sequential(nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8))
            """,
        ),
        Invalid(
            """
            from torch import nn


            class Block(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.conv = nn.Conv2d(3, 8, 3)
                    self.bn = nn.BatchNorm2d(8)

                def forward(self, x):
                    return self.bn(self.conv(x))
            """,
            expected_fix="""
            from torch import nn


            class Block(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.conv = nn.Conv2d(3, 8, 3, bias=False)
                    self.bn = nn.BatchNorm2d(8)

                def forward(self, x):
                    return self.bn(self.conv(x))
            """,
        ),
    ]

    BENCHMARK = Benchmark(
        title="Conv2d with vs without bias before BatchNorm2d (forward and backward, train mode)",
        before="""
            import torch

            device = torch.device(DEVICE)

            inputs = torch.randn(8, 16, 32, 32, device=device)
            model = torch.nn.Sequential(
                torch.nn.Conv2d(16, 32, 3, padding=1),
                torch.nn.BatchNorm2d(32),
                torch.nn.ReLU(),
            ).to(device)


            def run():
                out = model(inputs)
                out.sum().backward()
                return out.detach()
            """,
        after="""
            import torch

            device = torch.device(DEVICE)

            inputs = torch.randn(8, 16, 32, 32, device=device)
            model = torch.nn.Sequential(
                torch.nn.Conv2d(16, 32, 3, padding=1, bias=False),
                torch.nn.BatchNorm2d(32),
                torch.nn.ReLU(),
            ).to(device)


            def run():
                out = model(inputs)
                out.sum().backward()
                return out.detach()
            """,
        comparison=(
            "values, within float32 tolerances: in train mode BatchNorm subtracts the batch mean, so the bias "
            "cancels (the weights are the same because the bias is initialised after them)"
        ),
    )

    def __init__(self, context) -> None:
        super().__init__(context)
        self._layers: Dict[int, Layer] = {}
        self._convs: List[cst.Call] = []
        self._has_bn = False

    def visit_Call(self, node: cst.Call) -> None:
        layer = LAYER_CALLS.lookup(node, self.context)
        if layer is None:
            return
        self._layers[id(node)] = layer
        if layer.kind == "conv":
            self._convs.append(node)
        elif layer.kind == "bn":
            self._has_bn = True

    def leave_Module(self, node: cst.Module) -> None:
        if not self._convs or not self._has_bn:
            return
        if loads_downloaded_weights(self.context.source):
            return  # a port of published weights: dropping a bias breaks loading them, and changes eval outputs
        known = self.context.project.get("frequency", {})
        if trait_key(PROGRAM_SUBJECT, FROZEN_BN) in known:
            return  # the model that imports these layers freezes its BatchNorms: the bias does not cancel
        if trait_key(PROGRAM_SUBJECT, PUBLISHED_WEIGHTS) in known:
            return  # a module that imports these layers loads downloaded weights into them
        flow = LayerFlow(self._layers, node, BIAS_SENSITIVE_ATTRIBUTES, self.context.semantic)
        for call in self._convs:
            self._check(flow, call)

    def _check(self, flow: LayerFlow, call: cst.Call) -> None:
        layer = self._layers[id(call)]
        known, arg = argument(call, "bias", layer.bias_pos)
        if not known or (arg is not None and literal_bool(arg.value) is not True):
            return
        bn = flow.follower(call, lambda follower: normalizes(follower, layer))
        if bn is None:
            return
        bn_layer, label = bn
        if not self.context.path.endswith(".ipynb"):
            self.context.pending.add(PROGRAM_NOTE)  # does a module that imports this one freeze BatchNorm?
        where = f" (`{label}`)" if label else ""
        self.report(
            call,
            f"`{layer.cls}` has a bias that the following `{bn_layer.cls}`{where} cancels out "
            "(it subtracts the per-channel mean); pass `bias=False` to save the "
            "parameter and the add",
            fix=Fix(
                Applicability.UNSAFE,
                "Pass `bias=False`",
                lambda call=call, arg=arg: calls.set_keyword(call, "bias", "False", arg),
            ),
        )

