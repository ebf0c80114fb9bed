
self._limit_max_model_len_to_draft()
