"""Slim a dense safetensors checkpoint shard by shard, never building the dense model.

:func:`slim_checkpoint` applies a channel config to the weights of a folder that
``save_pretrained`` wrote and writes the folder :func:`~.reload.save_pruned` would have
written for the slim model.  Memory holds one dense tensor and the slim tensors of the
shard being written, never the dense model: the models it builds live on ``meta``.

Which dense indices each tensor keeps comes from the layer kinds themselves: the dense
model is built on ``meta``, every tensor is swapped for a storage-less :class:`_IndexProbe`
of its shape, and :func:`~razorlib.pruning.slicing.plan_slices` plans the config on it.
The kinds slice the probes with ``take`` as they would slice real weights, and each
probe records the indices it kept.  Deriving the indices from the config by hand would
repeat every kind's axis-to-dim rules (a Conv1D's transposed weight, grouped convs) and
drift from them; the probes run the very code ``slim_model`` runs.
"""
import json
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch
import torch.nn as nn

from ...layers import LayerKindsArg, as_table
from ...pruning.channel_config import ChannelConfig, as_channel_config
from ...pruning.slicing import plan_slices, slim_model
from .config import ConfigSync, build_like, sync_config
from .reload import (CHANNEL_FILES, _model_class, dump_channel_files, load_channel_files,
                     widths_channel_configs)

__all__ = ['slim_checkpoint']

SAFE_WEIGHTS, SAFE_INDEX = 'model.safetensors', 'model.safetensors.index.json'
#: Weight files of other formats: never copied next to the slim weights.
_WEIGHT_SUFFIXES = ('.safetensors', '.bin', '.pt', '.pth', '.ckpt', '.h5', '.msgpack')
#: Per dim, the dense indices a tensor keeps (None: all of them).
Kept = Tuple[Optional[torch.Tensor], ...]


class _IndexProbe(torch.Tensor):
    """A tensor of a given shape without storage that records the indices it keeps:
    ``index_select`` (what ``take`` runs on a tensor that is not ``meta``) is the one
    operation it supports."""

    @staticmethod
    def __new__(cls, shape, dtype, kept: Kept):
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=dtype, device='cpu')

    def __init__(self, shape, dtype, kept: Kept):
        self.kept = kept

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func is not torch.ops.aten.index_select.default:
            raise TypeError(f'slim_checkpoint plans slices on shape-only tensors; a layer '
                            f'kind ran {func} on one (only take/index_select is supported)')
        probe, dim, index = args
        kept, shape = list(probe.kept), list(probe.shape)
        kept[dim] = index if kept[dim] is None else kept[dim][index]
        shape[dim] = len(index)
        return _IndexProbe(shape, probe.dtype, tuple(kept))


def _kept_indices(dense: nn.Module, cfg: ChannelConfig, layer_kinds: LayerKindsArg
                  ) -> Dict[str, Kept]:
    """Tensor name -> the dense indices it keeps, for every tensor the config plans
    (swaps ``dense``'s tensors for probes; tied tensors share one probe)."""
    probes: Dict[int, _IndexProbe] = {}
    for module in dense.modules():
        for store in (module._parameters, module._buffers):
            for attr, t in store.items():
                if t is not None:
                    store[attr] = probes.setdefault(
                        id(t), _IndexProbe(t.shape, t.dtype, (None, ) * t.dim()))
    names: Dict[int, List[str]] = {}
    for name, module in dense.named_modules(remove_duplicate=False):
        names.setdefault(id(module), []).append(name)
    kept: Dict[str, Kept] = {}
    for module, plan in plan_slices(dense, cfg, as_table(layer_kinds)):
        tensors = {**getattr(plan, 'params', {}), **getattr(plan, 'buffers', {})}
        for attr, probe in tensors.items():  # in plan order: the last plan wins, as applied
            for prefix in names[id(module)]:
                kept[f'{prefix}.{attr}' if prefix else attr] = probe.kept
    return {name: k for name, k in kept.items() if any(i is not None for i in k)}


def _same(a: Optional[Kept], b: Optional[Kept], ndim: int) -> bool:
    a, b = a or (None, ) * ndim, b or (None, ) * ndim
    return all((x is None and y is None) or (x is not None and y is not None and
                                             torch.equal(x, y)) for x, y in zip(a, b))


