"""Trace + plan of a Llama-2-7B-shaped model against depth: razorlib vs Torch-Pruning.

Builds ``LlamaForCausalLM`` with Llama-2-7B's widths (hidden 4096, 32 heads, 8 key/value
heads, MLP 11008, vocabulary 32000) and 1, 8 or 32 decoder layers under
``torch.device('meta')``, so no weight is ever allocated, and times what a user runs
before pruning: razorlib's ``L1NormPruner(ratio=0.5,
except_start_keys=hidden_size_keys(model)).prepare_from_supernet(model, inputs)`` (the
shape-only trace, the channel groups, the pruned-run check of the size-dependent groups
and the masks; the L1 scores are computed later, by ``sample_subnet``, and are not
timed), then checks that every layer's heads (q/k/v bound, one channel per key/value
head, ``o_proj`` reading them) and MLP (gate/up bound, ``down_proj`` reading them) are
prunable.  Beside it, Torch-Pruning's ``DependencyGraph().build_dependency`` on the same
meta model (``output_transform`` picks the logits from the model's output), then its
``get_all_groups`` under a time limit.

Each (library, depth) runs in a fresh subprocess, so the peak RSS
(``getrusage().ru_maxrss``) is that run's: the figure includes the interpreter, torch and
transformers, taken after the first call (the JSON also has *base*, the peak before it,
and the peak after all calls).  Time is the first call in the process (what a user pays),
then the median of ``--repeat`` more.  ``--real-depths`` also runs both libraries on a
model with real fp32 weights (a 7B-shaped layer is 202M parameters, 0.8 GB; the
embeddings and ``lm_head`` another 1 GB), where Torch-Pruning's forward computes for real.
Torch-Pruning's ``DependencyGraph`` knows no heads: its groups are channel groups.

    OMP_NUM_THREADS=1 python benchmarks/trace_depth.py [--depths 1 8 32] [--real-depths 1 2]
    OMP_NUM_THREADS=1 python benchmarks/trace_depth.py --profile 32   # cProfile razorlib

Acceptance (issue 15, item 7): depth 32 on meta in under 30 s and 2 GB of RAM, heads and
MLP prunable in every layer.
"""
import argparse
import json
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import time
import warnings
from typing import Any, Callable, Dict, List, Tuple

import torch
import torch.nn as nn

LLAMA_7B = dict(hidden_size=4096, intermediate_size=11008, num_attention_heads=32,
                num_key_value_heads=8, vocab_size=32000)
SEQ_LEN = 16
TARGET_S, TARGET_GB = 30.0, 2.0
RESULT = 'RESULT '  # prefix of the child's JSON line


