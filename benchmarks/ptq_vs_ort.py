"""razorlib post-training quantization vs onnxruntime's ``quantize_static``, on digits.

    python benchmarks/ptq_vs_ort.py [--epochs 15] [--calib-batches 8] [--threads 1]

Trains small classifiers on the offline digits (16x16, seeded, seconds each): the
PlainCNN of the AutoSlim digits configs (the supernet), two subnets of it (L1-pruned to
75% and 50% of the channels, then fine-tuned: stand-ins for searched subnets), a
16-wide ResNet-18 and a MobileNetV2 x0.5.  Each is exported once to FP32 ONNX and
quantized from the same calibration batches (the first ``--calib-batches`` batches of
120 shuffled training images), once per calibration method of each tool:

- razorlib: ``quantize_torch_model`` (TRT_INT8: symmetric int8, per-channel weights,
  conservative dispatch; activations calibrated by each of ``--observers``, default all
  four: minmax, percentile, mse, kl), ``export_graph`` to QDQ ONNX;
- onnxruntime: ``quantize_static`` (QDQ, per-channel, symmetric int8 activations and
  weights) of the FP32 ONNX model, calibrated by each of ``--ort-methods`` (default all
  four: MinMax, Entropy, Percentile, Distribution, with onnxruntime's default options).
  onnxruntime's defaults round more tensors than razorlib's TRT_INT8 does (each Conv's
  output before its ReLU / Clip, a residual Add's inputs and sum, the classifier head's
  Gemm); ``--ort-like-trt`` quantizes with :func:`trt_like_options` instead, which rounds
  where TensorRT does (columns ``ORT <method> like-TRT``).  The recorded runs used the
  defaults.

Every INT8 model runs in onnxruntime on the 360 validation images.  The first table
gives the SNR of the logits against FP32 (dB) and, last, each razorlib observer's margin
over onnxruntime's best method on that model (the target: no margin below -1 dB); the
second gives top-1 and top-1 agreement with FP32.
"""
import argparse
import contextlib
import copy
import io
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
import onnxruntime as ort
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                      QuantType, quantize_static)

import razorlib
from razorlib.datasets import DigitsDataset
from razorlib.ir import from_torch, to_onnx
from razorlib.models import ImageClassifier
from razorlib.quantization import export_graph, int8_session, quantize_torch_model, snr_db
from razorlib.quantization.export import optimization_level

BATCH = 120  # the exported graphs' static batch; the 360 validation images are 3 batches
SIZE = 16

BACKBONES: Dict[str, dict] = {
    'PlainCNN (digits supernet)': dict(type='PlainCNN', channels=(32, 64, 64, 128),
                                       strides=(1, 2, 1, 2)),
    'ResNet-18, 16 wide': dict(type='ResNet', depth=18, base_channels=16, stem='cifar'),
    'MobileNetV2 x0.5': dict(type='MobileNetV2', widen_factor=0.5, stem='cifar'),
}
SUBNETS = {'PlainCNN subnet 75%': 0.75, 'PlainCNN subnet 50%': 0.5}


def digits(split: str, test_ratio: float = 0.0):
    """The images (scaled to [-1, 1]) and labels of one split of the digits (``test_ratio``:
    :class:`~razorlib.datasets.DigitsDataset`'s held-out test split)."""
    data = DigitsDataset(split, upscale=SIZE, test_ratio=test_ratio)
    images = torch.stack([item['inputs'] for item in data]) * 2 - 1  # mean 0.5, std 0.5
    labels = torch.tensor([int(item['data_samples'].gt_label) for item in data])
    return images, labels


