"""Distributed training with gradient accumulation (launch with `torchrun`).

Two slow spots: DDP asked to search for unused parameters after every forward,
and gradients all-reduced on every micro-batch although the optimizer only
steps every `accum_steps` batches.
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main(accum_steps: int = 4, steps: int = 64) -> None:
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 10)).cuda()
    model = DDP(model, device_ids=[local_rank], find_unused_parameters=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for step in range(steps):
        inputs = torch.randn(32, 512, device="cuda")
        targets = torch.randint(0, 10, (32,), device="cuda")
        loss = nn.functional.cross_entropy(model(inputs), targets)
        (loss / accum_steps).backward()
        if (step + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
