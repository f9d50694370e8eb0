"""How much nccl-tests output one import reads: each limit names itself in the error that enforces it.

The text log is read line by line, so its size costs time, not memory; the JSON file is parsed
whole, so its size is memory. Rows become records, and an import holds at most as many as a
critpath run (``MAX_RUN_CASES``): an nccl-tests sweep from 1 B to 16 GB by factors of 2 prints 35.
What one row may hold is derived from what one record may be (``MAX_RECORD_BYTES``), so that a
record the import writes is one every reader of results.jsonl reads.
"""
from harness.core.jsonfile import INT64_MAX
from harness.core.records import MAX_SAMPLES
from harness.core.store import MAX_RECORD_BYTES, MAX_RUN_CASES, RECORD_LIMITS

# nccl-tests prints sizes and counts as size_t through "%ld" (and -J writes them as such), so none
# exceeds a signed 64 bits, which is also the most numpy and pandas hold: a size of 2**70 imported
# fine and then crashed every reader (OverflowError).
MAX_COUNT = INT64_MAX
# A time becomes whole nanoseconds in samples_ns, which hold at most MAX_COUNT; half of it leaves
# room for the rounding of a float (4.6e15 us is 146 years).
MAX_TIME_US = MAX_COUNT / 1e3 / 2

# A per-iteration record holds its side's times as samples_ns (at most 19 digits and a comma each)
# and the other side's as extra.imported.<side>.times_us (a float's repr, at most 24 characters,
# and a comma); the rest of a record is a few kilobytes, for which 1 MiB is left. A row with more
# times than this would make a results line readers refuse (6.3 million did, at 69 MB). Each time
# of either side is also one of the values a record may hold (RECORD_LIMITS), beside its keys.
_SAMPLE_JSON_BYTES = 20 + 25
_RECORD_REST_BYTES = 1 << 20
MAX_TIMES_PER_SIDE = min((MAX_RECORD_BYTES - _RECORD_REST_BYTES) // _SAMPLE_JSON_BYTES,
                         (RECORD_LIMITS.values - RECORD_LIMITS.keys) // 2)

MAX_ROWS = MAX_RUN_CASES
# A name or message -J writes as a JSON string: nccl-tests copies each rank's host and device name
# into 1024-byte buffers (rankInfo_t in src/util.cu), and NCCL keeps the last error it reports
# (-J "errors", ncclGetLastError) in one (ncclLastError[1024]); a reduction or type name is a word.
MAX_TEXT_CHARS = 1024
# A word of the command line (-J "args"): Linux passes no argument longer than MAX_ARG_STRLEN.
MAX_ARG_CHARS = 128 << 10
# A '#  Rank' line's CUDA device ordinal, one of its node's devices: the largest nodes hold 16 GPUs,
# and each of up to 7 MIG instances is a device of its own; 255 is past any node.
MAX_DEVICE = 255
# An import's warm-up and timed iterations become its records' plan, which holds no more than a
# critpath run may time (records.MAX_SAMPLES, the bound of --iters and --warmup).
MAX_ITERS = MAX_SAMPLES
# -m, the launches aggregated into each timed iteration, is kept beside the plan (extra.imported.
# agg_iters) and held to the same bound as the iterations: nccl-tests reads it into a C int and
# divides its times by iters x agg_iters, another int (src/common.cu, BenchTime).
MAX_AGG_ITERS = MAX_ITERS
# A '#  Rank' line's Group, the color of MPI_Comm_split (src/common.cu, main): a C int, never negative.
MAX_GROUP = (1 << 31) - 1
# -u, the element each buffer starts at: nccl-tests reads any int (strtol) and pads each buffer by
# 8 * unalign bytes, an int product (src/common.cu, AllocateBuffs), so a run that allocated its
# buffers and printed rows had an unalign whose padding an int holds; a negative one would start
# the buffers before their allocation.
MAX_UNALIGN = ((1 << 31) - 1) // 8
# A text log with NCCL_DEBUG=INFO lines between the rows of a large job: tens of megabytes.
MAX_TEXT_BYTES = 256 << 20
# Lines cost time however short (some 4 us each: 10 million lines of '#' took 40 s): nccl-tests
# prints a few dozen and a row per size (at most MAX_ROWS), NCCL_DEBUG=INFO some hundred for each
# rank; a million is a job of ten thousand ranks.
MAX_TEXT_LINES = 1_000_000
# -J output, per-iteration times included (writePerIterReport): 10,000 rows of 600 times is 60 MB.
MAX_JSON_BYTES = 64 << 20
# No line nccl-tests or NCCL prints comes near this; a longer one is not a log line.
MAX_LINE_BYTES = 1 << 20
# Records are written this many at a time, with one fsync each: run.json, written after the last,
# is what says the import is whole.
RECORDS_PER_BATCH = 1000
