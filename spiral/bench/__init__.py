"""`spiral bench`: throughput on this machine, measured in one run and reported as ratios.

Everything that times or profiles the product for a benchmark lives here, apart from the
product packages: `games` (random-play games/s), `engine` (sampling, learning and their
ceilings on one device), `selfplay` (a Kuhn step by what is shared, population play's
cost, the prefix cache), `async_loop` (the sync loop against the actor-learner) and
`vllm` (a step sampled by torch and by vLLM); `cli` is the command. Scripts that compare
two versions of the code side by side are in the repository's `benchmarks/` folder.
"""
