"""A training program of the size and shape people keep in one file: configuration,
data, models, the training loop, evaluation, checkpoints and logging.

benchmarks/server_latency.py measures the editor's per-keystroke analysis on it
(it is parsed and linted, never run).  It has a handful of the anti-patterns
torchlint reports, as such files do.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset
from torchvision import datasets, transforms

logger = logging.getLogger("train")


# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------


@dataclass
class DataConfig:
    root: str = "./data"
    dataset: str = "cifar10"
    image_size: int = 32
    batch_size: int = 128
    eval_batch_size: int = 256
    num_workers: int = 8
    augment: bool = True
    subset: Optional[int] = None
    tokens_path: Optional[str] = None
    sequence_length: int = 256


@dataclass
class ModelConfig:
    kind: str = "resnet"
    width: int = 64
    depth: int = 18
    num_classes: int = 10
    dropout: float = 0.1
    vocab_size: int = 32000
    embed_dim: int = 512
    num_heads: int = 8
    num_layers: int = 6
    mlp_ratio: float = 4.0


@dataclass
class OptimConfig:
    optimizer: str = "adamw"
    lr: float = 3e-4
    weight_decay: float = 0.05
    betas: Tuple[float, float] = (0.9, 0.999)
    momentum: float = 0.9
    warmup_steps: int = 500
    max_steps: int = 20000
    grad_clip: float = 1.0
    accumulation: int = 1
    label_smoothing: float = 0.1


@dataclass
class RunConfig:
    out_dir: str = "./runs/default"
    seed: int = 0
    log_every: int = 50
    eval_every: int = 1000
    save_every: int = 2000
    amp: bool = True
    compile: bool = False
    resume: Optional[str] = None
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "RunConfig":
        raw = json.loads(text)
        return cls(
            out_dir=raw.get("out_dir", "./runs/default"),
            seed=raw.get("seed", 0),
            log_every=raw.get("log_every", 50),
            eval_every=raw.get("eval_every", 1000),
            save_every=raw.get("save_every", 2000),
            amp=raw.get("amp", True),
            compile=raw.get("compile", False),
            resume=raw.get("resume"),
            data=DataConfig(**raw.get("data", {})),
            model=ModelConfig(**raw.get("model", {})),
            optim=OptimConfig(**raw.get("optim", {})),
        )


def parse_args(argv: Optional[Sequence[str]] = None) -> RunConfig:
    parser = argparse.ArgumentParser(description="Train an image classifier or a small language model.")
    parser.add_argument("--config", type=str, default=None, help="a JSON file with a RunConfig")
    parser.add_argument("--out-dir", type=str, default=None)
    parser.add_argument("--dataset", type=str, default=None, choices=["cifar10", "cifar100", "tokens"])
    parser.add_argument("--model", type=str, default=None, choices=["resnet", "transformer"])
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--no-amp", action="store_true")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--resume", type=str, default=None)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    config = RunConfig.from_json(Path(args.config).read_text()) if args.config else RunConfig()
    if args.out_dir is not None:
        config.out_dir = args.out_dir
    if args.dataset is not None:
        config.data.dataset = args.dataset
    if args.model is not None:
        config.model.kind = args.model
    if args.batch_size is not None:
        config.data.batch_size = args.batch_size
    if args.lr is not None:
        config.optim.lr = args.lr
    if args.max_steps is not None:
        config.optim.max_steps = args.max_steps
    if args.no_amp:
        config.amp = False
    if args.compile:
        config.compile = True
    if args.resume is not None:
        config.resume = args.resume
    if args.seed is not None:
        config.seed = args.seed
    return config


# ---------------------------------------------------------------------------
# Distributed helpers
# ---------------------------------------------------------------------------


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main_process() -> bool:
    return rank() == 0


def setup_distributed() -> torch.device:
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        dist.init_process_group(backend="nccl")
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def cleanup_distributed() -> None:
    if is_distributed():
        dist.barrier()
        dist.destroy_process_group()


def all_reduce_mean(value: torch.Tensor) -> torch.Tensor:
    if not is_distributed():
        return value
    value = value.clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value / world_size()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------


CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


def image_transforms(config: DataConfig, train: bool) -> transforms.Compose:
    steps: List[Callable] = []
    if train and config.augment:
        steps.append(transforms.RandomCrop(config.image_size, padding=4))
        steps.append(transforms.RandomHorizontalFlip())
    steps.append(transforms.ToTensor())
    steps.append(transforms.Normalize(CIFAR_MEAN, CIFAR_STD))
    return transforms.Compose(steps)


class TokenDataset(Dataset):
    """Fixed-length windows over a flat array of token ids stored with numpy."""

    def __init__(self, path: str, sequence_length: int, split: str = "train") -> None:
        data = np.memmap(path, dtype=np.uint16, mode="r")
        cut = int(len(data) * 0.98)
        self.data = data[:cut] if split == "train" else data[cut:]
        self.sequence_length = sequence_length

    def __len__(self) -> int:
        return max(0, (len(self.data) - 1) // self.sequence_length)

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, torch.Tensor]:
        start = index * self.sequence_length
        chunk = np.asarray(self.data[start:start + self.sequence_length + 1], dtype=np.int64)
        tokens = torch.from_numpy(chunk)
        return tokens[:-1], tokens[1:]


def build_datasets(config: DataConfig) -> Tuple[Dataset, Dataset]:
    if config.dataset == "tokens":
        if config.tokens_path is None:
            raise ValueError("the tokens dataset needs data.tokens_path")
        return (TokenDataset(config.tokens_path, config.sequence_length, "train"),
                TokenDataset(config.tokens_path, config.sequence_length, "val"))
    factory = datasets.CIFAR10 if config.dataset == "cifar10" else datasets.CIFAR100
    train = factory(config.root, train=True, download=True, transform=image_transforms(config, True))
    val = factory(config.root, train=False, download=True, transform=image_transforms(config, False))
    if config.subset is not None:
        train = Subset(train, list(range(min(config.subset, len(train)))))
    return train, val


def build_loaders(config: DataConfig) -> Tuple[DataLoader, DataLoader, Optional[DistributedSampler]]:
    train_set, val_set = build_datasets(config)
    sampler = DistributedSampler(train_set, shuffle=True) if is_distributed() else None
    train_loader = DataLoader(
        train_set,
        batch_size=config.batch_size,
        shuffle=sampler is None,
        sampler=sampler,
        num_workers=config.num_workers,
        drop_last=True,
        persistent_workers=config.num_workers > 0,
    )
    val_loader = DataLoader(
        val_set,
        batch_size=config.eval_batch_size,
        shuffle=False,
        num_workers=config.num_workers,
        pin_memory=True,
    )
    return train_loader, val_loader, sampler


def infinite(loader: DataLoader, sampler: Optional[DistributedSampler]) -> Iterator[Any]:
    epoch = 0
    while True:
        if sampler is not None:
            sampler.set_epoch(epoch)
        for batch in loader:
            yield batch
        epoch += 1


# ---------------------------------------------------------------------------
# Models: a ResNet for images
# ---------------------------------------------------------------------------


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes * self.expansion:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes * self.expansion, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * self.expansion),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, block, num_blocks: Sequence[int], num_classes: int = 10, width: int = 64,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.in_planes = width
        self.stem = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1)
        self.stem_bn = nn.BatchNorm2d(width)
        self.layer1 = self._make_layer(block, width, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(block, width * 2, num_blocks[1], stride=2)
        self.layer3 = self._make_layer(block, width * 4, num_blocks[2], stride=2)
        self.layer4 = self._make_layer(block, width * 8, num_blocks[3], stride=2)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(width * 8 * block.expansion, num_classes)

    def _make_layer(self, block, planes: int, num_blocks: int, stride: int) -> nn.Sequential:
        strides = [stride] + [1] * (num_blocks - 1)
        layers = []
        for s in strides:
            layers.append(block(self.in_planes, planes, s))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.stem_bn(self.stem(x)))
        out = self.layer1(out)
        out = self.layer2(out)
        out = self.layer3(out)
        out = self.layer4(out)
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.head(self.dropout(out))


def resnet(depth: int, num_classes: int, width: int, dropout: float) -> ResNet:
    layouts = {
        18: (BasicBlock, (2, 2, 2, 2)),
        34: (BasicBlock, (3, 4, 6, 3)),
        50: (Bottleneck, (3, 4, 6, 3)),
        101: (Bottleneck, (3, 4, 23, 3)),
    }
    if depth not in layouts:
        raise ValueError(f"no ResNet of depth {depth}; choose one of {sorted(layouts)}")
    block, blocks = layouts[depth]
    return ResNet(block, blocks, num_classes=num_classes, width=width, dropout=dropout)


# ---------------------------------------------------------------------------
# Models: a decoder-only transformer for tokens
# ---------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norm = x.pow(2).mean(-1, keepdim=True).add(self.eps).rsqrt()
        return x * norm * self.weight


def rotary_frequencies(dim: int, length: int, base: float = 10000.0) -> torch.Tensor:
    inv = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    positions = torch.arange(length).float()
    angles = torch.outer(positions, inv)
    return torch.polar(torch.ones_like(angles), angles)


def apply_rotary(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    shaped = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    freqs = freqs[: x.shape[1]].view(1, x.shape[1], 1, -1)
    return torch.view_as_real(shaped * freqs).flatten(3).type_as(x)


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError("the embedding size must be a multiple of the number of heads")
        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.dropout = dropout

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.qkv(x).split(dim, dim=2)
        q = q.view(batch, length, self.heads, self.head_dim)
        k = k.view(batch, length, self.heads, self.head_dim)
        v = v.view(batch, length, self.heads, self.head_dim)
        q, k = apply_rotary(q, freqs), apply_rotary(k, freqs)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        out = out.transpose(1, 2).contiguous().view(batch, length, dim)
        return self.proj(out)


class FeedForward(nn.Module):
    def __init__(self, dim: int, ratio: float, dropout: float) -> None:
        super().__init__()
        hidden = int(dim * ratio)
        hidden = 64 * ((hidden + 63) // 64)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(F.silu(self.gate(x)) * self.up(x)))


class TransformerBlock(nn.Module):
    def __init__(self, dim: int, heads: int, ratio: float, dropout: float) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(dim)
        self.attention = CausalSelfAttention(dim, heads, dropout)
        self.ffn_norm = RMSNorm(dim)
        self.ffn = FeedForward(dim, ratio, dropout)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), freqs)
        return x + self.ffn(self.ffn_norm(x))


class LanguageModel(nn.Module):
    def __init__(self, config: ModelConfig, max_length: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(config.vocab_size, config.embed_dim)
        self.blocks = nn.ModuleList(
            TransformerBlock(config.embed_dim, config.num_heads, config.mlp_ratio, config.dropout)
            for _ in range(config.num_layers)
        )
        self.norm = RMSNorm(config.embed_dim)
        self.head = nn.Linear(config.embed_dim, config.vocab_size, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer(
            "freqs", rotary_frequencies(config.embed_dim // config.num_heads, max_length), persistent=False
        )
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, self.freqs)
        return self.head(self.norm(x))

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, steps: int, temperature: float = 1.0,
                 top_k: Optional[int] = None) -> torch.Tensor:
        tokens = prompt
        for _ in range(steps):
            logits = self(tokens[:, -self.freqs.shape[0]:])[:, -1, :] / max(temperature, 1e-5)
            if top_k is not None:
                values, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < values[:, [-1]]] = -float("inf")
            probabilities = F.softmax(logits, dim=-1)
            following = torch.multinomial(probabilities, num_samples=1)
            tokens = torch.cat((tokens, following), dim=1)
        return tokens


def build_model(config: RunConfig) -> nn.Module:
    if config.model.kind == "resnet":
        return resnet(config.model.depth, config.model.num_classes, config.model.width, config.model.dropout)
    return LanguageModel(config.model, config.data.sequence_length)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# ---------------------------------------------------------------------------
# Optimisation
# ---------------------------------------------------------------------------


def parameter_groups(model: nn.Module, weight_decay: float) -> List[Dict[str, Any]]:
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        if parameter.ndim < 2 or name.endswith(".bias") or "norm" in name:
            no_decay.append(parameter)
        else:
            decay.append(parameter)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(model: nn.Module, config: OptimConfig) -> torch.optim.Optimizer:
    groups = parameter_groups(model, config.weight_decay)
    if config.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=config.lr, momentum=config.momentum, nesterov=True)
    if config.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas, fused=torch.cuda.is_available())
    raise ValueError(f"unknown optimizer {config.optimizer!r}")


def lr_at(step: int, config: OptimConfig) -> float:
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.max_steps - config.warmup_steps)
    return 0.5 * config.lr * (1.0 + math.cos(math.pi * min(progress, 1.0)))


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


class EMA:
    """An exponential moving average of a model's weights, for evaluation."""

    def __init__(self, model: nn.Module, decay: float = 0.999) -> None:
        self.decay = decay
        self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items() if v.dtype.is_floating_point}

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        for name, value in model.state_dict().items():
            if name in self.shadow:
                self.shadow[name].mul_(self.decay).add_(value.detach(), alpha=1 - self.decay)

    def copy_to(self, model: nn.Module) -> None:
        model.load_state_dict({**model.state_dict(), **self.shadow})


