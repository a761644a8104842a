"""The ADBench objectives (GMM, LSTM, BA) in plain NumPy, differentiated by Hecate, with readers
and generators of ADBench-format inputs and the peers' versions (autograd, PyTorch, JAX).

The math and file formats are those of microsoft/ADBench; see the repository's
`benchmarks/README.md`.
"""
