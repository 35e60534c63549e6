"""SubnetValLoop scores each sample once: not the padding DefaultSampler adds on CPU (gloo,
2 processes), nor fewer than it validated when its batches are not dicts."""
import json
from datetime import timedelta
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from mmengine.dataset import DefaultSampler, pseudo_collate
from mmengine.evaluator import Evaluator
from torch import nn
from torch.utils.data import DataLoader

from razorlib.engine.loops import SubnetValLoop
from razorlib.evaluation import Accuracy

WORLD_SIZE = 2
LENGTH = 5  # odd: each rank gets 3 samples, rank 1's last one a repeat of sample 0


class FirstRight(nn.Module):
    """Right on sample 0 only (every label is 0, and only sample 0 scores class 0 higher):
    top-1 is the share of sample 0 among the samples scored."""

    def val_step(self, data) -> list:
        indices = data['inputs'] if isinstance(data, dict) else data[0].tolist()
        return [dict(pred_score=torch.tensor([1.0, 0.0] if index == 0 else [0.0, 1.0]),
                     gt_label=0) for index in indices]


def first_right_loop(loader: DataLoader) -> SubnetValLoop:
    runner = SimpleNamespace(model=FirstRight(), hooks=[], call_hook=lambda *args, **kwargs: None)
    return SubnetValLoop(runner, loader, Evaluator(Accuracy(topk=1)), subnet=None,
                         recalib_batches=0, calib_dataloader=loader)


def ddp_worker(rank: int, store: str, result: str) -> None:
    # A file store, not a TCP port: nothing to collide with on a shared machine.
    dist.init_process_group('gloo', init_method=f'file://{store}', rank=rank,
                            world_size=WORLD_SIZE, timeout=timedelta(seconds=120))
    try:
        loader = DataLoader([dict(inputs=index) for index in range(LENGTH)], batch_size=2,
                            sampler=DefaultSampler(range(LENGTH), shuffle=False),
                            collate_fn=pseudo_collate)
        loop = first_right_loop(loader)
        top1 = {str(max_batches): loop.validate(None, max_batches)['accuracy/top1']
                for max_batches in (None, 1, 2, 3)}
        if rank == 0:
            with open(result, 'w') as file:
                json.dump(top1, file)
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # a multi-process run
def test_padded_duplicates_are_left_out_of_the_score(tmp_path):
    result = tmp_path / 'top1.json'
    mp.spawn(ddp_worker, args=(str(tmp_path / 'store'), str(result)), nprocs=WORLD_SIZE)
    # ranks hold [0, 2, 4] and [1, 3, 0], in batches of 2: one batch is samples 0-3
    # (sample 0 right of 4), two batches or more are all 5 once (1 of 5), not 0 twice
    # (2 of 6, 33.3)
    assert json.loads(result.read_text()) == {'None': 20.0, '1': 25.0, '2': 20.0, '3': 20.0}


def test_a_batch_of_fields_is_scored_on_all_its_samples():
    # default_collate of (input, label) pairs: a batch is [inputs, labels], two fields
    # of 4 samples each; max_batches=2 validates all 8 samples, sample 0 right of them
    loader = DataLoader([(index, 0) for index in range(8)], batch_size=4)
    assert first_right_loop(loader).validate(None, max_batches=2) == {'accuracy/top1': 12.5}
