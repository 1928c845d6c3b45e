"""Precision on set U (modded-nanogpt, Deformable-DETR, SAM 2, torchtitan,
audiocraft, ControlNet, V-JEPA, hlb-CIFAR10; synthetic examples written here,
not their code): collators and dataset transforms, reads that only check and
fail, code at one step of the run, a solver loop that waits on a tensor
comparison, a whole dataset fetched in one batch, test utilities and
conversion directories.  Each with the near-miss that must still be
reported."""

from __future__ import annotations

import pytest

from tests.helpers import lint
from torchlint.rule import is_test_path


def found(code: str, select: str = "TL101", path: str = "train.py"):
    return [(d.code, d.line) for d in lint(code, select=select.split(","), path=path)]


# -- collators and dataset transforms run on the host ------------------------------------------

COLLATOR = """
import torch


class MultiModalCollator:
    def __call__(self, batch):
        positions = []
        for grid in batch["grid_thw"]:
            t, h, w = grid
            positions.append((int(t.item()), int(h.item()), int(w.item())))
        return positions
"""


def test_a_collator_reads_host_tensors():
    assert found(COLLATOR) == []


def test_the_same_class_under_another_name_is_reported():
    assert found(COLLATOR.replace("MultiModalCollator", "MultiModalHead")) == [
        ("TL101", 10), ("TL101", 10), ("TL101", 10)]


TRANSFORM = """
import torch


class RandomMosaic:
    def __call__(self, frames):
        flips = torch.rand(len(frames)) < 0.5
        out = []
        for i, frame in enumerate(frames):
            if flips[i].item():
                frame = frame.flip(-1)
            out.append(frame)
        return out
"""


def test_a_transform_under_a_dataset_directory_is_host_code():
    assert found(TRANSFORM, path="training/dataset/transforms.py") == []


def test_a_dataset_directory_module_that_names_a_device_is_judged_as_usual():
    code = TRANSFORM.replace("out.append(frame)", "out.append(frame.to('cuda'))")
    assert found(code, path="training/dataset/transforms.py") == [("TL101", 10)]
    assert found(TRANSFORM, path="training/augment/transforms.py") == [("TL101", 10)]


# -- reads that only check and fail -------------------------------------------------------------

CHECKS = """
import torch


def encode(model, batches):
    for tokens in batches:
        tokens = model(tokens.cuda())
        assert tokens.max() < 2**15, tokens.max().item()
        gathered = [tokens.sum() for _ in range(2)]
        if any(v.item() != 0 for v in gathered):
            raise RuntimeError("plans differ across ranks")
"""


def test_an_assert_message_and_a_check_that_raises_are_silent():
    assert found(CHECKS) == []


def test_the_same_reads_that_do_not_raise_are_reported():
    code = CHECKS.replace('raise RuntimeError("plans differ across ranks")', "print('differ')").replace(
        "assert tokens.max() < 2**15, tokens.max().item()", "print(tokens.max().item())")
    assert found(code) == [("TL101", 8), ("TL101", 10)]


# -- code at one step of the run ------------------------------------------------------------------

ONE_STEP = """
import torch


def maybe_apply_delta(model, step, schedule):
    for i, (apply_step, gamma) in enumerate(schedule):
        if gamma == 0.0 or step != apply_step:
            continue
        moved = torch.zeros((), device="cuda")
        for p in model.parameters():
            moved += p.detach().square().sum()
        print(f"delta applied at {step}: {moved.sqrt().item():.6f}")


def train(model, loader, schedule):
    for step, batch in enumerate(loader):
        model(batch).sum().backward()
        maybe_apply_delta(model, step, schedule)
        if step == 1000:
            print(model(batch).sum().item())
"""


def test_code_at_one_step_of_the_run_is_not_per_step():
    assert found(ONE_STEP) == []


def test_a_guard_that_lets_most_steps_through_is_per_step():
    code = ONE_STEP.replace("if gamma == 0.0 or step != apply_step:", "if gamma == 0.0 and step != apply_step:")
    code = code.replace("if step == 1000:", "if step != 1000:")
    assert found(code) == [("TL101", 12), ("TL101", 20)]


# -- a solver loop that waits on a tensor comparison ----------------------------------------------

SOLVER = """
import logging
import torch

logger = logging.getLogger(__name__)


def root_inverse(A, tolerance, max_iterations):
    identity = torch.eye(A.shape[0], device=A.device)
    M = A
    error = torch.linalg.vector_norm(M - identity, torch.inf)
    iteration = 0
    while error > tolerance and iteration < max_iterations:
        iteration += 1
        M = M @ (2 * identity - M)
        error = torch.linalg.vector_norm(M - identity, torch.inf)
        logger.debug(f"error at iteration {iteration}: {error.item()}")
    return M
"""


def test_a_loop_that_tests_a_tensor_every_iteration_already_waits():
    assert found(SOLVER) == []


def test_a_loop_bounded_by_a_host_number_is_reported():
    code = SOLVER.replace("while error > tolerance and iteration < max_iterations:",
                          "while iteration < max_iterations:")
    assert found(code) == [("TL101", 17)]


def test_a_name_bound_to_a_host_answer_is_no_tensor():
    code = SOLVER.replace("while error > tolerance and iteration < max_iterations:",
                          "while torch.cuda.device_count() > iteration:")
    assert found(code) == [("TL101", 17)]


# -- a whole dataset fetched in one batch -----------------------------------------------------------

