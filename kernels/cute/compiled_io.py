"""A compiled CuTe kernel as bytes, and back, in another process (nvidia-cutlass-dsl 4.3.5).

CuTe DSL's own file cache (``CUTE_DSL_CACHE_DIR``) serves only kernels compiled implicitly on
call: ``cute.compile`` sets ``no_cache``. So this stores what that cache stores: the compiled
module's MLIR bytecode (LLVM dialect, host launcher and the embedded cubin), with the host
entry's name and the kernels' attributes. Loading parses it and JIT-compiles the host code again,
which skips IR generation, the MLIR passes and ptxas: the compile's costly part.
"""

from __future__ import annotations

import inspect
import io
import json
from typing import Any

_HEADER_BYTES = 4


def dumps(compiled: Any) -> bytes | None:
    """The payload of a compiled kernel, or None when it has no host engine (compiled for
    another GPU than this process's, e.g. on a CPU machine) or is of another kind."""
    from cutlass.cutlass_dsl.cuda_jit_executor import CudaDialectJitCompiledFunction

    if type(compiled) is not CudaDialectJitCompiledFunction or compiled.engine is None:
        return None
    meta = {
        "function_name": compiled.function_name,
        "kernel_info": {
            sym: [[int(attr), value] for attr, value in attrs.items()]
            for sym, attrs in (compiled.kernel_info or {}).items()
        },
    }
    header = json.dumps(meta).encode()
    code = io.BytesIO()
    compiled.ir_module.operation.write_bytecode(code)
    return len(header).to_bytes(_HEADER_BYTES, "little") + header + code.getvalue()


def loads(payload: bytes, entry: Any) -> Any:
    """The compiled kernel back from ``dumps``; ``entry`` is the ``@cute.jit`` function (or
    method) that was compiled, whose signature the launcher's argument handling needs."""
    import cuda.bindings.driver as cuda
    from cutlass._mlir import ir
    from cutlass.cutlass_dsl import CuTeDSL
    from cutlass.cutlass_dsl.cuda_jit_executor import CudaDialectJitCompiledFunction

    size = int.from_bytes(payload[:_HEADER_BYTES], "little")
    meta = json.loads(payload[_HEADER_BYTES : _HEADER_BYTES + size])
    with ir.Context():
        module = ir.Module.parse(payload[_HEADER_BYTES + size :])
    dsl = CuTeDSL._get_dsl()
    engine = dsl.compiler_provider.jit(module, shared_libs=dsl.get_shared_libs())
    name = meta["function_name"]
    kernel_info = {
        sym: {cuda.CUfunction_attribute(attr): value for attr, value in attrs}
        for sym, attrs in meta["kernel_info"].items()
    }
    return CudaDialectJitCompiledFunction(
        module, engine, engine.lookup(name), _arg_spec(entry), name, kernel_info, False, None
    )


def _arg_spec(entry: Any) -> inspect.FullArgSpec:
    """The spec cute.compile records: of the undecorated function behind ``entry``."""
    func = getattr(entry, "__func__", entry)
    while hasattr(func, "__wrapped__"):
        func = func.__wrapped__
    return inspect.getfullargspec(func)
