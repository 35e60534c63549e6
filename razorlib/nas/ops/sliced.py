"""Weight slicing shared by the dynamic blocks: a batch norm on its first channels, and
copying those channels into the plain block of a fixed subnet."""
import torch
import torch.nn as nn
import torch.nn.functional as F


def sliced_bn(x: torch.Tensor, bn: nn.BatchNorm2d, channels: int) -> torch.Tensor:
    """``bn`` on its first ``channels`` channels, updating their running statistics in
    place as ``nn.BatchNorm2d`` would (``momentum=None``: a cumulative average).

    Example:
        >>> bn = nn.BatchNorm2d(8).eval()
        >>> x = torch.randn(2, 4, 3, 3)
        >>> torch.allclose(sliced_bn(x, bn, 4), x / (1 + bn.eps) ** 0.5)
        True
    """
    factor = 0.0
    use_batch = bn.training or not bn.track_running_stats
    if bn.training and bn.track_running_stats:
        bn.num_batches_tracked.add_(1)
        factor = 1.0 / float(bn.num_batches_tracked) if bn.momentum is None else bn.momentum
    running = (bn.running_mean[:channels], bn.running_var[:channels]) \
        if bn.track_running_stats else (None, None)
    return F.batch_norm(x, *running, bn.weight[:channels], bn.bias[:channels], use_batch,
                        factor, bn.eps)


def copy_bn(source: nn.BatchNorm2d, target: nn.BatchNorm2d) -> None:
    """The first ``target.num_features`` channels of ``source`` (affine and running
    statistics) into ``target``, and its ``eps`` and ``momentum`` (:func:`copy_bn_settings`).

    Example:
        >>> source, target = nn.BatchNorm2d(8, eps=1e-3, momentum=None), nn.BatchNorm2d(4)
        >>> copy_bn(source, target)
        >>> target.eps, target.momentum
        (0.001, None)
    """
    copy_bn_settings(source, target)
    channels = target.num_features
    with torch.no_grad():
        for name in ('weight', 'bias', 'running_mean', 'running_var'):
            getattr(target, name).copy_(getattr(source, name)[:channels])
        target.num_batches_tracked.copy_(source.num_batches_tracked)


def copy_bn_settings(source: nn.Module, target: nn.Module) -> None:
    """``eps`` and ``momentum`` of each batch norm in ``source`` onto its counterpart in
    ``target`` (the same structure): a block built anew has the defaults, and a fixed
    subnet must compute what the supernet did (``momentum=None`` averages cumulatively)."""
    pairs = zip((m for m in source.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)),
                (m for m in target.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)))
    for from_bn, to_bn in pairs:
        to_bn.eps, to_bn.momentum = from_bn.eps, from_bn.momentum
