"""Refuse a checkpoint a tool cannot use before it runs: incomplete, or of another model.

mmengine's Runner loads ``load_from`` with ``strict=False``: a checkpoint of another
architecture only logs its missing keys, and the tool goes on with random weights (a
test at chance accuracy, a search ranking random subnets).  A truncated file fails deep
inside ``torch.load`` with ``OSError: [Errno 22] Invalid argument`` after the work dir
was made.  Every tool that takes a checkpoint calls :func:`read_checkpoint` first and
:func:`check_fits` once its model is built (and, to evaluate it, :func:`check_loads`),
and reports a :class:`CheckpointError` in
one line with exit code 2.

Example:
    >>> import io, tempfile, torch
    >>> path = Path(tempfile.mkdtemp()) / 'linear.pth'
    >>> torch.save({'state_dict': torch.nn.Linear(4, 2).state_dict()}, path)
    >>> state = state_dict_of(read_checkpoint(path))
    >>> check_fits(torch.nn.Linear(4, 2), state, path)  # fits: nothing happens
    >>> check_fits(torch.nn.Linear(8, 2), state, path)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    razorlib.engine.checkpoint_check.CheckpointError: .../linear.pth: not a checkpoint of \
this Linear: 1 tensor of another shape (weight: (2, 4) here, (2, 8) in the model); ...
"""
import pickle
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import torch
import torch.nn as nn

from ..utils.errors import first_line
from .config import ConfigError

#: How many keys of each kind a message names.
SHOWN = 3
#: How many characters of torch's error a message quotes (after the checkpoint's path).
QUOTED = 120


class CheckpointError(ConfigError):
    """A checkpoint a tool cannot use; the message starts with its path."""


