"""Learners over several processes (torchrun): `distributed.py` (ranks, and data-parallel
learning: each rank trains its share of the rows, gradients summed) and `sharded.py`
(FSDP2: weights, gradients and optimizer state sharded over the ranks)."""
