"""Precision on projects never seen before (set HHH: 2D Gaussian splatting,
DirectVoxGO, TensoRF, DiffDock, wanda, Medusa...; docs/precision.md).
Synthetic examples written for these tests, each with the near-miss that
must still be reported."""

from __future__ import annotations

from tests.helpers import codes, lint

# -- a loop that reads CUDA event timings every iteration waits for the device anyway --

SPLAT_TRAIN = """\
import torch


def training(gaussians, scene, render, opt, tb_writer):
    iter_start = torch.cuda.Event(enable_timing=True)
    iter_end = torch.cuda.Event(enable_timing=True)
    ema_loss = 0.0
    for iteration in range(1, opt.iterations + 1):
        iter_start.record()
        image = render(scene.camera(), gaussians)
        loss = (image - scene.target()).abs().mean()
        loss.backward()
        iter_end.record()
        with torch.no_grad():
            ema_loss = 0.4 * loss.item() + 0.6 * ema_loss
            tb_writer.add_scalar("iter_time", iter_start.elapsed_time(iter_end), iteration)
            gaussians.optimizer.step()
            gaussians.optimizer.zero_grad(set_to_none=True)
"""


def test_an_item_read_where_the_loop_reads_event_timings_every_iteration():
    # `elapsed_time` raises unless `iter_end` has completed: the loop waits anyway
    assert codes(lint(SPLAT_TRAIN, select=["TL101"])) == []


def test_event_timings_read_every_hundred_iterations_do_not_make_the_loop_wait():
    periodic = SPLAT_TRAIN.replace(
        '            tb_writer.add_scalar("iter_time", iter_start.elapsed_time(iter_end), iteration)\n',
        '            if iteration % 100 == 0:\n'
        '                tb_writer.add_scalar("iter_time", iter_start.elapsed_time(iter_end), iteration)\n')
    assert codes(lint(periodic, select=["TL101"])) == ["TL101"]


# -- a guard that holds only at the steps a list names --------------------------------

VOXEL_TRAIN = """\
import torch


def scene_rep_reconstruction(model, cfg_train, optimizer, sample):
    for global_step in range(cfg_train.N_iters):
        if global_step in cfg_train.pg_scale:
            model.scale_volume_grid(2 * model.num_voxels)
            torch.cuda.empty_cache()
        loss = model(sample()).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
"""


def test_empty_cache_at_the_few_steps_a_list_names():
    assert codes(lint(VOXEL_TRAIN, select=["TL702"])) == []


def test_a_span_of_steps_is_not_a_step_list():
    span = VOXEL_TRAIN.replace("if global_step in cfg_train.pg_scale:", "if global_step in range(10, cfg_train.N_iters):")
    assert codes(lint(span, select=["TL702"])) == ["TL702"]


def test_a_filter_over_names_is_not_a_step_list():
    # `name in frozen` holds for any number of iterations: not a rare step
    every = VOXEL_TRAIN.replace("if global_step in cfg_train.pg_scale:", "if cfg_train.name in cfg_train.pg_scale:")
    assert codes(lint(every, select=["TL702"])) == ["TL702"]


# -- a Gaussian-splatting program: the rasterizer's own kernels set the pace ------------

SPLAT_PROGRAM = """\
import torch
from diff_surfel_rasterization import GaussianRasterizer


def train(gaussians, cameras, optimizer):
    for camera in cameras:
        image = GaussianRasterizer(camera)(gaussians.cuda())
        loss = (image - camera.image.cuda()).abs().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


if __name__ == "__main__":
    train(None, [], None)
"""


def test_no_autocast_or_compile_advice_for_a_gaussian_splatting_program():
    assert codes(lint(SPLAT_PROGRAM, select=["TL504", "TL505"])) == []


def test_the_same_program_without_the_rasterizer_is_advised():
    plain = SPLAT_PROGRAM.replace("from diff_surfel_rasterization import GaussianRasterizer",
                                  "from renderer import GaussianRasterizer")
    assert codes(lint(plain, select=["TL504", "TL505"])) == ["TL504", "TL505"]


# -- arithmetic with a host copy of a tensor stays on the host ------------------------