def read_checkpoint(path: Union[str, Path]) -> Dict[str, Any]:
    """Load ``path`` on the CPU with ``weights_only=True``, memory-mapped when it can be
    (so that reading it to check it, before the Runner reads it again, costs little).

    Raises:
        CheckpointError: the file is missing, cut short (``not a complete checkpoint``)
            or holds objects that weights-only loading refuses.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f'checkpoint {path} does not exist')
    try:
        checkpoint = torch.load(path, map_location='cpu', weights_only=True,
                                mmap=zipfile.is_zipfile(path))
    except pickle.UnpicklingError as err:
        if 'Weights only load failed' not in str(err):
            raise CheckpointError(f'{path}: not a complete checkpoint '
                                  f'({first_line(err, QUOTED)}); was it cut short while being '
                                  'written or copied?') from err
        refused = next((line.strip() for line in str(err).splitlines()
                        if 'GLOBAL' in line), first_line(err, QUOTED))
        raise CheckpointError(f'{path}: refused by weights-only loading ({refused}); '
                              'razorlib loads tensors and what mmengine checkpoints hold, '
                              'never pickled code') from err
    except PermissionError as err:
        raise CheckpointError(f'{path}: cannot be read ({err.strerror})') from err
    except Exception as err:  # torch reports a cut-short file as OSError, EOFError,
        # RuntimeError (zip reader) or KeyError (unpickler), depending on where it ends
        raise CheckpointError(f'{path}: not a complete checkpoint ({first_line(err, QUOTED)});'
                              ' was it cut short while being written or copied?') from err
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f'{path}: holds a {type(checkpoint).__name__}, not a checkpoint '
                              'dict or a state_dict')
    state = checkpoint.get('state_dict', checkpoint)
    if not isinstance(state, Mapping):  # state_dict_of and the Runner read it as a dict
        raise CheckpointError(f"{path}: its 'state_dict' is a {type(state).__name__}, not a "
                              'dict of tensors')
    return checkpoint


def state_dict_of(checkpoint: Mapping[str, Any]) -> Dict[str, torch.Tensor]:
    """The model weights of an mmengine checkpoint (its ``state_dict``) or of a bare
    state_dict, without the ``module.`` prefix a DDP-wrapped model saves (as mmengine's
    ``load_checkpoint`` strips it).

    Example:
        >>> sorted(state_dict_of({'meta': {}, 'state_dict': {'module.fc.weight': 1}}))
        ['fc.weight']
    """
    state = checkpoint.get('state_dict', checkpoint)
    return {key[len('module.'):] if key.startswith('module.') else key: value
            for key, value in state.items()}


def check_fits(model: nn.Module, state_dict: Mapping[str, Any], path: Union[str, Path],
               partial: bool = False) -> None:
    """Refuse ``state_dict`` unless its keys and shapes are exactly ``model``'s.

    Args:
        model: the model the tool built from its config (unwrapped).
        state_dict: the weights to load, from :func:`state_dict_of`.
        path: the checkpoint, for the message.
        partial: accept a checkpoint that fits the model in the main (fine-tuning from
            ``load_from`` may leave out a new head, or hold one of another class count, as
            mmengine allows): at least one weight tensor fits by name and shape, and no
            more tensors than fit have another shape.  Scalars are not counted: every
            BatchNorm's ``num_batches_tracked`` and an algorithm's step count fit any
            width, so a checkpoint of another width would pass on them alone, and the
            Runner would skip its other tensors with a warning and train from random
            weights.

    Raises:
        CheckpointError: naming the checkpoint, the first missing and unexpected keys and
            the first tensors of another shape.

    A module may name state its checkpoints have not always held
    (``OPTIONAL_STATE_PREFIXES``, e.g. an ``LSQGraph``'s quantization signature, added
    after the first QAT checkpoints were written): keys under those prefixes may be
    missing, and the module's own loading says what that means.
    """
    expected = model.state_dict()
    optional = optional_state_prefixes(model)
    missing = [key for key in expected if key not in state_dict
               and not key.startswith(optional)]
    unexpected = [key for key in state_dict if key not in expected]
    reshaped = [key for key in expected if key in state_dict
                and _shape(state_dict[key]) != _shape(expected[key])]
    if _fits_partly(expected, state_dict, reshaped) if partial \
            else not (missing or unexpected or reshaped):
        return
    parts = []
    if partial:
        fitting = len(_weights_fitting(expected, state_dict, reshaped))
        parts.append(f'{fitting} of its weight tensors fit by name and shape, scalars '
                     '(BatchNorm counters, step counts) aside')
    if missing:
        parts.append(f'{len(missing)} of the model\'s {len(expected)} tensors missing '
                     f'({_names(missing)})')
    if unexpected:
        parts.append(f'{len(unexpected)} unexpected ({_names(unexpected)})')
    if reshaped:
        shapes = [f'{key}: {_described(state_dict[key])} here, {_described(expected[key])} '
                  'in the model' for key in reshaped[:SHOWN]]
        parts.append(f"{len(reshaped)} {'tensor' if len(reshaped) == 1 else 'tensors'} of "
                     f"another shape ({_names(reshaped, shapes)})")
    raise CheckpointError(f'{path}: not a checkpoint of this {type(model).__name__}: '
                          f"{'; '.join(parts)}; use the config (and --cfg-options, e.g. "
                          'model.channel_cfg) it was saved with')


def _fits_partly(expected: Mapping[str, torch.Tensor], state_dict: Mapping[str, Any],
                 reshaped: List[str]) -> bool:
    """Whether a ``load_from`` checkpoint fits ``expected`` in the main: some weight
    tensors fit, they outnumber those of another shape, the modules with tensors of
    another shape all come after every module whose tensors all fit, and those tensors
    differ in their first dim only (a new head of another class count: the model's last
    layer, its masks beside it, another number of output rows).  A layer of another width
    (a checkpoint of another ``channel_cfg``) would leave it and the layers around it at
    their initialisation: in the middle, or as the last pruned layer, whose reader (the
    head) then differs in its input columns.

    Example:
        >>> model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 3))
        >>> model = model.state_dict()
        >>> head = dict(model, **{'2.weight': torch.zeros(5, 8), '2.bias': torch.zeros(5)})
        >>> _fits_partly(model, head, ['2.weight', '2.bias'])
        True
        >>> _fits_partly(model, {'2.bias': torch.zeros(3)}, [])
        True
        >>> middle = dict(model, **{'0.weight': torch.zeros(9, 4), '0.bias': torch.zeros(9),
        ...                         '1.weight': torch.zeros(8, 9)})
        >>> _fits_partly(model, middle, ['0.weight', '0.bias', '1.weight'])
        False
        >>> last = dict(model, **{'1.weight': torch.zeros(6, 8), '1.bias': torch.zeros(6),
        ...                       '2.weight': torch.zeros(3, 6)})  # another last width
        >>> _fits_partly(model, last, ['1.weight', '1.bias', '2.weight'])
        False
    """
    if not expected:
        return True
    fitting = _weights_fitting(expected, state_dict, reshaped)
    modules = list(dict.fromkeys(key.rpartition('.')[0] for key in expected))
    other = {key.rpartition('.')[0] for key in reshaped}
    last = max((modules.index(module) for module in
                {key.rpartition('.')[0] for key in fitting} - other), default=-1)
    rows_only = all(_rows_differ_only(_shape(state_dict[key]), _shape(expected[key]))
                    for key in reshaped)
    return bool(fitting) and len(reshaped) <= len(fitting) and rows_only and all(
        modules.index(module) > last for module in other if module in modules)


def _shape(value: Any) -> Optional[Tuple[int, ...]]:
    """A tensor's shape; None for anything else a state_dict may hold (a module's extra
    state, a number in a hand-edited checkpoint), which has no shape to compare."""
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def _described(value: Any) -> str:
    """A state_dict entry for a message: a tensor's shape, else its type.

    Example:
        >>> _described(torch.zeros(2, 3)), _described(3)
        ('(2, 3)', 'an int')
    """
    shape = _shape(value)
    if shape is not None:
        return str(shape)
    name = type(value).__name__
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"


def _rows_differ_only(shape: Optional[Tuple[int, ...]],
                      expected: Optional[Tuple[int, ...]]) -> bool:
    """Whether two tensors' shapes differ in their first dim only (a non-tensor does not)."""
    return shape is not None and expected is not None and len(shape) == len(expected) \
        and shape[1:] == expected[1:]


