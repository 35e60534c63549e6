"""razorlib's PTQ passes and QAT vs onnxruntime's ``quantize_static``, on digits.

    python benchmarks/ptq_passes.py [--epochs 15] [--calib-batches 8] [--threads 1]
                                    [--score-split val|test] [--test-ratio 0.2]
                                    [--ort-like-trt] [--platform TRT_INT8|ORT_INT8]
                                    [--qat-start passes|baseline] [--qat-lr 1e-5]
                                    [--qat-schedule cosine|constant] [--passes P ...]
                                    [--calib-shifts] [--seed 0] [--out FILE]
    python benchmarks/ptq_passes.py --pool FILE ...

The models and their training are those of ``benchmarks/ptq_vs_ort.py`` (imported from
it): the digits PlainCNN supernet, its two L1-pruned subnets, a 16-wide ResNet-18 and a
MobileNetV2 x0.5, trained on the train split of the digits' three-way split
(``--test-ratio 0.2``: 1,077 train / 360 val / 360 test images) and scored on its test
split, which none of this benchmark's choices has seen (the pass list was chosen by runs
scored on the validation split: ``--score-split val``).  With ``--test-ratio 0`` the
models train on the two-way split of ``ptq_vs_ort.py`` (1,437 train / 360 val) and are
scored on its validation split (there is no test split).  Calibration reads training
images.  Each model is
quantized for TRT_INT8 (symmetric int8, per-channel weights, ``mse`` activations; or, with
``--platform ORT_INT8``, onnxruntime's own QDQ format: asymmetric uint8 activations,
symmetric per-channel int8 weights, the format ``quantize_static`` writes) by razorlib

- as calibrated (``baseline``);
- with the passes: ``LayerwiseEqualization``, ``ClipEqualization``,
  ``ActivationCentering``, ``AdaRound`` and ``BiasCorrection`` (``passes``; ``--passes``
  another list; runs 4-8 of benchmarks/README.md had no ``ActivationCentering``);
- with those and ``MixedPrecision`` targeting onnxruntime's best SNR on the calibration
  batches + ``--margin`` dB (``+ mixed``: how many layers stay in floating point); the
  target and the SNR it is compared with are both measured on the calibration batches
  (training images), so the scored split decides nothing here;
- by QAT: the ``passes`` graph (``--qat-start baseline``: the ``baseline`` one, as in
  runs 1-7 of benchmarks/README.md) trained ``--qat-epochs`` epochs with LSQ
  (:class:`~razorlib.quantization.LSQGraph`, Adam at ``--qat-lr`` annealed to 0, the
  log-scales at 100 times it, the training images with ``ptq_vs_ort.train``'s one-pixel
  shifts) on the labels (``QAT``), and the same with the
  FP32 model's logits as targets (``QAT+KD``: distillation at ``--qat-kd-temperature``,
  plus ``--qat-kd-label-weight`` times the labels' cross-entropy; ``--qat-kd-losses kl
  mse`` adds ``QAT+KD mse``, matching the logits' values instead of their softmax);

and by onnxruntime's ``quantize_static`` with each calibration method (its best on the
scored images is the reference; ``--ort-like-trt``: with ``ptq_vs_ort.trt_like_options``,
rounding where TensorRT does, instead of its defaults).  Every INT8 model is exported to
QDQ ONNX and run by onnxruntime on the 360 scored images: logits SNR against FP32 (dB),
top-1 and top-1 agreement with FP32.
Targets: razorlib with the passes at or above onnxruntime's best + 3 dB on every model;
QAT top-1 within 0.1 points of FP32.

One FP32 model does not settle either target: the same recipe met and missed the first
on two models that differ only by the machine they were trained on, and one of the 360
scored images is 0.28 points (runs 9-12 in benchmarks/README.md).  ``--seed`` trains
every FP32 model (and fine-tunes the subnets) from another torch seed (the recorded runs:
0; splits, calibration and QAT batches stay as they are), ``--out`` writes a run's
figures as JSON, and ``--pool FILE ...`` gives each target per model over such runs: the
mean with its standard error, the verdict on the mean, within two standard errors, and
in how many runs it holds.
"""
import argparse
import contextlib
import copy
import io
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import onnxruntime as ort
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ptq_vs_ort as base  # noqa: E402  (the models, data and onnxruntime side)

