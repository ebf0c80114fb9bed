
# The DFlash2 candidate selector exists only in the V2 speculator. On V1
# the same checkpoint drafts through DFlashProposer, which never calls
# it, so the draft degrades to DFlash1 silently. Force V2 as for dspark.
if self._is_dflash2_draft():
    return True
