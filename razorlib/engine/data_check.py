"""Build a tool's dataloader from its config and check its batches before the tool writes
anything.

mmengine reports a dataloader that cannot give what a tool reads only once the tool is
running, with the work dir made: an empty dataset as a ``ZeroDivisionError`` in its
sampler, an unknown dataset type as a ``KeyError``, a batch without labels as whatever
first reads them.  tools/prune.py, tools/ptq.py, tools/deploy.py and tools/search.py
build their loaders and read a first batch with these functions instead, so that each
mistake is one line naming the config key (``calib_dataloader.dataset: ...``) and
nothing is written; prune, ptq and deploy then run on the loaders checked.  Each error
is a :class:`ConfigError` whose message starts with the key; the tool puts the file or
flag in front.  tools/search.py, tools/prune.py and tools/train.py also check here that a
model's ``input_shape`` (what its FLOPs and params are counted on) is the size of the
images its data gives (:func:`check_input_shape`).

Example:
    >>> build_loader(dict(batch_size=2, dataset=dict(type='DigitzDataset')),
    ...              'calib_dataloader')  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    razorlib.engine.config.ConfigError: calib_dataloader.dataset.type: 'DigitzDataset' is not ...
"""
from collections.abc import Sized
from itertools import islice
from typing import Any, Iterable, List, NamedTuple, Optional, Tuple

import torch
import torch.nn as nn
from mmengine.registry import DefaultScope
from mmengine.runner import Runner

from ..models.data_preprocessor import pack_labels
from ..registry import SCOPE
from .config import BUILD_ERRORS, ConfigError, check_dataloader, message_of
from .loops.bn_calibration import fresh_workers, seeded

#: How a tool expects its batches, for the message of a batch it cannot read.
BATCH_FORMAT = ("the tool reads dict batches of 'inputs' and 'data_samples', as "
                "default_collate makes of a dataset's dict samples")


def build_loader(loader_cfg: Any, key: str, seed: Optional[int] = None,
                 scope: str = SCOPE) -> Iterable:
    """The dataloader of ``loader_cfg`` (the config's ``key``), built as the Runner builds
    it, with its registry types and their arguments checked first and its dataset not
    empty (mmengine's sampler divides by its length).

    Raises:
        ConfigError: ``<key>[.<sub key>]: <what is wrong>``.
    """
    if not isinstance(loader_cfg, dict):
        raise ConfigError(f'{key}: missing; expected a dataloader config (a dict)')
    check_dataloader(loader_cfg, key, scope)
    try:
        with DefaultScope.overwrite_default_scope(scope):
            loader = Runner.build_dataloader(loader_cfg, seed=seed)
    except BUILD_ERRORS as err:  # a value the dataset, sampler or loader refuses
        raise ConfigError(f'{key}: {type(err).__name__}: {message_of(err)}') from err
    if isinstance(loader.dataset, Sized) and len(loader.dataset) == 0:
        raise ConfigError(f'{key}.dataset: {type(loader.dataset).__name__} holds no samples')
    return loader


def read_batches(loader: Iterable, key: str, steps: Optional[int] = None) -> List[Any]:
    """The first ``steps`` batches of ``loader`` (all of them for None), at least one.

    Raises:
        ConfigError: reading a batch raised (the dataset's own code runs then), or the
            loader gives no batch.
    """
    try:
        batches = list(islice(loader, steps))
    except BUILD_ERRORS as err:
        raise ConfigError(f'{key}: reading a batch raised {type(err).__name__}: '
                          f'{message_of(err)}') from err
    if not batches:
        raise ConfigError(f'{key} gives no batch (drop_last with fewer samples than '
                          'batch_size?)')
    return batches


def batch_inputs(batch: Any, index: int, key: str) -> Any:
    """Batch ``index``'s ``inputs``: stacked into one tensor where they are a list of
    tensors of one shape; a list of images of several sizes (which ``pseudo_collate``
    gives and the data preprocessor pads) and a dict of tensors (a Hugging Face style
    batch) as they are.

    Raises:
        ConfigError: the batch is not a dict with ``inputs``.
    """
    if not isinstance(batch, dict) or 'inputs' not in batch:
        keys = f'keys {", ".join(map(repr, batch))}' if isinstance(batch, dict) else \
            f'a {type(batch).__name__}'
        raise ConfigError(f"{key} batch {index} has no 'inputs' ({keys}); {BATCH_FORMAT}")
    inputs = batch['inputs']
    if isinstance(inputs, (list, tuple)) and inputs and \
            all(isinstance(x, torch.Tensor) and x.shape == inputs[0].shape for x in inputs):
        return torch.stack(inputs)
    return inputs


