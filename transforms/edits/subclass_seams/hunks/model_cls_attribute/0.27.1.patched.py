model_cls = DFlashQwen3Model
