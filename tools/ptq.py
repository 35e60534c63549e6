"""Post-training INT8 quantization of a trained classifier, from its config.

    python tools/ptq.py configs/pruning/autoslim/autoslim_plaincnn_digits_supernet.py \\
        work_dirs/autoslim_plaincnn_digits_supernet/epoch_30.pth
    python tools/ptq.py CONFIG CHECKPOINT --subnet work_dirs/<search>/subnet.yaml

Builds the model of CONFIG and loads CHECKPOINT (an mmengine checkpoint or a plain
state_dict, of the whole model or of its ``architecture``); an AutoSlim supernet is
quantized at full width, or at the channel config given with ``--subnet`` (sliced with
``slim_model``, its batch-norm statistics recalibrated on training batches).  Calibration
batches come from the config's ``train_dataloader``; the model is quantized with
``quantize_torch_model``, exported as a QDQ ONNX model and evaluated on the
``val_dataloader``: top-1 of FP32, of the simulated INT8 (``QuantExecutor``) and of
onnxruntime running the QDQ model, then the SNR table of ``analyse_error``.  Writes
``<work_dir>/<config name>_int8.onnx``, ``ptq.json`` (the figures) and ``ptq.log``; exit
code 2 for a mistake in the arguments, the config, the checkpoint or the subnet.  See
docs/tools/ptq.md.
"""
import argparse
import json
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import onnxruntime as ort
import torch
import torch.nn as nn
from mmengine.config import Config, DictAction
from mmengine.logging import MMLogger
from mmengine.registry import init_default_scope
from mmengine.runner import Runner

from razorlib.engine.config import ConfigError, check_config, load_config
from razorlib.engine.loops import recalibrate_bn
from razorlib.pruning import remove_masks, slim_model
from razorlib.quantization import (DISPATCHERS, OBSERVERS, QuantExecutor, analyse_error,
                                   export_graph, quantize_torch_model)
from razorlib.registry import MODELS, SCOPE

PLATFORMS = ('TRT_INT8', 'ORT_INT8')
Batch = Tuple[torch.Tensor, torch.Tensor]  # preprocessed images, labels


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Quantize a trained classifier to INT8.')
    parser.add_argument('config', help='the config file')
    parser.add_argument('checkpoint', help='the checkpoint or state_dict to quantize')
    parser.add_argument('--subnet', help='channel config (YAML/JSON) of a supernet subnet')
    parser.add_argument('--platform', default='TRT_INT8', choices=PLATFORMS)
    parser.add_argument('--calib-steps', type=int, default=32, help='calibration batches')
    parser.add_argument('--observer', default='percentile', choices=sorted(OBSERVERS),
                        help='activation observer')
    parser.add_argument('--dispatcher', default='conservative', choices=sorted(DISPATCHERS))
    parser.add_argument('--recalibrate-bn', type=int, default=None, metavar='STEPS',
                        help='batches to recompute batch-norm statistics on; default '
                        '--calib-steps with --subnet, else 0')
    parser.add_argument('--analyse-steps', type=int, default=4,
                        help='validation batches of the SNR analysis')
    parser.add_argument('--top', type=int, default=20, help='rows of the SNR table')
    parser.add_argument('--work-dir', help='default: work_dirs/ptq_<config name>')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, metavar='KEY=VALUE',
                        help='override config keys, e.g. val_dataloader.batch_size=100')
    parser.add_argument('--seed', type=int, default=0)
    return parser.parse_args(argv)


def load_classifier(args: argparse.Namespace) -> Tuple[Config, nn.Module, nn.Module]:
    """The config, its model with the checkpoint loaded, and the classifier to quantize
    (the model's ``architecture`` when it has one), sliced to ``--subnet``.

    Raises:
        ConfigError: a missing file, a config without what the tool needs, a checkpoint
            or subnet that does not fit the model.
    """
    for what, path in (('checkpoint', args.checkpoint), ('--subnet', args.subnet)):
        if path is not None and not Path(path).is_file():
            raise ConfigError(f'{what}: {path} does not exist')
    cfg = load_config(args.config, args.cfg_options)
    check_config(cfg, required=('model', 'train_dataloader', 'val_dataloader'))
    init_default_scope(cfg.get('default_scope') or SCOPE)
    model = MODELS.build(cfg.model)
    state = torch.load(args.checkpoint, map_location='cpu')
    state = state.get('state_dict', state)
    classifier = getattr(model, 'architecture', model)
    whole = any(key.startswith('architecture.') for key in state)
    try:
        (model if whole else classifier).load_state_dict(state)
    except RuntimeError as err:
        raise ConfigError(f'checkpoint {args.checkpoint}: {err}') from err
    if args.subnet:
        try:
            slim_model(classifier, args.subnet)
        except ValueError as err:
            raise ConfigError(f'--subnet {args.subnet}: {err}') from err
    remove_masks(classifier)
    return cfg, model, classifier


