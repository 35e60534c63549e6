"""ConvNeXt-T and ViT-B/16 as torchvision defines them, for the trace benchmark.

The same modules in the same order as ``torchvision.models.convnext_tiny`` and
``vit_b_16``: ConvNeXt's depthwise 7x7 conv, permutes around a LayerNorm and two Linear
layers, layer scale and ``LayerNorm2d`` downsampling; ViT's patchify conv, the reshape
to tokens with the model's own ``hidden_dim``, the class token, the position embedding
and ``nn.MultiheadAttention`` encoder blocks.  Stochastic depth is the identity in eval
mode and is left out, as are the weight initialisations.
"""
from functools import partial
from typing import List, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F


# ------------------------------------------------------------------ ConvNeXt-T
class LayerNorm2d(nn.LayerNorm):
    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class Permute(nn.Module):
    def __init__(self, dims: Sequence[int]):
        super().__init__()
        self.dims = list(dims)

    def forward(self, x):
        return torch.permute(x, self.dims)


class CNBlock(nn.Module):
    def __init__(self, dim: int, layer_scale: float = 1e-6):
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(dim, dim, 7, padding=3, groups=dim), Permute([0, 2, 3, 1]),
            nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, 4 * dim), nn.GELU(),
            nn.Linear(4 * dim, dim), Permute([0, 3, 1, 2]))
        self.layer_scale = nn.Parameter(torch.ones(dim, 1, 1) * layer_scale)
        self.stochastic_depth = nn.Identity()

    def forward(self, x):
        return self.stochastic_depth(self.layer_scale * self.block(x)) + x


class ConvNeXt(nn.Module):
    """ConvNeXt-T: patchify stem, four stages of CNBlocks, LayerNorm2d downsampling."""

    def __init__(self, dims=(96, 192, 384, 768), depths=(3, 3, 9, 3),
                 num_classes: int = 1000):
        super().__init__()
        norm = partial(LayerNorm2d, eps=1e-6)
        layers: List[nn.Module] = [nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), norm(dims[0]))]
        for i, (dim, depth) in enumerate(zip(dims, depths)):
            layers.append(nn.Sequential(*[CNBlock(dim) for _ in range(depth)]))
            if i < len(dims) - 1:
                layers.append(nn.Sequential(norm(dim), nn.Conv2d(dim, dims[i + 1], 2, 2)))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(norm(dims[-1]), nn.Flatten(1),
                                        nn.Linear(dims[-1], num_classes))

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)))


# ------------------------------------------------------------------ ViT-B/16
class MLPBlock(nn.Sequential):
    def __init__(self, dim: int, hidden: int):
        super().__init__(nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(0.0),
                         nn.Linear(hidden, dim), nn.Dropout(0.0))


class EncoderBlock(nn.Module):
    def __init__(self, heads: int, dim: int, hidden: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.dropout = nn.Dropout(0.0)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = MLPBlock(dim, hidden)

    def forward(self, x):
        y = self.ln_1(x)
        y, _ = self.self_attention(y, y, y, need_weights=False)
        x = self.dropout(y) + x
        return x + self.mlp(self.ln_2(x))


class VisionTransformer(nn.Module):
    def __init__(self, image_size: int = 224, patch: int = 16, layers: int = 12,
                 heads: int = 12, dim: int = 768, hidden: int = 3072,
                 num_classes: int = 1000):
        super().__init__()
        self.patch, self.hidden_dim = patch, dim
        self.conv_proj = nn.Conv2d(3, dim, patch, patch)
        self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
        tokens = (image_size // patch) ** 2 + 1
        self.pos_embedding = nn.Parameter(torch.empty(1, tokens, dim).normal_(std=0.02))
        self.dropout = nn.Dropout(0.0)
        self.layers = nn.Sequential(*[EncoderBlock(heads, dim, hidden) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.heads = nn.Sequential(nn.Linear(dim, num_classes))

    def forward(self, x):
        n, _, h, w = x.shape
        x = self.conv_proj(x)
        x = x.reshape(n, self.hidden_dim, (h // self.patch) * (w // self.patch))
        x = x.permute(0, 2, 1)
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)
        x = self.ln(self.layers(self.dropout(x + self.pos_embedding)))
        return self.heads(x[:, 0])