# ---------------------------------------------------------------------------
# Metrics and logging
# ---------------------------------------------------------------------------


class Meter:
    def __init__(self) -> None:
        self.total = 0.0
        self.count = 0

    def update(self, value: float, n: int = 1) -> None:
        self.total += value * n
        self.count += n

    @property
    def mean(self) -> float:
        return self.total / max(self.count, 1)


class MetricLog:
    """JSON lines, one per logging step, in the run's directory."""

    def __init__(self, out_dir: str) -> None:
        self.path = Path(out_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.history: Dict[str, List[Tuple[int, float]]] = defaultdict(list)

    def write(self, step: int, **values: float) -> None:
        for key, value in values.items():
            self.history[key].append((step, value))
        if is_main_process():
            with self.path.open("a") as handle:
                handle.write(json.dumps({"step": step, **values}) + "\n")

    def best(self, key: str, larger: bool = True) -> Optional[float]:
        values = [v for _, v in self.history.get(key, [])]
        if not values:
            return None
        return max(values) if larger else min(values)


def accuracy(logits: torch.Tensor, targets: torch.Tensor, k: int = 1) -> torch.Tensor:
    top = logits.topk(k, dim=-1).indices
    return (top == targets.unsqueeze(-1)).any(dim=-1).float().mean()


# ---------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------


def unwrap(model: nn.Module) -> nn.Module:
    inner = model.module if isinstance(model, DDP) else model
    return getattr(inner, "_orig_mod", inner)


def save_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, scaler, step: int,
                    config: RunConfig, ema: Optional[EMA] = None) -> None:
    if not is_main_process():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "model": unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None else None,
        "step": step,
        "config": asdict(config),
        "ema": ema.shadow if ema is not None else None,
    }
    temporary = path.with_suffix(".tmp")
    torch.save(state, temporary)
    os.replace(temporary, path)
    logger.info("saved %s at step %d", path, step)