def preprocessed(loader, preprocessor: nn.Module, steps: Optional[int] = None) -> List[Batch]:
    """``(images, labels)`` of the first ``steps`` batches, through the data preprocessor."""
    batches = []
    for step, data in enumerate(loader):
        if step == steps:
            break
        data = preprocessor(data, False)
        labels = torch.cat([sample.gt_label for sample in data['data_samples']])
        batches.append((data['inputs'], labels))
    return batches


def fixed_size(images: torch.Tensor, batch_size: int) -> List[Tuple[torch.Tensor, int]]:
    """``images`` in chunks of ``batch_size`` (the graph's static batch), the last one padded
    with copies of its last image; each with its count of real images."""
    chunks = []
    for start in range(0, len(images), batch_size):
        chunk = images[start:start + batch_size]
        count = len(chunk)
        padding = chunk[-1:].expand(batch_size - count, *chunk.shape[1:])
        chunks.append((torch.cat([chunk, padding]), count))
    return chunks


def top1(run: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor,
         labels: torch.Tensor, batch_size: int) -> float:
    """Top-1 accuracy in percent of ``run`` (images -> logits) over fixed-size chunks."""
    logits = torch.cat([run(chunk)[:count] for chunk, count in fixed_size(images, batch_size)])
    return 100.0 * float((logits.argmax(1) == labels).float().mean())


def main(argv=None) -> int:
    args = parse_args(argv)
    name = Path(args.config).stem
    work_dir = Path(args.work_dir or f'work_dirs/ptq_{name}')
    work_dir.mkdir(parents=True, exist_ok=True)
    logger = MMLogger.get_instance(f'razorlib_ptq:{work_dir.resolve()}',
                                   log_file=str(work_dir / 'ptq.log'))
    torch.manual_seed(args.seed)
    try:
        cfg, model, classifier = load_classifier(args)
    except ConfigError as err:
        logger.error(f'{args.config}: {err}')
        return 2

    preprocessor = model.data_preprocessor
    train_loader = Runner.build_dataloader(cfg.train_dataloader, seed=args.seed)
    bn_steps = args.recalibrate_bn
    if bn_steps is None:
        bn_steps = args.calib_steps if args.subnet else 0
    recalibrate_bn(classifier, train_loader, bn_steps, seed=args.seed)
    classifier.eval()
    train = preprocessed(train_loader, preprocessor, args.calib_steps)
    shape = train[0][0].shape
    calibration = [images for images, _ in train if images.shape == shape]
    logger.info(f'{name}: {type(classifier).__name__}'
                f"{' sliced to ' + args.subnet if args.subnet else ''}, batch-norm statistics "
                f'from {bn_steps} batches; {args.platform}, {len(calibration)} calibration '
                f'batches of {tuple(shape)}, {args.observer} activations, {args.dispatcher} '
                'dispatch')

    graph = quantize_torch_model(classifier, calibration, calibration[0], args.platform,
                                 args.calib_steps, args.observer, args.dispatcher)
    onnx_path = work_dir / f'{name}_int8.onnx'
    export_graph(graph, onnx_path)
    session = ort.InferenceSession(str(onnx_path), providers=['CPUExecutionProvider'])
    input_name = session.get_inputs()[0].name
    executor = QuantExecutor(graph)

    val = preprocessed(Runner.build_dataloader(cfg.val_dataloader), preprocessor)
    images, labels = torch.cat([b[0] for b in val]), torch.cat([b[1] for b in val])
    runs: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        'fp32': classifier,
        'int8_simulated': lambda x: executor(x)[0],
        'int8_onnxruntime': lambda x: torch.from_numpy(
            session.run(None, {input_name: x.numpy()})[0]),
    }
    with torch.no_grad():
        accuracy = {key: top1(run, images, labels, shape[0]) for key, run in runs.items()}
    report = analyse_error(graph, [chunk for chunk, _ in fixed_size(images, shape[0])],
                           args.analyse_steps)
    logger.info(f'top-1 on {len(labels)} validation images: FP32 {accuracy["fp32"]:.2f}, '
                f'INT8 simulated {accuracy["int8_simulated"]:.2f}, INT8 onnxruntime '
                f'{accuracy["int8_onnxruntime"]:.2f}')
    logger.info(f'SNR of the quantized vs FP32 outputs ({args.analyse_steps} validation '
                f'batches), worst first:\n{report.table(top=args.top)}')
    results = dict(config=args.config, checkpoint=args.checkpoint, subnet=args.subnet,
                   platform=args.platform, onnx=str(onnx_path), top1=accuracy,
                   output_snr_db=report.outputs)
    (work_dir / 'ptq.json').write_text(json.dumps(results, indent=2))
    logger.info(f'wrote {onnx_path} and {work_dir / "ptq.json"}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
