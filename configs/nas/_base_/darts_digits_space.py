# The DARTS search space on the digits: the SPOS ShuffleNetV2 layout with every searched
# block a DiffMutableOP, the softmax-weighted mixture of its four candidates
# (shuffle_3x3 / 5x5 / 7x7 / xception), narrower than the SPOS space since every
# candidate runs in every step.
architecture = dict(
    type='ImageClassifier',
    backbone=dict(
        type='SearchableShuffleNetV2',
        arch_setting=[(16, 2, 2), (32, 3, 2), (64, 2, 2)],
        stem_channels=8,
        last_channels=None,
        stem='cifar',
        downsample='shuffle_3x3',
        mutable_cfg=dict(type='DiffMutableOP')),
    head=dict(type='LinearClsHead', num_classes=10),
    data_preprocessor=dict(type='ClsDataPreprocessor', mean=[0.5] * 3, std=[0.5] * 3))
