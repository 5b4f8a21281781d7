"""The launching side: starting ranks, supervising them, and deciding each case's verdict.

``launchers`` (which launcher, and its command line), ``jobs`` (one job of
cases), ``groups``, ``records``, ``verdict``, ``schedule``, ``durations``,
``job_clock``, ``job_store``, ``spares`` (spare processes),
``torchrun_options``, ``supervision`` (deadlines and process groups),
``diagnosis`` (which rank fell behind), ``evidence`` (stacks and NCCL dumps
from a hung rank), ``inject_option`` (``--inject``), ``reference_pool``
(the reference pool's processes). It never imports the reports; the rank
side's modules run in other processes and are never imported here.
"""