def _weights_fitting(expected: Mapping[str, torch.Tensor], state_dict: Mapping[str, Any],
                     reshaped: List[str]) -> List[str]:
    """The keys of ``expected`` that ``state_dict`` fits by name and shape, scalars aside:
    a scalar (one element, or a BatchNorm's ``num_batches_tracked``) fits any width."""
    return [key for key, value in expected.items()
            if key in state_dict and key not in reshaped
            and getattr(value, 'numel', lambda: 0)() > 1
            and not key.endswith('num_batches_tracked')]


def check_loads(model: nn.Module, state_dict: Mapping[str, Any],
                path: Union[str, Path]) -> None:
    """Load ``state_dict`` into ``model`` (one built to be checked) as the Runner will,
    so that a module's own check of its state (an ``LSQGraph``'s quantization platform)
    refuses the checkpoint before the Runner makes the work dir, not after.

    Raises:
        CheckpointError: ``<path>: <what the module said>``.

    Example:
        >>> check_loads(nn.Linear(2, 1), nn.Linear(2, 1).state_dict(), 'fc.pth')
    """
    from mmengine.runner.checkpoint import load_state_dict

    try:  # mismatched keys and shapes are check_fits's: not logged twice
        load_state_dict(model, dict(state_dict), strict=False, logger='silent')
    except ValueError as err:
        raise CheckpointError(f'{path}: {err}') from err


def optional_state_prefixes(model: nn.Module) -> Tuple[str, ...]:
    """The state_dict key prefixes that ``model``'s modules declare optional in a
    checkpoint (their ``OPTIONAL_STATE_PREFIXES``), each under its module's name.

    Example:
        >>> class Signed(nn.Linear):
        ...     OPTIONAL_STATE_PREFIXES = ('signature.', )
        >>> optional_state_prefixes(nn.Sequential(nn.ReLU(), Signed(2, 2)))
        ('1.signature.',)
    """
    return tuple(f'{name}.{prefix}' if name else prefix
                 for name, module in model.named_modules()
                 for prefix in getattr(module, 'OPTIONAL_STATE_PREFIXES', ()))


def _names(keys: List[str], shown: Optional[List[str]] = None) -> str:
    """The first :data:`SHOWN` of ``keys`` (or their descriptions ``shown``), then ``...``."""
    shown = shown or keys[:SHOWN]
    return ', '.join(shown[:SHOWN]) + (', ...' if len(keys) > SHOWN else '')
