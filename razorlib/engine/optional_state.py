"""Loading a checkpoint written before a module had some of its state.

A module that gained a buffer (or extra state) after checkpoints of it were written names
the new keys' prefixes in ``OPTIONAL_STATE_PREFIXES``.  Two rules serve that one
declaration: :func:`~razorlib.engine.checkpoint_check.check_fits` lets a checkpoint lack
those keys, and the module's ``_load_from_state_dict`` calls
:func:`keep_own_optional_state`, so that loading such a checkpoint keeps the module's own
values (as built, or as set before loading) instead of reporting the keys missing.

Example:
    >>> import torch
    >>> class Counted(nn.Linear):
    ...     OPTIONAL_STATE_PREFIXES = ('seen', )  # added after the first checkpoints
    ...     def __init__(self):
    ...         super().__init__(2, 1)
    ...         self.register_buffer('seen', torch.tensor(7))
    ...     def _load_from_state_dict(self, state_dict, prefix, *args):
    ...         keep_own_optional_state(self, state_dict, prefix)
    ...         super()._load_from_state_dict(state_dict, prefix, *args)
    >>> old = nn.Linear(2, 1).state_dict()  # no 'seen'
    >>> model = Counted()
    >>> model.load_state_dict(old)  # strict: nothing missing
    <All keys matched successfully>
    >>> int(model.seen)
    7
"""
from typing import Any, Dict, Iterator, Tuple

import torch.nn as nn

__all__ = ['keep_own_optional_state']


def keep_own_optional_state(module: nn.Module, state_dict: Dict[str, Any], prefix: str) -> None:
    """Put ``module``'s own values into ``state_dict`` under every one of its
    ``OPTIONAL_STATE_PREFIXES`` that the checkpoint holds no key under.

    Call it from ``module._load_from_state_dict`` before ``super()``'s: torch and
    mmengine hand the children the entries of this dict only after the parent has
    loaded, so a child's keys put here load too.  A prefix the checkpoint holds some
    keys under is left alone: an older checkpoint lacks the whole prefix, and one that
    holds part of it is of another model or damaged, so its missing keys are reported as
    usual rather than filled in.

    Args:
        module: the module being loaded.
        state_dict: the dict torch passes ``_load_from_state_dict``; changed in place.
        prefix: ``module``'s key prefix in ``state_dict``.
    """
    for optional in getattr(module, 'OPTIONAL_STATE_PREFIXES', ()):
        if any(key.startswith(prefix + optional) for key in state_dict):
            continue
        for key, value in _own_state(module, optional):
            state_dict[prefix + key] = value


def _own_state(module: nn.Module, start: str) -> Iterator[Tuple[str, Any]]:
    """The entries of ``module.state_dict()`` whose keys start with ``start``, detached
    copies, read without calling ``state_dict()`` (which runs the save hooks of the whole
    model; an ``LSQGraph``'s rewrites its zero points)."""
    for name, owner in module.named_modules(remove_duplicate=False):
        head = f'{name}.' if name else ''
        saved = [*owner.named_parameters(recurse=False),
                 *((key, buffer) for key, buffer in owner.named_buffers(recurse=False)
                   if key not in owner._non_persistent_buffers_set)]
        for key, tensor in saved:
            if (head + key).startswith(start):
                yield head + key, tensor.detach().clone()
        if _has_extra_state(owner) and (head + '_extra_state').startswith(start):
            yield head + '_extra_state', owner.get_extra_state()


def _has_extra_state(module: nn.Module) -> bool:
    """Whether ``module`` saves extra state (overrides ``get_extra_state``), as torch tells."""
    return type(module).get_extra_state is not nn.Module.get_extra_state
