
self._cap_dflash_draft_seqs()
