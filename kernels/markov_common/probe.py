"""Elementwise probes of single PTX sequences on a GPU tensor.

Each probe runs one helper of ``kernels/ptx.py`` (the very instruction
sequence the Markov kernels embed) over flat CUDA tensors, one element per
thread, so that a golden emulation can be compared with the hardware bit for
bit, and so that the hardware reciprocal ``div.full.f32`` uses can be
measured per temperature.

Kernel: ``ProbeKernel(op)``, grid ``ceil(n / 256)``, 256 threads; inputs are
raw addresses of flat tensors (``in0..in5``), outputs ``out0`` (and
``out1``), element ``i`` of each read with ``ld.global.nc`` and written with
``st.global``. Ops and their inputs (all tensors of one length n):

- ``logf_ftz``: x f32 -> f32 (libdevice logf under FTZ, subnormals scaled)
- ``tanhf``: x f32 -> f32 (libdevice tanhf under FTZ)
- ``div_full``: x f32, t f32 -> f32 (``div.full.f32 x, t``)
- ``murmur``: seed i64, col i32, pos i64, vocab_id i32 -> hash (i32 bits)
- ``uniform``: as murmur -> f32 (the Gumbel uniform of that hash)
- ``gumbel``: seed i64, col i32, pos i64, vocab_id i32, logit f32, temp f32
  -> f32 (the step kernel's noised score: seed ^ (col << 32), position
  pos - 1 salted by 2^30, as in ``StepKernel``)
- ``logit`` / ``logit_cap``: base bits i32, bias bits i32 (low 16 bits: BF16),
  mult f32, inv_cap f32, cap f32 -> (cached BF16 bits i32, logit f32)

The host functions below take and return torch tensors; the reciprocal
table writer merges into ``golden/data/rcp_f32_<arch>.json``'s format
(``{"reciprocals": {"0x<t bits>": "0x<rcp bits>"}, "arch", "provenance"}``).
"""

from __future__ import annotations

import datetime
import json
import sys

import cuda.bindings.driver as cuda
import cutlass.cute as cute
import torch
from cutlass import Float32, Int32, Int64, Uint32, const_expr

from kernels import ptx
from kernels.compile import compiled
from kernels.variant import KernelVariant

PROBE_THREADS = 256
OPS = ("logf_ftz", "tanhf", "div_full", "murmur", "uniform", "gumbel", "logit", "logit_cap")


def _word(address, i):
    """Element i's 32-bit word of a flat 4-byte tensor."""
    return ptx.ld_global_nc(address + Int64(i) * 4, 4, Int32(1))[0]


class ProbeKernel(KernelVariant):
    """Grid ceil(n / 256), 256 threads: ``out[i] = op(in0[i], ...)``."""

    def __init__(self, op: str) -> None:
        if op not in OPS:
            raise ValueError(f"op must be one of {OPS}, got {op!r}")
        self.op = op

    def key(self) -> tuple:
        """The probed operation, which tells this variant's kernel symbol from the others'."""
        return ("probe", self.op)

    @cute.jit
    def __call__(
        self, in0: Int64, in1: Int64, in2: Int64, in3: Int64, in4: Int64, in5: Int64, out0: Int64, out1: Int64,
        n: Int32, grid: Int32, stream: cuda.CUstream,
    ) -> None:
        self.kernel(in0, in1, in2, in3, in4, in5, out0, out1, n).launch(
            grid=(grid, 1, 1), block=(PROBE_THREADS, 1, 1), stream=stream
        )

    @cute.kernel
    def kernel(
        self, in0: Int64, in1: Int64, in2: Int64, in3: Int64, in4: Int64, in5: Int64, out0: Int64, out1: Int64,
        n: Int32,
    ) -> None:
        tidx, _, _ = cute.arch.thread_idx()
        blk, _, _ = cute.arch.block_idx()
        i = blk * PROBE_THREADS + tidx
        live = Int32(i < n)
        j = Int64(i) * Int64(live)  # element 0 for the idle tail threads
        op = self.op
        second = Uint32(0)
        if const_expr(op in ("logf_ftz", "tanhf", "div_full")):
            x = ptx.f32_from_bits(_word(in0, j))
            if const_expr(op == "logf_ftz"):
                result = ptx.f32_bits(ptx.logf_ftz(x))
            elif const_expr(op == "tanhf"):
                result = ptx.f32_bits(ptx.tanhf(x))
            else:
                result = ptx.f32_bits(ptx.div_full_f32(x, ptx.f32_from_bits(_word(in1, j))))
        elif const_expr(op in ("murmur", "uniform", "gumbel")):
            seed = ptx.ld_global_nc_b64(in0 + j * 8, Int32(1))
            col = Int32(_word(in1, j))
            position = ptx.ld_global_nc_b64(in2 + j * 8, Int32(1)) - 1
            vocab_id = Int32(_word(in3, j))
            step_seed = seed ^ (Int64(col) << 32)
            salted = position + (1 << 30)
            prefix = ptx.murmur_prefix(
                Uint32(step_seed & 0xFFFFFFFF), Uint32((step_seed >> 32) & 0xFFFFFFFF), Uint32(salted & 0xFFFFFFFF)
            )
            if const_expr(op == "murmur"):
                result = ptx.murmur_finish(prefix, vocab_id)
            elif const_expr(op == "uniform"):
                result = ptx.f32_bits(ptx.uniform_of_hash(ptx.murmur_finish(prefix, vocab_id)))
            else:
                logit = ptx.f32_from_bits(_word(in4, j))
                temp = ptx.f32_from_bits(_word(in5, j))
                result = ptx.f32_bits(ptx.gumbel_score(logit, temp, prefix, vocab_id, Int32(1)))
        else:
            bits, logit = ptx.output_logit(
                _word(in0, j), _word(in1, j), ptx.f32_from_bits(_word(in2, j)), ptx.f32_from_bits(_word(in3, j)),
                ptx.f32_from_bits(_word(in4, j)), Int32(1), op == "logit_cap",
            )
            result = bits
            second = ptx.f32_bits(logit)
        ptx.st_global(out0 + Int64(i) * 4, [result], 4, live)
        if const_expr(op in ("logit", "logit_cap")):
            ptx.st_global(out1 + Int64(i) * 4, [second], 4, live)


