"""Tests of spiral.report: sinks, transcripts, plots and the run report, on real files."""
