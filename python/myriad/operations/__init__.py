"""myriad.operations — operations tools for running clusters, not the runtime.

Pure Python (standard library; PyYAML to read a config, matplotlib only for plots), none of it
imported by training: `goodput` (effective training time under failures and the best checkpoint
interval), `sbatch` (Slurm batch scripts that requeue on preemption) and `cluster_sim` (a shared
cluster's scheduling policies, simulated). Each runs as `myriad <goodput|sbatch|cluster-sim>` or
`python -m myriad.operations.<module>`; docs/planning.md documents them.

(Named `operations`, not `ops`: `myriad.ops` is the compiled op bindings.)
"""