def load_checkpoint(path: str, model: nn.Module, optimizer: torch.optim.Optimizer, scaler,
                    ema: Optional[EMA] = None) -> int:
    state = torch.load(path, map_location="cpu", weights_only=False)
    unwrap(model).load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if scaler is not None and state.get("scaler") is not None:
        scaler.load_state_dict(state["scaler"])
    if ema is not None and state.get("ema") is not None:
        ema.shadow = state["ema"]
    return int(state["step"])


def latest_checkpoint(out_dir: str) -> Optional[Path]:
    candidates = sorted(Path(out_dir).glob("step_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    return candidates[-1] if candidates else None


# ---------------------------------------------------------------------------
# Losses
# ---------------------------------------------------------------------------


def classification_loss(logits: torch.Tensor, targets: torch.Tensor, smoothing: float) -> torch.Tensor:
    return F.cross_entropy(logits, targets, label_smoothing=smoothing)


def language_model_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def mixup(images: torch.Tensor, targets: torch.Tensor, num_classes: int,
          alpha: float = 0.2) -> Tuple[torch.Tensor, torch.Tensor]:
    lam = float(np.random.beta(alpha, alpha))
    order = torch.randperm(images.size(0), device=images.device)
    mixed = lam * images + (1 - lam) * images[order]
    one_hot = F.one_hot(targets, num_classes).float()
    return mixed, lam * one_hot + (1 - lam) * one_hot[order]


# ---------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------


@torch.no_grad()
def evaluate_classifier(model: nn.Module, loader: DataLoader, device: torch.device,
                        amp: bool) -> Dict[str, float]:
    model.eval()
    total_loss = torch.zeros((), device=device)
    total_top1 = torch.zeros((), device=device)
    total_top5 = torch.zeros((), device=device)
    seen = 0
    for images, targets in loader:
        images = images.to(device, non_blocking=True)
        targets = targets.to(device, non_blocking=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp):
            logits = model(images)
            loss = F.cross_entropy(logits, targets, reduction="sum")
        total_loss += loss
        total_top1 += accuracy(logits, targets, 1) * images.size(0)
        total_top5 += accuracy(logits, targets, 5) * images.size(0)
        seen += images.size(0)
    model.train()
    totals = all_reduce_mean(torch.stack([total_loss, total_top1, total_top5]) / max(seen, 1))
    loss, top1, top5 = totals.tolist()
    return {"val_loss": loss, "val_top1": top1, "val_top5": top5}


@torch.no_grad()
def evaluate_language_model(model: nn.Module, loader: DataLoader, device: torch.device, amp: bool,
                            max_batches: int = 50) -> Dict[str, float]:
    model.eval()
    losses = []
    for index, (tokens, targets) in enumerate(loader):
        if index >= max_batches:
            break
        tokens = tokens.to(device, non_blocking=True)
        targets = targets.to(device, non_blocking=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp):
            losses.append(language_model_loss(model(tokens), targets))
    model.train()
    mean = all_reduce_mean(torch.stack(losses).mean()).item() if losses else float("nan")
    return {"val_loss": mean, "val_perplexity": math.exp(min(mean, 20.0))}


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------


class Trainer:
    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.device = setup_distributed()
        seed_everything(config.seed + rank())
        self.train_loader, self.val_loader, self.sampler = build_loaders(config.data)
        model = build_model(config).to(self.device)
        logger.info("model: %s parameters", f"{count_parameters(model):,}")
        self.ema = EMA(model) if config.model.kind == "resnet" else None
        if is_distributed():
            model = DDP(model, device_ids=[self.device.index])
        if config.compile:
            model = torch.compile(model)
        self.model = model
        self.optimizer = build_optimizer(model, config.optim)
        self.scaler = torch.amp.GradScaler(enabled=config.amp and self.device.type == "cuda")
        self.log = MetricLog(config.out_dir)
        self.step = 0
        if config.resume:
            path = latest_checkpoint(config.out_dir) if config.resume == "latest" else Path(config.resume)
            if path is not None:
                self.step = load_checkpoint(str(path), self.model, self.optimizer, self.scaler, self.ema)
                logger.info("resumed from %s at step %d", path, self.step)

    def loss_of(self, batch) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        inputs, targets = batch
        inputs = inputs.to(self.device, non_blocking=True)
        targets = targets.to(self.device, non_blocking=True)
        if self.config.model.kind == "resnet":
            logits = self.model(inputs)
            loss = classification_loss(logits, targets, self.config.optim.label_smoothing)
            return loss, {"top1": accuracy(logits.detach(), targets)}
        logits = self.model(inputs)
        return language_model_loss(logits, targets), {}

    def train(self) -> Dict[str, float]:
        config = self.config
        optim = config.optim
        batches = infinite(self.train_loader, self.sampler)
        loss_meter, top1_meter = Meter(), Meter()
        started = time.perf_counter()
        self.model.train()
        final: Dict[str, float] = {}
        while self.step < optim.max_steps:
            set_lr(self.optimizer, lr_at(self.step, optim))
            self.optimizer.zero_grad(set_to_none=True)
            for micro in range(optim.accumulation):
                batch = next(batches)
                with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=config.amp):
                    loss, extra = self.loss_of(batch)
                    loss = loss / optim.accumulation
                self.scaler.scale(loss).backward()
            if optim.grad_clip > 0:
                self.scaler.unscale_(self.optimizer)
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), optim.grad_clip)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            if self.ema is not None:
                self.ema.update(unwrap(self.model))
            loss_meter.update(loss.item() * optim.accumulation)
            if "top1" in extra:
                top1_meter.update(float(extra["top1"]))
            self.step += 1
            if self.step % config.log_every == 0:
                elapsed = time.perf_counter() - started
                self.log.write(self.step, loss=loss_meter.mean, top1=top1_meter.mean,
                               lr=self.optimizer.param_groups[0]["lr"],
                               steps_per_second=config.log_every / elapsed)
                logger.info("step %d loss %.4f lr %.2e", self.step, loss_meter.mean,
                            self.optimizer.param_groups[0]["lr"])
                loss_meter, top1_meter = Meter(), Meter()
                started = time.perf_counter()
            if self.step % config.eval_every == 0:
                final = self.evaluate()
                self.log.write(self.step, **final)
            if self.step % config.save_every == 0:
                save_checkpoint(Path(config.out_dir) / f"step_{self.step}.pt", self.model, self.optimizer,
                                self.scaler, self.step, config, self.ema)
        return final

    def evaluate(self) -> Dict[str, float]:
        if self.config.model.kind == "resnet":
            return evaluate_classifier(self.model, self.val_loader, self.device, self.config.amp)
        return evaluate_language_model(self.model, self.val_loader, self.device, self.config.amp)


