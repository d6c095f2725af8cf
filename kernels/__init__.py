"""NVFP4 MoE kernels: one validated op API (ops.py) over torch references and pluggable backends.

nvfp4.py (format, quantise), layouts.py (swizzled scales, SwiGLU interleave), moe_tables.py
(sort, permute, unpermute), backends.py (registry, dispatch), reference.py (the torch backend),
moe_pipeline.py (fused_moe from the ops). Importing this package imports nothing heavy.
"""
