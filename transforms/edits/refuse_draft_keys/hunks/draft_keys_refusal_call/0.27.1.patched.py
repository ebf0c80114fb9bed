self._refuse_dflash2_draft_keys()
