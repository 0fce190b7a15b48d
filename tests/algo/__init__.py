"""Tests of spiral.algo: hand-worked numbers for RAE, losses, datums and statistics."""
