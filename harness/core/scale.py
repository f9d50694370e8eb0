"""How large a job and a host critpath holds: the bounds every reader of a rank count, a node
count or a CPU count takes from here (options, the environment, fingerprints, profiles, claims)."""

# Ranks of one job (--world, WORLD_SIZE, SLURM_NTASKS, a fingerprint's world): beyond the largest
# machines this project models (docs/scale.md), a typo.
MAX_WORLD = 65536
# Logical CPUs of one host (a fingerprint's cpu_count and cpu_usable): Linux counts at most
# 8,192 (NR_CPUS); a larger figure is no host.
MAX_CPU_COUNT = 8192
