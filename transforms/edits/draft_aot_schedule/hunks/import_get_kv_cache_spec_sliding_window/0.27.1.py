from vllm.v1.kv_cache_interface import KVCacheConfig
