"""Accuracy on hand-made predictions."""
import pytest
import torch

from razorlib.evaluation import Accuracy
from razorlib.models import ClsDataSample
from razorlib.registry import METRICS

# rank of the true class: 1st, 2nd, 3rd, 5th, 6th (of 6 classes)
SCORES = torch.tensor([[.50, .20, .10, .10, .05, .05],
                       [.20, .50, .10, .10, .05, .05],
                       [.40, .30, .20, .05, .04, .01],
                       [.40, .30, .15, .10, .04, .01],
                       [.40, .30, .15, .10, .04, .01]])
LABELS = [0, 0, 2, 4, 5]


def samples(as_dicts: bool):
    out = []
    for score, label in zip(SCORES, LABELS):
        sample = ClsDataSample(gt_label=label, pred_score=score)
        out.append(sample.to_dict() if as_dicts else sample)
    return out


@pytest.mark.parametrize('as_dicts', [False, True])
def test_topk_in_percent(as_dicts):
    metric = Accuracy(topk=(1, 2, 3, 5, 6))
    metric.process(None, samples(as_dicts)[:2])
    metric.process(None, samples(as_dicts)[2:])
    assert metric.compute_metrics(metric.results) == pytest.approx(
        {'top1': 20.0, 'top2': 40.0, 'top3': 60.0, 'top5': 80.0, 'top6': 100.0})


def test_evaluate_prefixes_keys_and_skips_k_above_num_classes():
    metric = METRICS.build(dict(type='Accuracy'))
    metric.process(None, [ClsDataSample(gt_label=1, pred_score=torch.tensor([.3, .7])),
                          ClsDataSample(gt_label=1, pred_score=torch.tensor([.6, .4]))])
    assert metric.evaluate(size=2) == {'accuracy/top1': 50.0}


def test_missing_fields_and_bad_topk_are_named():
    with pytest.raises(KeyError, match='pred_score and gt_label'):
        Accuracy().process(None, [ClsDataSample(gt_label=1)])
    with pytest.raises(ValueError, match='topk'):
        Accuracy(topk=0)


@pytest.mark.parametrize('topk, error, message', [
    # True passed as k=1 and was reported as 'accuracy/topTrue'
    (True, TypeError, 'Accuracy: topk must be an integer (the k of a top-k accuracy), got '
     'True (bool)'),
    ((1, 5.0), TypeError, 'Accuracy: topk must be an integer (the k of a top-k accuracy), '
     'got 5.0 (float)'),
    (1.0, TypeError, 'Accuracy: topk must be an integer (the k of a top-k accuracy), got '
     '1.0 (float)'),  # was: 'float' object is not iterable
    ('15', TypeError, "Accuracy: topk must be an integer (the k of a top-k accuracy), got "
     "'15' (str)"),  # was: '<' not supported between instances of 'str' and 'int'
    ((1, -2), ValueError, 'Accuracy: topk must be at least 1, got -2'),
    ((), ValueError, 'Accuracy: topk must give at least one k, got ()'),
])
def test_a_k_that_is_no_positive_integer_is_refused_by_name(topk, error, message):
    with pytest.raises(error) as info:
        Accuracy(topk=topk)
    assert str(info.value) == message


def test_numpy_ks_are_taken_as_ints():
    import numpy as np
    metric = Accuracy(topk=[np.int64(1), np.int64(2)])
    metric.process(None, samples(False)[:2])
    assert metric.compute_metrics(metric.results) == {'top1': 50.0, 'top2': 100.0}


def test_a_gt_label_of_several_classes_is_refused_by_name():
    # int(label) failed with 'only one element tensors can be converted to Python scalars'
    sample = ClsDataSample(gt_label=[0, 2], pred_score=torch.tensor([.5, .3, .2]))
    with pytest.raises(ValueError) as info:
        Accuracy(topk=1).process(None, [sample.to_dict()])
    assert str(info.value) == ('Accuracy scores one class per sample, but a gt_label holds 2 '
                               'entries (shape (2,)): a multi-label or one-hot target?')


