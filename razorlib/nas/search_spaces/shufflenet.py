"""SearchableShuffleNetV2: SPOS's space, one choice block per layer (3x3/5x5/7x7/xception)."""
from typing import Dict, Optional, Sequence, Tuple

import torch.nn as nn

from ...models.backbones import BaseBackbone, ConvBNAct, make_stem
from ...registry import MODELS, MUTABLES
from ..checks import integer
from .mobilenet import check_arch_setting, check_ints

#: SPOS's four choice blocks.
SPOS_CANDIDATES = dict(
    shuffle_3x3=dict(type='ShuffleBlock', kernel_size=3),
    shuffle_5x5=dict(type='ShuffleBlock', kernel_size=5),
    shuffle_7x7=dict(type='ShuffleBlock', kernel_size=7),
    shuffle_xception=dict(type='ShuffleXception'))
#: Keys of a candidate config that must be integers, checked before any layer is built
#: (each block checks its own again when built alone).
CANDIDATE_INTS = ('kernel_size', 'mid_channels')
#: SPOS on ImageNet: (channels, blocks, stride) per stage, 20 searchable layers.
SPOS_IMAGENET_SETTING = ((64, 4, 2), (160, 4, 2), (320, 8, 2), (640, 4, 2))


@MODELS.register_module()
class SearchableShuffleNetV2(BaseBackbone):
    """A ShuffleNetV2 supernet whose every block is a mutable op over ``candidates``.

    Stem, then one stage per ``arch_setting`` row, each block a mutable op (the first
    of a stage strides and widens), then an optional 1x1 conv to ``last_channels``.
    Guo et al., "Single Path One-Shot Neural Architecture Search with Uniform
    Sampling", 2020: with the defaults and ``stem='imagenet'`` it is SPOS's space.

    Args:
        arch_setting: ``(channels, num_blocks, stride)`` per stage; stride 2 or 1 (1
            only if the stage keeps its input width).
        stem_channels: stem width.
        last_channels: width of the final 1x1 conv; None for none.
        candidates: op name -> ``MODELS`` config of the block without ``in_channels``,
            ``out_channels`` and ``stride``, which each layer fills in; a
            ``kernel_size`` or ``mid_channels`` in it must be an integer (``5.0`` is
            refused, naming the candidate).
        mutable_cfg: the mutable wrapping each layer's candidates, from ``MUTABLES``:
            ``OneShotMutableOP`` (SPOS) or ``DiffMutableOP`` (DARTS).
        in_channels: image channels.
        num_classes: add a pooled linear classifier with this many classes.
        stem: ``'imagenet'`` (stride-2 3x3 conv, no max pool) or ``'cifar'`` (stride 1).
        downsample: a candidate name that the first block of every stage takes, as a
            plain module (not searched); None searches those blocks too (SPOS).  On
            small data a fixed downsampling block trains much faster: a searched one
            gives every path its own output channels, which the head must learn apart.

    Example:
        >>> import torch
        >>> net = SearchableShuffleNetV2(arch_setting=[(16, 2, 2)], stem_channels=8,
        ...                              stem='cifar', num_classes=10)
        >>> net(torch.randn(2, 3, 8, 8)).shape
        torch.Size([2, 10])
        >>> net.stages[0][1].choices
        ('shuffle_3x3', 'shuffle_5x5', 'shuffle_7x7', 'shuffle_xception')
    """

    def __init__(self, arch_setting: Sequence[Tuple[int, int, int]] = SPOS_IMAGENET_SETTING,
                 stem_channels: int = 16, last_channels: Optional[int] = 1024,
                 candidates: Optional[Dict[str, dict]] = None,
                 mutable_cfg: Optional[dict] = None, in_channels: int = 3,
                 num_classes: Optional[int] = None, stem: str = 'imagenet',
                 downsample: Optional[str] = None):
        candidates = dict(SPOS_CANDIDATES if candidates is None else candidates)
        arch_setting = check_arch_setting(arch_setting, 'SearchableShuffleNetV2')
        check_ints('SearchableShuffleNetV2', stem_channels=stem_channels,
                   last_channels=last_channels, in_channels=in_channels,
                   num_classes=num_classes)
        for name, cfg in candidates.items():
            for key in CANDIDATE_INTS:
                if isinstance(cfg, dict) and cfg.get(key) is not None:
                    integer(cfg[key], 'SearchableShuffleNetV2', f'candidates.{name}.{key}',
                            minimum=1)
        mutable_cfg = dict(type='OneShotMutableOP') if mutable_cfg is None else mutable_cfg
        if downsample is not None and downsample not in candidates:
            raise ValueError(f'downsample {downsample!r} is not one of the candidates '
                             f'{list(candidates)}')
        stem_module = make_stem(in_channels, stem_channels, stem, max_pool=False)
        stages, widths, channels = [], [], stem_channels
        for width, num_blocks, stride in arch_setting:
            blocks = []
            for index in range(num_blocks):
                layer = dict(in_channels=channels, out_channels=width,
                             stride=stride if index == 0 else 1)
                if index == 0 and downsample is not None:
                    blocks.append(MODELS.build(dict(candidates[downsample], **layer)))
                else:
                    blocks.append(MUTABLES.build(dict(
                        mutable_cfg, candidates={name: dict(cfg, **layer)
                                                 for name, cfg in candidates.items()})))
                channels = width
            stages.append(nn.Sequential(*blocks))
            widths.append(width)
        if last_channels is not None:
            stages.append(ConvBNAct(channels, last_channels, 1))
            widths.append(last_channels)
        super().__init__(stem_module, stages, widths, num_classes)
