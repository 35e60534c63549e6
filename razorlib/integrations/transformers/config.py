"""Config rewrite: make a pruned Hugging Face model's ``config`` describe its slim widths.

A pruned model keeps its dense ``config``, so ``from_pretrained`` would build the dense
layers and fail on the saved weights' sizes.  :func:`sync_config` finds what the config
must say by building the same class from it on the ``meta`` device (shapes only, no
memory) and comparing every parameter and buffer shape with the slim model's: each
width field (``intermediate_size``, GPT-2's ``n_inner``, ...) whose change makes the
shapes agree is rewritten.  Widths that differ across layers cannot be written in a
config; they stay in :attr:`ConfigSync.mismatches`, and :func:`~.reload.save_pruned`
saves them as a channel config.
"""
import copy
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

import torch
import torch.nn as nn

__all__ = ['MLP_WIDTH_FIELDS', 'ConfigSync', 'Mismatch', 'is_hf_model', 'build_like',
           'shape_mismatches', 'sync_config']

#: Config fields that size the MLP of every layer, by model family (tried in order).
MLP_WIDTH_FIELDS = ('intermediate_size', 'n_inner', 'ffn_dim', 'd_ff', 'encoder_ffn_dim',
                    'decoder_ffn_dim')


@dataclass(frozen=True)
class Mismatch:
    """A tensor whose shape differs between the slim model and one built from its config
    (``None`` where one of them lacks it)."""
    name: str
    config_shape: Optional[Tuple[int, ...]]
    model_shape: Optional[Tuple[int, ...]]

    def __str__(self) -> str:
        return f'{self.name}: config builds {self.config_shape}, the model has {self.model_shape}'


@dataclass
class ConfigSync:
    """What :func:`sync_config` changed and what the config still cannot describe.

    Args:
        changed: config field -> ``(old value, new value)``.
        mismatches: tensors whose shapes a model built from the new config still gets
            wrong (widths that differ across layers).
    """
    changed: Dict[str, Tuple[object, int]] = field(default_factory=dict)
    mismatches: List[Mismatch] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        """Whether ``from_pretrained`` of the config builds exactly the slim shapes."""
        return not self.mismatches


def is_hf_model(model: nn.Module) -> bool:
    """Whether ``model`` is a transformers ``PreTrainedModel`` (without importing
    transformers for a model that is none).

    Example:
        >>> is_hf_model(nn.Linear(2, 2))
        False
    """
    return any(cls.__module__.startswith('transformers.') and cls.__name__ == 'PreTrainedModel'
               for cls in type(model).__mro__)


def build_like(model: nn.Module, config=None, device: str = 'meta') -> nn.Module:
    """A fresh model of ``model``'s class built from ``config`` (default its own), on
    ``device``: on ``meta`` it holds shapes only and costs no memory."""
    config = copy.deepcopy(model.config if config is None else config)
    with torch.device(device):
        return type(model)(config)


def _shapes(model: nn.Module) -> Dict[str, Tuple[int, ...]]:
    tensors = list(model.named_parameters(remove_duplicate=False)) + \
        list(model.named_buffers(remove_duplicate=False))
    return {name: tuple(t.shape) for name, t in tensors}


def shape_mismatches(model: nn.Module, reference: nn.Module) -> List[Mismatch]:
    """The tensors whose shapes differ between ``reference`` and ``model``."""
    ref, own = _shapes(reference), _shapes(model)
    return [Mismatch(name, ref.get(name), own.get(name)) for name in sorted(set(ref) | set(own))
            if ref.get(name) != own.get(name)]


def _width_changes(mismatches: Iterable[Mismatch]) -> Dict[int, set]:
    """config size -> the sizes the model has in its place, over every mismatched dim."""
    changes: Dict[int, set] = {}
    for m in mismatches:
        if m.config_shape is None or m.model_shape is None or \
                len(m.config_shape) != len(m.model_shape):
            continue
        for dense, slim in zip(m.config_shape, m.model_shape):
            if dense != slim:
                changes.setdefault(dense, set()).add(slim)
    return changes


def _try_field(model: nn.Module, config, name: str, value: int,
               current: List[Mismatch]) -> Optional[Tuple[object, List[Mismatch]]]:
    """The config with ``name = value`` and its mismatches, if that fixes some tensors
    and breaks none."""
    trial = copy.deepcopy(config)
    setattr(trial, name, value)
    left = shape_mismatches(model, build_like(model, trial))
    before = {m.name for m in current}
    if len(left) < len(current) and {m.name for m in left} <= before:
        return trial, left
    return None


def sync_config(model: nn.Module, fields: Tuple[str, ...] = MLP_WIDTH_FIELDS) -> ConfigSync:
    """Rewrite ``model.config`` (in place) so that it describes the slim widths.

    A field is rewritten when every tensor dim of its old size that changed has the same
    new size (widths uniform across layers) and the rewrite makes a model built from
    the config agree on more tensors and disagree on none.  Fields whose value is
    ``None`` (GPT-2's ``n_inner``, meaning ``4 * n_embd``) are tried with each change.

    Args:
        model: a pruned transformers model.
        fields: the config fields that may be rewritten.

    Returns:
        what changed and what the config still cannot describe.

    Example:
        >>> from transformers import BertConfig, BertModel
        >>> bert = BertModel(BertConfig(hidden_size=32, intermediate_size=64,
        ...                             num_hidden_layers=2, num_attention_heads=2,
        ...                             vocab_size=50))
        >>> for layer in bert.encoder.layer:  # as a pruner slims the MLPs
        ...     layer.intermediate.dense = nn.Linear(32, 16)
        ...     layer.output.dense = nn.Linear(16, 32)
        >>> sync = sync_config(bert)
        >>> sync.changed, sync.exact, bert.config.intermediate_size
        ({'intermediate_size': (64, 16)}, True, 16)
    """
    if not is_hf_model(model):
        raise TypeError(f'sync_config rewrites the config of a transformers model, got a '
                        f'{type(model).__name__}')
    config = model.config
    mismatches = shape_mismatches(model, build_like(model))
    sync = ConfigSync()
    for name in fields:
        if not mismatches:
            break
        if not hasattr(config, name):
            continue
        old = getattr(config, name)
        for dense, slims in _width_changes(mismatches).items():
            if len(slims) != 1 or old not in (dense, None):
                continue
            found = _try_field(model, config, name, next(iter(slims)), mismatches)
            if found is not None:
                config, mismatches = found
                sync.changed[name] = (old, getattr(config, name))
                break
    for name, (_, new) in sync.changed.items():
        setattr(model.config, name, new)
    sync.mismatches = mismatches
    return sync
