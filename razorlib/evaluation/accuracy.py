"""Accuracy: top-k classification accuracy as an mmengine metric."""
import logging
import numbers
from typing import Any, Dict, List, Optional, Sequence, Union

import torch
from mmengine.evaluator import BaseMetric
from mmengine.logging import print_log

from ..registry import METRICS
from ..utils.checks import integer_number


@METRICS.register_module()
class Accuracy(BaseMetric):
    """Top-k accuracy, in percent, from each sample's ``pred_score`` and ``gt_label``.

    Samples may be :class:`~razorlib.models.ClsDataSample` or the dicts that mmengine's
    ``Evaluator`` turns them into.  A ``k`` larger than the number of classes is left out
    of the results (with one log line), so the default ``topk=(1, 5)`` also suits
    two-class tasks.

    Ties go to the lower class index, as ``argmax`` breaks them (the top-1 of
    ``tools/ptq.py``, ``tools/deploy.py`` and the benchmarks): a sample is a top-``k`` hit
    when fewer than ``k`` classes rank before its true class, a class ranking before it
    when it scores higher, or as high with a lower index (an infinite score ranks as
    ``argmax`` ranks it).  A sample with a NaN score (a diverged model) is a miss for
    every ``k`` and counts as probability 0 for ``nll``, with a warning giving their
    number: a diverged subnet then scores last in a search instead of stopping it (a NaN
    would otherwise rank first).

    Args:
        topk: the ``k`` of each accuracy reported as ``'accuracy/top{k}'``.
        nll: also report ``'accuracy/nll'``, the mean negative log-likelihood of the true
            class (``pred_score`` being softmax probabilities): a continuous score that
            still separates two models whose top-1 ties on a small validation set.
        collect_device: ``'cpu'`` or ``'gpu'``, for gathering results across ranks.
        prefix: the prefix of the result keys; default ``'accuracy'``.

    Example:
        >>> metric = Accuracy(topk=(1, 2))
        >>> metric.process(None, [
        ...     dict(pred_score=torch.tensor([0.7, 0.2, 0.1]), gt_label=torch.tensor([0])),
        ...     dict(pred_score=torch.tensor([0.5, 0.3, 0.2]), gt_label=torch.tensor([1]))])
        >>> metric.compute_metrics(metric.results)
        {'top1': 50.0, 'top2': 100.0}
        >>> metric = Accuracy(topk=1, nll=True)
        >>> metric.process(None, [dict(pred_score=torch.tensor([0.6, 0.4]),
        ...                            gt_label=torch.tensor([0]))])
        >>> metric.compute_metrics(metric.results)
        {'top1': 100.0, 'nll': 0.5108...}
    """
    default_prefix = 'accuracy'

    def __init__(self, topk: Union[int, Sequence[int]] = (1, 5), nll: bool = False,
                 collect_device: str = 'cpu', prefix: Optional[str] = None):
        # each k checked: True passed as k=1 reported as 'topTrue', 1.0 and '1' failed
        # in a bare iteration or comparison
        ks = (topk, ) if isinstance(topk, (numbers.Number, str, type(None))) else tuple(topk)
        if not ks:
            raise ValueError(f'Accuracy: topk must give at least one k, got {topk!r}')
        self.topk = tuple(integer_number(k, 'Accuracy: topk', 'the k of a top-k accuracy',
                                         minimum=1) for k in ks)
        super().__init__(collect_device=collect_device, prefix=prefix)
        self.nll = nll

    def process(self, data_batch: Any, data_samples: Sequence[Any]) -> None:
        """Keep the scores and label of every sample of a batch.

        Args:
            data_batch: the batch from the dataloader (unused).
            data_samples: the model's predictions, one per image.
        """
        for sample in data_samples:
            score, label = sample.get('pred_score'), sample.get('gt_label')
            if score is None or label is None:
                raise KeyError('Accuracy needs pred_score and gt_label in every data sample')
            label = torch.as_tensor(label)
            if label.numel() != 1:
                raise ValueError(f'Accuracy scores one class per sample, but a gt_label holds '
                                 f'{label.numel()} entries (shape {tuple(label.shape)}): a '
                                 'multi-label or one-hot target?')
            self.results.append((torch.as_tensor(score).detach().cpu(), int(label)))

    def compute_metrics(self, results: List[tuple]) -> Dict[str, float]:
        """Top-k accuracies in percent over all the kept samples (see the class for ties
        and NaN scores).

        Args:
            results: the ``(pred_score, gt_label)`` pairs kept by :meth:`process`.
        """
        if not results:
            raise ValueError('Accuracy: no samples to score: process() was given no data '
                             'samples (an empty val/test dataloader?)')
        shapes = sorted({tuple(score.shape) for score, _ in results})
        if len(shapes) > 1 or len(shapes[0]) != 1:
            # torch.stack (mixed lengths) or gather ((1, C) scores) would fail naming
            # neither the metric nor pred_score
            raise ValueError(f'Accuracy: every pred_score must be a 1-D tensor of one score '
                             f'per class, of one length; got shapes {shapes[:5]}')
        scores = torch.stack([score for score, _ in results])
        # at least float32 (exact for half-precision scores, so no rank changes): in
        # float16 nll's floor of 1e-12 is 0, and a zero probability made it inf
        scores = scores.to(torch.promote_types(scores.dtype, torch.float32))
        labels = torch.tensor([label for _, label in results])
        num_classes = scores.shape[1]
        outside = labels[(labels < 0) | (labels >= num_classes)]
        if len(outside):
            raise ValueError(f'Accuracy: gt_label {int(outside[0])} is no class of the '
                             f'{num_classes} scores (0 to {num_classes - 1}): the dataset\'s '
                             f'classes and the head\'s num_classes disagree')
        skipped = [k for k in self.topk if k > num_classes]
        if skipped:
            print_log(f'Accuracy: top-k for k in {skipped} skipped, there are only '
                      f'{num_classes} classes', logger='current')
        finite = ~scores.isnan().any(dim=1)
        if not finite.all():
            print_log(f'Accuracy: {int((~finite).sum())} of {len(labels)} samples have a NaN '
                      'pred_score; they count as misses', logger='current',
                      level=logging.WARNING)
        true = scores.gather(1, labels[:, None])
        lower = torch.arange(num_classes)[None, :] < labels[:, None]
        before = ((scores > true) | (scores == true) & lower).sum(dim=1)  # argmax's order
        metrics = {f'top{k}': 100 * (finite & (before < k)).sum().item() / len(labels)
                   for k in self.topk if k <= num_classes}
        if self.nll:
            probability = true.squeeze(1).where(finite, torch.zeros(()))
            metrics['nll'] = -probability.clamp_min(1e-12).log().mean().item()
        return metrics
