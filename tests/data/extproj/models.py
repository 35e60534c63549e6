"""extproj's classifiers: mmengine BaseModels that know nothing about razorlib.

``ExtClassifier`` predicts into data elements of its own; ``ImageClassifier`` and
``ClsDataPreprocessor`` copy what an mmpretrain user brings: names that razorlib registers
too, a preprocessor taking ``num_classes``, and a head that calls ``set_pred_score`` on
the data samples the dataset made.
"""
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import BaseModel, ImgDataPreprocessor
from mmengine.structures import BaseDataElement

from .registry import MODELS


class Head(nn.Module):

    def __init__(self, in_channels: int, num_classes: int):
        super().__init__()
        self.fc = nn.Linear(in_channels, num_classes)

    def forward(self, feats):
        return self.fc(feats)

    def loss(self, feats, data_samples):
        labels = torch.cat([sample.gt_label for sample in data_samples])
        return dict(loss_cls=F.cross_entropy(self(feats), labels))


@MODELS.register_module()
class ExtClassifier(BaseModel):
    """conv-BN-ReLU x2, global average pooling, a linear head."""

    def __init__(self, width: int = 8, num_classes: int = 10):
        super().__init__(data_preprocessor=dict(type='ImgDataPreprocessor', mean=[0.5] * 3,
                                                std=[0.5] * 3))
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(2 * width), nn.ReLU())
        self.head = Head(2 * width, num_classes)

    def forward(self, inputs, data_samples=None, mode='tensor'):
        feats = self.features(inputs).mean(dim=(2, 3))
        if mode == 'loss':
            return self.head.loss(feats, data_samples)
        logits = self.head(feats)
        if mode == 'predict':
            return [BaseDataElement(pred_score=score.softmax(0), gt_label=sample.gt_label)
                    for score, sample in zip(logits, data_samples)]
        return logits


@MODELS.register_module(name='ClsDataPreprocessor')
class ExtClsDataPreprocessor(ImgDataPreprocessor):
    """Like mmpretrain's ``ClsDataPreprocessor``: takes ``num_classes``, and passes data
    samples of other projects through as they are."""

    def __init__(self, num_classes: int, mean=None, std=None):
        super().__init__(mean=mean, std=std)
        self.num_classes = num_classes


class PredictingHead(Head):
    """Like mmpretrain's ``ClsHead.predict``: sets the scores on the data samples it is
    given with ``set_pred_score(...).set_pred_label(...)``."""

    def predict(self, feats, data_samples):
        scores = self(feats).softmax(dim=1)
        labels = scores.argmax(dim=1, keepdim=True)
        return [sample.set_pred_score(score).set_pred_label(label)
                for sample, score, label in zip(data_samples, scores, labels)]


@MODELS.register_module(name='ImageClassifier')
class ExtImageClassifier(BaseModel):
    """Like mmpretrain's ``ImageClassifier`` (a name razorlib registers too): its data
    preprocessor config is built in the default scope, and its head predicts as
    mmpretrain's heads do."""

    def __init__(self, width: int = 8, num_classes: int = 10,
                 data_preprocessor: Optional[dict] = None):
        super().__init__(data_preprocessor=dict(type='ClsDataPreprocessor', **(
            data_preprocessor or dict(num_classes=num_classes))))
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(2 * width), nn.ReLU())
        self.head = PredictingHead(2 * width, num_classes)

    def forward(self, inputs, data_samples=None, mode='tensor'):
        feats = self.features(inputs).mean(dim=(2, 3))
        if mode == 'loss':
            return self.head.loss(feats, data_samples)
        if mode == 'predict':
            return self.head.predict(feats, data_samples)
        return self.head(feats)
