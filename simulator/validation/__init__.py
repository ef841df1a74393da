"""Predictions against measurements: the shipped nccl-tests tables (``collectives``, ``fabricsim validate``),
fitting a preset to a user's nccl-tests log (``calibration``, ``fabricsim calibrate``), and Megatron SC21
Table 1 (``sc21``, ``python -m simulator.validation.sc21``), the DGX Cloud recipes (``dgxc``), and both
training tables in one (``steps``, ``fabricsim validate --training``). The measured data, each row with its source,
is in ``data/``."""