def compile_probe(op: str, options: str | None = None):
    """The compiled probe of ``op`` (``kernels.compile``: cached per op and options)."""
    return compiled(ProbeKernel(op), options, remedy="run the probe once")


def compile_variants(arch: str):
    """Compile-gate registry entry: one variant per probe op (spills allowed)."""
    del arch
    return [(f"probe.{op}", (lambda options, op=op: compile_probe(op, options)), False) for op in OPS]


_INPUT_DTYPES = {
    "logf_ftz": (torch.float32,),
    "tanhf": (torch.float32,),
    "div_full": (torch.float32, torch.float32),
    "murmur": (torch.int64, torch.int32, torch.int64, torch.int32),
    "uniform": (torch.int64, torch.int32, torch.int64, torch.int32),
    "gumbel": (torch.int64, torch.int32, torch.int64, torch.int32, torch.float32, torch.float32),
    "logit": (torch.int32, torch.int32, torch.float32, torch.float32, torch.float32),
    "logit_cap": (torch.int32, torch.int32, torch.float32, torch.float32, torch.float32),
}


def run_probe(op: str, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run probe ``op`` over 1-D CUDA ``inputs`` (dtypes per ``_INPUT_DTYPES``):
    returns (out0, out1 or None); out0 is float32 except ``murmur`` (int32 bits)
    and the ``logit`` ops (int32 BF16 bits, with the FP32 logit as out1)."""
    dtypes = _INPUT_DTYPES.get(op)
    if dtypes is None:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    if len(inputs) != len(dtypes):
        raise ValueError(f"probe {op}: expected {len(dtypes)} inputs, got {len(inputs)}")
    n = inputs[0].numel()
    flat = []
    for k, (t, dtype) in enumerate(zip(inputs, dtypes)):
        if not isinstance(t, torch.Tensor) or t.dtype != dtype or not t.is_cuda or t.dim() != 1 or t.numel() != n:
            raise ValueError(f"probe {op}: input {k} must be a 1-D CUDA {dtype} tensor of {n} elements, got "
                             f"{getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}")
        flat.append(t.contiguous())
    if n == 0:
        raise ValueError(f"probe {op}: empty input")
    device = flat[0].device
    out_dtype = torch.int32 if op in ("murmur", "logit", "logit_cap") else torch.float32
    out0 = torch.empty(n, dtype=out_dtype, device=device)
    out1 = torch.empty(n, dtype=torch.float32, device=device) if op in ("logit", "logit_cap") else None
    pointers = [t.data_ptr() for t in flat] + [0] * (6 - len(flat))
    kernel = compile_probe(op)
    kernel(*[Int64(p) for p in pointers], Int64(out0.data_ptr()), Int64(out1.data_ptr() if out1 is not None else 0),
           Int32(n), Int32(-(-n // PROBE_THREADS)), cuda.CUstream(torch.cuda.current_stream().cuda_stream))
    return out0, out1


def logf_ftz(x: torch.Tensor) -> torch.Tensor:
    """The GPU's libdevice logf (FTZ) of each element of an f32 CUDA tensor."""
    return run_probe("logf_ftz", x.reshape(-1))[0].view(x.shape)


def tanhf(x: torch.Tensor) -> torch.Tensor:
    """The GPU's libdevice tanhf (FTZ) of each element of an f32 CUDA tensor."""
    return run_probe("tanhf", x.reshape(-1))[0].view(x.shape)


def div_full(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``div.full.f32 x, t`` elementwise (f32 CUDA tensors of one shape)."""
    return run_probe("div_full", x.reshape(-1), t.reshape(-1))[0].view(x.shape)


def reciprocal_bits(t: torch.Tensor) -> torch.Tensor:
    """The bits (int64, in [0, 2^32)) of ``div.full.f32(1, t)`` per element:
    the hardware reciprocal ``div.full.f32`` multiplies by, for normal
    2^-126 <= |t| <= 2^126 (where no range scaling applies)."""
    q = div_full(torch.ones_like(t), t)
    return q.view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def gumbel(seed, col, pos, vocab_id, logit, temp) -> torch.Tensor:
    """The step kernel's noised score per element (see the module docstring)."""
    return run_probe("gumbel", seed, col, pos, vocab_id, logit, temp)[0]


def murmur(seed, col, pos, vocab_id) -> torch.Tensor:
    """The finalized MurmurHash3 (int32 bits) of the step kernel's keys per element."""
    return run_probe("murmur", seed, col, pos, vocab_id)[0]


def uniform(seed, col, pos, vocab_id) -> torch.Tensor:
    """The Gumbel uniform of the step kernel's keys per element."""
    return run_probe("uniform", seed, col, pos, vocab_id)[0]


def output_logit(base_bits, bias_bits, mult, inv_cap, cap, has_cap: bool):
    """(cached BF16 bits as int32, FP32 logit) of the output transform per element."""
    return run_probe("logit_cap" if has_cap else "logit", base_bits, bias_bits, mult, inv_cap, cap)


def measure_reciprocal_table(temperatures, device: str = "cuda") -> dict:
    """``{"reciprocals": {"0x<t bits>": "0x<rcp bits>"}, "arch", "provenance"}``
    (golden's ``rcp_f32_<arch>.json`` fields) for the given temperatures,
    measured on ``device``."""
    t = torch.tensor([float(x) for x in temperatures], dtype=torch.float32, device=device)
    mag = t.abs()
    if bool(((mag < 2.0**-126) | (mag > 2.0**126) | ~torch.isfinite(t)).any()):
        raise ValueError("temperatures: every entry must be a finite normal fp32 in [2^-126, 2^126]")
    rcp = reciprocal_bits(t).cpu().tolist()
    t_bits = (t.view(torch.int32).to(torch.int64) & 0xFFFFFFFF).cpu().tolist()
    props = torch.cuda.get_device_properties(t.device)
    return {
        "reciprocals": {f"0x{tb:08X}": f"0x{rb:08X}" for tb, rb in sorted(zip(t_bits, rcp))},
        "arch": f"sm_{props.major}{props.minor}",
        "provenance": {
            "device": props.name,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": "python3 -m kernels.markov_common.probe OUT.json TEMPERATURE... (div.full.f32 q, 1.0, t)",
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
        },
    }


def write_reciprocal_table(path: str, temperatures) -> dict:
    """Measure ``temperatures`` and merge them into the table at ``path``
    (created if absent; other keys such as ``note`` are kept; a temperature
    measured before must give the same bits, else ValueError)."""
    measured = measure_reciprocal_table(temperatures)
    doc = {}
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        pass
    old = {int(k, 16): int(v, 16) for k, v in doc.get("reciprocals", {}).items()}
    for key, value in measured["reciprocals"].items():
        t_bits, r_bits = int(key, 16), int(value, 16)
        if t_bits in old and old[t_bits] != r_bits:
            raise ValueError(f"{path}: temperature 0x{t_bits:08X} was stored as 0x{old[t_bits]:08X}, measured 0x{r_bits:08X}")
        old[t_bits] = r_bits
    if doc.get("arch") not in (None, measured["arch"]):
        raise ValueError(f"{path}: table of {doc['arch']}, measured on {measured['arch']}")
    doc.update(arch=measured["arch"], provenance=measured["provenance"])
    doc["reciprocals"] = {f"0x{t:08X}": f"0x{r:08X}" for t, r in sorted(old.items())}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return doc


def main(argv: list[str] | None = None) -> int:
    """``python -m kernels.markov_common.probe OUT.json T1 T2 ...``: measure and merge a reciprocal table."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2:
        print("usage: python -m kernels.markov_common.probe OUT.json TEMPERATURE...", file=sys.stderr)
        return 2
    doc = write_reciprocal_table(args[0], [float(a) for a in args[1:]])
    print(f"{args[0]}: {len(doc['reciprocals'])} reciprocals ({doc['provenance']['device']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
