"""Small-message RPC on one host: framing, servers in their own processes, transports, a
shared-memory ring, a fault-injection proxy and open-loop scheduling. The benchmark family that
drives them is ``harness.families.rpc``; ``docs/rpc.md`` describes the cases.

Nothing here imports torch: server processes start in a fraction of a second.
"""