def train(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, epochs: int,
          lr: float) -> nn.Module:
    """Adam with a cosine schedule, batches of 64, random one-pixel shifts."""
    optimizer = torch.optim.Adam(model.parameters(), lr, weight_decay=1e-4)
    steps = epochs * ((len(images) + 63) // 64)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    model.train()
    for _ in range(epochs):
        for index in torch.randperm(len(images)).split(64):
            shifts = tuple(torch.randint(-1, 2, (2, )).tolist())
            batch = torch.roll(images[index], shifts, dims=(2, 3))
            loss = F.cross_entropy(model(batch), labels[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    return model.eval()


def in_batches(run: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([run(chunk) for chunk in images.split(BATCH)])


def onnxruntime_runner(path: Path) -> Callable[[torch.Tensor], torch.Tensor]:
    session = int8_session(path)  # unfused where this CPU's int8 kernels saturate
    name = session.get_inputs()[0].name
    return lambda x: torch.from_numpy(session.run(None, {name: x.numpy()})[0])


class Batches(CalibrationDataReader):
    """onnxruntime's calibration reader over the same batches razorlib calibrates on."""

    def __init__(self, name: str, batches: List[torch.Tensor]):
        self.feeds = iter([{name: batch.numpy()} for batch in batches])

    def get_next(self):
        return next(self.feeds, None)


# Beyond razorlib's TRT_INT8 rounding points, quantize_static's defaults (onnxruntime 1.32,
# symmetric activations) also round each Conv's output before its ReLU / Clip, a residual
# Add's inputs and its sum, and the head (the Gemm's input, weights and output):
# ``--ort-like-trt`` (trt_like_options) leaves those in FP32.
POOLS = ('ReduceMean', 'GlobalAveragePool')


def trt_like_options(fp32: Path) -> dict:
    """``quantize_static`` keyword arguments that round where razorlib's TRT_INT8 does.

    - ``nodes_to_exclude``: every ``Gemm`` (the head stays in FP32: the global average pool
      is no TensorRT int8 op) and every ``Add`` fed by a ``Conv`` that only it reads (the
      residual Adds of ``FuseResidualAdds``: the Add neither rounds its inputs nor its sum);
    - ``OpTypesToExcludeOutputQuantization``: ``Conv`` (and the pools), so a convolution's
      output is rounded only where a quantized op reads it: after its ReLU / Clip (which is
      then left unquantized, as TensorRT fuses it), or as the next convolution's input;
    - ``op_types_to_quantize``: onnxruntime's defaults plus ``ReduceMean``, so the pool's
      input is rounded as razorlib rounds it, and its output is not.

    Not reachable with these options (a quantizer option acts per op type or per node, not
    per tensor): a Conv output read only by a residual Add whose other input is a Conv too
    (ResNet's downsampling shortcut) stays FP32 here, where razorlib rounds one of the two.
    """
    import onnx
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry
    graph = onnx.load(str(fp32)).graph
    readers: Dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    convs = {output for node in graph.node if node.op_type == 'Conv' for output in node.output}
    exclude = [node.name for node in graph.node
               if node.op_type == 'Gemm' or node.op_type == 'Add' and any(
                   name in convs and readers[name] == 1 for name in node.input)]
    return dict(nodes_to_exclude=exclude,
                op_types_to_quantize=sorted(set(QLinearOpsRegistry) | set(QDQRegistry)
                                            | {'ReduceMean'}),
                extra_options={'OpTypesToExcludeOutputQuantization': ['Conv', *POOLS]})


def quantize_with_onnxruntime(fp32: Path, calibration: List[torch.Tensor], method: str,
                              folder: Path, like_trt: bool = False) -> Path:
    """``quantize_static`` of the FP32 model, calibrated by ``method`` (its defaults; with
    ``like_trt``, :func:`trt_like_options`)."""
    int8 = folder / f'ort_{method}{"_like_trt" if like_trt else ""}.onnx'
    name = ort.InferenceSession(str(fp32), providers=['CPUExecutionProvider']).get_inputs()[0].name
    options = trt_like_options(fp32) if like_trt else dict(extra_options={})
    quantize_static(fp32, int8, Batches(name, calibration), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8,
                    calibrate_method=getattr(CalibrationMethod, method),
                    nodes_to_exclude=options.get('nodes_to_exclude'),
                    op_types_to_quantize=options.get('op_types_to_quantize'),
                    extra_options={'ActivationSymmetric': True, 'WeightSymmetric': True,
                                   **options['extra_options']})
    return int8


def ort_label(method: str, like_trt: bool = False) -> str:
    """The results' key (and table column) of onnxruntime calibrated by ``method``."""
    return f'ORT {method}{" like-TRT" if like_trt else ""}'


def scores(logits: torch.Tensor, fp32: torch.Tensor, labels: torch.Tensor) -> Dict[str, float]:
    return dict(top1=100 * float((logits.argmax(1) == labels).float().mean()),
                agree=100 * float((logits.argmax(1) == fp32.argmax(1)).float().mean()),
                snr=snr_db(fp32, logits))


def compare(model: nn.Module, calibration: List[torch.Tensor], val: torch.Tensor,
            labels: torch.Tensor, observers: List[str],
            ort_methods: List[str], like_trt: bool = False) -> Dict[str, Dict[str, float]]:
    """Scores of FP32, razorlib per observer and onnxruntime per calibration method."""
    fp32 = in_batches(model, val)
    results = {'FP32': scores(fp32, fp32, labels)}
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        for observer in observers:
            graph = quantize_torch_model(model, calibration, calibration[0], 'TRT_INT8',
                                         calib_steps=len(calibration), observer=observer,
                                         progress=False)
            export_graph(graph, folder / f'razorlib_{observer}.onnx')
            ours = in_batches(onnxruntime_runner(folder / f'razorlib_{observer}.onnx'), val)
            results[f'razorlib {observer}'] = scores(ours, fp32, labels)
        fp32_path = folder / 'fp32.onnx'
        to_onnx(from_torch(model, calibration[0]), fp32_path)
        for method in ort_methods:
            with contextlib.redirect_stdout(io.StringIO()):  # its progress lines
                int8 = quantize_with_onnxruntime(fp32_path, calibration, method, folder,
                                                 like_trt)
            theirs = in_batches(onnxruntime_runner(int8), val)
            results[ort_label(method, like_trt)] = scores(theirs, fp32, labels)
    return results


def tables(rows: Dict[str, Dict[str, Dict[str, float]]]) -> str:
    """The SNR table (best onnxruntime method in bold, razorlib's margins over it) and the
    top-1 / agreement table, in Markdown."""
    tools = [tool for tool in next(iter(rows.values())) if tool != 'FP32']
    ours = [tool for tool in tools if tool.startswith('razorlib')]
    header = ['model'] + [f'{tool} SNR dB' for tool in tools] + ['razorlib - best ORT dB']
    lines = ['| ' + ' | '.join(header) + ' |', '|---|' + '---:|' * (len(header) - 1)]
    for model, results in rows.items():
        best = max((tool for tool in tools if tool.startswith('ORT')),
                   key=lambda tool: results[tool]['snr'])
        cells = [f"**{results[tool]['snr']:.2f}**" if tool == best else
                 f"{results[tool]['snr']:.2f}" for tool in tools]
        margins = ' / '.join(f"{results[tool]['snr'] - results[best]['snr']:+.2f}"
                             for tool in ours)
        lines.append('| ' + ' | '.join([model] + cells + [margins]) + ' |')
    header = ['model', 'FP32 top-1'] + [f'{tool} top-1 / agree %' for tool in tools]
    lines += ['', '| ' + ' | '.join(header) + ' |', '|---|' + '---:|' * (len(header) - 1)]
    for model, results in rows.items():
        cells = [f"{results[tool]['top1']:.2f} / {results[tool]['agree']:.2f}"
                 for tool in tools]
        lines.append('| ' + ' | '.join([model, f"{results['FP32']['top1']:.2f}"] + cells)
                     + ' |')
    return '\n'.join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--epochs', type=int, default=15)
    parser.add_argument('--finetune-epochs', type=int, default=5)
    parser.add_argument('--calib-batches', type=int, default=8)
    parser.add_argument('--observers', nargs='+', default=['minmax', 'percentile', 'mse', 'kl'],
                        help="razorlib's activation observers, one column each")
    parser.add_argument('--ort-methods', nargs='+',
                        default=['MinMax', 'Entropy', 'Percentile', 'Distribution'],
                        help="onnxruntime's calibration methods, one column each")
    parser.add_argument('--threads', type=int, default=1,
                        help='torch threads (small images: 1 is fastest on shared cores)')
    parser.add_argument('--ort-like-trt', action='store_true',
                        help="quantize with onnxruntime rounding where TensorRT does (head "
                        "Gemm in FP32, conv+relu and conv+add+relu rounded once: "
                        "trt_like_options) instead of quantize_static's defaults (the "
                        "recorded runs)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    images, labels = digits('train')
    val, val_labels = digits('val')
    generator = torch.Generator().manual_seed(0)
    order = torch.randperm(len(images), generator=generator)
    calibration = list(images[order].split(BATCH))[:args.calib_batches]
    calibration = [batch for batch in calibration if len(batch) == BATCH]

    rows = {}
    for name, backbone in BACKBONES.items():
        start = time.perf_counter()
        torch.manual_seed(0)
        model = train(ImageClassifier(backbone, dict(type='LinearClsHead', num_classes=10)),
                      images, labels, args.epochs, 3e-3)
        rows[name] = compare(model, calibration, val, val_labels, args.observers,
                             args.ort_methods, args.ort_like_trt)
        print(f'{name}: trained and compared in {time.perf_counter() - start:.0f} s', flush=True)
        if name.startswith('PlainCNN'):
            supernet = model
    for name, ratio in SUBNETS.items():
        torch.manual_seed(0)
        subnet = razorlib.prune(copy.deepcopy(supernet), calibration[0][:1], ratio=ratio)
        subnet = train(subnet, images, labels, args.finetune_epochs, 1e-3)
        rows[name] = compare(subnet, calibration, val, val_labels, args.observers,
                             args.ort_methods, args.ort_like_trt)

    print(tables(rows))
    print(f'calibration: {len(calibration)} batches of {BATCH}; validation: {len(val)} images; '
          f'torch {torch.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}; '
          f'onnxruntime options: {"like-TRT" if args.ort_like_trt else "defaults"}; sessions '
          f'run with {optimization_level()} graph optimizations')


if __name__ == '__main__':
    main()
