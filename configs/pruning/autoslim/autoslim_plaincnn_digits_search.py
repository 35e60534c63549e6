# AutoSlim's greedy search of the digits supernet down to three FLOPs targets.
#   python tools/search.py configs/pruning/autoslim/autoslim_plaincnn_digits_search.py \
#       work_dirs/autoslim_plaincnn_digits_supernet/epoch_30.pth
# Writes subnet_flops<target>.yaml per target, search_results.json and search_plot.png to
# work_dirs/autoslim_plaincnn_digits_search/ (about a minute on two CPU cores).
_base_ = ['./autoslim_plaincnn_digits_supernet.py']

search_cfg = dict(
    type='GreedySearchLoop',
    # The supernet spans 4.96M FLOPs (every layer whole) to 172k (2/12 of each);
    # uniform 6/12 is 1.30M, 4/12 600k.
    target_flops=[2.5e6, 1.2e6, 0.6e6],
    max_channel_bins=12,
    recalib_batches=16,  # 512 training images per BatchNorm recalibration
    # Candidates are ranked on the whole (360-image) validation set: one batch here.
    val_batches=None,
    # ... by its cross-entropy, not top-1: the supernet's subnets get 99% of these digits
    # right, so most candidates of a step tie on top-1 and the tie, not the data, would
    # decide which layer is cut (benchmarks/README.md, "The digits pipeline").
    score_key='accuracy/nll',
    score_rule='less')
val_evaluator = dict(type='Accuracy', topk=(1, 5), nll=True)

# Not the supernet's training hooks: only the one that writes the chosen subnets and
# search_results.json when the search ends.
custom_hooks = [dict(type='DumpSubnetHook')]