def _shards(source: Path) -> List[str]:
    """The safetensors files of a checkpoint folder, in order."""
    if (source / SAFE_INDEX).exists():
        weight_map = json.loads((source / SAFE_INDEX).read_text())['weight_map']
        files = sorted(set(weight_map.values()))
    elif (source / SAFE_WEIGHTS).exists():
        files = [SAFE_WEIGHTS]
    else:
        raise FileNotFoundError(f'{source}: neither {SAFE_WEIGHTS} nor {SAFE_INDEX}; '
                                'slim_checkpoint reads safetensors checkpoints only')
    for file in files:
        if not (source / file).exists():
            raise FileNotFoundError(f'{source / SAFE_INDEX} names shard {file}, which is '
                                    'missing')
    return files


def _key_renamer(model: nn.Module) -> Callable[[str], Tuple[str, bool]]:
    """Checkpoint key -> (the model's name for it, whether transformers converts it on
    load): the renaming ``from_pretrained`` applies, as transformers 5 stores some models
    under legacy names (ViT's ``vit.encoder.layer.0`` for ``vit.layers.0``)."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key
    transforms = get_model_conversion_mapping(model)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    state = model.state_dict()

    def rename(key: str) -> Tuple[str, bool]:
        name, pattern = rename_source_key(key, renamings, converters, model.base_model_prefix,
                                          state)
        return (key, False) if name not in state and key in state else (name, pattern is not None)

    return rename


def _check_ties(source: Path, state: Dict[str, torch.Tensor], kept: Dict[str, Kept],
                stored: set) -> None:
    """Tied tensors (one tensor under several names) must be sliced alike, and one of
    their names stored when sliced (a tied ``lm_head.weight`` is not saved)."""
    ties: Dict[int, List[str]] = {}
    for name, tensor in state.items():
        ties.setdefault(id(tensor), []).append(name)
    for names in ties.values():
        first, ndim = names[0], state[names[0]].dim()
        for other in names[1:]:
            if not _same(kept.get(first), kept.get(other), ndim):
                raise ValueError(f'the channel config slices the tied tensors {first!r} and '
                                 f'{other!r} differently')
        if any(n in kept for n in names) and not stored & set(names):
            raise ValueError(f'the channel config slices {names[0]!r}, which no shard in '
                             f'{source} holds')


def _layout(source: Path, files: List[str], dense: nn.Module, kept: Dict[str, Kept]
            ) -> Dict[str, Dict[str, Optional[Kept]]]:
    """Shard -> stored key -> the indices it keeps (None: copied whole), once every stored
    tensor is checked to be the dense model's, at its shape (raising, naming file and
    tensor) and the ties check out.  Reads the shards' headers only: nothing is written
    before every check has passed."""
    from safetensors import safe_open
    state, rename = dense.state_dict(keep_vars=True), _key_renamer(dense)
    where = type(dense).__name__ + ' built from config.json'
    layout: Dict[str, Dict[str, Optional[Kept]]] = {}
    stored = set()
    for file in files:
        layout[file] = {}
        with safe_open(source / file, framework='pt') as shard:
            for key in shard.keys():
                shape = tuple(shard.get_slice(key).get_shape())
                name, converted = rename(key)
                if name not in state:
                    raise ValueError(f'{source / file}: tensor {key!r} is not in the {where}')
                if converted and name in kept:
                    raise ValueError(f'{source / file}: transformers converts tensor {key!r} '
                                     f'into {name!r} on load; slim_checkpoint cannot slice it')
                if not converted and shape != tuple(state[name].shape):
                    raise ValueError(f'{source / file}: tensor {key!r} has shape {shape}, '
                                     f'the {where} has {tuple(state[name].shape)}')
                layout[file][key] = kept.get(name)
                stored.add(name)
    _check_ties(source, state, kept, stored)
    return layout


def _slice(tensor: torch.Tensor, kept: Optional[Kept]) -> torch.Tensor:
    for dim, index in enumerate(kept or ()):
        if index is not None:
            tensor = tensor.index_select(dim, index)
    return tensor


def _write_shards(source: Path, layout: Dict[str, Dict[str, Optional[Kept]]], out: Path) -> None:
    """Slice and write one shard at a time: one dense tensor in memory at a time, and each
    slim shard written (and freed) as soon as its dense shard is done."""
    from safetensors import safe_open
    from safetensors.torch import save_file
    weight_map, total = {}, 0
    for file, keys in layout.items():
        with safe_open(source / file, framework='pt') as shard:
            metadata = shard.metadata() or {'format': 'pt'}
            slim = {key: _slice(shard.get_tensor(key), kept) for key, kept in keys.items()}
        save_file(slim, out / file, metadata=metadata)
        weight_map.update(dict.fromkeys(slim, file))
        total += sum(t.numel() * t.element_size() for t in slim.values())
        del slim
    if (source / SAFE_INDEX).exists():
        index = {'metadata': {'total_size': total}, 'weight_map': dict(sorted(weight_map.items()))}
        (out / SAFE_INDEX).write_text(json.dumps(index, indent=2) + '\n')


def _dense_meta(source: Path, config, model_class: type, layer_kinds: LayerKindsArg) -> nn.Module:
    """The model the checkpoint holds, on ``meta``: built from its config and sliced by
    its own channel files, if it has them (it was itself saved by ``save_pruned``)."""
    with torch.device('meta'):
        model = model_class(config)
    for cfg in load_channel_files(source):
        slim_model(model, cfg, layer_kinds)
    return model


def slim_checkpoint(source_dir: Union[str, Path],
                    channel_cfg: Union[ChannelConfig, Dict[str, Any], str, Path],
                    out_dir: Union[str, Path], model_class: Optional[type] = None,
                    layer_kinds: LayerKindsArg = None) -> ConfigSync:
    """Write to ``out_dir`` the checkpoint of ``source_dir``'s model sliced by
    ``channel_cfg``, reading the dense safetensors one shard at a time.

    ``out_dir`` gets the same shard files (and index) with the slim tensors, the config
    rewritten by :func:`~.config.sync_config`, the channel files when that config cannot
    describe every width (as :func:`~.reload.save_pruned`), and the folder's other
    files (tokenizer, generation config); :func:`~.reload.load_pruned` loads it.

    Args:
        source_dir: a folder ``save_pretrained`` (or ``save_pruned``) wrote with
            safetensors, in one file or sharded.
        channel_cfg: the channels to keep, relative to the model ``source_dir`` holds: a
            :class:`ChannelConfig`, its dict form or a JSON/YAML path.
        out_dir: the folder to write (not ``source_dir``).
        model_class: the transformers class; default the config's ``architectures``.
        layer_kinds: layer kinds to slice with, if not the registry's.

    Returns:
        what the config rewrite changed and what it cannot describe.

    Raises:
        FileNotFoundError: no safetensors checkpoint, or a shard the index names is
            missing.
        ValueError: naming the file and tensor at fault: a tensor the model lacks or of
            another shape, a sliced tensor no shard holds, tied tensors sliced apart (and
            the module or parameter at fault for a config that does not fit the model).

    Example:
        >>> import tempfile, torch
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> from razorlib.pruning import ChannelSelection
        >>> from razorlib.integrations.transformers import load_pruned
        >>> llama = LlamaForCausalLM(LlamaConfig(hidden_size=16, intermediate_size=32,
        ...     num_hidden_layers=2, num_attention_heads=2, vocab_size=20)).eval()
        >>> dense, slim = tempfile.mkdtemp(), tempfile.mkdtemp()
        >>> llama.save_pretrained(dense, max_shard_size='8KB')
        >>> keep = ChannelSelection(32, range(0, 32, 2))  # every other MLP channel
        >>> cfg = ChannelConfig({f'model.layers.{i}.mlp.{proj}': {axis: keep}
        ...                      for i in range(2) for proj, axis in
        ...                      (('gate_proj', 'out'), ('up_proj', 'out'), ('down_proj', 'in'))})
        >>> slim_checkpoint(dense, cfg, slim).changed
        {'intermediate_size': (32, 16)}
        >>> x = torch.randint(0, 20, (1, 6))
        >>> torch.equal(load_pruned(slim)(x).logits, slim_model(llama, cfg)(x).logits)
        True
    """
    from transformers import AutoConfig
    source, out = Path(source_dir), Path(out_dir)
    if out.resolve() == source.resolve():
        raise ValueError(f'{out}: slim_checkpoint cannot write over the checkpoint it reads')
    config = AutoConfig.from_pretrained(source)
    model_class = model_class or _model_class(config, source)
    cfg = as_channel_config(channel_cfg)
    files = _shards(source)
    dense = _dense_meta(source, config, model_class, layer_kinds)
    kept = _kept_indices(_dense_meta(source, config, model_class, layer_kinds), cfg,
                         layer_kinds)
    layout = _layout(source, files, dense, kept)
    slim = slim_model(dense, cfg, layer_kinds)
    sync = sync_config(slim)
    channels = [] if sync.exact else widths_channel_configs(slim, build_like(slim), layer_kinds)
    out.mkdir(parents=True, exist_ok=True)
    _write_shards(source, layout, out)
    slim.config.save_pretrained(out)
    for path in source.iterdir():
        if path.is_file() and not path.name.endswith(_WEIGHT_SUFFIXES + ('.index.json', )) \
                and path.name not in ('config.json', ) + CHANNEL_FILES:
            shutil.copy2(path, out / path.name)
    dump_channel_files(channels, out)
    return sync
