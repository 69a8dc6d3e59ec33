"""myriad.planner — will it fit, how fast, which layout.

Pure Python over the resolved config (docs/planning.md has every formula and assumption):
memory per rank (memory), step time (step_time, hardware), layout search (plan). The tools for
operating clusters — goodput under failures, Slurm batch scripts, the cluster scheduling
simulator — are in myriad.operations.
"""