def peak_gb() -> float:
    """This process's peak resident set so far (Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def build_llama(depth: int, device: str) -> Tuple[nn.Module, Dict[str, torch.Tensor]]:
    """The 7B-shaped model with ``depth`` layers on ``device``, and its example inputs."""
    from transformers import LlamaConfig, LlamaForCausalLM
    with torch.device(device):
        model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=depth, **LLAMA_7B)).eval()
    input_ids = torch.randint(0, LLAMA_7B['vocab_size'], (1, SEQ_LEN),
                              generator=torch.Generator().manual_seed(0)).to(device)
    return model, {'input_ids': input_ids}


def timed(fn: Callable[[], Any], repeat: int, after: Callable[[], None]) -> Dict[str, Any]:
    """First-call time, median of ``repeat`` more (``after`` runs between calls, untimed),
    the peak RSS before, after the first call and after all; the error's type and first
    line if ``fn`` raises."""
    out: Dict[str, Any] = {'base_gb': peak_gb()}
    times: List[float] = []
    try:
        for _ in range(repeat + 1):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
            out.setdefault('peak_gb', peak_gb())
            if len(times) <= repeat:
                after()
    except Exception as err:  # a peer (or a regression) failing is a figure too
        out['error'] = f'{type(err).__name__}: {str(err).splitlines()[0][:200]}'
    out['peak_all_gb'] = peak_gb()
    if times:
        out['first_s'] = times[0]
        out['median_s'] = statistics.median(times[1:] or times)
    return out


def layer_coverage(groups, depth: int) -> Dict[str, Any]:
    """How many layers have their heads and their MLP in a prunable group of the right
    shape, and which groups are frozen."""
    heads = mlp = 0
    prunable = list(groups.prunable.values())
    for i in range(depth):
        attn, ffn = f'model.layers.{i}.self_attn.', f'model.layers.{i}.mlp.'
        heads += any({attn + 'q_proj', attn + 'k_proj', attn + 'v_proj'} <= set(g.layers)
                     and attn + 'o_proj' in g.consumers
                     and g.num_channels == LLAMA_7B['num_key_value_heads'] for g in prunable)
        mlp += any({ffn + 'gate_proj', ffn + 'up_proj'} <= set(g.layers)
                   and ffn + 'down_proj' in g.consumers
                   and g.num_channels == LLAMA_7B['intermediate_size'] for g in prunable)
    frozen = sorted(gid for gid in groups.groups if gid not in groups.prunable)
    return {'heads_layers': heads, 'mlp_layers': mlp, 'prunable': len(prunable),
            'frozen': frozen}


def run_razorlib(depth: int, device: str, repeat: int) -> Dict[str, Any]:
    from razorlib.integrations.transformers import hidden_size_keys
    from razorlib.pruning import L1NormPruner, remove_masks
    model, inputs = build_llama(depth, device)
    pruners = []

    def prepare():
        pruner = L1NormPruner(ratio=0.5, except_start_keys=hidden_size_keys(model))
        pruner.prepare_from_supernet(model, inputs)
        pruners.append(pruner)

    out = timed(prepare, repeat, lambda: remove_masks(model))
    if pruners:
        out.update(layer_coverage(pruners[0].groups, depth),
                   traced_on=pruners[0].groups.graph.device)
    return out


def run_torch_pruning(depth: int, device: str, repeat: int,
                      groups_limit: int) -> Dict[str, Any]:
    import torch_pruning as tp
    model, inputs = build_llama(depth, device)

    def build():
        return tp.DependencyGraph().build_dependency(
            model, example_inputs=inputs, output_transform=lambda out: out.logits)

    out = timed(build, repeat, lambda: None)
    if 'error' not in out and groups_limit > 0:
        out.update(tp_all_groups(build(), model, groups_limit))
    return out


def tp_all_groups(graph, model: nn.Module, limit: int) -> Dict[str, Any]:
    """Torch-Pruning's ``get_all_groups`` (every Linear's output channels as a root,
    ``lm_head`` ignored) for at most ``limit`` seconds: time, groups yielded, and the
    root it was working on when time ran out."""
    current: List[str] = []
    names = {module: name for name, module in model.named_modules()}
    get_group = graph.get_pruning_group

    def tracked(module, *args, **kwargs):
        current[:] = [names.get(module, type(module).__name__)]
        return get_group(module, *args, **kwargs)

    def expire(*_):
        raise TimeoutError

    graph.get_pruning_group = tracked
    count, start = 0, time.perf_counter()
    signal.signal(signal.SIGALRM, expire)
    signal.alarm(limit)
    try:
        for _ in graph.get_all_groups(ignored_layers=[model.lm_head]):
            count += 1
    except TimeoutError:
        return {'groups_s': None, 'groups': count, 'stalled_at': current[0]}
    finally:
        signal.alarm(0)
    return {'groups_s': time.perf_counter() - start, 'groups': count}


def child(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    warnings.filterwarnings('ignore')
    if args.child == 'razorlib':
        out = run_razorlib(args.depth, args.device, args.repeat)
    else:
        out = run_torch_pruning(args.depth, args.device, args.repeat, args.groups_limit)
    print(RESULT + json.dumps(out), flush=True)


def spawn(lib: str, depth: int, device: str, args: argparse.Namespace) -> Dict[str, Any]:
    """Run one (library, depth, device) in a fresh interpreter and read its JSON line."""
    cmd = [sys.executable, os.path.abspath(__file__), '--child', lib, '--depth', str(depth),
           '--device', device, '--repeat', str(args.repeat), '--threads', str(args.threads),
           '--groups-limit', str(args.groups_limit)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT):])
    tail = (proc.stderr.strip().splitlines() or ['no output'])[-1]
    return {'error': f'child exited {proc.returncode}: {tail[:200]}'}


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open('/proc/cpuinfo') as info:
            model = next(line.split(':', 1)[1].strip() for line in info
                         if line.startswith('model name'))
    except (OSError, StopIteration):
        pass
    import transformers
    try:
        import torch_pruning
        peer = torch_pruning.__version__
    except ImportError:
        peer = 'not installed'
    return (f'{os.cpu_count()} cpus ({model}), load {os.getloadavg()[0]:.1f}, '
            f'torch {torch.__version__}, transformers {transformers.__version__}, '
            f'torch-pruning {peer}')


def cell(res: Dict[str, Any]) -> str:
    if 'first_s' not in res:
        return 'fails: ' + res.get('error', '?').split(':')[0]
    return f"{res['first_s']:.2f} / {res['median_s']:.2f} s, {res['peak_gb']:.2f} GB"


def groups_cell(res: Dict[str, Any], limit: int) -> str:
    if 'groups' not in res:
        return '-'
    if res['groups_s'] is None:
        return f"> {limit} s ({res['groups']} done; at {res['stalled_at']})"
    return f"{res['groups_s']:.2f} s ({res['groups']})"


def report(device: str, depth: int, ours: Dict[str, Any], peer: Dict[str, Any],
           limit: int) -> None:
    ratio = (f"{ours['median_s'] / peer['median_s']:.1f}"
             if 'median_s' in ours and 'median_s' in peer else '-')
    cover = (f"{ours['heads_layers']}/{depth} / {ours['mlp_layers']}/{depth}"
             if 'heads_layers' in ours else '-')
    print(f'{device:<5}{depth:>6}  {cell(ours):<26}{cover:>12}  {cell(peer):<26}{ratio:>7}'
          f'  {groups_cell(peer, limit)}', flush=True)
    for name, res in (('razorlib', ours), ('torch-pruning', peer)):
        if 'error' in res:
            print(f'      {name}: {res["error"]}')
    if ours.get('traced_on') == 'real':
        print('      razorlib: traced by a real forward (its meta forward failed)')


def profile(depth: int, top: int) -> None:
    """cProfile of razorlib's preparation of the meta model, top functions by own and by
    cumulative time."""
    import cProfile
    import pstats
    warnings.filterwarnings('ignore')
    from razorlib.integrations.transformers import hidden_size_keys
    from razorlib.pruning import L1NormPruner
    model, inputs = build_llama(depth, 'meta')
    pruner = L1NormPruner(ratio=0.5, except_start_keys=hidden_size_keys(model))
    prof = cProfile.Profile()
    prof.runcall(pruner.prepare_from_supernet, model, inputs)
    stats = pstats.Stats(prof)
    stats.sort_stats('tottime').print_stats(top)
    stats.sort_stats('cumulative').print_stats(top)
    print(f'peak RSS {peak_gb():.2f} GB')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--depths', type=int, nargs='*', default=[1, 8, 32])
    parser.add_argument('--real-depths', type=int, nargs='*', default=[1, 2],
                        help='depths also run with real fp32 weights (~0.8 GB a layer)')
    parser.add_argument('--repeat', type=int, default=3, help='calls after the first')
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--groups-limit', type=int, default=60,
                        help="seconds for Torch-Pruning's get_all_groups (0: skip it)")
    parser.add_argument('--profile', type=int, metavar='DEPTH',
                        help='cProfile razorlib on the meta model of this depth instead')
    parser.add_argument('--child', choices=('razorlib', 'torch-pruning'), help=argparse.SUPPRESS)
    parser.add_argument('--depth', type=int, help=argparse.SUPPRESS)
    parser.add_argument('--device', default='meta', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    if args.profile:
        return profile(args.profile, 25)
    print(f'machine: {machine()}, {args.threads} thread(s)')
    print(f'Llama-2-7B widths, input 1x{SEQ_LEN} tokens; time: first call / median of '
          f'{args.repeat} more; GB: process peak RSS after the first call\n')
    print(f"{'dev':<5}{'depth':>6}  {'razorlib':<26}{'heads / MLP':>12}  "
          f"{'torch-pruning build_dep.':<26}{'ratio':>7}  tp get_all_groups")
    runs = [('meta', d) for d in args.depths] + [('cpu', d) for d in args.real_depths]
    results = {}
    for device, depth in runs:
        ours = spawn('razorlib', depth, device, args)
        peer = spawn('torch-pruning', depth, device, args)
        results[device, depth] = ours
        report(device, depth, ours, peer, args.groups_limit)
    deepest = max(args.depths, default=None)
    if deepest is not None:
        ours = results['meta', deepest]
        met = (ours.get('first_s', float('inf')) < TARGET_S
               and ours.get('peak_gb', float('inf')) < TARGET_GB
               and ours.get('heads_layers') == ours.get('mlp_layers') == deepest)
        print(f'\nacceptance at depth {deepest} (< {TARGET_S:.0f} s, < {TARGET_GB:.0f} GB, '
              f'heads and MLP prunable in every layer): {"met" if met else "MISSED"}; '
              f'frozen groups: {ours.get("frozen", "-")}')
    print(f'load at the end: {os.getloadavg()[0]:.1f}')


if __name__ == '__main__':
    main()
