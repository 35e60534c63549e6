# Evolution search of the MBConv digits supernet for the best subnet within a FLOPs
# budget: kernel, expand ratio and skip of every block; each candidate scored on the
# validation split after BatchNorm recalibration on training batches.
#   python tools/search.py configs/nas/spos/spos_mbconv_digits_search.py \
#       work_dirs/spos_mbconv_digits_supernet/epoch_20.pth [--resume]
# Writes best_subnet.yaml (spos_mbconv_digits_subnet.py's model.fix_subnet),
# search_state.json, search_results.json and search_plot.png.
_base_ = ['./spos_mbconv_digits_supernet.py']

# EvolutionSearchLoop searches the model's own search space (SPOS.search_space).
search_cfg = dict(
    type='EvolutionSearchLoop',
    max_epochs=8,
    num_candidates=16,
    top_k=4,
    num_mutation=6,
    num_crossover=6,
    mutate_prob=0.2,
    # The space spans 0.46M (skippable blocks skipped, the rest 3x3 at ratio 3) to 2.65M
    # FLOPs (7x7 at ratio 6, nothing skipped); a random subnet has about 1.2M.
    constraints=dict(flops=1.0e6),
    recalib_batches=16,
    # Ranked by validation cross-entropy, as the ShuffleNet search: top-1 on the 360
    # validation digits ties on most candidates.
    score_key='accuracy/nll',
    score_rule='less')
val_evaluator = dict(type='Accuracy', topk=(1, 5), nll=True)

# Writes the chosen subnet's YAML and the results JSON at the end of the search.
custom_hooks = [dict(type='DumpSubnetHook')]