def batch_labels(batch: dict, index: int, key: str, needed_by: str) -> torch.Tensor:
    """Batch ``index``'s labels, from its ``data_samples`` in any form the data
    preprocessor packs (:func:`~razorlib.models.data_preprocessor.pack_labels`): data
    samples with a ``gt_label`` each, a tensor of labels, or a list of bare labels (what
    ``pseudo_collate`` makes of int labels).

    Args:
        needed_by: why the tool needs them, for the message (``'--importance taylor
            scores channels by the loss, which needs them'``).

    Raises:
        ConfigError: a batch without them, or with labels that are not whole numbers.
    """
    samples = batch.get('data_samples')
    labels = None
    if samples is not None and len(samples):
        try:
            labels = torch.cat([torch.as_tensor(sample.gt_label).reshape(-1)
                                for sample in pack_labels(samples)])
        except (AttributeError, TypeError, ValueError, RuntimeError):
            labels = None  # a data sample without gt_label, or not a label at all
    if labels is None or labels.is_floating_point() or labels.is_complex():
        raise ConfigError(f"{key} batch {index} has no targets ('data_samples' with a "
                          f'gt_label each, or a label per image); {needed_by}')
    return labels


class CheckedLoader(NamedTuple):
    """A dataloader built and checked by :func:`checked_loader`, with the first batch the
    check read (what a tool's own check of the model can run on without reading it
    again)."""
    loader: Iterable
    first_batch: Any


def checked_loader(loader_cfg: Any, key: str, seed: Optional[int] = None,
                   labels_needed_by: Optional[str] = None, scope: str = SCOPE
                   ) -> CheckedLoader:
    """``key``'s dataloader, built and its first batch read and checked to have ``inputs``
    and, where ``labels_needed_by`` says why they are needed, labels.  The tool runs on
    the loader returned, so that its dataset (an ImageFolder scans its folder) is built
    once.  The check reads through workers of its own (:func:`fresh_workers`): persistent
    workers it started would carry their augmentations' random state into the run's
    first pass, which would then read other images than without the check.

    Raises:
        ConfigError: as :func:`build_loader`, :func:`read_batches`, :func:`batch_inputs`
            and :func:`batch_labels` do.
    """
    loader = build_loader(loader_cfg, key, seed, scope)
    batch = read_batches(fresh_workers(loader), key, 1)[0]
    batch_inputs(batch, 0, key)
    if labels_needed_by:
        batch_labels(batch, 0, key, labels_needed_by)
    return CheckedLoader(loader, batch)


def input_shape_of(model: nn.Module) -> Optional[Tuple[int, ...]]:
    """The ``input_shape`` a model counts its FLOPs and params on (AutoSlim, SPOS, DARTS,
    the pruning algorithms), or None for a model without one."""
    shape = getattr(model, 'input_shape', None)
    return None if shape is None else tuple(shape)


def check_input_shape(model: nn.Module, loader: Iterable, key: str, counted: str) -> None:
    """Refuse a model whose ``input_shape`` is not the size of the images of ``loader``
    (the config's ``key``), read off its first batch after the model's data preprocessor
    (which may resize or crop): the model counts its FLOPs and params on a random ``1 x
    input_shape`` batch, so with another size (the default ``(3, 224, 224)`` left in a
    config of 16x16 digits) every count, and every FLOPs or params limit met, would be that
    of other images, silently.  Images of several sizes (a list of tensors, which the
    preprocessor pads to each batch's largest), batches of another format than a dict of
    ``inputs`` (a tensor after the preprocessor), and models without ``input_shape`` are
    not compared.  The batch is read under a fixed seed with the generators restored
    after, so the check leaves the run's random state as it was.

    Args:
        counted: what counts on ``input_shape`` in the tool, for the message (``'the FLOPs
            and params the search limits, ranks and reports'``).

    Raises:
        ConfigError: naming ``model.input_shape``, its value and the images' shape; or as
            :func:`read_batches` does.
    """
    shape = input_shape_of(model)
    if shape is None:
        return
    with seeded(0), torch.no_grad():
        batch = read_batches(fresh_workers(loader), key, 1)[0]
        if not (isinstance(batch, dict) and 'inputs' in batch
                and isinstance(batch_inputs(batch, 0, key), torch.Tensor)):
            return  # another batch format; images of several sizes, padded batch by batch
        data = model.data_preprocessor(batch, False)
    inputs = data.get('inputs') if isinstance(data, dict) else None
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != len(shape) + 1:
        return
    images = tuple(inputs.shape[1:])
    if images != shape:
        raise ConfigError(f'model.input_shape: {shape}, but the {key} gives images of '
                          f'{images} (after the data preprocessor): {counted} are counted on '
                          'a 1 x input_shape batch, so they would be those of other images; '
                          f'set model.input_shape={images}')


def check_config_input_shape(model: nn.Module, cfg: Any, key: str, counted: str) -> None:
    """:func:`check_input_shape` on the config's ``key`` dataloader, built here for the
    check (before the tool writes anything, seed 0: only the images' size is read) only
    for a model with an ``input_shape`` and a config with that dataloader.

    Raises:
        ConfigError: as :func:`build_loader` and :func:`check_input_shape` do.
    """
    if input_shape_of(model) is None or cfg.get(key) is None:
        return
    check_input_shape(model, build_loader(cfg.get(key), key, 0), key, counted)
