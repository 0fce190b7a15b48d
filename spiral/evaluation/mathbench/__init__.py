"""Math benchmarks for the transfer of reasoning: problem sets (`data`), answer grading
with math-verify (`grading`), and the benchmark run (`benchmark`)."""
