"""KV-cache allocator models, request traces and a continuous-batching simulator (``kv_alloc``)."""