def test_nll_is_the_mean_negative_log_likelihood_of_the_true_class():
    import math
    metric = Accuracy(topk=1, nll=True)
    metric.process(None, [dict(pred_score=torch.tensor([0.25, 0.75]), gt_label=1),
                          dict(pred_score=torch.tensor([1.0, 0.0]), gt_label=1)])
    result = metric.compute_metrics(metric.results)
    assert result['top1'] == 50.0
    assert result['nll'] == pytest.approx((-math.log(0.75) - math.log(1e-12)) / 2)
    assert 'nll' not in Accuracy(topk=1).compute_metrics(metric.results)


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_nll_of_half_precision_scores_is_computed_in_float32(dtype):
    """A half-precision pred_score (a model run under autocast) gave an nll in that
    precision: the floor 1e-12 is 0 in float16, so a zero probability made it inf."""
    import math
    metric = Accuracy(topk=1, nll=True)
    metric.process(None, [dict(pred_score=torch.tensor([0.25, 0.75], dtype=dtype), gt_label=1),
                          dict(pred_score=torch.tensor([1.0, 0.0], dtype=dtype), gt_label=1)])
    result = metric.compute_metrics(metric.results)
    assert result['nll'] == pytest.approx((-math.log(0.75) - math.log(1e-12)) / 2, rel=1e-6)


@pytest.mark.parametrize('label', [2, -1])
def test_a_label_outside_the_scores_is_refused(label):
    # a dataset with more classes than the head: no prediction can be right, so no score
    metric = Accuracy(topk=1)
    metric.process(None, [ClsDataSample(gt_label=label, pred_score=torch.tensor([.3, .7]))])
    with pytest.raises(ValueError, match=f'gt_label {label} is no class of the 2 scores'):
        metric.compute_metrics(metric.results)


def compute(scores, labels, **kwargs):
    metric = Accuracy(**kwargs)
    metric.process(None, [dict(pred_score=s, gt_label=label) for s, label in zip(scores, labels)])
    return metric.compute_metrics(metric.results)


def test_samples_with_a_nan_score_are_misses_with_a_warning(monkeypatch):
    import math
    logs = []
    monkeypatch.setattr('razorlib.evaluation.accuracy.print_log',
                        lambda message, **kwargs: logs.append(message))
    diverged = torch.full((10, 10), float('nan'))  # argsort ranked NaN first: 10% / 50%
    assert compute(diverged, range(10), topk=(1, 5), nll=True) == pytest.approx(
        {'top1': 0.0, 'top5': 0.0, 'nll': -math.log(1e-12)})
    assert logs == ['Accuracy: 10 of 10 samples have a NaN pred_score; they count as misses']
    scores = torch.eye(4)
    scores[1, 3] = float('nan')  # true class still scored 1.0
    scores[2, 0], scores[3, 3] = float('-inf'), float('inf')  # ranked as argmax ranks them
    assert compute(scores, range(4), topk=(1, 4)) == {'top1': 75.0, 'top4': 75.0}
    assert logs[-1].startswith('Accuracy: 1 of 4 samples')


def test_ties_go_to_the_lower_class_index_as_argmax_breaks_them():
    """The top-1 of tools/ptq.py, tools/deploy.py and the benchmarks is an argmax: the
    metric agrees with it, tie for tie (argsort ranked tied classes in no set order)."""
    collapsed = torch.full((10, 10), 0.1)
    assert compute(collapsed, range(10), topk=(1, 5, 10)) == {
        'top1': 10.0, 'top5': 50.0, 'top10': 100.0}  # classes 0 / 0-4 / all rank first
    assert (collapsed.argmax(1) == torch.arange(10)).float().mean() * 100 == 10.0
    tied = torch.tensor([[0.4, 0.4, 0.2], [0.4, 0.4, 0.2], [0.25, 0.5, 0.25]])
    assert compute(tied, [0, 1, 2], topk=(1, 2, 3)) == pytest.approx(
        {'top1': 100 / 3, 'top2': 200 / 3, 'top3': 100.0})  # 2 ranks after 1 (scores more)
    many = torch.zeros(1, 1000)
    assert compute(many, [999], topk=(1, )) == {'top1': 0.0}
    assert compute(many, [0], topk=(1, )) == {'top1': 100.0}


def test_no_samples_is_a_clear_error():
    with pytest.raises(ValueError, match='Accuracy: no samples to score'):
        Accuracy().compute_metrics([])


@pytest.mark.parametrize('scores', [
    [torch.tensor([.4, .6]), torch.tensor([.2, .4, .4])],
    [torch.tensor([[.4, .6]]), torch.tensor([[.7, .3]])]])
def test_scores_of_another_length_or_rank_are_named(scores):
    # mixed class counts failed in torch.stack, (1, C) scores in gather, naming neither
    # the metric nor pred_score
    metric = Accuracy(topk=1)
    metric.process(None, [dict(pred_score=score, gt_label=0) for score in scores])
    with pytest.raises(ValueError, match='Accuracy: every pred_score must be a 1-D'):
        metric.compute_metrics(metric.results)
