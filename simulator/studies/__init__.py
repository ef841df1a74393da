"""Studies built on the core: a training step and its reductions (``training``), several jobs on one fabric
(``jobs``), the nccl-tests front end (``nccl_tests``), a step's Perfetto trace (``trace``), and N steps under
stragglers and jitter with their critical path (``stragglers``)."""
