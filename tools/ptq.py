"""Post-training INT8 quantization of a trained classifier, from a PTQ config.

Examples:
    python tools/ptq.py configs/quantization/ptq/autoslim_plaincnn_digits_trt_int8.py \\
        work_dirs/autoslim_plaincnn_digits_supernet/epoch_30.pth
    python tools/ptq.py CONFIG CHECKPOINT --subnet work_dirs/<search>/subnet.yaml

CONFIG is a PTQ config (``configs/quantization/ptq/``: the model's config through
``_base_``, a ``ptq`` section with the platform, observer, dispatcher, calibration steps,
dynamic batch, graph passes and export format, and a ``calib_dataloader``), or any model
config (the ``ptq`` defaults, calibration on its ``train_dataloader``); the options below
override ``ptq``.  Builds the model and loads CHECKPOINT (an mmengine checkpoint or a
plain state_dict, of the whole model or of its ``architecture``); an AutoSlim supernet is
quantized at full width, or at the channel config given with ``--subnet`` (sliced with
``slim_model``, its batch-norm statistics recalibrated on training batches).  The model is
quantized with ``quantize_torch_model``, exported (QDQ ONNX by default) and evaluated on
the ``val_dataloader``: top-1 of FP32, of the simulated INT8 (``QuantExecutor``) and of
onnxruntime running the QDQ model, then the SNR table of ``analyse_error``.  Writes
``<work_dir>/<config name>_int8.onnx`` (and ``.json`` for TRT_JSON), ``ptq.json`` (the
figures and settings) and ``ptq.log``; exit code 2 for a mistake in the arguments, the
config, its dataloaders (each built and its first batch read), the checkpoint or the
subnet, or a work dir holding an earlier run's results without ``--overwrite``, all
checked before the work dir is made.  See docs/tools/ptq.md.
"""
from __future__ import annotations

import argparse
import json
import runpy
import sys
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Optional, Tuple

# Only what the arguments need is imported here (no torch), so that --help is instant;
# the functions import the rest.
from mmengine.config import Config, DictAction

if TYPE_CHECKING:
    import torch
    import torch.nn as nn

    from razorlib.quantization import PTQSettings

PLATFORMS = ('TRT_INT8', 'ORT_INT8')
EXPORT_FORMATS = ('QDQ_ONNX', 'TRT_JSON', 'ONNX')
#: Names in razorlib.quantization's OBSERVERS and DISPATCHERS (tests/test_tools/test_help.py
#: checks that they are registered).
OBSERVER_NAMES = ('kl', 'minmax', 'mse', 'percentile')
DISPATCHER_NAMES = ('aggressive', 'allin', 'conservative', 'pointwise')
Batch = Tuple['torch.Tensor', 'torch.Tensor']  # preprocessed images, labels
#: Top-level config sections the tool reads besides the Runner's: ``--cfg-options`` may add
#: them (``ptq``'s keys are checked by ``PTQSettings``).
CONFIG_KEYS = ('ptq', 'calib_dataloader')
#: Why the validation batches need labels, for the message of a batch without them.
LABELS_NEEDED_BY = 'the top-1 accuracy compares the predictions with them'
#: razorlib.utils.cli, run from its file beside this folder: ``import razorlib`` loads
#: torch, which --help must not wait for.
at_least = runpy.run_path(str(Path(__file__).resolve().parents[1] / 'razorlib' / 'utils'
                              / 'cli.py'))['at_least']


def results_of(name: str) -> Tuple[str, ...]:
    """What a run on config ``name`` writes (the TRT_JSON ranges beside the model); a work
    dir holding any is refused without --overwrite."""
    return ('ptq.json', f'{name}_int8.onnx', f'{name}_int8.json')


