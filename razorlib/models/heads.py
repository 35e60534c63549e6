"""Classification heads: logits, the training loss, and predictions as data samples."""
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..registry import MODELS
from .data_sample import ClsDataSample


@MODELS.register_module()
class LinearClsHead(nn.Module):
    """Dropout (optional) and one linear layer, trained with cross-entropy.

    Args:
        num_classes: number of classes.
        in_channels: length of the feature vector; :class:`ImageClassifier` fills it in
            from its backbone when left out of a config.
        dropout: dropout probability before the linear layer; 0 for none.
        label_smoothing: label smoothing of the cross-entropy loss, in [0, 1).

    Example:
        >>> head = LinearClsHead(num_classes=3, in_channels=8)
        >>> feats = torch.randn(2, 8)
        >>> head(feats).shape
        torch.Size([2, 3])
        >>> samples = [ClsDataSample(gt_label=0), ClsDataSample(gt_label=2)]
        >>> sorted(head.loss(feats, samples))
        ['loss']
        >>> head.predict(feats)[0].pred_score.shape
        torch.Size([3])
    """

    def __init__(self, num_classes: int, in_channels: int, dropout: float = 0.0,
                 label_smoothing: float = 0.0):
        super().__init__()
        if num_classes < 1:
            raise ValueError(f'num_classes must be positive, got {num_classes}')
        self.num_classes = num_classes
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.fc = nn.Linear(in_channels, num_classes)
        self.loss_fn = nn.CrossEntropyLoss(label_smoothing=label_smoothing)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(feats))

    def loss(self, feats: torch.Tensor,
             data_samples: Sequence[ClsDataSample]) -> Dict[str, torch.Tensor]:
        """The cross-entropy of the logits against the samples' ``gt_label``.

        Args:
            feats: NC feature vectors.
            data_samples: one data sample with ``gt_label`` per row of ``feats``.

        Raises:
            ValueError: naming the first sample without exactly one ``gt_label`` (a sample
                of soft targets, ``gt_score``, only; a multi-label one): it failed as a
                bare ``AttributeError`` or a batch-size mismatch.
        """
        for index, sample in enumerate(data_samples):
            count = len(sample.gt_label) if 'gt_label' in sample else 0
            if count != 1:
                has = f'{count} class indices in gt_label' if count else 'no gt_label' + (
                    ' (only gt_score, soft targets)' if 'gt_score' in sample else '')
                raise ValueError(f'{type(self).__name__}.loss: data sample {index} has {has}; '
                                 'the loss is the cross-entropy against one class index per '
                                 'image')
        labels = torch.cat([sample.gt_label for sample in data_samples]).to(feats.device)
        return dict(loss=self.loss_fn(self(feats), labels))

    def predict(self, feats: torch.Tensor,
                data_samples: Optional[Sequence[ClsDataSample]] = None
                ) -> List[ClsDataSample]:
        """Softmax scores and arg-max labels, written into the given data samples (so
        their ``gt_label`` and metainfo stay) or into new ones.

        Args:
            feats: NC feature vectors.
            data_samples: one data sample per row of ``feats``, or ``None``.
        """
        scores = F.softmax(self(feats), dim=1).detach()
        if data_samples is None:
            data_samples = [ClsDataSample() for _ in range(len(scores))]
        elif len(data_samples) != len(scores):
            raise ValueError(f'{len(data_samples)} data samples for {len(scores)} images')
        for sample, score in zip(data_samples, scores):
            sample.pred_score = score
            sample.pred_label = score.argmax(dim=0)
        return list(data_samples)
