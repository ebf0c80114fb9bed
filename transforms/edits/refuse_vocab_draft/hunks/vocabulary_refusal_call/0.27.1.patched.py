
self._refuse_dflash2_vocabulary_mismatch()
