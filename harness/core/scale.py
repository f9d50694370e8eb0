"""How large a job, a host and a record critpath holds: the bounds every reader of a rank count, a
node count, a CPU count, a sample count or a process id takes from here (options, the environment,
fingerprints, profiles, claims, owner files, records, run.json and imported logs)."""

# Ranks of one job (--world, WORLD_SIZE, SLURM_NTASKS, a fingerprint's world): beyond the largest
# machines this project models (docs/scale.md), a typo.
MAX_WORLD = 65536
# Logical CPUs of one host (a fingerprint's cpu_count and cpu_usable): Linux counts at most
# 8,192 (NR_CPUS); a larger figure is no host.
MAX_CPU_COUNT = 8192

# The most samples one record holds, and so the most timed iterations a case runs (--iters): at
# about 20 bytes a sample as JSON, 20 MB, well within a results line (store.MAX_RECORD_BYTES);
# the full profile calibrates to at most 20,000.
MAX_SAMPLES = 1_000_000

# The most cases one run holds (``critpath run`` refuses more; an import of more rows too; a
# run.json naming more in its options is no run's).
MAX_RUN_CASES = 10_000

# An emulated time of one event on a case's critical path (a stage's compute, a link's round trip,
# a fault proxy's delay, jitter or stall, a coalescing window), in microseconds: 10 s. One event
# longer than that measures the case's --timeout, not a latency, and its key is refused when the
# case ID is read rather than found out a timeout later.
MAX_EMULATED_US = 10_000_000

# Linux's PID_MAX_LIMIT, the most kernel.pid_max may be set to: every pid is below it, so a larger
# one (in a claim, an owner file or an nccl-tests '#  Rank' line) is no process's, and overflows os.kill.
PID_MAX = 1 << 22
