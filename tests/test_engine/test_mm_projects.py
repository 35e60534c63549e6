"""razorlib from another OpenMMLab project (docs/mm_projects.md): the documented mmpretrain
config trains, validates and searches where mmpretrain imports; razorlib's data samples
take mmpretrain's DataSample API.  (tests/test_tools/test_search_tool.py runs the same
pattern everywhere, with tests/data/extproj standing in for mmpretrain.)"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from optional_deps import mmpretrain_or_skip
from razorlib.datasets import DigitsDataset
from razorlib.evaluation import Accuracy
from razorlib.models.data_sample import ClsDataSample

REPO = Path(__file__).parents[2]
CONFIG = REPO / 'configs' / 'pruning' / 'autoslim' / 'autoslim_mmpretrain_resnet18_digits.py'
DOC = REPO / 'docs' / 'mm_projects.md'


def test_the_doc_shows_the_tested_config_as_it_is():
    blocks = re.findall(r'```python\n(.*?)```', DOC.read_text(), re.S)
    assert CONFIG.read_text() in blocks


def test_razorlib_samples_take_what_an_mmpretrain_head_sets():
    """What mmpretrain's ``ClsHead._get_predictions`` does to the data samples of the
    batch, on razorlib's digits; then a metric reads them as mmpretrain's Accuracy does
    (``'pred_score' in sample``, ``sample['gt_label']`` of the dict)."""
    samples = [DigitsDataset('val')[i]['data_samples'] for i in range(4)]
    scores = F.softmax(torch.randn(4, 10), dim=1)
    labels = scores.argmax(dim=1, keepdim=True)
    outputs = [s.set_pred_score(score).set_pred_label(label)
               for s, score, label in zip(samples, scores, labels)]
    assert all(out is sample for out, sample in zip(outputs, samples))
    as_dicts = [sample.to_dict() for sample in samples]
    assert all('pred_score' in d and d['num_classes'] == 10 for d in as_dicts)
    assert torch.equal(torch.stack([d['pred_score'] for d in as_dicts]), scores)
    assert 'gt_score' not in samples[0]  # mmpretrain's loss then takes gt_label
    metric = Accuracy(topk=(1, ))
    metric.process(None, as_dicts)
    expected = 100.0 * float((labels.flatten() == torch.cat(
        [d['gt_label'] for d in as_dicts])).float().mean())
    assert metric.compute_metrics(metric.results)['top1'] == pytest.approx(expected)


def test_scores_of_another_length_than_num_classes_are_refused():
    sample = ClsDataSample(gt_label=1).set_gt_score([0.5, 0.5])
    with pytest.raises(ValueError, match='3 class scores, but num_classes is 2'):
        sample.set_pred_score([0.2, 0.3, 0.5])


@pytest.mark.slow  # about 3 minutes: an epoch of ResNet-18 and a short search
def test_the_mmpretrain_example_trains_validates_and_searches(tmp_path):
    mmpretrain_or_skip()
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS='1')

    def tool(name, *args):
        result = subprocess.run([sys.executable, str(REPO / 'tools' / f'{name}.py'), *args],
                                cwd=REPO, env=env, capture_output=True, text=True,
                                timeout=900)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    tool('train', str(CONFIG), '--work-dir', str(tmp_path / 'train'), '--cfg-options',
         'train_cfg.max_epochs=1', 'train_cfg.val_interval=1',
         'default_hooks.checkpoint.interval=1', 'param_scheduler.0.T_max=1',
         'param_scheduler.0.end=1')
    assert (tmp_path / 'train' / 'subnet_final.yaml').is_file()
    # one greedy step or two: a target just under the widest subnet, scored on one batch
    tool('search', str(CONFIG), str(tmp_path / 'train' / 'epoch_1.pth'), '--work-dir',
         str(tmp_path / 'search'), '--cfg-options', 'search_cfg.target_flops=[30e6]',
         'search_cfg.recalib_batches=1', 'search_cfg.val_batches=1')
    results = json.loads((tmp_path / 'search' / 'search_results.json').read_text())
    assert results['chosen']['subnet_flops30000000']['flops'] <= 30e6
