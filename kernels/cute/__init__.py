"""CuTe DSL (nvidia-cutlass-dsl 4.3.5) NVFP4 grouped-GEMM kernels for Hopper (sm_90a), and one
for Blackwell (sm_100a, ``sm100_gemm``: compiled, not run on hardware; backend ``cute-sm100``).

Nothing here imports cutlass or torch at module import time except the kernel modules
themselves (``grouped_gemm``), which only ``compile``, ``backend`` (inside functions) and
``bot/cli/local/kernels.py`` (inside the `bot kernels build` command) load.
"""