def add_recalibrate_bn(parser: argparse.ArgumentParser, calib_steps: str = '--calib-steps'
                       ) -> None:
    """``--recalibrate-bn STEPS``; tools/deploy.py takes it too, so that both tools build
    a subnet's graph from the same batch-norm statistics.  ``calib_steps`` names where the
    default comes from in the tool's help."""
    parser.add_argument('--recalibrate-bn', type=at_least(0), default=None, metavar='STEPS',
                        help='batches to recompute batch-norm statistics on; default '
                        f'{calib_steps} with --subnet, else 0')


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('config', help='the config file')
    parser.add_argument('checkpoint', help='the checkpoint or state_dict to quantize')
    parser.add_argument('--subnet', help='channel config (YAML/JSON) of a supernet subnet '
                        '(default: none, the full width)')
    parser.add_argument('--platform', choices=PLATFORMS,
                        help="target platform (default: the config's ptq.platform, else "
                        'TRT_INT8)')
    parser.add_argument('--calib-steps', type=at_least(1),
                        help="calibration batches (default: the config's ptq.calib_steps, "
                        'else 32)')
    parser.add_argument('--observer', choices=OBSERVER_NAMES,
                        help="activation observer (default: the config's ptq.observer, "
                        'else percentile)')
    parser.add_argument('--dispatcher', choices=DISPATCHER_NAMES,
                        help="which operations run in INT8 (default: the config's "
                        'ptq.dispatcher, else conservative)')
    parser.add_argument('--export-format', choices=EXPORT_FORMATS,
                        help="what to write (default: the config's ptq.export, else the "
                        "platform's: QDQ_ONNX)")
    parser.add_argument('--dynamic-batch', action=argparse.BooleanOptionalAction,
                        help='a symbolic batch axis, so the ONNX model takes any batch size '
                        "(default: the config's ptq.dynamic_batch, else on)")
    add_recalibrate_bn(parser)
    parser.add_argument('--analyse-steps', type=at_least(1), default=4,
                        help='validation batches of the SNR analysis (default: %(default)s)')
    parser.add_argument('--top', type=at_least(1), default=20,
                        help='rows of the SNR table (default: %(default)s)')
    parser.add_argument('--work-dir', help='where the files go (default: '
                        'work_dirs/ptq_<config name>)')
    parser.add_argument('--overwrite', action='store_true',
                        help="replace the ptq.json and <config name>_int8.onnx (.json) of an "
                        'earlier run in the work dir (default: refuse)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, metavar='KEY=VALUE',
                        help='override config keys, e.g. val_dataloader.batch_size=100 '
                        '(default: none)')
    parser.add_argument('--seed', type=int, default=0,
                        help='random seed of the dataloaders (default: %(default)s)')
    parser.add_argument('--threads', type=at_least(1), metavar='N',
                        help='torch threads (default: 1 for a model under 1M parameters, '
                        'else the idle cores; OMP_NUM_THREADS if set)')
    return parser.parse_args(argv)


def load_classifier(args: argparse.Namespace) -> Tuple[Config, nn.Module, nn.Module]:
    """The config, its model with the checkpoint loaded, and the classifier to quantize
    (the model's ``architecture`` when it has one), sliced to ``--subnet``.  A pruning
    algorithm's checkpoint (ItePrune, GroupFisher, network slimming) holds its subnet:
    the classifier is its slim architecture, which a ``--subnet`` may not slice again.

    Raises:
        ConfigError: a missing file, a config without what the tool needs, a checkpoint
            or subnet that does not fit the model.
    """
    from mmengine.registry import init_default_scope

    from razorlib.engine.checkpoint_check import check_fits, read_checkpoint, state_dict_of
    from razorlib.engine.config import ConfigError, check_config, load_config
    from razorlib.pruning import remove_masks, slim_model
    from razorlib.registry import MODELS, SCOPE
    from razorlib.utils.cli import merge_cfg_options

    for what, path in (('checkpoint', args.checkpoint), ('--subnet', args.subnet)):
        if path is not None and not Path(path).is_file():
            raise ConfigError(f'{what}: {path} does not exist')
    cfg = merge_cfg_options(load_config(args.config), args.cfg_options, CONFIG_KEYS,
                            error=ConfigError)
    check_config(cfg, required=('model', 'train_dataloader', 'val_dataloader'))
    init_default_scope(cfg.get('default_scope') or SCOPE)
    model = MODELS.build(cfg.model)
    state = state_dict_of(read_checkpoint(args.checkpoint))
    classifier = getattr(model, 'architecture', model)
    whole = any(key.startswith('architecture.') for key in state)
    check_fits(model if whole else classifier, state, args.checkpoint)
    (model if whole else classifier).load_state_dict(state)
    if whole and hasattr(model, 'slim_architecture'):  # pruned in training: its masks
        if args.subnet:
            raise ConfigError(f'--subnet {args.subnet}: the {type(model).__name__} '
                              f'checkpoint {args.checkpoint} holds the subnet it pruned to; '
                              'leave --subnet out')
        classifier = model.slim_architecture()
    if args.subnet:
        try:
            check_subnet_fits(model, args.subnet)
            slim_model(classifier, args.subnet)
        except ValueError as err:
            raise ConfigError(f'--subnet {args.subnet}: {err}') from err
    remove_masks(classifier)
    return cfg, model, classifier


