from vllm.v1.kv_cache_interface import (
    KVCacheConfig,
    get_kv_cache_spec_sliding_window,
)
