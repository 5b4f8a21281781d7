"""``python -m harness.scale``: what the nightly NVL72 job costs as the world grows, measured on one host.

The nightly job (README, "The nightly job"; docs/nightly.md) runs one ``harness validate`` per
node, each with its torchrun agent, one c10d rendezvous, ``--tp 4``, one
report per node and a merge. This package runs exactly that shape on one
host with the ``cpu`` launcher (torchrun + gloo, the golden implementation)
at several worlds, e.g. 2, 8, 32 and 72 ranks (agents of 4 processes; a
world smaller than 4 is one agent of that many, its TP size the world), a
small scenario set, and one hang planted in one TP group of one scenario
(``--inject SCENARIO:hang:rank=1,launch=1,group=G``), and measures where
the time and the memory go:

- ``nightly``: the agents of one world (``node_argv``, ``run_agents``): all
  started at once, every wait under one deadline, every process ended and
  verified gone at the end, the per-node reports merged; the workers'
  memory (VmHWM, VmRSS from ``/proc``) sampled meanwhile (``memory``).
- ``measure``: the costs of each job from the files the run leaves (the
  workers' start-up marks, progress records and phases, the job runners'
  timing files): rendezvous (to the whole world joined), setup (TP groups
  and the first case's start), per-case overhead (a case's wall time less
  its kernel, reference and comparison work), verdict latency, teardown,
  how long the healthy nodes' agents waited for the hung node's, and how
  soon the bad group was named after its hang.
- ``summary``: a markdown table and a plot from one or more result files
  (worlds measured on different machines keep their host and core count).

Results go to ``--out``: ``scale.json`` (every number), ``scale.md``,
``scale.png`` (when matplotlib is present) and, per world, the merged
``w<world>/nightly.json`` and ``.xml``; the raw run directories go to
``--work`` (default ``<out>/raw``). ``--budget`` bounds the whole run: a
world that cannot start in the time left is skipped, one that runs out of
it is ended and recorded as cut short, and the table is written either way.
"""
