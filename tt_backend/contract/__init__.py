"""The values that cross layers: the step plan and its modes, the forward batch, the step's
sampling plan and its sampled tokens, request statuses and finish reasons.

Every layer may import this package; it imports no other part of `tt_backend`. `modes` and
`step` are plain Python (the scheduler holds them without torch); `forward_batch` and
`sampling` carry tensors.
"""
