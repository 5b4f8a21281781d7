"""Launchers: how a job's ranks are started, and which launcher ``auto`` picks.

- ``cpu``: real processes through torchrun's agent (``python -m
  harness.launch.torchrun_agent torch.distributed.run``: torchrun, ended
  quietly by the harness's signal)
  (``--standalone``, or the ``--nnodes/--rdzv-*`` pass-through for several
  agents, job ``i`` meeting at the endpoint's port plus ``i``:
  ``Rendezvous.job_endpoint``), gloo, the golden per-rank system as the system under test.
- ``torchrun``: the same launcher with the kernel implementation: NCCL with
  one GPU per rank, or gloo with ``TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1``
  when ranks must share GPUs.
- ``virtual``: one process (``harness.rank.worker --virtual N``), N ranks as
  threads on one GPU (kernel) or on the CPU (golden).
- ``auto``: torchrun over the GPUs present when there are several, virtual
  on one GPU, cpu with none; ``describe`` says which ran and why.

Every launcher runs its jobs through ``harness.launch.jobs.JobRunner``
(batching, per-case deadlines, recovery); only the command line differs.
Per-rank logs go to ``<run>/logs/job<i>/`` via torchrun's ``--log-dir`` and
``--redirects 3``; a rank writes its stdout into its stderr (``harness.rank.worker``), so the
``stderr.log`` a report names holds everything it printed, unbuffered (``PYTHONUNBUFFERED``). NCCL groups run with PyTorch's flight recorder on
(``harness.launch.evidence.flight_recorder_env``): a collective timeout dumps its
trace under ``<run>/nccl_trace/``. gloo groups connect lazily
(``TORCH_GLOO_LAZY_INIT``): only the TP groups' ranks ever exchange.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.launch.evidence import flight_recorder_env
from harness.launch.jobs import JobSettings, job_log_dir, python
from harness.launch.torchrun_agent import AGENT_MODULE

LAUNCHERS = ("auto", "torchrun", "virtual", "cpu")
GLOO_LAZY_INIT = "TORCH_GLOO_LAZY_INIT"
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def gpu_count() -> int:
    """The number of CUDA devices this process sees (0 without CUDA)."""
    try:
        import torch  # noqa: PLC0415 - torch loads in seconds: asked only when no --gpus says

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001
        return 0


def resolve(name: str, gpus: int | None = None) -> tuple[str, str]:
    """(launcher, reason) for a requested launcher name; ``auto`` chooses from the GPUs present."""
    if name not in LAUNCHERS:
        raise ValueError(f"--launcher must be one of {', '.join(LAUNCHERS)}, got {name!r}")
    gpus = gpu_count() if gpus is None else gpus
    if name == "cpu":
        return name, ("launcher cpu (requested): golden sharded vs unsharded over real processes with gloo; "
                      "kernel validation needs a GPU")
    if name != "auto":
        note = "kernel implementation" if gpus else "kernel implementation, but no GPU here: kernel cases are not available"
        return name, f"launcher {name} (requested); {gpus} GPU(s) visible; {note}"
    if gpus > 1:
        return "torchrun", f"launcher torchrun (auto: {gpus} GPUs, NCCL, kernel implementation)"
    if gpus == 1:
        return "virtual", "launcher virtual (auto: 1 GPU, ranks as threads on it, kernel implementation)"
    return "cpu", ("launcher cpu (auto: no GPU; golden sharded vs unsharded over real processes with gloo; "
                   "kernel validation needs a GPU: run `make validate` on a GPU machine)")


def settings_for(launcher: str, run_dir: Path, world_hint: int, gpus: int | None = None, **kw) -> JobSettings:
    """Job settings for a resolved launcher: implementation, backend and environment."""
    gpus = gpu_count() if gpus is None else gpus
    # a rank's prints reach its log as they happen, not when a buffer fills (a killed rank's never would)
    env = dict(MULTICAST_OFF, PYTHONUNBUFFERED="1")
    if launcher == "cpu":
        impl, backend = "golden", "gloo"
    elif launcher == "virtual":
        impl, backend = ("kernel" if gpus else "golden"), "none"
        # One process holds every rank, and its golden references (realistic sizes) are the slow part:
        # let torch use the machine's cores instead of the one-per-process default of the other launchers.
        env["OMP_NUM_THREADS"] = str(max(1, os.cpu_count() or 1))
        # Each virtual rank's stream needs a hardware queue of its own: with the default 8 a rank's
        # kernel can wait behind a peer's spinning grid that waits for it.
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "32"
    else:
        impl = "kernel"
        rendezvous = kw.get("rendezvous")
        per_node = (rendezvous and rendezvous.nproc_per_node) or world_hint
        if gpus >= per_node:
            backend = "nccl"
            # A collective that times out dumps its flight-recorder trace into the run directory.
            env.update(flight_recorder_env(run_dir))
        else:
            backend = "gloo"
            env["TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES"] = "1"
    if backend == "gloo":
        # gloo connects every pair of the world's ranks when the process group is made, though the ranks
        # exchange only within their TP groups: lazily, a world of 72 makes 18 meshes of 4, not one of 72.
        env[GLOO_LAZY_INIT] = "1"
    impl = kw.pop("impl", None) or impl
    return JobSettings(launcher=launcher, impl=impl, backend=backend, run_dir=run_dir, env=env, **kw)


def torchrun_argv(s: JobSettings, job_path: Path, world: int, job_index: int) -> list[str]:
    """The torchrun command line of one job (standalone, or the multi-node pass-through)."""
    rdzv = s.rendezvous
    per_node = rdzv.nproc_per_node or world // max(rdzv.nnodes, 1)
    if per_node * rdzv.nnodes != world:
        raise ValueError(f"--nproc-per-node {per_node} x --nnodes {rdzv.nnodes} must equal the world size {world}")
    # torchrun's agent, run so that the harness ending it leaves one line in the log, not a traceback
    argv = [python(), "-m", "harness.launch.torchrun_agent", AGENT_MODULE]
    if rdzv.nnodes > 1 or rdzv.endpoint:
        if not rdzv.endpoint:
            raise ValueError("--rdzv-endpoint is required with --nnodes > 1")
        argv += ["--nnodes", str(rdzv.nnodes), "--node-rank", str(rdzv.node_rank),
                 "--rdzv-backend", rdzv.backend or "c10d", "--rdzv-endpoint", rdzv.job_endpoint(job_index),
                 "--rdzv-id", rdzv.job_id(job_index)]
        if rdzv.nnodes > 1 and (rdzv.backend or "c10d") == "c10d":
            # the harness on the endpoint's machine serves the store (harness.launch.job_store)
            argv += ["--rdzv-conf", "is_host=false"]
    else:
        argv += ["--standalone", "--nnodes", "1"]
    log_dir = job_log_dir(s, job_index)
    argv += ["--nproc-per-node", str(per_node), "--max-restarts", "0", "--monitor-interval", "0.5",
             "--log-dir", str(log_dir), "--redirects", "3",
             "-m", "harness.rank.worker", "--job", str(job_path)]
    return argv


def virtual_argv(s: JobSettings, job_path: Path, world: int, job_index: int) -> list[str]:
    """The command line of a virtual job: one process holding every rank."""
    return [python(), "-m", "harness.rank.worker", "--job", str(job_path), "--virtual", str(world)]


def argv_builder(launcher: str):
    """The argv builder of a resolved launcher."""
    return virtual_argv if launcher == "virtual" else torchrun_argv
