# Evolution search of the SPOS digits supernet for the most accurate subnet within a
# FLOPs budget; each candidate is scored on the validation split after BatchNorm
# recalibration on training batches.
#   python tools/search.py configs/nas/spos/spos_shufflenet_digits_search.py \
#       work_dirs/spos_shufflenet_digits_supernet/epoch_20.pth [--resume]
# Writes best_subnet.yaml (the subnet config's model.fix_subnet), search_state.json,
# search_results.json and search_plot.png.
_base_ = ['./spos_shufflenet_digits_supernet.py']

# EvolutionSearchLoop searches the model's own search space (SPOS.search_space, the op
# choices) as it searches an AutoSlim pruner's widths.
search_cfg = dict(
    type='EvolutionSearchLoop',
    max_epochs=8,
    num_candidates=16,
    top_k=4,
    num_mutation=6,
    num_crossover=6,
    mutate_prob=0.2,
    # The space spans 0.74M (every block 3x3) to 0.94M FLOPs (xception everywhere).
    constraints=dict(flops=0.8e6),
    recalib_batches=16,
    # Ranked by validation cross-entropy, not top-1: most candidates get 97-98% of the
    # 360 validation digits right and tie on top-1; ranked by top-1 the search picked a
    # subnet below every random one on test (benchmarks/README.md, "NAS: SPOS").
    score_key='accuracy/nll',
    score_rule='less')
val_evaluator = dict(type='Accuracy', topk=(1, 5), nll=True)

# Writes the chosen subnet's YAML and the results JSON at the end of the search.
custom_hooks = [dict(type='DumpSubnetHook')]
