"""Scheduling, policy only: requests and their lifecycle, one PhaseScheduler per lane, the
LaneCoordinator over all lanes (one mode per step), and the KV manager that alone owns each
request's blocks over the block pool. Plain Python: no torch, no runtime."""