def check_subnet_fits(model: nn.Module, subnet: str) -> None:
    """Check a supernet's channel config against its traced channel groups, as
    tools/get_flops.py does (``set_subnet``): one that names some layers only, whose
    layers disagree (a consumer's input channels that are not its producer's output
    ones) or that names none would otherwise be sliced as given, and fail in the first
    forward or quantize the full width.  A dense model has no groups traced: a config
    naming nothing is refused (it would quantize the model whole), its slices are tried
    by a forward in :func:`check_data`.

    Raises:
        ValueError: naming the first ``modules.<name>`` entry that does not fit.
    """
    from razorlib.pruning import ChannelConfig

    channel_cfg = ChannelConfig.load(subnet)
    if not channel_cfg.modules and not channel_cfg.params:
        raise ValueError('the channel config names no module, so it would quantize the model '
                         'at full width; leave --subnet out for that')
    pruner = getattr(model, 'pruner', None)
    if hasattr(pruner, 'subnet_from_channel_config'):
        pruner.subnet_from_channel_config(channel_cfg)


def preprocessed(loader, preprocessor: nn.Module, steps: Optional[int] = None) -> List[Batch]:
    """``(images, labels)`` of the first ``steps`` batches of the validation ``loader``,
    through the data preprocessor."""
    from razorlib.engine.data_check import batch_labels

    batches = []
    for step, data in enumerate(islice(loader, steps)):
        data = preprocessor(data, False)
        batches.append((data['inputs'],
                        batch_labels(data, step, 'val_dataloader', LABELS_NEEDED_BY)))
    return batches


def data_keys(cfg: Config, args: argparse.Namespace, settings: PTQSettings
              ) -> Dict[str, Optional[str]]:
    """The dataloaders the run reads, each with why it needs labels (None: inputs only):
    the calibration's, the batch-norm recalibration's (where it runs) and the validation's."""
    keys = {calibration_key(cfg): None}
    if bn_steps(args, settings):
        keys.setdefault('train_dataloader', None)
    keys['val_dataloader'] = LABELS_NEEDED_BY
    return keys


def check_data(cfg: Config, args: argparse.Namespace, settings: PTQSettings,
               classifier: nn.Module, preprocessor: nn.Module) -> Dict[str, Iterable]:
    """The dataloaders the run reads (:func:`data_keys`), by config key, each built and its
    first batch read, and the classifier run on the calibration batch, before the work dir
    is made: an empty dataset, one of an unknown type or with an argument it refuses,
    batches without inputs (or, to validate, without labels), or a dense model's
    ``--subnet`` slices that do not fit each other, would otherwise fail once the run has
    written its log.  The run reads these loaders, so each dataset is built once.  Read
    under ``--seed`` with the generators restored after, so that the run reads what it
    would without the check.

    Raises:
        ConfigError: naming the dataloader key at fault, or ``--subnet``.
    """
    import torch

    from razorlib.engine.config import ConfigError
    from razorlib.engine.data_check import checked_loader
    from razorlib.engine.loops.bn_calibration import seeded
    from razorlib.registry import SCOPE

    scope = cfg.get('default_scope') or SCOPE
    with seeded(args.seed), torch.no_grad():
        checked = {key: checked_loader(cfg.get(key), key, args.seed, labels_needed_by, scope)
                   for key, labels_needed_by in data_keys(cfg, args, settings).items()}
        if args.subnet:
            images = preprocessor(checked[calibration_key(cfg)].first_batch, False)['inputs']
            mode = classifier.training
            try:
                classifier.eval()(images)
            except RuntimeError as err:
                raise ConfigError(f'--subnet {args.subnet}: the model sliced to it fails on a '
                                  f'{calibration_key(cfg)} batch: {err}') from err
            finally:
                classifier.train(mode)
    return {key: loader for key, (loader, _) in checked.items()}


