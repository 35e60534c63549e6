"""Heads whose loss is configured as mmpretrain's are, for the tests of the algorithms
that take the wrapped model's own label loss (SingleTeacherDistill, QAT): mmpretrain
itself is not installed."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class SmoothedCrossEntropy(nn.Module):
    """A loss module as mmpretrain's ``LabelSmoothLoss``: ``loss_weight`` times the
    cross-entropy against labels smoothed by ``label_smooth_val`` (or soft labels),
    summed over the samples and divided by ``avg_factor``."""

    def __init__(self, label_smooth_val: float, loss_weight: float = 1.0):
        super().__init__()
        self.label_smooth_val, self.loss_weight = label_smooth_val, loss_weight

    def forward(self, cls_score, label, avg_factor=None):
        loss = F.cross_entropy(cls_score, label, label_smoothing=self.label_smooth_val,
                               reduction='sum')
        return self.loss_weight * loss / (avg_factor or len(cls_score))


class PretrainStyleHead(nn.Module):
    """A head as mmpretrain's ``LinearClsHead``: its loss in ``loss_module``, and
    ``loss(feats, data_samples)`` against the samples' ``gt_score`` (mixed soft labels,
    as mmpretrain's Mixup and CutMix leave) where they have one, else their ``gt_label``."""

    def __init__(self, loss_module: nn.Module, in_channels: int = 8, num_classes: int = 10):
        super().__init__()
        self.fc = nn.Linear(in_channels, num_classes)
        self.loss_module = loss_module

    def forward(self, feats):
        return self.fc(feats)

    def loss(self, feats, data_samples):
        cls_score = self(feats)
        if 'gt_score' in data_samples[0]:
            target = torch.stack([s.gt_score for s in data_samples])
        else:
            target = torch.cat([s.gt_label for s in data_samples])
        return dict(loss=self.loss_module(cls_score, target, avg_factor=cls_score.size(0)))
