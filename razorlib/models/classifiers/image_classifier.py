"""ImageClassifier: backbone -> neck -> head, as an mmengine ``BaseModel``."""
from typing import Dict, List, Optional, Sequence, Union

import torch
import torch.nn as nn
from mmengine.model import BaseModel

from ...registry import MODELS
from ..backbones import BaseBackbone
from ..data_sample import ClsDataSample
from ..necks import GlobalAveragePooling

ModuleOrCfg = Union[nn.Module, dict]


def _build(module: Optional[ModuleOrCfg]) -> Optional[nn.Module]:
    return MODELS.build(module) if isinstance(module, dict) else module


@MODELS.register_module()
class ImageClassifier(BaseModel):
    """An image classifier that mmengine's ``Runner`` can train, validate and test.

    ``forward(inputs, data_samples, mode)`` follows mmengine: ``'tensor'`` returns the
    logits (so a tracer or exporter can call ``model(images)`` directly), ``'loss'``
    a dict with the training loss, ``'predict'`` a list of :class:`ClsDataSample` with
    ``pred_score`` and ``pred_label``.  The data preprocessor runs in
    ``train_step``/``val_step``/``test_step``, not in ``forward``.

    Args:
        backbone: a backbone module or its config; if it returns a tuple of stage
            features (``out_indices``), the last one is classified.  A razorlib backbone
            with a classifier of its own (``num_classes``) is refused under the default
            pooling neck: its logits are no feature map to pool.
        head: a head module or its config (e.g. ``LinearClsHead``); a config without
            ``in_channels`` gets the backbone's ``num_features``.
        neck: a neck module or its config; ``None`` for global average pooling (pass
            ``nn.Identity()`` for a backbone that already returns feature vectors).
        data_preprocessor: a preprocessor module or its config; default a
            ``ClsDataPreprocessor`` without normalisation.
        init_cfg: mmengine initialisation config.

    Example:
        >>> model = ImageClassifier(
        ...     backbone=dict(type='ResNet', depth=18, stem='cifar'),
        ...     head=dict(type='LinearClsHead', num_classes=10),
        ...     data_preprocessor=dict(type='ClsDataPreprocessor',
        ...                            mean=[0.5] * 3, std=[0.25] * 3))
        >>> model(torch.randn(2, 3, 32, 32)).shape
        torch.Size([2, 10])
    """

    def __init__(self, backbone: ModuleOrCfg, head: ModuleOrCfg,
                 neck: Optional[ModuleOrCfg] = None,
                 data_preprocessor: Optional[ModuleOrCfg] = None,
                 init_cfg: Optional[dict] = None):
        if data_preprocessor is None:
            data_preprocessor = dict(type='ClsDataPreprocessor')
        # Built here, in our registry: mmengine's BaseModel would look the type up in
        # mmengine's root registry, which does not see razorlib's unless it is the
        # default scope.
        super().__init__(data_preprocessor=_build(data_preprocessor), init_cfg=init_cfg)
        self.backbone = _build(backbone)
        self.neck = GlobalAveragePooling() if neck is None else _build(neck)
        if isinstance(self.backbone, BaseBackbone) and self.backbone.fc is not None \
                and isinstance(self.neck, GlobalAveragePooling):
            # it failed at the first forward, in the head, with a bare shape error
            raise ValueError(
                f'ImageClassifier: the backbone {type(self.backbone).__name__} ends in a '
                f'classifier of its own (num_classes={self.backbone.num_classes}), whose '
                'logits the GlobalAveragePooling neck cannot pool; leave num_classes out '
                'of the backbone, the head classifies')
        if isinstance(head, dict) and 'in_channels' not in head:
            head = dict(head, in_channels=self.backbone.num_features)
        self.head = _build(head)

    def extract_feat(self, inputs: torch.Tensor) -> torch.Tensor:
        """The feature vectors the head classifies: backbone, then neck."""
        feats = self.backbone(inputs)
        if isinstance(feats, tuple):
            feats = feats[-1]
        return self.neck(feats)

    def forward(self, inputs: torch.Tensor,
                data_samples: Optional[Sequence[ClsDataSample]] = None,
                mode: str = 'tensor'
                ) -> Union[torch.Tensor, Dict[str, torch.Tensor], List[ClsDataSample]]:
        """Logits (``'tensor'``), the loss dict (``'loss'``) or data samples
        (``'predict'``) for a batch of NCHW images.

        Args:
            inputs: the preprocessed NCHW batch.
            data_samples: one data sample per image; ``'loss'`` needs their
                ``gt_label``.
            mode: ``'tensor'``, ``'loss'`` or ``'predict'``.
        """
        feats = self.extract_feat(inputs)
        if mode == 'tensor':
            return self.head(feats)
        if mode == 'loss':
            if data_samples is None:
                raise ValueError("mode='loss' needs data_samples with gt_label")
            return self.head.loss(feats, data_samples)
        if mode == 'predict':
            return self.head.predict(feats, data_samples)
        raise ValueError(f"mode must be 'tensor', 'loss' or 'predict', got {mode!r}")