RENDER_EVAL = """\
import numpy as np
import torch


@torch.no_grad()
def evaluation(test_dataset, renderer):
    psnrs = []
    for idx, rays in enumerate(test_dataset.all_rays):
        rgb_map, depth_map = renderer(rays.cuda())
        rgb_map, depth_map = rgb_map.reshape(8, 8, 3).cpu(), depth_map.reshape(8, 8).cpu()
        gt_rgb = test_dataset.all_rgbs[idx].view(8, 8, 3)
        loss = torch.mean((rgb_map - gt_rgb) ** 2)
        psnrs.append(-10.0 * np.log(loss.item()) / np.log(10.0))
    return psnrs
"""


def test_item_of_a_loss_computed_from_a_host_copy():
    assert codes(lint(RENDER_EVAL, select=["TL101"])) == []


def test_item_of_a_loss_computed_from_a_reduced_host_copy_is_reported():
    # a 0-dim CPU tensor combines with a device tensor: the loss may be on the device
    reduced = RENDER_EVAL.replace("(rgb_map - gt_rgb)", "(rgb_map.sum().cpu() - gt_rgb.cuda())")
    assert codes(lint(reduced, select=["TL101"])) == ["TL101"]


# -- a loop that runs a whole sampler per iteration ---------------------------------

DOCKING_EVAL = """\
import copy

import numpy as np
import torch
from torch_geometric.loader import DataLoader


def inference_epoch(model, complex_graphs, device, args, sampling):
    loader = DataLoader(complex_graphs, batch_size=1)
    rmsds = []
    for orig_complex_graph in loader:
        data_list = [copy.deepcopy(orig_complex_graph) for _ in range(args.inference_samples)]
        predictions_list = None
        while predictions_list is None:
            try:
                predictions_list, confidences = sampling(data_list=data_list, model=model, device=device,
                                                         inference_steps=args.inference_steps)
            except Exception as e:
                print(e)
        ligand_pos = np.asarray([g["ligand"].pos.cpu().numpy() for g in predictions_list])
        orig = orig_complex_graph["ligand"].orig_pos - orig_complex_graph.original_center.cpu().numpy()
        rmsds.append(np.sqrt(((ligand_pos - orig) ** 2).sum(axis=2).mean(axis=1)))
    return rmsds
"""


def test_host_copies_per_complex_next_to_a_whole_reverse_diffusion():
    assert codes(lint(DOCKING_EVAL, select=["TL102"])) == []


def test_the_same_copies_in_a_loop_that_samples_only_sometimes_are_reported():
    # (over batches of unknown placement: a PyG `DataLoader`'s batches are host
    # memory, where `orig_complex_graph.original_center.cpu()` copies nothing)
    sometimes = DOCKING_EVAL.replace("        while predictions_list is None:\n",
                                     "        while predictions_list is None and args.sample:\n").replace(
        "DataLoader(complex_graphs, batch_size=1)", "model.batches(complex_graphs)")
    assert "TL102" in codes(lint(sometimes, select=["TL102"]))


def test_a_box_sampler_is_no_diffusion_sampler():
    # mmdet's `bbox_sampler.sample(...)` picks boxes: a step's work, not a whole reverse diffusion
    head = (
        "import torch\n\n\nclass DynamicRoIHead(torch.nn.Module):\n"
        "    def forward_train(self, x, proposal_list, gt_bboxes, gt_labels):\n"
        "        cur_iou = []\n"
        "        for i in range(len(proposal_list)):\n"
        "            assign_result = self.bbox_assigner.assign(proposal_list[i], gt_bboxes[i], gt_labels[i])\n"
        "            sampling_result = self.bbox_sampler.sample(assign_result, proposal_list[i], gt_bboxes[i])\n"
        "            ious, _ = torch.topk(assign_result.max_overlaps, 5)\n"
        "            cur_iou.append(ious[-1].item())\n"
        "        return cur_iou\n"
    )
    assert codes(lint(head, select=["TL101"])) == ["TL101"]
    ddim = head.replace("self.bbox_sampler.sample(assign_result, proposal_list[i], gt_bboxes[i])",
                        "self.ddim_sampler.sample(S=50, conditioning=assign_result)")
    assert ddim != head
    assert codes(lint(ddim, select=["TL101"])) == []
