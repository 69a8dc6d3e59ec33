"""myriad.planner — will it fit, how fast, which layout, what failures and scheduling cost.

Pure Python over the resolved config (docs/planning.md has every formula and assumption):
memory per rank, step time, layout search (plan), goodput under failures (goodput), Slurm
batch scripts (sbatch) and a cluster scheduling simulator (cluster_sim).
"""