import razorlib  # noqa: E402
from razorlib.algorithms.qat import DISTILL_LOSSES, distill_options, qat_losses  # noqa: E402
from razorlib.ir import from_torch, to_onnx  # noqa: E402
from razorlib.models import ImageClassifier  # noqa: E402
from razorlib.quantization import (LSQGraph, MixedPrecision, export_graph,  # noqa: E402
                                   quantize_torch_model, snr_db)
from pooling import mean_and_error, verdict  # noqa: E402  (benchmarks/pooling.py)

PASSES = ['LayerwiseEqualization', 'ClipEqualization', 'ActivationCentering', 'AdaRound',
          'BiasCorrection']  # runs 4-8 of benchmarks/README.md: without ActivationCentering
MARGIN_TARGET_DB = 3.0  # the passes over onnxruntime's best, logits SNR
QAT_TARGET = -0.1  # a QAT row's top-1 minus FP32's, points


def pass_config(entry: str):
    """A ``--passes`` entry: a registered pass name, or a JSON config dict with ``type``."""
    return json.loads(entry) if entry.lstrip().startswith('{') else entry


def quantize(model, calibration, observer: str, ptq_passes: list, platform: str = 'TRT_INT8'):
    return quantize_torch_model(model, calibration, calibration[0], platform,
                                calib_steps=len(calibration), observer=observer,
                                progress=False, ptq_passes=ptq_passes)


def shifted(batches: List[torch.Tensor]) -> List[torch.Tensor]:
    """The batches, then each of them rolled by every non-zero one-pixel shift that
    ``ptq_vs_ort.train`` draws (rows and columns each by -1, 0 or 1): the training
    distribution, at 9 times the images.

    Example:
        >>> [b.flatten().tolist() for b in shifted([torch.arange(4.).view(1, 1, 2, 2)])][:3]
        [[0.0, 1.0, 2.0, 3.0], [3.0, 2.0, 1.0, 0.0], [2.0, 3.0, 0.0, 1.0]]
    """
    moves = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0)]
    return list(batches) + [torch.roll(b, move, dims=(2, 3)) for move in moves for b in batches]


def run_exported(graph, folder: Path, name: str, held: torch.Tensor) -> torch.Tensor:
    path = folder / f'{name}.onnx'
    export_graph(graph, path)
    return base.in_batches(base.onnxruntime_runner(path), held)


def margin_interval(fp32: torch.Tensor, ours: torch.Tensor, theirs: torch.Tensor,
                    draws: int = 1000, seed: int = 0) -> List[float]:
    """The 5th and 95th percentiles of ``SNR(ours) - SNR(theirs)`` (dB, against ``fp32``)
    over ``draws`` resamplings of the scored images with replacement: how far the margin
    could move on another draw of as many images like these.

    Example:
        >>> fp32 = torch.randn(360, 10)
        >>> ours, theirs = fp32 + 0.01 * torch.randn(360, 10), fp32 + 0.02 * torch.randn(360, 10)
        >>> low, high = margin_interval(fp32, ours, theirs)
        >>> 5.0 < low < 6.02 < high < 7.0  # 20 log10(2) dB, give or take
        True
    """
    generator = torch.Generator().manual_seed(seed)
    noise_ours = (ours - fp32).double().square().sum(1)
    noise_theirs = (theirs - fp32).double().square().sum(1)
    rows = torch.randint(len(fp32), (draws, len(fp32)), generator=generator)  # a draw a row
    margins = (10 * torch.log10(noise_theirs[rows].sum(1) / noise_ours[rows].sum(1))).float()
    return [float(margins.quantile(0.05)), float(margins.quantile(0.95))]


