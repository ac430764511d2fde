"""Sharded loading under torch.distributed: train, resume at another world size, evaluate exactly.

Run on the CPU (gloo) or on GPUs (nccl, one per process), from the repository root::

    # train 5 steps on 4 ranks, save the loader's state, stop
    torchrun --nproc_per_node=4 docs/examples/distributed_torch.py --steps 5 --save /tmp/lt.pt
    # finish the epoch on 2 ranks: each remaining sample exactly once, then evaluate
    torchrun --nproc_per_node=2 docs/examples/distributed_torch.py --resume /tmp/lt.pt

The Loader takes rank and world size from the process group; nothing here
passes them. Evaluation uses the padding mask so that the mean over the sharded
evaluation set counts every sample exactly once.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from looptoolkit import Loader
N, FEATURES, BATCH = 1001, 16, 32  # 1001: the evaluation pads at any world size > 1


def make_data() -> dict[str, torch.Tensor]:
    """A synthetic regression set, the same on every rank."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, FEATURES, generator=g)
    return {"x": x, "y": x @ torch.linspace(-1, 1, FEATURES) + 0.1, "idx": torch.arange(N)}


def main() -> None:
    """Train (optionally stop and save, or resume), then evaluate exactly."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="stop after this many steps")
    parser.add_argument("--save", default=None, help="write loader and model state here")
    parser.add_argument("--resume", default=None, help="resume from a state written by --save")
    args = parser.parse_args()

    # One GPU per process where there is one for every process here, else the CPU (gloo).
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    cuda = torch.cuda.is_available() and torch.cuda.device_count() >= local_world
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank) if cuda else None
    if device is not None:
        torch.cuda.set_device(device)

    data = make_data()
    model = DistributedDataParallel(nn.Linear(FEATURES, 1).to(device or "cpu"))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    # Per-rank batch size; rank and world size come from the process group.
    loader = Loader(data, BATCH, shuffle=True, seed=0, device=device)
    if args.resume:
        state = torch.load(args.resume, weights_only=False)
        loader.load_state_dict(state["loader"])
        model.module.load_state_dict(state["model"])

    seen, saved = 0, None
    for step, batch in enumerate(loader):
        loss = nn.functional.mse_loss(model(batch["x"]).squeeze(1), batch["y"])
        opt.zero_grad()
        loss.backward()  # DDP all-reduces the gradients: every rank must take this step
        opt.step()
        seen += len(batch["idx"])
        if args.steps is not None and step + 1 == args.steps:
            # Inside the loop: the position in the running epoch. After a `break`
            # the Loader is back at the start of this epoch (its next pass runs it again).
            saved = loader.state_dict()
            break
    print(f"rank {rank}/{world}: {step + 1} steps, {seen} rows, last loss {loss.item():.4f}")
    if saved is None:  # the whole epoch ran: the state points at the next one
        saved = loader.state_dict()

    if args.save:
        if rank == 0:
            torch.save(
                {"loader": saved, "model": model.module.state_dict()}, args.save
            )
        dist.barrier()
        dist.destroy_process_group()
        return

    # Exact evaluation: padded rows (repeats that give every rank equal batches) are masked.
    evaluate = Loader(data, 64, shuffle=False, device=device, return_mask=True)
    totals = torch.zeros(2, dtype=torch.float64, device=device)
    with torch.no_grad():
        for batch, mask in evaluate:
            mask = torch.as_tensor(mask, device=batch["x"].device)
            err = (model(batch["x"]).squeeze(1) - batch["y"]) ** 2
            totals += torch.stack([err[mask].sum().double(), mask.sum().double()])
    dist.all_reduce(totals)
    if rank == 0:
        print(f"eval over {int(totals[1])} of {N} samples: mse {totals[0] / totals[1]:.4f}")
    dist.barrier()  # no rank tears gloo down while another still talks to it
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
