"""Pipeline-parallel building blocks shared by the ``pipeline`` family and its analytical model.

- ``schedule``: pure functions. The published GPipe and 1F1B orders, and each schedule written
  out as a per-stage *program* of actions (compute, send, receive, wait).
- ``model``: evaluates the same programs under a cost model (compute durations, one-way hop
  time) to predict a step, plus the closed forms (fill/drain bubble, sync tax).
- ``link``: what a stage does on the wire and the CPU: message header, emulated link latency,
  compute emulation (calibrated busy loop, sleep-based device time, GPU matmul).
- ``executor``: runs a program over torch.distributed point-to-point operations.

Because the measurement and the prediction run the very same program, a difference between the
two is the cost the model leaves out (scheduling, copies, contention), not a different schedule.
"""