def train_qat(graph, images, labels, epochs: int, lr: float, teacher=None,
              temperature: float = 1.0, label_weight: float = 0.0,
              schedule: str = 'constant', kd_loss: str = 'kl') -> LSQGraph:
    """LSQ fine-tuning of a calibrated graph: Adam (the log-scales at 100 times ``lr``;
    ``schedule`` 'cosine' anneals both to 0 over the run), batches of 64, one-pixel
    shifts; on the labels, or distilling ``teacher`` (the FP32 model, in eval mode) with
    the QAT algorithm's losses (:func:`razorlib.algorithms.qat.qat_losses`, summed; the
    logits' loss ``kd_loss``)."""
    softmax = dict(temperature=temperature) if kd_loss == 'kl' else {}
    distill = None if teacher is None else distill_options(
        dict(softmax, label_weight=label_weight, loss=kd_loss))
    lsq = LSQGraph(graph)
    optimizer = torch.optim.Adam([dict(params=lsq.weights.parameters(), lr=lr),
                                  dict(params=lsq.scales.parameters(), lr=100 * lr)])
    annealing = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, max(epochs * (len(images) // 64), 1)) if schedule == 'cosine' else None
    for _ in range(epochs):
        for index in torch.randperm(len(images)).split(64):
            if len(index) < 64:  # the graph's batch axis is dynamic, but keep steps even
                continue
            shifts = tuple(torch.randint(-1, 2, (2, )).tolist())
            batch = torch.roll(images[index], shifts, dims=(2, 3))
            with torch.no_grad():
                target = None if teacher is None else teacher(batch)
            loss = sum(qat_losses(lsq(batch), labels[index], target, distill).values())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if annealing is not None:
                annealing.step()
    return lsq


def compare(model, calibration, held, held_labels, images, labels, args) -> Dict[str, dict]:
    fp32 = base.in_batches(model, held)
    results = {'FP32': base.scores(fp32, fp32, held_labels)}
    logits = {}  # the scored images' logits, for the margin's interval
    calib = torch.cat(calibration)
    calib_fp32 = base.in_batches(model, calib)
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        fp32_path = folder / 'fp32.onnx'
        to_onnx(from_torch(model, calibration[0]), fp32_path)
        for method in args.ort_methods:
            with contextlib.redirect_stdout(io.StringIO()):
                int8 = base.quantize_with_onnxruntime(fp32_path, calibration, method, folder,
                                                      args.ort_like_trt)
            runner = base.onnxruntime_runner(int8)
            key = base.ort_label(method, args.ort_like_trt)
            logits[key] = base.in_batches(runner, held)
            results[key] = base.scores(logits[key], fp32, held_labels)
            # MixedPrecision measures razorlib on the calibration batches: so is its target
            results[key]['calib_snr'] = snr_db(calib_fp32, base.in_batches(runner, calib))
        best = max(results[base.ort_label(m, args.ort_like_trt)]['calib_snr']
                   for m in args.ort_methods)
        adaround = dict(type='AdaRound', steps=args.adaround_steps)
        passes = [adaround if name == 'AdaRound' else pass_config(name) for name in args.passes]
        mixed = dict(type='MixedPrecision', target_snr_db=best + args.margin)
        start = time.perf_counter()
        baseline = quantize(model, calibration, args.observer, [], args.platform)
        results['baseline'] = base.scores(run_exported(baseline, folder, 'baseline', held),
                                          fp32, held_labels)
        graph = quantize(model, calibration, args.observer, passes, args.platform)
        logits['passes'] = run_exported(graph, folder, 'passes', held)
        results['passes'] = base.scores(logits['passes'], fp32, held_labels)
        best_ort = max((base.ort_label(m, args.ort_like_trt) for m in args.ort_methods),
                       key=lambda key: results[key]['snr'])  # the table's reference
        results['passes']['margin_interval'] = margin_interval(fp32, logits['passes'],
                                                               logits[best_ort])
        results['passes']['seconds'] = time.perf_counter() - start
        # QAT's start, taken before MixedPrecision floats layers of the passes graph
        start_graph = baseline if args.qat_start == 'baseline' else graph.copy(copy_value=True)
        MixedPrecision(**{k: v for k, v in mixed.items() if k != 'type'})(graph, calibration)
        results['+ mixed'] = base.scores(run_exported(graph, folder, 'mixed', held), fp32,
                                         held_labels)
        results['+ mixed']['float'] = len(graph.extension_attrib['mixed_precision']
                                          ['float_layers'])
        results['+ mixed']['target'] = mixed['target_snr_db']
        trainings = [('QAT', None, 'kl')] + [(qat_row(loss), model.eval(), loss)
                                             for loss in dict.fromkeys(args.qat_kd_losses)]
        for name, teacher, kd_loss in trainings:
            torch.manual_seed(0)  # the same batches and shifts for each
            start = start_graph.copy(copy_value=True)  # LSQGraph takes it over
            lsq = train_qat(start, images, labels, args.qat_epochs, args.qat_lr, teacher,
                            args.qat_kd_temperature, args.qat_kd_label_weight,
                            args.qat_schedule, kd_loss)
            results[name] = base.scores(
                run_exported(lsq.calibrated_graph(), folder,
                             name.lower().replace('+', '_').replace(' ', '_'), held),
                fp32, held_labels)
    return results


def qat_row(kd_loss: str) -> str:
    """The row of QAT distilling with the logits' loss ``kd_loss``: 'QAT+KD' for the
    softmax KL (the rows of runs 3-12), 'QAT+KD mse' for the logits' squared error."""
    return 'QAT+KD' if kd_loss == 'kl' else f'QAT+KD {kd_loss}'


def tables(rows: Dict[str, Dict[str, dict]], methods: List[str], margin: float,
           like_trt: bool = False) -> str:
    qat = [t for t in next(iter(rows.values()), {}) if t.startswith('QAT')]
    tools = ['baseline', 'passes', '+ mixed'] + qat
    methods = [base.ort_label(m, like_trt) for m in methods]
    header = (['model', 'best ORT SNR dB'] + [f'razorlib {t} SNR dB' for t in tools[:3]]
              + ['passes - best ORT dB', '90% interval (images resampled)',
                 'float layers (+ mixed)',
                 'mixed target dB (calibration)'] + [f'{t} SNR dB' for t in qat])
    lines = ['| ' + ' | '.join(header) + ' |', '|---|' + '---:|' * (len(header) - 1)]
    for model, r in rows.items():
        best = max(r[m]['snr'] for m in methods)
        lines.append('| ' + ' | '.join(
            [model, f'{best:.2f}'] + [f"{r[t]['snr']:.2f}" for t in tools[:3]]
            + [f"{r['passes']['snr'] - best:+.2f}",
               '{:+.2f} to {:+.2f}'.format(*r['passes']['margin_interval']),
               str(r['+ mixed']['float']),
               f"{r['+ mixed']['target']:.2f}"]
            + [f"{r[t]['snr']:.2f}" for t in tools[3:]]) + ' |')
    header = (['model', 'FP32 top-1', 'best ORT top-1 / agree']
              + [f'razorlib {t} top-1 / agree' for t in tools]
              + [f'{t} - FP32' for t in qat])
    lines += ['', '| ' + ' | '.join(header) + ' |', '|---|' + '---:|' * (len(header) - 1)]
    for model, r in rows.items():
        best = max(methods, key=lambda key: r[key]['snr'])
        cells = [f"{r[t]['top1']:.2f} / {r[t]['agree']:.2f}" for t in [best] + tools]
        gaps = [f"{r[t]['top1'] - r['FP32']['top1']:+.2f}" for t in qat]
        lines.append('| ' + ' | '.join([model, f"{r['FP32']['top1']:.2f}"] + cells + gaps)
                     + ' |')
    lines.append(f'\n(+ mixed: MixedPrecision to the best ORT SNR on the calibration batches '
                 f'+ {margin} dB, razorlib measured on the same batches; onnxruntime options: '
                 f'{"like-TRT" if like_trt else "defaults"})')
    return '\n'.join(lines)


def run_record(rows: Dict[str, Dict[str, dict]], args: argparse.Namespace,
               scored: int) -> dict:
    """What ``--out`` writes: the rows of :func:`compare` per model, and what
    :func:`pool_member` checks runs agree on before pooling them."""
    options = {key: value for key, value in vars(args).items() if key not in NOT_RECIPE}
    return dict(rows=rows, seed=args.seed, score_split=args.score_split, scored=scored,
                platform=args.platform, passes=args.passes, test_ratio=args.test_ratio,
                ort=[base.ort_label(m, args.ort_like_trt) for m in args.ort_methods],
                options=options, torch=torch.__version__, onnxruntime=ort.__version__)


#: what runs pooled together must share: each run differs by its FP32 models only
SHARED = ('score_split', 'scored', 'platform', 'passes', 'test_ratio', 'ort')
#: the options that are no part of the recipe a run measures (``options`` holds the rest,
#: compared where both runs recorded them)
NOT_RECIPE = ('seed', 'out', 'pool', 'threads', 'models')


def pool_member(path: str, first: Optional[dict] = None) -> dict:
    """The run ``--out`` wrote to ``path``, refused (naming the file) where it is no such
    file or where it scored, quantized or compared otherwise than ``first``."""
    try:
        run = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise SystemExit(f'--pool: cannot read {path}: {error}')
    missing = [key for key in ('rows', ) + SHARED if key not in run]
    if missing:
        raise SystemExit(f'--pool: {path} is no run written by --out (no {missing[0]!r})')
    for key in (*SHARED, 'options') if first is not None else ():
        if key in run and key in first and run[key] != first[key]:
            raise SystemExit(f'--pool: {path} differs from the first run in {key!r} '
                             f'({run[key]!r} against {first[key]!r}): only the FP32 '
                             'models may differ between pooled runs')
    return run


def pooled(runs: Sequence[dict]) -> List[dict]:
    """Per model and target, each run's figure, the mean over the runs with its standard
    error over them (0 with one run), and the target: passes - best onnxruntime (dB, at or
    above :data:`MARGIN_TARGET_DB`) and each QAT row - FP32 (top-1 points, at or above
    :data:`QAT_TARGET`).  A model missing from a run is pooled over the runs that have it.

    Example:
        >>> def model(passes, best_ort, fp32, qat):
        ...     return {'FP32': dict(top1=fp32), 'ORT MinMax': dict(snr=best_ort),
        ...             'passes': dict(snr=passes), 'QAT': dict(top1=qat)}
        >>> runs = [dict(ort=['ORT MinMax'], rows={'CNN': model(30.0, 26.0, 90.0, 90.28)}),
        ...         dict(ort=['ORT MinMax'], rows={'CNN': model(29.0, 27.0, 90.0, 89.72)})]
        >>> for p in pooled(runs):
        ...     print(p['model'], p['measure'], p['runs'], p['mean'], round(p['error'], 2))
        CNN passes - best ORT dB [4.0, 2.0] 3.0 1.0
        CNN QAT - FP32 [0.28, -0.28] 0.0 0.28
    """
    figures: Dict[Tuple[str, str], List[float]] = {}
    for run in runs:
        for name, r in run['rows'].items():
            best = max(r[key]['snr'] for key in run['ort'])
            figures.setdefault((name, 'passes - best ORT dB'), []).append(
                r['passes']['snr'] - best)
            for row in (key for key in r if key.startswith('QAT')):
                figures.setdefault((name, f'{row} - FP32'), []).append(
                    round(r[row]['top1'] - r['FP32']['top1'], 6))
    pooled_figures = []
    for (name, measure), each in figures.items():
        mean, error = mean_and_error(each)
        target = MARGIN_TARGET_DB if measure.startswith('passes') else QAT_TARGET
        pooled_figures.append(dict(model=name, measure=measure, runs=each, mean=mean,
                                   error=error, target=target))
    return pooled_figures


def pooled_report(runs: Sequence[dict]) -> str:
    """Markdown: :func:`pooled` with the verdict on the means (*holds*: at or above the
    target), within two standard errors (the mean plus two of them reaches the target),
    and in how many runs the target holds."""
    lines = [f'Pooled over {len(runs)} runs (seeds '
             f"{', '.join(str(run.get('seed')) for run in runs)}; FP32 models): the mean "
             'over the runs with its standard error over them\n',
             '| model | figure | runs | mean ± SE | target | holds | within 2 SE | '
             'holds in runs |', '| --- | --- | ---: | ---: | ---: | --- | --- | ---: |']
    for p in pooled(runs):
        judged = verdict([[value] for value in p['runs']], [(p['target'], 1)])
        lines.append(f"| {p['model']} | {p['measure']} | {len(p['runs'])} | "
                     f"{p['mean']:+.2f} ± {p['error']:.2f} | "
                     f"{p['target']:+g} | {'yes' if judged['holds'] else 'no'} | "
                     f"{'yes' if judged['close'] else 'no'} | "
                     f"{judged['held_in']} of {len(p['runs'])} |")
    return '\n'.join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--epochs', type=int, default=15)
    parser.add_argument('--finetune-epochs', type=int, default=5)
    parser.add_argument('--calib-batches', type=int, default=8)
    parser.add_argument('--observer', default='mse', help="razorlib's activation observer")
    parser.add_argument('--platform', default='TRT_INT8', choices=['TRT_INT8', 'ORT_INT8'],
                        help="razorlib's target platform (its quantization format)")
    parser.add_argument('--ort-methods', nargs='+',
                        default=['MinMax', 'Entropy', 'Percentile', 'Distribution'])
    parser.add_argument('--passes', nargs='+', default=PASSES,
                        help="razorlib's pass list, in order (default: %(default)s); a pass "
                        'with options as JSON, e.g. \'{"type": "ActivationCentering", '
                        '"explicit_pads": true}\'')
    parser.add_argument('--calib-shifts', action='store_true',
                        help='calibrate on the batches rolled by every one-pixel shift the '
                        'training draws too (9 times the batches), onnxruntime and razorlib '
                        'alike')
    parser.add_argument('--adaround-steps', type=int, default=500)
    parser.add_argument('--margin', type=float, default=3.5,
                        help='MixedPrecision target over the best ORT SNR on the calibration '
                        'batches, dB')
    parser.add_argument('--qat-epochs', type=int, default=3)
    parser.add_argument('--qat-lr', type=float, default=1e-5,
                        help="QAT's weight learning rate (the log-scales' is 100 times it; "
                        'default: 1e-5; runs 1-7: 1e-4)')
    parser.add_argument('--qat-start', choices=['baseline', 'passes'], default='passes',
                        help="the graph QAT and QAT+KD train from: razorlib with the passes "
                        "(the default) or as calibrated ('baseline', runs 1-7)")
    parser.add_argument('--qat-schedule', choices=['constant', 'cosine'], default='cosine',
                        help="QAT's learning rates annealed to 0 (the default) or constant "
                        '(runs 1-7)')
    parser.add_argument('--qat-kd-temperature', type=float, default=1.0,
                        help="QAT+KD: the distillation's softmax temperature (the KL only)")
    parser.add_argument('--qat-kd-label-weight', type=float, default=0.0,
                        help="QAT+KD: the labels' cross-entropy weight beside the FP32 logits")
    parser.add_argument('--qat-kd-losses', nargs='+', choices=DISTILL_LOSSES, default=['kl'],
                        help="QAT+KD: the logits' losses, one QAT+KD row each ('kl': the "
                        "softmax KL, row 'QAT+KD'; 'mse': the logits' squared error, row "
                        "'QAT+KD mse'; default: kl)")
    parser.add_argument('--models', nargs='+', help='a subset of the model names')
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--test-ratio', type=float, default=0.2,
                        help='train on the three-way split with this test fraction (0: the '
                        'two-way split of ptq_vs_ort.py, which has no test split: scored on '
                        'its validation split)')
    parser.add_argument('--score-split', choices=['val', 'test'],
                        help="the split scored: 'test' (the default with --test-ratio > 0) or "
                        "'val' (for choosing passes or options; the default, and the only "
                        'choice, with --test-ratio 0)')
    parser.add_argument('--ort-like-trt', action='store_true',
                        help="quantize with onnxruntime rounding where TensorRT does "
                        "(ptq_vs_ort.trt_like_options) instead of quantize_static's defaults "
                        '(the recorded runs)')
    parser.add_argument('--seed', type=int, default=0,
                        help='the torch seed the FP32 models train (and the subnets fine-tune) '
                        'from (default: 0, the recorded runs)')
    parser.add_argument('--out', help="write the run's figures to this JSON file, for --pool")
    parser.add_argument('--pool', nargs='+', metavar='FILE',
                        help='print the targets pooled over the runs --out wrote, and exit')
    args = parser.parse_args(argv)
    if args.pool:
        first = pool_member(args.pool[0])
        print(pooled_report([first] + [pool_member(path, first) for path in args.pool[1:]]))
        return
    if args.score_split is None:
        args.score_split = 'test' if args.test_ratio else 'val'
    if args.score_split == 'test' and not args.test_ratio:
        parser.error('--score-split test needs --test-ratio > 0 (0 has no test split)')
    torch.set_num_threads(args.threads)
    images, labels = base.digits('train', args.test_ratio)
    held, held_labels = base.digits(args.score_split, args.test_ratio)
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))
    calibration = [b for b in list(images[order].split(base.BATCH))[:args.calib_batches]
                   if len(b) == base.BATCH]
    if args.calib_shifts:
        calibration = shifted(calibration)
    wanted = set(args.models or list(base.BACKBONES) + list(base.SUBNETS))
    rows, supernet = {}, None
    for name, backbone in base.BACKBONES.items():
        if name not in wanted and not (name.startswith('PlainCNN') and wanted & set(base.SUBNETS)):
            continue
        start = time.perf_counter()
        torch.manual_seed(args.seed)
        model = base.train(ImageClassifier(backbone, dict(type='LinearClsHead', num_classes=10)),
                           images, labels, args.epochs, 3e-3)
        if name.startswith('PlainCNN'):
            supernet = model
        if name in wanted:
            rows[name] = compare(model, calibration, held, held_labels, images, labels, args)
            print(f'{name}: {time.perf_counter() - start:.0f} s', flush=True)
    for name, ratio in base.SUBNETS.items():
        if name not in wanted:
            continue
        torch.manual_seed(args.seed)
        subnet = razorlib.prune(copy.deepcopy(supernet), calibration[0][:1], ratio=ratio)
        subnet = base.train(subnet, images, labels, args.finetune_epochs, 1e-3)
        rows[name] = compare(subnet, calibration, held, held_labels, images, labels, args)
        print(f'{name}: done', flush=True)
    print(tables(rows, args.ort_methods, args.margin, args.ort_like_trt))
    split = {'test': 'test', 'val': 'validation'}[args.score_split]
    print(f'razorlib platform {args.platform}, passes {args.passes}; calibration: '
          f'{len(calibration)} batches of {base.BATCH}; trained on {len(images)} '
          f'images (test ratio {args.test_ratio:g}), scored on {len(held)} {split} images; '
          f'torch {torch.__version__}, onnxruntime {ort.__version__} '
          f'({base.optimization_level()} graph optimizations); FP32 seed {args.seed}')
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(run_record(rows, args, len(held)), indent=1))


if __name__ == '__main__':
    main()
