model = dict(
    type='ImageClassifier',
    backbone=dict(type='MobileNetV2', widen_factor=1.5),
    head=dict(type='LinearClsHead', num_classes=1000, dropout=0.2, label_smoothing=0.1),
    data_preprocessor=dict(type='ClsDataPreprocessor', mean=[0.485, 0.456, 0.406],
                           std=[0.229, 0.224, 0.225]))