ONE_BATCH = """
import torch
import torchvision

cifar10 = torchvision.datasets.CIFAR10("cifar10/", train=True)
loader = torch.utils.data.DataLoader(cifar10, batch_size=len(cifar10), num_workers=2)
images, targets = [item.to("cuda", non_blocking=True) for item in next(iter(loader))]
for step in range(1000):
    model(images).sum().backward()
"""


def test_a_loader_fetched_once_in_a_comprehension_is_silent():
    assert found(ONE_BATCH, "TL202,TL203") == []


def test_a_loader_read_in_the_comprehensions_body_is_reported():
    code = ONE_BATCH.replace("for item in next(iter(loader))]", "for item in range(2) if next(iter(loader))]")
    assert found(code, "TL202,TL203") == [("TL202", 6)]


# -- test utilities and conversion directories -------------------------------------------------------

@pytest.mark.parametrize(
    "path, test",
    [
        ("distributor/gpu_tests/distributor_test_utils.py", True),
        ("pkg/unit_tests/helpers.py", True),
        ("pkg/distributor_test_utils.py", True),
        ("pkg/latest/model.py", False),
        ("tools/test.py", False),
        ("pkg/contests/model.py", False),
        ("torchrec/distributed/test_utils/infer_utils.py", True),
        ("allennlp/common/testing/model_test_case.py", True),
        ("pkg/testing_data/model.py", False),
        ("pkg/attesting/model.py", False),
    ],
)
def test_test_paths(path, test):
    assert is_test_path(path) is test


def test_a_checkpoint_conversion_directory_runs_once():
    code = "import torch\nfor x in batches:\n    print(model(x.cuda()).sum().item())\n"
    assert found(code, path="scripts/checkpoint_conversion/numerical_check.py") == []
    assert found(code, path="scripts/training/numerical_check.py") == [("TL101", 3)]


# -- set V (OpenNMT-py, moco-v3, x-transformers, qlora, LTSF-Linear, benchmarking-gnns,
# stable-dreamfusion, efficientdet-pytorch): a periodic helper, a random slice of an in-memory
# corpus, boolean-mask indexing that waits every iteration ---------------------------------------

PERIODIC = """
import torch


def divisible_by(num, den):
    return (num % den) == 0


def train(model, train_loader, val_loader, optimizer, steps, validate_every):
    for i in range(steps):
        loss = model(next(train_loader).cuda())
        loss.backward()
        optimizer.step()
        if divisible_by(i, validate_every):
            with torch.no_grad():
                print(f"validation loss: {model(next(val_loader).cuda()).item()}")
"""


def test_a_helper_named_divisible_by_is_a_periodic_guard():
    assert found(PERIODIC) == []


def test_another_helper_is_not():
    assert found(PERIODIC.replace("if divisible_by(i, validate_every):", "if should_validate(i):")) == [
        ("TL101", 16)]


CORPUS = """
import torch
from torch.utils.data import DataLoader, Dataset


class TextSamplerDataset(Dataset):
    def __init__(self, data, seq_len):
        self.data, self.seq_len = data, seq_len

    def __getitem__(self, index):
        start = torch.randint(0, self.data.size(0) - self.seq_len - 1, (1,)).item()
        return self.data[start: start + self.seq_len + 1].long()

    def __len__(self):
        return self.data.size(0) // self.seq_len


loader = DataLoader(TextSamplerDataset(data_train, 1024), batch_size=4)
for batch in loader:
    model(batch.cuda()).backward()
"""


def test_a_random_slice_of_an_in_memory_corpus_needs_no_workers():
    assert found(CORPUS, "TL203") == []


def test_a_dataset_that_reads_files_is_reported():
    code = CORPUS.replace("return self.data[start: start + self.seq_len + 1].long()",
                          "return torch.load(self.files[start])")
    assert found(code, "TL203") == [("TL203", 18)]


MASKED = """
import torch


def evaluate(model, loader, ignore_index):
    loss_total = 0.0
    for batch in loader:
        logits, loss = model(batch["input_ids"].cuda(non_blocking=True))
        labels = batch["labels"].cuda()
        labels = labels[labels != ignore_index]
        loss_total += loss.item()
    return loss_total
"""


def test_boolean_mask_indexing_already_waits_every_iteration():
    assert found(MASKED) == []


def test_a_masked_fill_is_no_wait():
    code = MASKED.replace("labels = labels[labels != ignore_index]", "labels[labels == ignore_index] = 0")
    assert found(code) == [("TL101", 11)]


# -- sets W and X: a FLOPs counter's one forward; a logger given a dict of host values --------

FLOPS = """
import torch


def get_model_flops(model, input_res):
    model.eval()
    batch = torch.ones(()).new_empty((1, *input_res))
    flops_model = add_flops_counting_methods(model)
    flops_model(batch)
    return flops_model.compute_average_flops_cost()
"""


def test_a_flops_counter_is_one_forward():
    assert found(FLOPS, "TL302") == []


def test_an_evaluation_that_runs_the_model_is_reported():
    code = FLOPS.replace("get_model_flops", "evaluate_model")
    assert found(code, "TL302") == [("TL302", 5)]


PROGRESS = """
import torch
from tqdm import tqdm


def evaluate(model, dataloader, is_main_process):
    progress_bar = tqdm if is_main_process() else iter
    results = []
    for imgs, _, info_imgs, ids in progress_bar(dataloader):
        frame_id = info_imgs[2].item()
        results.append((frame_id, model(imgs.cuda())))
    return results
"""


def test_a_progress_bar_chosen_at_run_time_yields_the_loaders_batches():
    assert found(PROGRESS) == []


def test_another_wrapper_is_not_assumed_to():
    assert found(PROGRESS.replace("tqdm if is_main_process() else iter", "make_prefetcher")) == [("TL101", 10)]
