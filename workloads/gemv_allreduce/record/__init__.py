"""Multi-GPU recording harness for the fused GEMV+AllReduce (issue 8).

``python -m workloads.gemv_allreduce.record --gpus N [--dry-run]`` runs the instrumented kernel on N
real GPUs with peer pointers, aligns their clocks by NVLink ping-pong and writes an
``hbfsim.eidola.recording`` (see eidola/from_recording.py, docs/eidola-record-replay.md).
Importing this package sets the no-multicast environment (knobs.py) before any CUDA use.
"""
from workloads.gemv_allreduce.record import knobs as _knobs  # noqa: F401  (sets NVLS-off env)