# ---------------------------------------------------------------------------
# A quick fine-tuning script for a pretrained classifier (kept from an older
# version of this file; still used for the ablations)
# ---------------------------------------------------------------------------


class ProbeHead(nn.Module):
    def __init__(self, features: int, classes: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(features, features, kernel_size=1)
        self.bn = nn.BatchNorm2d(features)
        self.fc = nn.Linear(features, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn(self.conv(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def finetune(backbone: nn.Module, head: nn.Module, dataset: Dataset, device: torch.device,
             epochs: int = 3, lr: float = 1e-3) -> List[float]:
    loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4)
    optimizer = torch.optim.SGD(head.parameters(), lr=lr, momentum=0.9)
    backbone.eval()
    head.train()
    history = []
    for epoch in range(epochs):
        running = 0.0
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad(set_to_none=False)
            with torch.no_grad():
                features = backbone(images)
            weights = torch.ones(labels.shape[0]).to(device)
            loss = (F.cross_entropy(head(features), labels, reduction="none") * weights).mean()
            loss.backward()
            optimizer.step()
            running += loss.item()
        history.append(running / len(loader))
        logger.info("epoch %d: loss %.4f", epoch, history[-1])
    return history


def sweep(dataset: Dataset, backbone: nn.Module, device: torch.device,
          rates: Iterable[float] = (1e-2, 3e-3, 1e-3)) -> Dict[float, float]:
    results = {}
    for lr in rates:
        head = ProbeHead(512, 10).to(device)
        results[lr] = finetune(backbone, head, dataset, device, lr=lr)[-1]
    return results


# ---------------------------------------------------------------------------
# Sampling and reporting
# ---------------------------------------------------------------------------


def sample_text(model: LanguageModel, decode: Callable[[List[int]], str], device: torch.device,
                prompt: Sequence[int], steps: int = 200) -> str:
    tokens = torch.tensor([list(prompt)], dtype=torch.long, device=device)
    out = model.generate(tokens, steps, temperature=0.8, top_k=200)
    return decode(out[0].tolist())


def summarize(log: MetricLog) -> Dict[str, Optional[float]]:
    return {
        "best_top1": log.best("val_top1"),
        "best_val_loss": log.best("val_loss", larger=False),
        "final_loss": log.history["loss"][-1][1] if log.history.get("loss") else None,
    }


def write_report(out_dir: str, config: RunConfig, summary: Dict[str, Optional[float]]) -> Path:
    path = Path(out_dir) / "report.md"
    lines = ["# Run report", "", "## Configuration", "", "```json", config.to_json(), "```", "",
             "## Results", ""]
    for key, value in summary.items():
        lines.append(f"- {key}: {'n/a' if value is None else f'{value:.4f}'}")
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: Optional[Sequence[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    config = parse_args(argv)
    Path(config.out_dir).mkdir(parents=True, exist_ok=True)
    if is_main_process():
        (Path(config.out_dir) / "config.json").write_text(config.to_json())
    trainer = Trainer(config)
    try:
        final = trainer.train()
        final.update(trainer.evaluate())
        trainer.log.write(trainer.step, **final)
        if is_main_process():
            report = write_report(config.out_dir, config, summarize(trainer.log))
            logger.info("report: %s", report)
    finally:
        cleanup_distributed()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
