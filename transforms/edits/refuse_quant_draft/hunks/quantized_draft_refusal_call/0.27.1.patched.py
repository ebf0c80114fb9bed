
self._refuse_quantized_dflash2_draft()
