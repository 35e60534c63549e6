# Evolution search of the digits supernet for the most accurate subnet under 1.2M FLOPs.
#   python tools/search.py configs/pruning/autoslim/autoslim_plaincnn_digits_evolution_search.py \
#       work_dirs/autoslim_plaincnn_digits_supernet/epoch_30.pth [--resume]
# Writes best_subnet.yaml, search_state.json (after every generation; --resume continues
# from it), search_results.json and search_plot.png (about a minute on two CPU cores).
_base_ = ['./autoslim_plaincnn_digits_supernet.py']

search_cfg = dict(
    type='EvolutionSearchLoop',
    max_epochs=8,
    num_candidates=16,
    top_k=4,
    num_mutation=6,
    num_crossover=6,
    mutate_prob=0.25,
    constraints=dict(flops=1.2e6),  # uniform 6/12 of every layer: 1.30M
    recalib_batches=16)

# Not the supernet's training hooks: only the one that writes best_subnet.yaml and
# search_results.json when the search ends.
custom_hooks = [dict(type='DumpSubnetHook')]
