"""Layers: the vocabulary of ``torch.nn`` layer constructors.

* ``Layer``: what a constructor call builds: ``kind`` (``"conv"``: a
  convolution, ``"bn"``: a BatchNorm, ``"seq"``: an ``nn.Sequential``,
  ``"odict"``: an ``OrderedDict`` of layers given to it), the class name, the
  spatial dimensionality (None for ``SyncBatchNorm``, which takes any) and the
  0-based position of ``bias`` among its positional parameters;
* ``LAYER_CALLS``: the table of constructors by qualified name
  (``torch.nn.Conv2d``, ``torch.nn.modules.conv.Conv2d``, the ``Lazy`` and
  ``ConvTranspose`` variants, ``BatchNorm1d``/``2d``/``3d``, ``SyncBatchNorm``,
  ``nn.Sequential``, ``collections.OrderedDict``), looked up for a call;
* ``normalizes(bn, conv)``: whether a BatchNorm takes the output of a layer
  of that dimensionality;
* ``BIAS_SENSITIVE_ATTRIBUTES``: the attributes of a convolution whose use
  depends on its bias (``conv.bias``, ``conv.forward``).

What flows into what (which layer follows which) is ``rules/_layer_flow.py``.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional

from torchlint.rules._helpers import CallTable
from torchlint.rules._project_text import loads_published_weights  # noqa: F401 - the rules' import


class Layer(NamedTuple):
    kind: str  # "conv", "bn", "seq" or "odict"
    cls: str = ""  # the class name, e.g. "Conv2d"
    dim: Optional[int] = None  # spatial dimensionality; None for SyncBatchNorm
    bias_pos: int = 7  # 0-based position of `bias` among the positional parameters


def _table() -> Dict[str, Layer]:
    layers: Dict[str, Layer] = {}
    for d in (1, 2, 3):
        for base, pos in (("Conv", 7), ("ConvTranspose", 7), ("LazyConv", 6), ("LazyConvTranspose", 6)):
            name = f"{base}{d}d"
            layers[f"torch.nn.{name}"] = layers[f"torch.nn.modules.conv.{name}"] = Layer("conv", name, d, pos)
        for base in ("BatchNorm", "LazyBatchNorm"):
            name = f"{base}{d}d"
            layers[f"torch.nn.{name}"] = layers[f"torch.nn.modules.batchnorm.{name}"] = Layer("bn", name, d)
    sync = Layer("bn", "SyncBatchNorm", None)
    layers["torch.nn.SyncBatchNorm"] = layers["torch.nn.modules.batchnorm.SyncBatchNorm"] = sync
    layers["torch.nn.Sequential"] = layers["torch.nn.modules.container.Sequential"] = Layer("seq")
    layers["collections.OrderedDict"] = layers["typing.OrderedDict"] = Layer("odict")
    return layers


LAYERS: Dict[str, Layer] = _table()
LAYER_CALLS = CallTable(LAYERS)

# Attributes of a convolution module whose use depends on its bias.
BIAS_SENSITIVE_ATTRIBUTES = frozenset({"bias", "forward", "__call__", "_conv_forward"})


def normalizes(bn: Layer, conv: Layer) -> bool:
    """Whether the BatchNorm ``bn`` takes the output of ``conv`` (same dimensionality)."""
    return bn.kind == "bn" and (bn.dim is None or bn.dim == conv.dim)


