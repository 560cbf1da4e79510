"""Pure array math for fastuq: one module per estimator family, each with its jitted JAX
kernel and its NumPy twin side by side. No I/O, no strings. Installed as ``fastuq.kernels``.

Importing this package does not import JAX; importing a kernel module does.
"""
