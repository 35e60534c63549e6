"""extproj's classifier: an mmengine BaseModel that knows nothing about razorlib."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import BaseModel
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
