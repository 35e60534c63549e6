"""Build TensorRT engines of a quantized model and check them against razorlib's simulation.

Examples:
    python tools/deploy.py configs/quantization/ptq/autoslim_plaincnn_digits_trt_int8.py \\
        work_dirs/autoslim_plaincnn_digits_supernet/epoch_30.pth
    python tools/deploy.py configs/quantization/qat/qat_plaincnn_digits_trt_int8.py \\
        work_dirs/qat_plaincnn_digits_trt_int8/epoch_5.pth

CONFIG is what tools/ptq.py takes (a PTQ config, or a model config with the ``ptq``
defaults) and CHECKPOINT the trained model, or CONFIG is a QAT config
(``configs/quantization/qat/``) and CHECKPOINT a checkpoint of its training, either
quantizing for TRT_INT8 (the only platform TensorRT's INT8 engine takes).  The model
is quantized as tools/ptq.py quantizes it (with its functions: a ``--subnet`` sliced and
its batch-norm statistics recalibrated, ``--recalibrate-bn``) or its trained QAT graph
restored (a QAT checkpoint holds its graph: ``--subnet`` and ``--recalibrate-bn`` are
refused with it), then written twice: the QDQ ONNX
model (INT8) and the plain ONNX model; TensorRT builds an INT8 engine from the first
(explicit quantization: the Q/DQ pairs say what runs in int8, the rest in FP16) and an
FP16 engine from the second.  Both run on the ``val_dataloader``; their outputs are
compared with razorlib's simulated INT8 (``QuantExecutor``) and with FP32 (the graph
dequantized, what the plain model holds; for a QAT checkpoint the trained float model,
QAT's learned weights and biases unquantized): SNR in dB, top-1, and top-1 agreement.
Writes ``<work_dir>/<config name>_int8.onnx``, ``_fp32.onnx``, the ``.engine`` files and
``deploy.json``; a work dir holding an earlier run's is refused without ``--overwrite``.

TensorRT is an optional extra (``pip install 'razorlib[tensorrt]'``, on a machine with
an NVIDIA GPU).  Where it is not installed, or no CUDA GPU is present, the tool says so in
one line and exits with code 0 before it does anything; exit code 2 for a mistake in
the arguments or the config file (checked first), the config, its dataloaders, the
checkpoint or the subnet, with nothing written.  See docs/quantization/deploy.md.
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Optional, Tuple

from mmengine.config import DictAction
from mmengine.logging import print_log

if TYPE_CHECKING:
    import torch

TOOLS = Path(__file__).resolve().parent
#: Exit code where TensorRT or a CUDA GPU is missing: nothing to do is not a failure.
NOT_AVAILABLE = 0


def parse_args(argv=None) -> argparse.Namespace:
    ptq = _load_ptq_tool()
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('config', help='a PTQ, model or QAT config file')
    parser.add_argument('checkpoint', help='the trained model (or QAT) checkpoint')
    parser.add_argument('--subnet', help='channel config of a supernet subnet (PTQ only; '
                        'default: none, the full width)')
    ptq.add_recalibrate_bn(parser, calib_steps="the config's ptq.calib_steps")
    parser.add_argument('--batch-size', type=ptq.at_least(1), default=32,
                        help='the engines\' largest and optimal batch (default: %(default)s)')
    parser.add_argument('--workspace', type=ptq.at_least(1), default=1024, metavar='MIB',
                        help='TensorRT builder workspace in MiB (default: %(default)s)')
    parser.add_argument('--work-dir', help='where the files go (default: '
                        'work_dirs/deploy_<config name>)')
    parser.add_argument('--overwrite', action='store_true',
                        help='replace the deploy.json, ONNX models and engines of an earlier '
                        'run in the work dir (default: refuse)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, metavar='KEY=VALUE',
                        help='override config keys (default: none)')
    parser.add_argument('--seed', type=int, default=0,
                        help='random seed of the dataloaders (default: %(default)s)')
    return parser.parse_args(argv)


def results_of(name: str) -> Tuple[str, ...]:
    """What a run on config ``name`` writes; a work dir holding any is refused without
    --overwrite, and with it they are removed before the new ONNX models are written, so
    that a run failing after that (an engine TensorRT cannot build) leaves no earlier
    figures beside models they do not describe."""
    return ('deploy.json', *(f'{name}_{kind}{suffix}' for kind in ('int8', 'fp32')
                             for suffix in ('.onnx', '.engine')))


def work_dir_of(args: argparse.Namespace) -> Path:
    """--work-dir, or ``work_dirs/deploy_<config name>``."""
    return Path(args.work_dir or f'work_dirs/deploy_{Path(args.config).stem}')


def unavailable() -> Optional[str]:
    """Why no engine can be built here (one line), or None when TensorRT and a GPU are."""
    if importlib.util.find_spec('tensorrt') is None:
        return ("TensorRT is not installed (pip install 'razorlib[tensorrt]' on a machine "
                'with an NVIDIA GPU): no engine built')
    import torch
    if not torch.cuda.is_available():
        return 'TensorRT is installed but no CUDA GPU is visible: no engine built'
    return None


@functools.lru_cache(maxsize=None)
def _load_ptq_tool():
    """tools/ptq.py as a module: deploy quantizes with its functions, so that both tools
    build the same graph from the same arguments."""
    spec = importlib.util.spec_from_file_location('ptq_tool', TOOLS / 'ptq.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def is_qat(cfg) -> bool:
    """Whether ``cfg`` is a QAT config: its checkpoint holds the trained INT8 graph."""
    return (cfg.get('model') or {}).get('type') == 'QAT'


def argument_refusal(args: argparse.Namespace) -> Optional[str]:
    """Why the arguments cannot be deployed (one line), or None: a CONFIG that cannot be
    read or ``--cfg-options`` it has no key for, flags a QAT checkpoint cannot take
    (:func:`qat_refusal`), a graph quantized for another platform than TensorRT's
    (:func:`platform_refusal`), a checkpoint or ``--subnet`` file that does not exist (the
    work dir holding an earlier run's results is :func:`main`'s to refuse).  Checked
    before TensorRT is looked for, so that a mistake is reported (exit code 2) on any
    machine, not hidden behind the line saying no engine can be built."""
    from razorlib.engine.config import ConfigError, load_config
    from razorlib.utils.cli import merge_cfg_options

    try:
        cfg = merge_cfg_options(load_config(args.config), args.cfg_options,
                                _load_ptq_tool().CONFIG_KEYS, error=ConfigError)
    except ConfigError as err:
        return str(err)
    refusal = qat_refusal(args, cfg) or platform_refusal(cfg)
    if refusal is not None:
        return refusal
    for what, path in (('checkpoint', args.checkpoint), ('--subnet', args.subnet)):
        if path is not None and not Path(path).is_file():
            return f'{what}: {path} does not exist'
    return None


def qat_refusal(args: argparse.Namespace, cfg) -> Optional[str]:
    """Why ``--subnet`` or ``--recalibrate-bn`` cannot apply to ``cfg`` (one line), or None.

    A QAT checkpoint holds its trained graph: the widths of the QAT config's
    ``model.architecture``, its batch norms folded into the convolutions; neither flag
    could change it, and ignoring them would deploy another model than the one asked for.
    """
    given = [flag for flag, value in (('--subnet', args.subnet),
                                      ('--recalibrate-bn', args.recalibrate_bn))
             if value is not None]
    if not given or not is_qat(cfg):
        return None
    return (f'{" and ".join(given)}: a QAT checkpoint already holds its trained INT8 graph '
            "(the widths of the config's model.architecture, batch norms folded); slice and "
            'recalibrate the model before QAT training instead')


def platform_refusal(cfg) -> Optional[str]:
    """Why ``cfg``'s graph cannot become a TensorRT INT8 engine (one line), or None.

    TensorRT's explicit quantization takes symmetric int8 Q/DQ pairs (zero points 0): a
    TRT_INT8 graph.  An ORT_INT8 one (uint8 activations with zero points) would be
    calibrated and written only for TensorRT to reject it, or to build an engine whose
    arithmetic is not the simulation it is compared with.
    """
    from razorlib.quantization import PTQSettings

    qat = is_qat(cfg)
    key = 'model.quantization' if qat else 'ptq'
    section = (cfg.model.get('quantization') if qat else cfg.get('ptq')) or {}
    platform = section.get('platform') or PTQSettings.platform
    platform = str(getattr(platform, 'name', platform)).upper()  # a TargetPlatform, any case
    if platform == 'TRT_INT8':
        return None
    remedy = ('train QAT for TRT_INT8' if qat
              else 'quantize for TRT_INT8 (--cfg-options ptq.platform=TRT_INT8)')
    return (f'{key}.platform {platform}: TensorRT builds its INT8 engine from a TRT_INT8 '
            'graph (symmetric int8 Q/DQ pairs, zero points 0), not from one quantized for '
            f'{platform}; {remedy}, or run the {platform} QDQ model on onnxruntime')


def quantized_graph(args: argparse.Namespace):
    """``(graph, validation loader, preprocessor)``: the calibrated (PTQ) or trained (QAT)
    graph, and the ``val_dataloader`` checked before (built once: the run reads it).

    Raises:
        ConfigError: a missing file, a config or checkpoint that does not fit.
    """
    import torch
    from mmengine.registry import init_default_scope

    from razorlib.engine.checkpoint_check import check_fits, read_checkpoint, state_dict_of
    from razorlib.engine.config import ConfigError, check_config, load_config
    from razorlib.engine.data_check import checked_loader
    from razorlib.registry import MODELS, SCOPE
    from razorlib.utils.cli import merge_cfg_options

    cfg = merge_cfg_options(load_config(args.config), args.cfg_options,
                            _load_ptq_tool().CONFIG_KEYS, error=ConfigError)
    check_config(cfg, required=('model', 'val_dataloader'))
    init_default_scope(cfg.get('default_scope') or SCOPE)
    if not is_qat(cfg):
        return ptq_graph(args)
    model = MODELS.build(cfg.model)  # argument_refusal checked the checkpoint exists
    state = state_dict_of(read_checkpoint(args.checkpoint))
    check_fits(model, state, args.checkpoint)
    model.load_state_dict(state)
    ptq = _load_ptq_tool()
    val = checked_loader(cfg.val_dataloader, 'val_dataloader',
                         labels_needed_by=ptq.LABELS_NEEDED_BY,
                         scope=cfg.get('default_scope') or SCOPE).loader
    with torch.no_grad():
        return model.calibrated_graph(), val, model.data_preprocessor


def ptq_graph(args: argparse.Namespace):
    """``(graph, validation loader, preprocessor)`` of post-training quantization, built by
    tools/ptq.py's functions (the ``ptq`` settings, ``--subnet`` slicing, batch-norm
    recalibration, calibration batches, its checked dataloaders), so that deploy's graph is
    the one ptq.py exports.

    Raises:
        ConfigError: a missing file, a config, ``ptq`` section, checkpoint or subnet that
            does not fit.
    """
    from razorlib.quantization import quantize_torch_model

    ptq = _load_ptq_tool()
    args.platform = args.calib_steps = args.observer = args.dispatcher = None
    args.export_format = args.dynamic_batch = None
    cfg, model, classifier = ptq.load_classifier(args)
    settings = ptq.ptq_settings(cfg, args)
    loaders = ptq.check_data(cfg, args, settings, classifier, model.data_preprocessor)
    ptq.recalibrate(args, loaders, classifier, settings)
    images = ptq.calibration_batches(loaders[ptq.calibration_key(cfg)],
                                     model.data_preprocessor, settings)
    graph = quantize_torch_model(classifier, images, images[0], progress=False,
                                 **settings.quantize_kwargs())
    return graph, loaders['val_dataloader'], model.data_preprocessor


class Engine:
    """A TensorRT engine built from an ONNX model, run on torch CUDA tensors.

    Args:
        onnx_path: the model.
        int8: build with INT8 enabled (a QDQ model: explicit quantization) besides FP16.
        batch_size: the largest and optimal batch of a dynamic batch axis.
        workspace_mib: the builder's workspace.
    """

    def __init__(self, onnx_path: Path, int8: bool, batch_size: int, workspace_mib: int):
        import tensorrt as trt
        self.trt = trt
        self.onnx_path = onnx_path
        logger = trt.Logger(trt.Logger.WARNING)
        builder = trt.Builder(logger)
        network = builder.create_network(0)
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(onnx_path)):
            errors = '; '.join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise RuntimeError(f'TensorRT cannot parse {onnx_path}: {errors}')
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_mib << 20)
        config.set_flag(trt.BuilderFlag.FP16)
        if int8 and hasattr(trt.BuilderFlag, 'INT8'):
            config.set_flag(trt.BuilderFlag.INT8)
        profile = builder.create_optimization_profile()
        for index in range(network.num_inputs):
            tensor = network.get_input(index)
            shape = list(tensor.shape)
            if shape and shape[0] == -1:
                low, high = [1] + shape[1:], [batch_size] + shape[1:]
                profile.set_shape(tensor.name, low, high, high)
        config.add_optimization_profile(profile)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise RuntimeError(f'TensorRT failed to build an engine from {onnx_path}')
        self.plan = bytes(serialized)
        self.engine = trt.Runtime(logger).deserialize_cuda_engine(self.plan)
        self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        mode = trt.TensorIOMode.INPUT
        self.inputs = [n for n in names if self.engine.get_tensor_mode(n) == mode]
        self.outputs = [n for n in names if self.engine.get_tensor_mode(n) != mode]

    def __call__(self, images: 'torch.Tensor') -> 'torch.Tensor':
        """The first output on ``images`` (any batch up to the build's), as float32 on
        the CPU."""
        import torch
        if not self.context.set_input_shape(self.inputs[0], tuple(images.shape)):
            raise ValueError(f'TensorRT engine of {self.onnx_path}: its input '
                             f'{self.inputs[0]!r} cannot take shape {tuple(images.shape)} '
                             f'(it takes {tuple(self.engine.get_tensor_shape(self.inputs[0]))}'
                             ', -1 for any size up to --batch-size)')
        images = images.cuda().contiguous()
        self.context.set_tensor_address(self.inputs[0], images.data_ptr())
        results = []
        dtypes = {self.trt.float32: torch.float32, self.trt.float16: torch.float16}
        for name in self.outputs:
            shape = tuple(self.context.get_tensor_shape(name))
            out = torch.empty(shape, dtype=dtypes[self.engine.get_tensor_dtype(name)],
                              device='cuda')
            self.context.set_tensor_address(name, out.data_ptr())
            results.append(out)
        stream = torch.cuda.current_stream()
        if not self.context.execute_async_v3(stream.cuda_stream):
            raise RuntimeError('TensorRT execution failed')
        stream.synchronize()
        return results[0].float().cpu()


def compare(run, reference, chunks, labels) -> Dict[str, float]:
    """SNR (dB) against ``reference``, top-1 and agreement with ``reference``'s top-1, over
    the ``chunks`` of tools/ptq.py's ``evaluation_chunks`` (images, count of real ones)."""
    import torch

    from razorlib.quantization import snr_db

    ptq = _load_ptq_tool()
    with torch.no_grad():
        logits, expected = ptq.outputs(run, chunks), ptq.outputs(reference, chunks)
    return dict(snr_db=snr_db(expected, logits), top1=ptq.accuracy(logits, labels),
                agreement=ptq.accuracy(logits, expected.argmax(1)))


def static_batch(graph) -> Optional[int]:
    """The batch size ``graph`` is fixed to (``ptq.dynamic_batch=False``), None for a
    symbolic batch axis: a static engine takes that batch only."""
    shape = next(iter(graph.inputs.values())).shape
    return shape[0] if shape and isinstance(shape[0], int) else None


def main(argv=None) -> int:
    args = parse_args(argv)
    from razorlib.engine.config import ConfigError
    from razorlib.utils.cli import check_earlier_results, refuse

    refusal = argument_refusal(args)
    if refusal is not None:
        return refuse(refusal, args.config)
    name, work_dir = Path(args.config).stem, work_dir_of(args)
    try:  # on any machine, as the other mistakes in the arguments
        check_earlier_results(work_dir, results_of(name), args.overwrite, error=ConfigError)
    except ConfigError as err:
        return refuse(err)
    reason = unavailable()
    if reason is not None:
        print(f'tools/deploy.py: {reason}', flush=True)
        return NOT_AVAILABLE
    import torch

    from razorlib.engine.checkpoint_check import CheckpointError
    from razorlib.quantization import QuantExecutor, dequantized, export_graph

    torch.manual_seed(args.seed)
    paths = {'int8': work_dir / f'{name}_int8.onnx', 'fp16': work_dir / f'{name}_fp32.onnx'}
    try:
        graph, val_loader, preprocessor = quantized_graph(args)
        work_dir.mkdir(parents=True, exist_ok=True)  # made once the inputs check
        for earlier in results_of(name):  # --overwrite: none outlives the new models
            (work_dir / earlier).unlink(missing_ok=True)
        # a graph with nothing quantized is refused (quantize_graph said why)
        export_graph(graph, paths['int8'], 'QDQ_ONNX')
    except (ConfigError, CheckpointError, ValueError) as err:
        return refuse(err, args.config)
    export_graph(graph, paths['fp16'], 'ONNX')
    ptq = _load_ptq_tool()
    val = ptq.preprocessed(val_loader, preprocessor)
    labels = torch.cat([batch_labels for _, batch_labels in val])
    chunks = ptq.evaluation_chunks(val, static_batch(graph), args.batch_size)
    executor = QuantExecutor(graph)

    def simulated(x):
        return executor(x)[0]

    def fp32(x):
        with dequantized(graph):
            return executor(x)[0]

    results: Dict[str, Dict[str, float]] = {}
    for kind, path in paths.items():
        engine = Engine(path, kind == 'int8', args.batch_size, args.workspace)
        path.with_suffix('.engine').write_bytes(engine.plan)
        reference = simulated if kind == 'int8' else fp32
        results[f'trt_{kind}'] = compare(engine, reference, chunks, labels)
    with torch.no_grad():  # the reference of the rows above: its top-1 only
        results['fp32'] = dict(top1=ptq.top1(fp32, chunks, labels))
    results['int8_simulated'] = compare(simulated, fp32, chunks, labels)
    for key, value in results.items():
        print_log(f'{key}: ' + ', '.join(f'{k} {v:.2f}' for k, v in value.items()),
                  logger='current')
    (work_dir / 'deploy.json').write_text(ptq.strict_json(dict(
        config=args.config, checkpoint=args.checkpoint,
        onnx={k: str(v) for k, v in paths.items()}, results=results)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