def fixed_size(images: torch.Tensor, batch_size: int) -> List[Tuple[torch.Tensor, int]]:
    """``images`` in chunks of ``batch_size`` (the graph's static batch), the last one padded
    with copies of its last image; each with its count of real images."""
    import torch

    chunks = []
    for start in range(0, len(images), batch_size):
        chunk = images[start:start + batch_size]
        count = len(chunk)
        padding = chunk[-1:].expand(batch_size - count, *chunk.shape[1:])
        chunks.append((torch.cat([chunk, padding]), count))
    return chunks


def top1(run: Callable[[torch.Tensor], torch.Tensor], chunks: List[Tuple[torch.Tensor, int]],
         labels: torch.Tensor) -> float:
    """Top-1 accuracy in percent of ``run`` (images -> logits) over the ``chunks`` of
    :func:`evaluation_chunks`."""
    return accuracy(outputs(run, chunks), labels)


def outputs(run: Callable[[torch.Tensor], torch.Tensor], chunks: List[Tuple[torch.Tensor, int]]
            ) -> torch.Tensor:
    """The logits of ``run`` on the real images of the ``chunks`` (the padding dropped)."""
    import torch

    return torch.cat([run(chunk)[:count] for chunk, count in chunks])


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Percent of ``logits`` whose argmax is ``labels``."""
    return 100.0 * float((logits.argmax(1) == labels).float().mean())


def strict_json(results: dict) -> str:
    """``results`` as strict JSON: an infinite SNR (outputs identical to the reference) or
    a NaN one is written ``null``, where ``json.dumps`` writes ``Infinity`` and ``NaN``,
    which JSON has not and strict parsers refuse."""
    import math

    def finite(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {key: finite(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [finite(item) for item in value]
        return value

    return json.dumps(finite(results), indent=2, allow_nan=False)


def ptq_settings(cfg: Config, args: argparse.Namespace) -> PTQSettings:
    """The config's ``ptq`` section with the options given on the command line over it.

    Raises:
        ConfigError: a ``ptq`` key that is no setting, or a value that is not valid.
    """
    from razorlib.engine.config import ConfigError
    from razorlib.quantization import PTQSettings

    try:
        settings = PTQSettings.from_config(
            cfg.get('ptq'), platform=args.platform, observer=args.observer,
            dispatcher=args.dispatcher, calib_steps=args.calib_steps,
            dynamic_batch=args.dynamic_batch,
            export=args.export_format)
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(str(err).strip('"')) from err
    check_buildable(settings)
    refusal = settings.export_refusal(  # export_graph refuses it, but after calibration
        '--export-format' if args.export_format else 'ptq.export',
        '--platform' if args.platform else 'ptq.platform')
    if refusal:
        raise ConfigError(refusal)
    return settings


def check_buildable(settings: PTQSettings) -> None:
    """Build the observer, the dispatcher and the graph passes once, so that a misspelled
    name or option in ``ptq`` is reported now, naming its key, rather than as a traceback
    after the model is calibrated.

    Raises:
        ConfigError: what building one of them raised, after its ``ptq.`` key.
    """
    from razorlib.engine.config import ConfigError
    from razorlib.ir.components import build_component, split_type
    from razorlib.ir.passes import build_pass
    from razorlib.quantization import DISPATCHERS, observer_class

    def observer():
        name, options = split_type(settings.observer, 'ptq.observer')
        return observer_class(name)(**options)

    builds = {'ptq.observer': observer,
              'ptq.dispatcher': lambda: build_component(DISPATCHERS, settings.dispatcher),
              'ptq.passes': lambda: [build_pass(spec) for spec in settings.passes]}
    for key, build in builds.items():
        try:
            build()
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigError(f'{key}: {str(err).strip(chr(34))}') from err


def recalibrate(args: argparse.Namespace, loaders: Dict[str, Iterable], classifier: nn.Module,
                settings: PTQSettings) -> int:
    """Recompute the classifier's batch-norm statistics on ``--recalibrate-bn`` batches of
    the ``train_dataloader`` of ``loaders`` (:func:`check_data`'s; default ``calib_steps``
    for a ``--subnet``: a supernet's subnet carries the full width's statistics, which ruin
    its accuracy, more so in INT8; else none), then put it in eval mode.  tools/deploy.py
    calls it too, so both tools quantize the same model.

    Returns:
        The number of batches the statistics came from (fewer than asked for where the
        training dataloader ends first).
    """
    from razorlib.engine.loops import recalibrate_bn

    steps = bn_steps(args, settings)
    used = 0
    if steps:
        used = recalibrate_bn(classifier, loaders['train_dataloader'], steps, seed=args.seed)
    classifier.eval()
    return used


def bn_steps(args: argparse.Namespace, settings: PTQSettings) -> int:
    """The training batches ``--recalibrate-bn`` asks for (default ``calib_steps`` for a
    ``--subnet``, else none)."""
    if args.recalibrate_bn is not None:
        return args.recalibrate_bn
    return settings.calib_steps if args.subnet else 0


def calibration_key(cfg: Config) -> str:
    """The dataloader calibration reads: ``calib_dataloader``, else ``train_dataloader``."""
    return 'calib_dataloader' if cfg.get('calib_dataloader') else 'train_dataloader'


def calibration_batches(loader: Iterable, preprocessor: nn.Module, settings: PTQSettings
                        ) -> List[torch.Tensor]:
    """The preprocessed images of the first ``calib_steps`` batches of the calibration
    ``loader`` (:func:`calibration_key`'s; no labels needed); for a static batch axis only
    those of the first batch's shape, since such a graph takes one shape only."""
    images = [preprocessor(data, False)['inputs']
              for data in islice(loader, settings.calib_steps)]
    return [batch for batch in images
            if settings.dynamic_batch or batch.shape == images[0].shape]


def evaluation_chunks(val: List[Batch], batch_size: Optional[int],
                      largest: Optional[int] = None) -> List[Tuple[torch.Tensor, int]]:
    """The validation images as the graph takes them, each chunk with its count of real
    images: for a dynamic batch axis (``batch_size`` None) the batches as they are, or
    re-cut to at most ``largest`` images (a TensorRT engine's largest batch); else re-cut
    to the static ``batch_size``, whatever ``largest`` is."""
    import torch

    if batch_size is None and largest is None:
        return [(images, len(images)) for images, _ in val]
    images = torch.cat([images for images, _ in val])
    if batch_size is None:
        return [(chunk, len(chunk)) for chunk in images.split(largest)]
    return fixed_size(images, batch_size)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch
    from mmengine.logging import MMLogger

    from razorlib.engine.checkpoint_check import CheckpointError
    from razorlib.engine.config import ConfigError
    from razorlib.engine.threads import set_threads
    from razorlib.quantization import (QuantExecutor, analyse_error, export_graph,
                                       int8_session, quantize_torch_model)
    from razorlib.quantization.export import optimization_level
    from razorlib.utils.cli import check_earlier_results, refuse

    name = Path(args.config).stem
    work_dir = Path(args.work_dir or f'work_dirs/ptq_{name}')
    torch.manual_seed(args.seed)
    # every input is checked before the work dir is made: a refused run writes nothing
    try:
        check_earlier_results(work_dir, results_of(name), args.overwrite, error=ConfigError)
    except ConfigError as err:
        return refuse(err)
    try:
        cfg, model, classifier = load_classifier(args)
        settings = ptq_settings(cfg, args)
        loaders = check_data(cfg, args, settings, classifier, model.data_preprocessor)
    except CheckpointError as err:  # one cut short, or of another model
        return refuse(err)
    except ConfigError as err:
        return refuse(err, args.config)
    work_dir.mkdir(parents=True, exist_ok=True)
    logger = MMLogger.get_instance(f'razorlib_ptq:{work_dir.resolve()}',
                                   log_file=str(work_dir / 'ptq.log'))
    logger.info(f'threads: {set_threads(args.threads, classifier)}')

    preprocessor = model.data_preprocessor
    recalibrated = recalibrate(args, loaders, classifier, settings)
    calibration = calibration_batches(loaders[calibration_key(cfg)], preprocessor, settings)
    shape = calibration[0].shape
    logger.info(f'{name}: {type(classifier).__name__}'
                f"{' sliced to ' + args.subnet if args.subnet else ''}, batch-norm statistics "
                f'from {recalibrated} batches; {len(calibration)} calibration batches of '
                f'{tuple(shape)}; {", ".join(settings.describe())}')

    graph = quantize_torch_model(classifier, calibration, calibration[0],
                                 **settings.quantize_kwargs())
    onnx_path = work_dir / f'{name}_int8.onnx'
    # an earlier run's files (--overwrite) must not outlive the ONNX model: its figures
    # would describe another model, its TensorRT ranges another export
    for earlier in results_of(name):
        (work_dir / earlier).unlink(missing_ok=True)
    try:  # a graph with nothing quantized is refused (quantize_graph said why)
        export_graph(graph, onnx_path, settings.export or settings.platform)
    except ValueError as err:
        return refuse(err, args.config)
    executor = QuantExecutor(graph)
    runs: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        'fp32': classifier, 'int8_simulated': lambda x: executor(x)[0]}
    if settings.export_format.name == 'QDQ_ONNX':  # the other formats are not INT8 in ORT
        session = int8_session(onnx_path)  # unfused where this CPU's int8 kernels saturate
        input_name = session.get_inputs()[0].name
        runs['int8_onnxruntime'] = lambda x: torch.from_numpy(
            session.run(None, {input_name: x.numpy()})[0])

    val = preprocessed(loaders['val_dataloader'], preprocessor)
    labels = torch.cat([b[1] for b in val])
    chunks = evaluation_chunks(val, None if settings.dynamic_batch else shape[0])
    with torch.no_grad():
        top1s = {key: top1(run, chunks, labels) for key, run in runs.items()}
    report = analyse_error(graph, [chunk for chunk, _ in chunks], args.analyse_steps)
    analysed = min(args.analyse_steps, len(chunks))  # analyse_error stops where they end
    labelled = {'fp32': 'FP32', 'int8_simulated': 'INT8 simulated',
                'int8_onnxruntime': f'INT8 onnxruntime ({optimization_level()} optimizations)'}
    logger.info(f'top-1 on {len(labels)} validation images: '
                + ', '.join(f'{labelled[key]} {value:.2f}' for key, value in top1s.items()))
    logger.info(f'SNR of the quantized vs FP32 outputs ({analysed} validation '
                f'batches), worst first:\n{report.table(top=args.top)}')
    results = dict(config=args.config, checkpoint=args.checkpoint, subnet=args.subnet,
                   platform=settings.platform, onnx=str(onnx_path), top1=top1s,
                   output_snr_db=report.outputs, settings=settings.to_dict(),
                   batches=dict(batch_norm=recalibrated, calibration=len(calibration),
                                analysed=analysed))
    (work_dir / 'ptq.json').write_text(strict_json(results))
    logger.info(f'wrote {onnx_path} and {work_dir / "ptq.json"}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
