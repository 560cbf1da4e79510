"""The engine core: the estimator registry, the batch a kernel sees, the runtime (devices,
dtypes, bucketed calls) and the streaming scoring of a corpus."""
